-- List: a page of the lease table's rows whose key starts with $1 and
-- comes after $2, in key order: each key's last token and, if it is held,
-- the holder and the remaining time on the database's clock. Never returns
-- the nonce.
--
-- $1 key prefix ('' for every key), $2 the last key of the previous page
-- ('' for the first page), $3 page size.
-- Rows (key, held, owner, token, remaining microseconds, acquired_at,
-- renewed_at, transitions, candidates, ending, preferred): the columns
-- after the key as inspect.sql gives them, which see. The placeholders of
-- watch.sql (token 0) are left out.
SELECT l.key, l.expires_at > statement_timestamp() AND l.candidates IS NULL, l.owner, l.token,
       floor(extract(epoch FROM l.expires_at - statement_timestamp()) * 1000000)::bigint,
       l.acquired_at, l.renewed_at, l.transitions,
       CASE WHEN l.expires_at > statement_timestamp() THEN l.candidates END,
       CASE WHEN l.expires_at > statement_timestamp() THEN CASE WHEN l.candidates IS NULL THEN 0 ELSE 4 END
            WHEN l.expires_at = to_timestamp(0)
                 OR l.expires_at < statement_timestamp() - interval '13140000 hours' THEN 3
            WHEN l.expires_at < statement_timestamp() - interval '4380000 hours' THEN 1
            WHEN l.candidates IS NOT NULL THEN 4
            ELSE 2 END,
       CASE WHEN l.preferred_until > statement_timestamp()
                 AND NOT (l.preferred = l.owner AND l.expires_at > statement_timestamp() AND l.candidates IS NULL)
            THEN l.preferred END
FROM public.leases AS l
WHERE starts_with(l.key, $1::text) AND l.key > $2::text AND l.token <> 0
ORDER BY l.key
LIMIT $3::bigint
