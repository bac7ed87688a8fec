-- renew: extend the claim of item $2 of queue $1 by token $3 and secret
-- $4 to $5 milliseconds from now on the database's clock, if it is still
-- current and not expired. No row when refused (claim_state.sql then says
-- why).
UPDATE public.leasequeue_jobs
SET visible_at = statement_timestamp() + $5::bigint * interval '1 millisecond'
WHERE queue = $1::text AND id = $2::text
  AND state = 'running' AND fence_token = $3::bigint AND claim_nonce = $4::text
  AND visible_at > statement_timestamp()
