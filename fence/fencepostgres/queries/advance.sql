-- advance: check and advance the fences of a transaction's resources.
--
-- $1 resources, sorted and without duplicates (text[])
-- $2 lease key, $3 token, $4 owner
-- $5 fence.MaxTokenLead in microseconds
--
-- A token above the server's clock in microseconds plus $5 is implausible:
-- no row is inserted, locked or written, and the statement returns one row
-- (NULL, NULL, the largest plausible token).
--
-- A plausible token below the floor of its lease key (the highest token of
-- the key's retired fences, see retire.sql) is stale on every resource: no
-- row is inserted, locked or written, and the statement returns one row
-- (NULL, the lease key, the floor).
--
-- Otherwise rows are inserted, or locked and updated, in the order of $1,
-- so transactions that name the same resources lock them in the same order
-- and never deadlock on them. ON CONFLICT works on the latest version of a
-- row, also at READ COMMITTED, and locks it whether or not it updates it.
--
-- RETURNING reports the fence after the statement of every resource whose
-- row was inserted or updated: the caller's key and token where the token
-- was admitted and advanced the fence; the row's own where it was refused
-- (such a row is updated to its own values so that it is reported, and the
-- transaction then rolls back). A row that already holds the caller's key
-- and token is only locked, not written, and not reported: the same holder
-- writing again costs no row version.
--
-- The floor is read with the statement's snapshot. At READ COMMITTED that
-- snapshot is taken after the statement's table locks are granted, and a
-- retirement holds the fences table in SHARE ROW EXCLUSIVE mode, which
-- conflicts with the ROW EXCLUSIVE lock of this statement: a statement
-- that waited for a retirement sees the floor it raised. At REPEATABLE
-- READ and SERIALIZABLE the snapshot is the transaction's, which may be
-- older than a retirement; the CTE serialized then inserts the floors
-- table's row with the empty lease key, which every retirement updates,
-- and ON CONFLICT DO NOTHING fails to serialize (40001) if that row's
-- latest version is not visible to the snapshot. At READ COMMITTED it
-- inserts nothing.
WITH clock AS (
    SELECT (extract(epoch FROM statement_timestamp()) * 1000000)::bigint + $5::bigint AS largest
), key_floor AS (
    SELECT coalesce(max(fl.token), 0) AS token
    FROM public.lease_fences_floors AS fl
    WHERE fl.lease_key = $2::text
), serialized AS (
    INSERT INTO public.lease_fences_floors (lease_key, token)
    SELECT '', 1 WHERE current_setting('transaction_isolation') <> 'read committed'
    ON CONFLICT (lease_key) DO NOTHING
), advanced AS (
    INSERT INTO public.lease_fences AS f (resource, lease_key, token, owner)
    SELECT r.resource, $2::text, $3::bigint, $4::text
    FROM unnest($1::text[]) WITH ORDINALITY AS r (resource, ord), clock, key_floor
    WHERE $3::bigint <= clock.largest AND $3::bigint >= key_floor.token
    ORDER BY r.ord
    ON CONFLICT (resource) DO UPDATE SET
        token      = CASE WHEN f.lease_key = EXCLUDED.lease_key AND f.token <= EXCLUDED.token THEN EXCLUDED.token ELSE f.token END,
        owner      = CASE WHEN f.lease_key = EXCLUDED.lease_key AND f.token <= EXCLUDED.token THEN EXCLUDED.owner ELSE f.owner END,
        updated_at = CASE WHEN f.lease_key = EXCLUDED.lease_key AND f.token <= EXCLUDED.token THEN now() ELSE f.updated_at END
    WHERE f.lease_key <> EXCLUDED.lease_key OR f.token <> EXCLUDED.token
    RETURNING f.resource, f.lease_key, f.token
)
SELECT resource, lease_key, token FROM advanced
UNION ALL
SELECT NULL, NULL, largest FROM clock WHERE $3::bigint > largest
UNION ALL
SELECT NULL, $2::text, key_floor.token FROM clock, key_floor
WHERE $3::bigint <= clock.largest AND $3::bigint < key_floor.token
