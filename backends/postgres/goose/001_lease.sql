-- +goose Up
-- The lease table of github.com/golib/lease/backends/postgres.
--
-- One row per key, never deleted by the library: a released or expired
-- lease keeps its row, so the key's last token is never forgotten.
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

-- +goose Down
DROP TABLE IF EXISTS public.leases;
