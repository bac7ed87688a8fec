-- Drops the fences table. Every resource forgets its fence: a stale writer
-- could then write. Only run it when nothing writes through the fences.
DROP TABLE IF EXISTS public.lease_fences;
