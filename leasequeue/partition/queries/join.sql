-- join: record worker $2 in group $1.
INSERT INTO public.leasequeue_jobs_members (group_name, worker)
VALUES ($1::text, $2::text)
ON CONFLICT (group_name, worker) DO NOTHING
