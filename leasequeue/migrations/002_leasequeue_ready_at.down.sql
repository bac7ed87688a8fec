ALTER TABLE public.leasequeue_jobs DROP COLUMN IF EXISTS ready_at;
