-- The fences table of github.com/golib/lease/fence.
--
-- One row per fenced resource: the lease key the resource is fenced by and
-- the highest token of that lease it has accepted. fence.Tx checks and
-- advances the rows of a transaction's resources in the same transaction as
-- the caller's writes. The token never goes down. A row is deleted only
-- by the fence sweeper, which raises the floor of the row's lease key in
-- the same transaction (002_floors); deleting a row by hand would let a
-- stale writer through.
--
-- Tokens are bigint: fence.Tx refuses tokens of 2^63 and above before
-- sending them (this module's backends issue tokens below 2^53).
CREATE TABLE IF NOT EXISTS public.lease_fences (
    resource   text        NOT NULL PRIMARY KEY,
    lease_key  text        NOT NULL,
    token      bigint      NOT NULL CHECK (token > 0),
    owner      text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE public.lease_fences IS 'Fences of github.com/golib/lease/fence: the last accepted lease token per resource. Never delete rows or lower tokens.';
