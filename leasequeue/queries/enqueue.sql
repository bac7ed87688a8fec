-- enqueue: add pending items $2 to queue $1, ready at once; IDs the queue
-- has already, in any state, are left alone.
INSERT INTO public.leasequeue_jobs (queue, id)
SELECT $1::text, u.id FROM unnest($2::text[]) AS u (id)
ON CONFLICT (queue, id) DO NOTHING
