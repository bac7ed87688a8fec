-- Acquire: grant key $1 to acquisition $3 if the key is free (never
-- acquired, released, or expired on the database's clock), or extend it
-- if $3 already holds it; otherwise leave the holder as it is.
--
-- $1 key, $2 owner, $3 nonce, $4 TTL (an interval), $5 notification
-- channel or ''.
-- One row: whether $3 holds the key now, and the holder's token, owner and
-- remaining time as an interval (those of $3 when granted), and the
-- candidates of a standing offer that refused $3, joined by a byte 1
-- (owners hold no control character), else NULL.
--
-- A hand-off (handoff.sql) leaves an offer: a row with candidates whose
-- expiry, the end of the offer's window, is ahead. The key is then free
-- for a candidate ($2 among the candidates), who gets the offered token
-- (the token column's ELSE), and held for anyone else, whom the statement
-- refuses as for a holder. Once the window passed the key is free for
-- anyone, and the token rises above the offered one. Every grant clears
-- candidates, so they are NULL on a held row and the test for a
-- candidate, evaluated only when the expiry is ahead, is false there. The
-- holder's own nonce extends its lease only if the row is no offer: the
-- acquisition that handed the key off has that nonce, and must not take
-- the offer back with a retried Acquire.
--
-- A grant to a new acquisition (acquired_at set to now) of a row that a
-- waiter marked (watch.sql) notifies channel $5, with the key after a
-- byte 1 as the payload: a change, which wakes change watchers but not
-- release waiters (see listen.go). The call sits in the last column,
-- in a THEN as in release.sql (AND goes on past a NULL term, CASE does
-- not), and its void result IS NULL, so the column is the candidates
-- either way. Candidates and notification share one text column because
-- each result column, and a text[] to scan, cost the client allocations
-- on every acquire.
--
-- A grant sets acquired_at and renewed_at to now and counts one more
-- transition on a row that existed (a new row starts at 0); an extension
-- by the holding nonce sets renewed_at only. The values come from VALUES
-- (excluded), read once.
--
-- The row is always written: ON CONFLICT locks it (which already costs a
-- write), and each column keeps its value unless the key is free or $3
-- holds it. So RETURNING shows the latest version of the row, the one
-- that decided, also when another acquisition committed it after this
-- statement began. "Now" is statement_timestamp(): the database's clock,
-- read once when the statement arrived, so every column sees the same
-- instant. A statement that waits for the row lock only gets a shorter
-- lease than it asked for, never a longer one.
--
-- Every function and operator in a statement costs the server a lookup
-- and a permission check each time the statement runs, even as a prepared
-- statement, so the statement uses few: the TTL arrives as an interval,
-- the remaining time leaves as one, and extract(epoch ...) of a
-- timestamptz is exact to the microsecond (numeric), so the token needs no
-- floor(). An extension by the holding nonce changes only expires_at: the
-- nonce is already $3, and the owner stays the one it was granted with.
-- Not writing the row when the key is held would need a second
-- read of it (the statement's snapshot may predate the version the
-- conflict check saw), which costs more than the write saves.
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
                      THEN NULL ELSE l.candidates END
RETURNING l.nonce = $3::text AND l.candidates IS NULL, l.token, l.owner, l.expires_at - statement_timestamp(),
          CASE WHEN l.watched_until > statement_timestamp() AND $5::text <> ''
                    AND l.acquired_at = statement_timestamp()
               THEN CASE WHEN pg_notify($5::text, E'\x01' || $1::text) IS NULL
                         THEN array_to_string(l.candidates, E'\x01') END
               ELSE array_to_string(l.candidates, E'\x01') END
