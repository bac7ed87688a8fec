-- Guard check, run inside the caller's transaction: lock the key's row
-- FOR SHARE, so that no acquire, renew or release can change it until the
-- transaction ends, and report whether it still shows acquisition
-- ($2 owner, $3 token) and has not expired. A row with a hand-off's
-- standing offer (handoff.sql) is held by nobody, though its expiry is the
-- window's end and it shows the offered token with the old owner: it is
-- not current for any guard.
--
-- $1 key, $2 owner, $3 token.
-- One row (current, owner, token, held), or no row for an unknown key.
SELECT l.owner = $2::text AND l.token = $3::bigint AND l.expires_at > statement_timestamp() AND l.candidates IS NULL,
       l.owner, l.token, l.expires_at > statement_timestamp() AND l.candidates IS NULL
FROM public.leases AS l
WHERE l.key = $1::text
FOR SHARE
