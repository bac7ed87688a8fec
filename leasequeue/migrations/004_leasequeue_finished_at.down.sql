-- Dropping the column drops the index on it.
ALTER TABLE public.leasequeue_jobs DROP COLUMN IF EXISTS finished_at;
