-- claim_state: the claim of item $2 of queue $1: its state, whether a
-- claim's secret is set, its holder, token, and remaining microseconds on
-- the database's clock (never negative); and the largest plausible token
-- now, the clock in microseconds plus $3 (fence.MaxTokenLead in
-- microseconds).
SELECT state, claim_nonce IS NOT NULL, coalesce(owner, ''), coalesce(fence_token, 0),
    greatest(0, (extract(epoch FROM visible_at - statement_timestamp()) * 1000000)::bigint),
    (extract(epoch FROM statement_timestamp()) * 1000000)::bigint + $3::bigint
FROM public.leasequeue_jobs
WHERE queue = $1::text AND id = $2::text
