-- The lease table of github.com/golib/lease/backends/postgres.
--
-- One row per key. The library removes a row a retention after its lease
-- ended (released, expired or force-released; Store.Sweep), and the key's
-- next token is still above the last one, as tokens are seeded from the
-- database clock; 003_lease_retention says so in the table's comment.
-- Tokens are bigint and stay below 2^53 (they are seeded from the
-- database clock in microseconds since 1970).
CREATE TABLE IF NOT EXISTS public.leases (
    key        text        NOT NULL PRIMARY KEY,
    owner      text        NOT NULL,
    nonce      text        NOT NULL,
    token      bigint      NOT NULL CHECK (token > 0),
    expires_at timestamptz NOT NULL,
    -- Until when some process waits for the key: release notifies only then.
    watched_until timestamptz
) WITH (fillfactor = 50);

COMMENT ON TABLE public.leases IS 'Leases of github.com/golib/lease: one row per key, kept after release so that tokens never go back.';
