-- Inspect: the key's last token and, if it is held, the holder and the
-- remaining time (an interval) on the database's clock. Never returns the
-- nonce.
--
-- $1 key.
-- One row (held, owner, token, remaining time, acquired_at, renewed_at,
-- transitions), or no row for a key that was never acquired or whose row
-- sweep.sql removed.
SELECT l.expires_at > statement_timestamp(), l.owner, l.token,
       l.expires_at - statement_timestamp(),
       l.acquired_at, l.renewed_at, l.transitions
FROM public.leases AS l
WHERE l.key = $1::text
