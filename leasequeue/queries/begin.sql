-- begin: start an attempt at item $2 of queue $1 under lease key $3, token
-- $4, owner $5, if the item is pending or running, its fence admits the
-- token (no fence yet, or the same lease key with a token not above $4)
-- and the token is plausible: at most the database's clock in
-- microseconds plus $7 (fence.MaxTokenLead in microseconds), so that no
-- forged token sets a fence that claims cannot pass (claim.sql adds one
-- to it); hide it for $6 milliseconds. Returns the attempt count, and the
-- item's age in microseconds on the database's clock: the time since
-- ready_at (or created_at, for the first attempt of a row older than
-- ready_at), NULL when unknown, never negative. No row when refused
-- (item.sql then says why).
UPDATE public.leasequeue_jobs
SET state       = 'running',
    attempts    = attempts + 1,
    fence_key   = $3::text,
    fence_token = $4::bigint,
    owner       = $5::text,
    visible_at  = now() + $6::bigint * interval '1 millisecond',
    updated_at  = now()
WHERE queue = $1::text AND id = $2::text
  AND state IN ('pending', 'running')
  AND (fence_key IS NULL OR (fence_key = $3::text AND fence_token <= $4::bigint))
  AND $4::bigint <= (extract(epoch FROM statement_timestamp()) * 1000000)::bigint + $7::bigint
RETURNING attempts,
    greatest(0, (extract(epoch FROM now() - coalesce(ready_at, CASE WHEN attempts = 1 THEN created_at END)) * 1000000)::bigint)
