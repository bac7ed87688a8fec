-- Release: end acquisition ($2, $3) of key $1 if it holds the key and has
-- not expired, by setting its expiry to a thousand years before now: long
-- past, so that a backward step of the server's clock can't bring the
-- released lease back (an expiry of "now" would be in the future again
-- after the step), and the time of the release stays known (the expiry
-- plus a thousand years), so that sweep.sql keeps the row, and with it the
-- key's token, for a retention after the release.
-- Token 0 identifies the acquisition by nonce alone.
--
-- If $4 is not empty and a waiter marked the row (watch.sql), the release
-- also calls pg_notify($4, key), so that waiters learn when it commits
-- that the key is free. NOTIFY makes committing transactions queue on a
-- global lock, so releases that nobody waits for skip it.
--
-- $1 key, $2 nonce, $3 token or 0, $4 notification channel or ''.
-- One row with the outcome: 0 released, 1 expired (the row still shows
-- this acquisition), 2 superseded (the row shows another one), 3 ended by
-- a forced release (the row shows this acquisition with the expiry
-- forcerelease.sql sets, more than 1500 years before now, or the Unix
-- epoch that its previous version set; this statement's expiry is a
-- thousand years before now), 4 handed off (the row shows this nonce
-- with candidates, as in renew.sql); no row if the key has none (it was
-- never acquired, was lost, or sweep.sql removed it). A release never
-- ends or alters an offer, also not by nonce alone (token 0), which the
-- client's cleanup sends.
--
-- The update matches the key's row whatever it shows, and sets expires_at
-- to its own value unless ($2, $3) holds it: a refused release writes the
-- row back unchanged (owner, nonce, token, expiry and watch stay as they
-- are), like a refused acquire. So RETURNING sees the latest version of
-- the row, also when another statement committed it after this one began,
-- and needs neither a second read of the row nor a CTE, whose plan nodes
-- PostgreSQL sets up on every execution. Like a refused acquire, a refused
-- release takes the row's lock, so it waits for a transaction that holds
-- the row (CheckGuard's FOR SHARE) to end. RETURNING tells a release by this
-- statement from an earlier one by the expiry: statement_timestamp() is
-- read once per statement, so only a release of the same acquisition in
-- the same microsecond could have set the same value, and it would report
-- released too. The interval is in hours, not years, so that subtracting
-- it needs no calendar arithmetic. A release that applies is told apart
-- before a forced one is looked for, so it evaluates no more than it must.
-- pg_notify returns void, which IS NULL; it is called in a THEN, not as a
-- third term of the AND: AND goes on past a NULL term (no watch), CASE
-- does not.
UPDATE public.leases AS l
SET expires_at = CASE WHEN l.nonce = $2::text AND ($3::bigint = 0 OR l.token = $3::bigint)
                           AND l.expires_at > statement_timestamp() AND l.candidates IS NULL
                      THEN statement_timestamp() - interval '8760000 hours'
                      ELSE l.expires_at END
WHERE l.key = $1::text
RETURNING CASE WHEN l.nonce <> $2::text THEN 2
               WHEN l.candidates IS NOT NULL THEN 4
               WHEN $3::bigint <> 0 AND l.token <> $3::bigint THEN 2
               WHEN l.expires_at = statement_timestamp() - interval '8760000 hours'
               THEN CASE WHEN l.watched_until > statement_timestamp() AND $4::text <> ''
                         THEN CASE WHEN pg_notify($4::text, $1::text) IS NULL THEN 0 ELSE 0 END
                         ELSE 0 END
               WHEN l.expires_at = to_timestamp(0)
                    OR l.expires_at < statement_timestamp() - interval '13140000 hours' THEN 3
               ELSE 1 END
