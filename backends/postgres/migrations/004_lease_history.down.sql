ALTER TABLE public.leases
    DROP COLUMN IF EXISTS acquired_at,
    DROP COLUMN IF EXISTS renewed_at,
    DROP COLUMN IF EXISTS transitions;
