-- release: end the claim of item $2 of queue $1 by token $3 (any token
-- when $3 is 0) and secret $4, if it is current and not expired: the item
-- stays running (its attempt counted) with an expiry of now, so the next
-- claim takes it at once. The token is kept. No row when refused.
UPDATE public.leasequeue_jobs
SET visible_at  = statement_timestamp(),
    claim_nonce = NULL
WHERE queue = $1::text AND id = $2::text
  AND state = 'running' AND ($3::bigint = 0 OR fence_token = $3::bigint) AND claim_nonce = $4::text
  AND visible_at > statement_timestamp()
