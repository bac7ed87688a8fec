DROP FUNCTION IF EXISTS public.leases_setrelease(text[], text, bigint, text);
DROP FUNCTION IF EXISTS public.leases_setrenew(text[], text, bigint, interval);
DROP FUNCTION IF EXISTS public.leases_setacquire(text[], text, text, interval);
DROP FUNCTION IF EXISTS public.leases_permit(text, text, text, interval, integer);
DROP INDEX IF EXISTS public.leases_permits;
