-- finished_at is when an item finished: when it was completed, or failed
-- for good (dead), on the database's clock. It is NULL while the item is
-- pending or running. PostgresSource.Sweep removes done and dead items
-- whose finished_at is more than their retention ago, in keyset pages of
-- the index below.
--
-- Rows finished before this migration take it from updated_at, which the
-- statement that finished them set, and which nothing has changed since:
-- so the migration writes every finished row once.
--
-- The index holds finished rows only, and a finished row is never
-- updated again: it costs a write when an item finishes (a write that
-- changes state, which an index already covers, so it was never a HOT
-- update) and nothing while items are pending or running.
ALTER TABLE public.leasequeue_jobs ADD COLUMN IF NOT EXISTS finished_at timestamptz;
UPDATE public.leasequeue_jobs SET finished_at = updated_at
WHERE state IN ('done', 'dead') AND finished_at IS NULL;
CREATE INDEX IF NOT EXISTS leasequeue_jobs_finished ON public.leasequeue_jobs (queue, state, finished_at, id)
    WHERE state IN ('done', 'dead');
