-- The floors of the fences table of github.com/golib/lease/fence.
--
-- A fence that has not advanced for a retention is retired: one
-- transaction deletes its row and raises the floor of its lease key to its
-- token. fence.Tx refuses every token of a lease key below the key's floor,
-- on every resource, with or without a fence row, so a stale writer to a
-- retired resource is still refused (the proof is in docs/fencing.md,
-- "Retirement"). Floors are never deleted and never go down: deleting one
-- would let a stale writer through to every resource its key retired.
--
-- The row with the empty lease key is not a floor (lease keys are never
-- empty): each retirement updates it, and a fenced transaction at
-- REPEATABLE READ or SERIALIZABLE inserts it with ON CONFLICT DO NOTHING,
-- which fails to serialize if a retirement committed after the
-- transaction's snapshot was taken, instead of missing the floor that
-- retirement raised. Its token counts the retirements.
CREATE TABLE IF NOT EXISTS public.lease_fences_floors (
    lease_key  text        NOT NULL PRIMARY KEY,
    token      bigint      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO public.lease_fences_floors (lease_key, token) VALUES ('', 1) ON CONFLICT (lease_key) DO NOTHING;

COMMENT ON TABLE public.lease_fences_floors IS 'Floors of github.com/golib/lease/fence: the highest token of each lease key whose fences were retired. Never delete rows or lower tokens.';

COMMENT ON TABLE public.lease_fences IS 'Fences of github.com/golib/lease/fence: the last accepted lease token per resource. Rows are retired only by the fence sweeper, which raises the lease key''s floor in the same transaction; never delete rows by hand or lower tokens.';
