-- members: the workers recorded in group $1.
SELECT worker FROM public.leasequeue_jobs_members WHERE group_name = $1::text
