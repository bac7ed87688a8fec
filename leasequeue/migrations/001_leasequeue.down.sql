DROP TABLE IF EXISTS public.leasequeue_jobs_members;
DROP TABLE IF EXISTS public.leasequeue_jobs;
