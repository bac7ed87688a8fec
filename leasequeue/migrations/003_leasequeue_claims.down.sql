ALTER TABLE public.leasequeue_jobs DROP COLUMN IF EXISTS claim_nonce;
