-- Inspect: the key's last token and, if it is held, the holder and the
-- remaining time on the database's clock. Never returns the nonce.
--
-- $1 key.
-- One row (held, owner, token, remaining microseconds), or no row for a
-- key that was never acquired.
SELECT l.expires_at > statement_timestamp(), l.owner, l.token,
       floor(extract(epoch FROM l.expires_at - statement_timestamp()) * 1000000)::bigint
FROM public.leases AS l
WHERE l.key = $1::text
