-- Inspect: the key's last token and, if it is held, the holder and the
-- remaining time (an interval) on the database's clock. Never returns the
-- nonce.
--
-- $1 key.
-- One row (held, owner, token, remaining time, acquired_at, renewed_at,
-- transitions, candidates, ending, preferred), or no row for a key that
-- was never acquired or whose row sweep.sql removed (or whose row is the
-- placeholder of watch.sql, token 0).
--
-- A row with candidates whose expiry is ahead is a standing offer
-- (handoff.sql): not held; the owner is the one who handed it off, the
-- remaining time what is left of the window. ending is a lease.Ending:
-- 0 held (or a standing offer: then 4), 3 force-released (the expiry
-- more than 1500 years before now, or the Unix epoch: see
-- forcerelease.sql), 1 released (between 500 and 1500 years: see
-- release.sql), 4 handed off (candidates: an offer that lapsed), else 2
-- expired. preferred is the preferred candidate (acquirepreferred.sql)
-- until it lapsed, unless it holds the key.
SELECT l.expires_at > statement_timestamp() AND l.candidates IS NULL, l.owner, l.token,
       l.expires_at - statement_timestamp(),
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
WHERE l.key = $1::text AND l.token <> 0
