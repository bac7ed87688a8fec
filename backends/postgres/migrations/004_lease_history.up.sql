-- Keep, for operators, when each key's lease was acquired and last
-- renewed, and how many times its holder changed (Store.Inspect and
-- Store.List; leasectl list and inspect show them, as kubectl shows a
-- Lease's acquireTime, renewTime and leaseTransitions). acquire.sql and
-- renew.sql set them in the statement they already run. They have no
-- index, on purpose: acquire and renew update them, and an index on them
-- would end those updates' HOT path, as one on expires_at would. Columns
-- added without a volatile default rewrite nothing; rows written before
-- show no times until their next acquire.
ALTER TABLE public.leases
    ADD COLUMN IF NOT EXISTS acquired_at timestamptz,
    ADD COLUMN IF NOT EXISTS renewed_at timestamptz,
    ADD COLUMN IF NOT EXISTS transitions bigint NOT NULL DEFAULT 0;
