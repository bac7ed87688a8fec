-- Acquire with AcquireRequest.Preferred: acquire.sql, which see, and
-- besides, when another acquisition holds the key (or an offer refuses
-- it), record $2 as the key's preferred candidate until now + $4
-- (preferred, preferred_until), and when the grant goes to the preferred
-- candidate, clear it. It changes nothing about who gets the key. A
-- candidate newly recorded (none before, another one, or a lapsed one)
-- sets preferred_at to now, and then the statement notifies as for a
-- grant: a change. acquire.sql, which most acquires run, writes none of
-- these columns: Inspect does not report as preferred the owner that
-- holds the key.
--
-- $1 key, $2 owner, $3 nonce, $4 TTL (an interval), $5 notification
-- channel or ''.
-- One row, as acquire.sql returns it.
INSERT INTO public.leases AS l (key, owner, nonce, token, expires_at, acquired_at, renewed_at)
VALUES ($1::text, $2::text, $3::text,
        (extract(epoch FROM statement_timestamp()) * 1000000)::bigint,
        statement_timestamp() + $4::interval, statement_timestamp(), statement_timestamp())
ON CONFLICT (key) DO UPDATE SET
    owner = CASE WHEN l.expires_at <= statement_timestamp() OR $2::text = ANY (l.candidates)
                 THEN excluded.owner ELSE l.owner END,
    nonce = CASE WHEN l.expires_at <= statement_timestamp() OR $2::text = ANY (l.candidates)
                 THEN excluded.nonce ELSE l.nonce END,
    token = CASE WHEN l.expires_at <= statement_timestamp()
                 THEN greatest(l.token + 1, excluded.token) ELSE l.token END,
    expires_at = CASE WHEN l.expires_at <= statement_timestamp() OR $2::text = ANY (l.candidates)
                           OR (l.nonce = excluded.nonce AND l.candidates IS NULL)
                      THEN excluded.expires_at ELSE l.expires_at END,
    acquired_at = CASE WHEN l.expires_at <= statement_timestamp() OR $2::text = ANY (l.candidates)
                       THEN excluded.acquired_at ELSE l.acquired_at END,
    renewed_at = CASE WHEN l.expires_at <= statement_timestamp() OR $2::text = ANY (l.candidates)
                           OR (l.nonce = excluded.nonce AND l.candidates IS NULL)
                      THEN excluded.renewed_at ELSE l.renewed_at END,
    transitions = CASE WHEN l.expires_at <= statement_timestamp() OR $2::text = ANY (l.candidates)
                       THEN l.transitions + 1 ELSE l.transitions END,
    candidates = CASE WHEN l.expires_at <= statement_timestamp() OR $2::text = ANY (l.candidates)
                      THEN NULL ELSE l.candidates END,
    preferred = CASE WHEN l.expires_at <= statement_timestamp() OR $2::text = ANY (l.candidates)
                     THEN CASE WHEN l.preferred = $2::text THEN NULL ELSE l.preferred END
                     WHEN (l.nonce = excluded.nonce AND l.candidates IS NULL) THEN l.preferred
                     ELSE $2::text END,
    preferred_until = CASE WHEN l.expires_at <= statement_timestamp() OR $2::text = ANY (l.candidates) OR (l.nonce = excluded.nonce AND l.candidates IS NULL)
                           THEN l.preferred_until ELSE excluded.expires_at END,
    preferred_at = CASE WHEN l.expires_at <= statement_timestamp() OR $2::text = ANY (l.candidates) OR (l.nonce = excluded.nonce AND l.candidates IS NULL)
                             OR (l.preferred = $2::text AND l.preferred_until > statement_timestamp())
                        THEN l.preferred_at ELSE statement_timestamp() END
RETURNING l.nonce = $3::text AND l.candidates IS NULL, l.token, l.owner, l.expires_at - statement_timestamp(),
          CASE WHEN l.watched_until > statement_timestamp() AND $5::text <> ''
                    AND (l.acquired_at = statement_timestamp() OR l.preferred_at = statement_timestamp())
               THEN CASE WHEN pg_notify($5::text, E'\x01' || $1::text) IS NULL
                         THEN array_to_string(l.candidates, E'\x01') END
               ELSE array_to_string(l.candidates, E'\x01') END
