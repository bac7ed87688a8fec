-- complete_batch: mark done, in one statement, the running items of queue
-- $1 whose fences admit the claims given element by element in $2 (item
-- IDs, none twice), $3 (lease keys), $4 (tokens) and $5 (owners), as
-- complete.sql does for one ($6 is fence.MaxTokenLead in microseconds).
-- One row, with its ID, per item marked done; an item refused gets none,
-- and the caller explains it as for complete.sql.
--
-- Like complete.sql, it waits for a row only when the row's committed
-- version admits the claim and another transaction writes the row: the
-- version a stale claim sees already carries the newer claim's fence, so
-- a stale completion is refused without waiting, also while the newer
-- claim's CompleteTx holds the row. Two batches never wait for each other
-- in a cycle: only one claim of an item is admitted, so no row is in two
-- batches that both write it.
UPDATE public.leasequeue_jobs AS j
SET state       = 'done',
    fence_token = c.token,
    owner       = c.owner,
    last_error  = NULL,
    claim_nonce = NULL,
    finished_at = now(),
    updated_at  = now()
FROM unnest($2::text[], $3::text[], $4::bigint[], $5::text[]) AS c(id, key, token, owner)
WHERE j.queue = $1::text AND j.id = c.id
  AND j.state = 'running'
  AND j.fence_key = c.key AND j.fence_token <= c.token
  AND c.token <= (extract(epoch FROM statement_timestamp()) * 1000000)::bigint + $6::bigint
RETURNING j.id
