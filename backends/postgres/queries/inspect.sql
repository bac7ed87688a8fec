-- Inspect: the key's last token and, if it is held, the holder and the
-- remaining time on the database's clock. Never returns the nonce.
--
-- $1 key.
-- One row (held, owner, token, remaining microseconds), or no row for a
-- key that was never acquired.
SELECT l.expires_at > now.t, l.owner, l.token,
       floor(extract(epoch FROM l.expires_at - now.t) * 1000000)::bigint
FROM public.leases AS l, (SELECT clock_timestamp() AS t) AS now
WHERE l.key = $1::text
