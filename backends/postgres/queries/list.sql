-- List: a page of the lease table's rows whose key starts with $1 and
-- comes after $2, in key order: each key's last token and, if it is held,
-- the holder and the remaining time on the database's clock. Never returns
-- the nonce.
--
-- $1 key prefix ('' for every key), $2 the last key of the previous page
-- ('' for the first page), $3 page size.
-- Rows (key, held, owner, token, remaining microseconds, acquired_at,
-- renewed_at, transitions).
SELECT l.key, l.expires_at > statement_timestamp(), l.owner, l.token,
       floor(extract(epoch FROM l.expires_at - statement_timestamp()) * 1000000)::bigint,
       l.acquired_at, l.renewed_at, l.transitions
FROM public.leases AS l
WHERE starts_with(l.key, $1::text) AND l.key > $2::text
ORDER BY l.key
LIMIT $3::bigint
