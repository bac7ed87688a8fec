-- fail: record a failed attempt at the running item $2 of queue $1, if its
-- fence admits lease key $3 and token $4 and the token is plausible (at
-- most the database's clock in microseconds plus $9, fence.MaxTokenLead
-- in microseconds): state $6
-- ('pending' or 'dead'), hidden for $7 milliseconds and ready again after
-- them, error text $8; a dead item is finished now. No row when refused.
UPDATE public.leasequeue_jobs
SET state       = $6::text,
    visible_at  = now() + $7::bigint * interval '1 millisecond',
    ready_at    = now() + $7::bigint * interval '1 millisecond',
    last_error  = $8::text,
    claim_nonce = NULL,
    finished_at = CASE WHEN $6::text = 'dead' THEN now() END,
    fence_token = $4::bigint,
    owner       = $5::text,
    updated_at  = now()
WHERE queue = $1::text AND id = $2::text
  AND state = 'running'
  AND fence_key = $3::text AND fence_token <= $4::bigint
  AND $4::bigint <= (extract(epoch FROM statement_timestamp()) * 1000000)::bigint + $9::bigint
