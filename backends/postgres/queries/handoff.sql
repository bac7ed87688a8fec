-- HandOff: end acquisition ($2, $3) of key $1 if it holds the key, has
-- not expired and is no offer, and in the same statement offer the key to
-- the owners $4 for $5 (lease.HandOffer): a new token, above every token
-- issued for the key by acquire.sql's rule, the expiry at the end of the
-- window, and the candidates; owner and nonce stay those of ($2, $3), so
-- that its renew.sql and release.sql learn that it handed the key off.
-- acquired_at, renewed_at and transitions stay: the candidate's grant
-- counts the transition. See acquire.sql for how the offer is honoured,
-- and migration 006 for the encoding.
--
-- If $6 is not empty and a waiter marked the row (watch.sql), it notifies
-- as release.sql does (the key as the payload: the key is free for the
-- candidates), so that a candidate's waiting Acquire is woken at once.
--
-- $1 key, $2 nonce, $3 token, $4 candidates (text[]), $5 window (an
-- interval), $6 notification channel or ''.
-- One row (outcome, token): 0 handed off (the new token), 1 expired, 2
-- superseded, 3 ended by a forced release, 4 handed off before; no row if
-- the key has none. Shaped as renew.sql is, which see: the update matches
-- the row whatever it shows and writes it back unchanged unless
-- ($2, $3) holds it, so RETURNING sees its latest version. It handed off
-- if the row shows $2 with candidates and the expiry it sets: a hand-off
-- before by the same acquisition set another expiry, or this one would
-- have been refused.
UPDATE public.leases AS l
SET token = CASE WHEN l.nonce = $2::text AND l.token = $3::bigint AND l.candidates IS NULL
                      AND l.expires_at > statement_timestamp()
                 THEN greatest(l.token + 1, (extract(epoch FROM statement_timestamp()) * 1000000)::bigint)
                 ELSE l.token END,
    expires_at = CASE WHEN l.nonce = $2::text AND l.token = $3::bigint AND l.candidates IS NULL
                           AND l.expires_at > statement_timestamp()
                      THEN statement_timestamp() + $5::interval
                      ELSE l.expires_at END,
    candidates = CASE WHEN l.nonce = $2::text AND l.token = $3::bigint AND l.candidates IS NULL
                           AND l.expires_at > statement_timestamp()
                      THEN $4::text[]
                      ELSE l.candidates END
WHERE l.key = $1::text
RETURNING CASE WHEN l.nonce <> $2::text THEN 2
               WHEN l.candidates IS NOT NULL
               THEN CASE WHEN l.expires_at <> statement_timestamp() + $5::interval THEN 4
                         WHEN l.watched_until > statement_timestamp() AND $6::text <> ''
                         THEN CASE WHEN pg_notify($6::text, $1::text) IS NULL THEN 0 ELSE 0 END
                         ELSE 0 END
               WHEN l.token <> $3::bigint THEN 2
               WHEN l.expires_at = to_timestamp(0)
                    OR l.expires_at < statement_timestamp() - interval '13140000 hours' THEN 3
               ELSE 1 END,
          l.token
