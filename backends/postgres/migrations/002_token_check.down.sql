ALTER TABLE public.leases ADD CONSTRAINT leases_token_check CHECK (token > 0);
