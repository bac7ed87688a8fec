COMMENT ON TABLE public.leases IS 'Leases of github.com/golib/lease: one row per key, kept after release so that tokens never go back.';
