-- Say in the table's comment that a row is removed a retention after its
-- lease ended (Store.Sweep, from this version of the package on), where
-- 001_lease said rows were kept. Only the comment changes.
COMMENT ON TABLE public.leases IS 'Leases of github.com/golib/lease: one row per key, removed a retention after its lease ended; the next token is still higher, as tokens are seeded from the database clock.';
