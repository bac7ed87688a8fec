-- The claimed item row is its own lease (leasequeue.Claimer): a claim
-- stores its acquisition's secret in claim_nonce, next to the holder
-- (owner), the token (fence_token, seeded by the database's clock like the
-- lease tokens) and the expiry (visible_at, on the database's clock).
-- Renew and Release of a claim apply only under that token and secret;
-- completing or failing the item clears the secret.
ALTER TABLE public.leasequeue_jobs ADD COLUMN IF NOT EXISTS claim_nonce text;
