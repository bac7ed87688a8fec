-- Force release: end whichever acquisition holds key $1 (only the one
-- holding token $2, unless $2 is 0) by setting its expiry to two thousand
-- years before now, for an operator: long past, as release.sql's thousand
-- years are, so that a backward step of the server's clock can't bring it
-- back; unlike release.sql's expiry, so that renew.sql and release.sql can
-- tell the ended holder that an operator ended it; and the time of the
-- forced release stays known (the expiry plus two thousand years), so that
-- sweep.sql keeps the row for a retention after it. The row keeps the
-- key's token until then. Like release.sql, it notifies waiters on channel
-- $3 (unless '') if a waiter marked the row.
--
-- A row whose expiry is more than 1500 years before now was ended by a
-- forced release, and so was one whose expiry is the Unix epoch: the
-- previous version of this statement wrote that, losing the time.
--
-- $1 key, $2 token or 0, $3 notification channel or ''.
-- One row (outcome, token, held, owner, remaining microseconds,
-- acquired_at, renewed_at, transitions: the row's history, and
-- candidates, as it was before when this statement released it, as it is
-- now otherwise). A standing offer (handoff.sql) is held here: this
-- statement ends it (the key is free; the row keeps its candidates, and
-- the expiry tells that a forced release ended it), and its candidates
-- tell the caller that it was an offer. Outcome
-- 1 released: the row as it was before, the holder this statement ended.
-- Outcome 0 ($2 = 0) nothing held: held is false, whatever the row shows
-- by the time the statement reads it again (below). Outcome 2 the
-- acquisition holding $2 already ended, 4 a forced release ended it, 5
-- there is no row, 3 another acquisition holds or held the key since:
-- the row as it is now. Token is NULL without a row.
--
-- The update sees the row as the statement's snapshot shows it, and a
-- newer version only if the snapshot's matched and was then changed. So
-- when it matches nothing, the fallback read (f), FOR SHARE, reads the
-- latest version of the row, which may be an acquisition that committed
-- after the snapshot: this statement did not end it, and with $2 = 0 it
-- is not reported (nothing was held when the statement took effect). With
-- $2 <> 0 the latest version decides between ended and superseded. The
-- remaining time of a released holder is read from the statement's
-- snapshot: informational.
WITH before AS (
    SELECT b.expires_at FROM public.leases AS b WHERE b.key = $1::text
), released AS (
    UPDATE public.leases AS l
    SET expires_at = statement_timestamp() - interval '17520000 hours'
    FROM before AS b
    WHERE l.key = $1::text AND l.expires_at > statement_timestamp()
      AND ($2::bigint = 0 OR l.token = $2::bigint)
    RETURNING l.token, l.owner,
              floor(extract(epoch FROM b.expires_at - statement_timestamp()) * 1000000)::bigint AS left_us,
              coalesce(l.watched_until > statement_timestamp(), false) AS watched,
              l.acquired_at, l.renewed_at, l.transitions, l.candidates
), announced AS (
    SELECT r.token, r.owner, r.left_us, r.acquired_at, r.renewed_at, r.transitions, r.candidates,
           CASE WHEN r.watched AND $3::text <> ''
                THEN (SELECT 1 FROM pg_notify($3::text, $1::text)) ELSE 0 END AS notified
    FROM released AS r
)
SELECT coalesce(CASE WHEN r.token IS NOT NULL THEN 1 END,
                CASE WHEN $2::bigint = 0 THEN 0
                     WHEN f.token IS NULL THEN 5
                     WHEN f.token <> $2::bigint THEN 3
                     WHEN f.expires_at = to_timestamp(0)
                          OR f.expires_at < statement_timestamp() - interval '13140000 hours' THEN 4
                     ELSE 2 END),
       coalesce(r.token, f.token),
       r.token IS NOT NULL OR ($2::bigint <> 0 AND coalesce(f.held, false)),
       coalesce(r.owner, CASE WHEN $2::bigint <> 0 AND f.held THEN f.owner END, ''),
       CASE WHEN r.token IS NOT NULL THEN r.left_us
            WHEN $2::bigint <> 0 AND f.held THEN f.left_us ELSE 0 END,
       CASE WHEN r.token IS NOT NULL THEN r.acquired_at ELSE f.acquired_at END,
       CASE WHEN r.token IS NOT NULL THEN r.renewed_at ELSE f.renewed_at END,
       coalesce(r.transitions, f.transitions, 0),
       CASE WHEN r.token IS NOT NULL THEN r.candidates WHEN $2::bigint <> 0 AND f.held THEN f.candidates END
FROM (SELECT 1) AS one
LEFT JOIN announced AS r ON true
LEFT JOIN LATERAL (
    SELECT l.token, l.expires_at, l.expires_at > statement_timestamp() AS held, l.owner,
           floor(extract(epoch FROM l.expires_at - statement_timestamp()) * 1000000)::bigint AS left_us,
           l.acquired_at, l.renewed_at, l.transitions, l.candidates
    FROM public.leases AS l
    WHERE l.key = $1::text AND NOT EXISTS (SELECT FROM released)
    FOR SHARE
) AS f ON true
