-- Acquire: grant the key to acquisition $3 if it is free, or extend it if
-- $3 already holds it; otherwise return the holder.
--
-- $1 key, $2 owner, $3 nonce, $4 TTL in milliseconds.
-- One row: (true, token, NULL, NULL) when granted, (false, token, owner,
-- remaining microseconds) when another acquisition holds the key. No row:
-- held by an acquisition committed after this statement's snapshot.
--
-- The upsert takes a row over only when it has expired on the database's
-- clock. ON CONFLICT locks the row even when its WHERE refuses, and the
-- holder CTE reads it FOR SHARE, so it sees the row version that refused.
WITH now AS MATERIALIZED (
    SELECT clock_timestamp() AS t
), granted AS (
    INSERT INTO public.leases AS l (key, owner, nonce, token, expires_at)
    SELECT $1::text, $2::text, $3::text,
           floor(extract(epoch FROM now.t) * 1000000)::bigint,
           now.t + $4::bigint * interval '1 millisecond'
    FROM now
    ON CONFLICT (key) DO UPDATE SET
        owner = excluded.owner,
        nonce = excluded.nonce,
        token = CASE
            WHEN l.nonce = excluded.nonce AND l.expires_at > (SELECT t FROM now) THEN l.token
            ELSE greatest(l.token + 1, excluded.token)
        END,
        expires_at = excluded.expires_at
    WHERE l.expires_at <= (SELECT t FROM now) OR l.nonce = excluded.nonce
    RETURNING l.token
), holder AS (
    SELECT l.owner, l.token, l.expires_at
    FROM public.leases AS l
    WHERE l.key = $1::text AND NOT EXISTS (SELECT FROM granted)
    FOR SHARE
)
SELECT true, g.token, NULL::text, NULL::bigint
FROM granted AS g
UNION ALL
SELECT false, h.token, h.owner,
       floor(extract(epoch FROM h.expires_at - now.t) * 1000000)::bigint
FROM holder AS h, now
