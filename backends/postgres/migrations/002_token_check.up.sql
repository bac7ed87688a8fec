-- Drop the CHECK (token > 0) of 001_lease. PostgreSQL rebuilds a table's
-- CHECK expressions from the catalog for every statement that writes the
-- table, about 7% of the server's instructions for an acquire and a
-- release; Acquire checks the token of every grant instead. 001_lease named it
-- after the default table; Migrate also drops it from a table of another
-- name, whose constraint PostgreSQL named after that table.
ALTER TABLE public.leases DROP CONSTRAINT IF EXISTS leases_token_check;
