-- defer: hide item $2 of queue $1 from pollers for $3 milliseconds, if it
-- is pending, or running without a claim of its own (claimed through
-- Next and Begin under a lease elsewhere). A hint, not fenced: it changes
-- no state, and never moves the expiry of a claim (claim.sql).
UPDATE public.leasequeue_jobs
SET visible_at = now() + $3::bigint * interval '1 millisecond'
WHERE queue = $1::text AND id = $2::text
  AND (state = 'pending' OR (state = 'running' AND claim_nonce IS NULL))
