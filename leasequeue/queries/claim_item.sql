-- claim_item: claim item $2 of queue $1 as claim.sql claims each item
-- ($3 lease key, $4 holder, $5 secret, $6 TTL in milliseconds, $7
-- fence.MaxTokenLead in microseconds), if it is pending, or running with
-- an expired claim or none, and its new token is plausible (see
-- claim.sql). It waits for no lock: a row another statement is writing
-- now is refused like a held one. No row when refused (claim_state.sql
-- then says why). Returns the token, the attempt count and the age in
-- microseconds.
UPDATE public.leasequeue_jobs AS j
SET state       = 'running',
    attempts    = j.attempts + 1,
    fence_key   = $3::text,
    fence_token = greatest(coalesce(j.fence_token, 0) + 1, floor(extract(epoch FROM statement_timestamp()) * 1000000)::bigint),
    owner       = $4::text,
    claim_nonce = $5::text,
    visible_at  = statement_timestamp() + $6::bigint * interval '1 millisecond',
    updated_at  = statement_timestamp()
WHERE j.queue = $1::text AND j.id = (
    SELECT id FROM public.leasequeue_jobs
    WHERE queue = $1::text AND id = $2::text
      AND (state = 'pending' OR (state = 'running' AND (visible_at <= statement_timestamp() OR claim_nonce IS NULL)))
      AND coalesce(fence_token, 0) < (extract(epoch FROM statement_timestamp()) * 1000000)::bigint + $7::bigint
    FOR UPDATE SKIP LOCKED
)
RETURNING j.fence_token, j.attempts,
    greatest(0, (extract(epoch FROM statement_timestamp() - coalesce(j.ready_at, CASE WHEN j.attempts = 1 THEN j.created_at END)) * 1000000)::bigint)
