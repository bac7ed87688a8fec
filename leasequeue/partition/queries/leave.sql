-- leave: forget worker $2 of group $1.
DELETE FROM public.leasequeue_jobs_members WHERE group_name = $1::text AND worker = $2::text
