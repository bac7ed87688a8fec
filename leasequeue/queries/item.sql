-- item: the state of item $2 of queue $1.
SELECT state, attempts, fence_key, fence_token, owner, last_error
FROM public.leasequeue_jobs
WHERE queue = $1::text AND id = $2::text
