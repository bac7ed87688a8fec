-- Drops the floors table. Every lease key forgets its floor: a stale writer
-- could then write to a resource whose fence was retired. Only run it when
-- nothing writes through the fences, or when no fence was ever retired.
DROP TABLE IF EXISTS public.lease_fences_floors;

COMMENT ON TABLE public.lease_fences IS 'Fences of github.com/golib/lease/fence: the last accepted lease token per resource. Never delete rows or lower tokens.';
