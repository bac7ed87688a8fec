-- claim: claim up to $2 ready items of queue $1 in one statement, each
-- under its own lease: first running items whose claim expired, then
-- pending items whose retry time has come, each in the order they became
-- due. Each claimed row becomes running under the holder $4 with the
-- secret $5, a token greater than every token the row has carried and
-- not below the database's clock in microseconds (so a restore from an
-- older backup cannot hand out a token again), the lease key $3 followed
-- by the item's escaped ID (keyspace.Escape: '%', '{', '}', '/' as %25,
-- %7B, %7D, %2F), and an expiry $6 milliseconds from now on the
-- database's clock; its attempt count goes up by one. SKIP LOCKED lets
-- concurrent claimers pass over each other's rows instead of waiting.
--
-- A row is claimed only if its new token is plausible: at most the
-- database's clock in microseconds plus $7 (fence.MaxTokenLead in
-- microseconds), that is if its fence_token is below that. The statements
-- that take a caller's token refuse one above it, so only a row written
-- before they did, or by hand, can hold a higher one: claims pass over
-- it, instead of failing on a token no bigint holds (2^63-1 + 1) or
-- handing out one no fence accepts.
--
-- Returns per claimed item its ID, token, attempt count, and age in
-- microseconds on the database's clock: the time since ready_at (or
-- created_at, for the first attempt of a row older than ready_at), NULL
-- when unknown, never negative.
--
-- The rows are updated through id = ANY (an index scan of the primary
-- key), not a join: a generic plan cannot know how many rows the LIMITs
-- let through, guesses a tenth of the table, and would hash-join the
-- whole table on every call.
WITH rescue AS (
    SELECT id
    FROM public.leasequeue_jobs
    WHERE queue = $1::text AND state = 'running' AND visible_at <= statement_timestamp()
      AND coalesce(fence_token, 0) < (extract(epoch FROM statement_timestamp()) * 1000000)::bigint + $7::bigint
    ORDER BY visible_at
    LIMIT $2::integer
    FOR UPDATE SKIP LOCKED
), fresh AS (
    SELECT id
    FROM public.leasequeue_jobs
    WHERE queue = $1::text AND state = 'pending' AND visible_at <= statement_timestamp()
      AND coalesce(fence_token, 0) < (extract(epoch FROM statement_timestamp()) * 1000000)::bigint + $7::bigint
    ORDER BY visible_at
    LIMIT $2::integer - (SELECT count(*) FROM rescue)
    FOR UPDATE SKIP LOCKED
)
UPDATE public.leasequeue_jobs AS j
SET state       = 'running',
    attempts    = j.attempts + 1,
    fence_key   = $3::text || replace(replace(replace(replace(j.id, '%', '%25'), '{', '%7B'), '}', '%7D'), '/', '%2F'),
    fence_token = greatest(coalesce(j.fence_token, 0) + 1, floor(extract(epoch FROM statement_timestamp()) * 1000000)::bigint),
    owner       = $4::text,
    claim_nonce = $5::text,
    visible_at  = statement_timestamp() + $6::bigint * interval '1 millisecond',
    updated_at  = statement_timestamp()
WHERE j.queue = $1::text AND j.id = ANY (ARRAY(SELECT id FROM rescue UNION ALL SELECT id FROM fresh))
RETURNING j.id, j.fence_token, j.attempts,
    greatest(0, (extract(epoch FROM statement_timestamp() - coalesce(j.ready_at, CASE WHEN j.attempts = 1 THEN j.created_at END)) * 1000000)::bigint)
