-- Renew: extend acquisition ($2, $3) of key $1 to $4 from now
-- if it holds the key and has not expired on the database's clock.
--
-- $1 key, $2 nonce, $3 token (0: any token), $4 TTL (an interval).
-- One row with the outcome: 0 renewed, 1 expired (the row still shows this
-- acquisition), 2 superseded (the row shows another one), 3 ended by a
-- forced release (the row shows this acquisition with the expiry
-- forcerelease.sql sets, more than 1500 years before now, or the Unix
-- epoch that its previous version set), 4 handed off (the row shows this
-- nonce with candidates: handoff.sql ended this acquisition, whether its
-- offer stands, lapsed or was force-released; with any token, as a hand-off
-- changes it); no row if the key has none (it was never acquired, was
-- lost, or sweep.sql removed it). A standing offer is never extended,
-- also not by nonce alone (token 0).
--
-- Shaped as release.sql is: the update matches the key's row whatever it
-- shows and changes the expiry only if ($2, $3) holds it, so a refused
-- renew writes the row back unchanged and RETURNING sees the latest
-- version of the row. It takes the row's lock also when it refuses, so it
-- waits for a transaction holding the row (CheckGuard's FOR SHARE) to end,
-- as a renewal that applies always did. It renewed if the row shows
-- ($2, $3) with the expiry it sets: an expired row's expiry is not later
-- than now, and another statement that sets the same expiry in the same
-- microsecond does it for another nonce or token (which reads as
-- superseded) or for this acquisition (which then holds the key). That
-- test comes before the one for a forced release, so a renewal that
-- applies evaluates no more than it must. A renewal also sets renewed_at
-- to now; a refused one writes it back unchanged.
UPDATE public.leases AS l
SET expires_at = CASE WHEN l.nonce = $2::text AND ($3::bigint = 0 OR l.token = $3::bigint)
                           AND l.expires_at > statement_timestamp() AND l.candidates IS NULL
                      THEN statement_timestamp() + $4::interval
                      ELSE l.expires_at END,
    renewed_at = CASE WHEN l.nonce = $2::text AND ($3::bigint = 0 OR l.token = $3::bigint)
                           AND l.expires_at > statement_timestamp() AND l.candidates IS NULL
                      THEN statement_timestamp()
                      ELSE l.renewed_at END
WHERE l.key = $1::text
RETURNING CASE WHEN l.nonce <> $2::text THEN 2
               WHEN l.candidates IS NOT NULL THEN 4
               WHEN $3::bigint <> 0 AND l.token <> $3::bigint THEN 2
               WHEN l.expires_at = statement_timestamp() + $4::interval THEN 0
               WHEN l.expires_at = to_timestamp(0)
                    OR l.expires_at < statement_timestamp() - interval '13140000 hours' THEN 3
               ELSE 1 END
