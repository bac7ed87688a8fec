-- advance: check and advance the fences of a transaction's resources.
--
-- $1 resources, sorted and without duplicates (text[])
-- $2 lease key, $3 token, $4 owner
--
-- Rows are inserted, or locked and updated, in the order of $1, so
-- transactions that name the same resources lock them in the same order and
-- never deadlock on them. ON CONFLICT works on the latest version of a row,
-- also at READ COMMITTED, and locks it whether or not it updates it.
--
-- RETURNING reports the fence after the statement of every resource whose
-- row was inserted or updated: the caller's key and token where the token
-- was admitted and advanced the fence; the row's own where it was refused
-- (such a row is updated to its own values so that it is reported, and the
-- transaction then rolls back). A row that already holds the caller's key
-- and token is only locked, not written, and not reported: the same holder
-- writing again costs no row version.
INSERT INTO public.lease_fences AS f (resource, lease_key, token, owner)
SELECT r.resource, $2::text, $3::bigint, $4::text
FROM unnest($1::text[]) WITH ORDINALITY AS r (resource, ord)
ORDER BY r.ord
ON CONFLICT (resource) DO UPDATE SET
    token      = CASE WHEN f.lease_key = EXCLUDED.lease_key AND f.token <= EXCLUDED.token THEN EXCLUDED.token ELSE f.token END,
    owner      = CASE WHEN f.lease_key = EXCLUDED.lease_key AND f.token <= EXCLUDED.token THEN EXCLUDED.owner ELSE f.owner END,
    updated_at = CASE WHEN f.lease_key = EXCLUDED.lease_key AND f.token <= EXCLUDED.token THEN now() ELSE f.updated_at END
WHERE f.lease_key <> EXCLUDED.lease_key OR f.token <> EXCLUDED.token
RETURNING f.resource, f.lease_key, f.token
