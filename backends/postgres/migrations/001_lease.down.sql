DROP TABLE IF EXISTS public.leases;
