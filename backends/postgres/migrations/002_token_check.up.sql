-- Drop the CHECK (token > 0) of 001_lease. PostgreSQL rebuilds a table's
-- CHECK expressions from the catalog for every statement that writes the
-- table, which cost each acquire and release about a tenth of its server
-- time; the store checks every token it reads instead. 001_lease named it
-- after the default table; Migrate also drops it from a table of another
-- name, whose constraint PostgreSQL named after that table.
ALTER TABLE public.leases DROP CONSTRAINT IF EXISTS leases_token_check;
