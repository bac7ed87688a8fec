-- complete: mark the running item $2 of queue $1 done, finished now, if
-- its fence admits lease key $3 and token $4 and the token is plausible
-- (at most the database's clock in microseconds plus $6,
-- fence.MaxTokenLead in microseconds). No row when
-- refused.
UPDATE public.leasequeue_jobs
SET state       = 'done',
    fence_token = $4::bigint,
    owner       = $5::text,
    last_error  = NULL,
    claim_nonce = NULL,
    finished_at = now(),
    updated_at  = now()
WHERE queue = $1::text AND id = $2::text
  AND state = 'running'
  AND fence_key = $3::text AND fence_token <= $4::bigint
  AND $4::bigint <= (extract(epoch FROM statement_timestamp()) * 1000000)::bigint + $6::bigint
