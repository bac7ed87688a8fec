-- defer: hide item $2 of queue $1 from pollers for $3 milliseconds, if it
-- is pending or running. A hint, not fenced: it changes no state.
UPDATE public.leasequeue_jobs
SET visible_at = now() + $3::bigint * interval '1 millisecond'
WHERE queue = $1::text AND id = $2::text AND state IN ('pending', 'running')
