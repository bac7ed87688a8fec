-- Counting semaphores and sets of keys (lease.PermitAcquirer and
-- lease.SetAcquirer): four functions beside the lease table, each called
-- by one statement of the Store (queries/permit.sql, setacquire.sql,
-- setrenew.sql, setrelease.sql), and an index for the permits.
--
-- Every permit and every key of a set is an ordinary row of the table,
-- written as acquire.sql, renew.sql and release.sql write one: expiry on
-- the database's clock (statement_timestamp(), read once per call), a
-- thousand years before now for a release, tokens greatest(last + 1,
-- microseconds since 1970), and the history of 004_lease_history (a
-- grant sets acquired_at and renewed_at and counts a transition on a row
-- that existed and was free; a set's grant over a key its acquisition
-- still holds counts none; an extension or renewal sets renewed_at). So Renew, Release, Inspect, List, ForceRelease, Sweep and
-- CheckGuard serve them unchanged.
--
-- The functions are SECURITY INVOKER (the default): they need the role's
-- own privileges on the table, and EXECUTE, which PostgreSQL grants to
-- PUBLIC on a new function. They set nothing on the session, so they work
-- through a pooler in transaction mode. The function names are the
-- table's name plus a suffix of at most 11 bytes, the length of the
-- "_migrations" suffix that already bounds the table's name.
--
-- # No deadlock
--
-- Every statement that locks more than one row of the table locks them one
-- at a time in one order, the order of the keys under COLLATE "C" (byte
-- order, which is Go's for UTF-8), and waits only for the next key while
-- it holds only keys before it: leases_setacquire inserts a missing key
-- (ON CONFLICT DO NOTHING, which waits for a concurrent insert of the same
-- key) or locks it FOR UPDATE, key by key in that order; leases_setrenew
-- and leases_setrelease lock key by key in that order before they write.
-- Of any two such statements waiting for each other, the
-- one that waits for the greater key holds the smaller one that the other
-- waits for, which is impossible: it holds only keys below the one it
-- waits for. The other statements (acquire, renew, release, force
-- release, watch, guard) lock one row and wait for nothing else meanwhile, and
-- sweep.sql never waits (SKIP LOCKED), so none of them can close a cycle.
-- leases_permit takes a transaction-scoped advisory lock of its semaphore
-- first and then the row of one free slot; a racer that takes that slot
-- between its read and its write (only a plain acquire of a permit key,
-- or a set that names one, can: permit acquisitions of one semaphore take
-- turns on the advisory lock) makes it lock a second slot while it holds
-- the first, and only then could it meet a set that names both permit
-- keys in the opposite order. PostgreSQL detects that cycle and rolls one
-- statement back (SQLSTATE 40P01, classified safe to retry).

-- The permit rows of a semaphore, found by a range of their keys in byte
-- order: PermitKey(K, i) is K || '/permit/' || i, so those of K are the
-- keys from K || '/permit/' (inclusive) to K || '/permit0' (exclusive)
-- under COLLATE "C". Partial, so that it holds only keys of that form and
-- costs nothing to other keys; on key only, which no update changes, so
-- updates stay HOT.
CREATE INDEX IF NOT EXISTS leases_permits ON public.leases (key COLLATE "C")
    WHERE key LIKE '%/permit/%';

-- leases_permit: grant acquisition p_nonce one of p_permits permits of the
-- semaphore p_key, as lease.PermitAcquirer.AcquirePermit says. Returns
-- the slot (-1 when refused), whether it was granted, and the token, owner
-- and remaining time of the grant, or when refused of the holder below
-- p_permits whose lease ends first.
--
-- Permit acquisitions of one semaphore take turns on a transaction-scoped
-- advisory lock named after the table (its row type's OID) and the key,
-- so that each reads every permit row of the semaphore as the previous
-- one committed them: its token is then greater than every token of
-- every permit row, whatever its slot, also one above p_permits. The read
-- decides: p_nonce's own permit below p_permits is extended (an
-- idempotent retry); otherwise the lowest free slot below p_permits is
-- taken with an upsert that writes only if the row is still free when
-- locked; if someone took it meanwhile, the call reads again and tries
-- the next, so it never gives up while a slot is free. A refusal
-- is decided by one read in which every slot below p_permits is held.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION public.leases_permit(
    p_key text, p_owner text, p_nonce text, p_ttl interval, p_permits integer,
    OUT r_slot integer, OUT r_granted boolean, OUT r_token bigint, OUT r_owner text,
    OUT r_remaining interval)
LANGUAGE plpgsql AS $body$
DECLARE
    v_now    timestamptz := statement_timestamp();
    v_prefix text := p_key || '/permit/';
    v_end    text := p_key || '/permit0';
    v_held   boolean[];
    v_max    bigint;
    v_mine   integer;
    v_first  timestamptz;
    v_slot   integer;
    r        record;
BEGIN
    IF p_permits IS NULL OR p_permits < 1 OR p_permits > 256 THEN
        RAISE EXCEPTION 'lease: % permits, want 1 to 256', p_permits
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended(p_key, pg_typeof(NULL::public.leases)::oid::bigint));
    FOR v_attempt IN 1 .. p_permits + 16 LOOP
        v_held := array_fill(false, ARRAY[p_permits]);
        v_max := 0;
        v_mine := NULL;
        v_first := NULL;
        FOR r IN
            SELECT l.key, l.owner, l.nonce, l.token, l.expires_at
            FROM public.leases AS l
            WHERE l.key COLLATE "C" >= v_prefix AND l.key COLLATE "C" < v_end
              AND l.key LIKE '%/permit/%'
        LOOP
            v_max := greatest(v_max, r.token);
            v_slot := CASE WHEN substr(r.key, length(v_prefix) + 1) ~ '^(0|[1-9][0-9]{0,2})$'
                           THEN substr(r.key, length(v_prefix) + 1)::integer END;
            CONTINUE WHEN v_slot IS NULL OR v_slot >= p_permits OR r.expires_at <= v_now;
            v_held[v_slot + 1] := true;
            IF r.nonce = p_nonce AND (v_mine IS NULL OR v_slot < v_mine) THEN
                v_mine := v_slot;
            END IF;
            IF v_first IS NULL OR r.expires_at < v_first THEN
                v_first := r.expires_at;
                r_token := r.token;
                r_owner := r.owner;
            END IF;
        END LOOP;

        IF v_mine IS NOT NULL THEN
            UPDATE public.leases AS l SET expires_at = v_now + p_ttl, renewed_at = v_now
            WHERE l.key = v_prefix || v_mine AND l.nonce = p_nonce AND l.expires_at > v_now
            RETURNING l.token, l.owner INTO r_token, r_owner;
            IF FOUND THEN
                r_slot := v_mine;
                r_granted := true;
                r_remaining := p_ttl;
                RETURN;
            END IF;
            CONTINUE; -- ended meanwhile (a forced release): read again
        END IF;

        v_slot := array_position(v_held, false) - 1;
        IF v_slot IS NULL THEN
            r_slot := -1;
            r_granted := false;
            r_remaining := v_first - v_now;
            RETURN;
        END IF;
        INSERT INTO public.leases AS l (key, owner, nonce, token, expires_at, acquired_at, renewed_at)
        VALUES (v_prefix || v_slot, p_owner, p_nonce,
                greatest(v_max + 1, (extract(epoch FROM v_now) * 1000000)::bigint),
                v_now + p_ttl, v_now, v_now)
        ON CONFLICT (key) DO UPDATE SET
            owner = excluded.owner,
            nonce = excluded.nonce,
            token = greatest(l.token + 1, excluded.token),
            expires_at = excluded.expires_at,
            acquired_at = excluded.acquired_at,
            renewed_at = excluded.renewed_at,
            transitions = l.transitions + 1
        WHERE l.expires_at <= v_now
        RETURNING l.token INTO r_token;
        IF FOUND THEN
            r_slot := v_slot;
            r_granted := true;
            r_owner := p_owner;
            r_remaining := p_ttl;
            RETURN;
        END IF;
        -- Taken meanwhile: read again and try the next free slot.
    END LOOP;
    RAISE EXCEPTION 'lease: permits of a semaphore kept being taken by other statements'
        USING ERRCODE = 'serialization_failure';
END
$body$;
-- +goose StatementEnd

-- leases_setacquire: grant acquisition p_nonce every key of p_keys, all or
-- nothing, with one token, as lease.SetAcquirer.AcquireSet says. Returns
-- whether it was granted, and the token; when refused, the first key in
-- order held by another acquisition, and its holder's token, owner and
-- remaining time.
--
-- Key by key in byte order, it locks the key's row FOR UPDATE or, if the
-- key has none, inserts a free row (ON CONFLICT DO NOTHING: if another
-- statement inserted it meanwhile, it waits for that one and locks its
-- row instead); see "No deadlock" above. It stops at the first key held by
-- another acquisition and deletes the rows it inserted, so nothing
-- changes. Once it holds every row it writes them all: extended with the
-- same token if p_nonce already held each with one token (an idempotent
-- retry), otherwise granted with a token greater than the last token of
-- every key.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION public.leases_setacquire(
    p_keys text[], p_owner text, p_nonce text, p_ttl interval,
    OUT r_granted boolean, OUT r_key text, OUT r_token bigint, OUT r_owner text,
    OUT r_remaining interval)
LANGUAGE plpgsql AS $body$
DECLARE
    v_now     timestamptz := statement_timestamp();
    v_key     text;
    v_max     bigint := 0;
    v_same    bigint;          -- the token p_nonce holds the keys with so far
    v_extend  boolean := true; -- p_nonce holds every key so far with one token
    v_new     text[] := '{}';  -- the keys whose rows this call inserted
    v_owner   text;
    v_nonce   text;
    v_token   bigint;
    v_expires timestamptz;
BEGIN
    IF coalesce(cardinality(p_keys), 0) = 0 THEN
        RAISE EXCEPTION 'lease: a set of no keys' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR v_key IN SELECT DISTINCT u.k COLLATE "C" FROM unnest(p_keys) AS u(k) ORDER BY 1 LOOP
        FOR v_attempt IN 1 .. 101 LOOP
            IF v_attempt = 101 THEN
                RAISE EXCEPTION 'lease: a key of a set kept being inserted and removed by other statements'
                    USING ERRCODE = 'serialization_failure';
            END IF;
            SELECT l.owner, l.nonce, l.token, l.expires_at
            INTO v_owner, v_nonce, v_token, v_expires
            FROM public.leases AS l WHERE l.key = v_key
            FOR UPDATE;
            EXIT WHEN FOUND;
            INSERT INTO public.leases AS l (key, owner, nonce, token, expires_at)
            VALUES (v_key, '', '', 1, '-infinity')
            ON CONFLICT (key) DO NOTHING;
            IF FOUND THEN
                v_new := v_new || v_key;
                v_nonce := NULL;
                v_token := 1;
                v_expires := '-infinity';
                EXIT;
            END IF;
        END LOOP;
        IF v_expires > v_now AND v_nonce <> p_nonce THEN
            DELETE FROM public.leases AS l WHERE l.key = ANY (v_new);
            r_granted := false;
            r_key := v_key;
            r_token := v_token;
            r_owner := v_owner;
            r_remaining := v_expires - v_now;
            RETURN;
        END IF;
        IF v_expires > v_now AND (v_same IS NULL OR v_same = v_token) THEN
            v_same := v_token;
        ELSE
            v_extend := false;
        END IF;
        v_max := greatest(v_max, v_token);
    END LOOP;

    r_granted := true;
    IF v_extend THEN
        UPDATE public.leases AS l SET expires_at = v_now + p_ttl, renewed_at = v_now
        WHERE l.key = ANY (p_keys);
        r_token := v_same;
        RETURN;
    END IF;
    r_token := greatest(v_max + 1, (extract(epoch FROM v_now) * 1000000)::bigint);
    UPDATE public.leases AS l
    SET owner = p_owner, nonce = p_nonce, token = r_token, expires_at = v_now + p_ttl,
        acquired_at = v_now, renewed_at = v_now,
        transitions = l.transitions
                      + CASE WHEN l.expires_at <= v_now AND l.key <> ALL (v_new) THEN 1 ELSE 0 END
    WHERE l.key = ANY (p_keys);
END
$body$;
-- +goose StatementEnd

-- leases_setrenew: extend acquisition (p_nonce, p_token; 0: any token) on
-- every key of p_keys to p_ttl from now, if it holds all of them, as
-- lease.SetAcquirer.RenewSet says. Returns outcome 0 and no key, or the
-- first key in order that it no longer holds, with that key's outcome as
-- renew.sql gives it (1 expired, 2 superseded, 3 force-released, 4 no
-- row); then nothing changed. It locks key by key in byte order before it
-- writes.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION public.leases_setrenew(
    p_keys text[], p_nonce text, p_token bigint, p_ttl interval,
    OUT r_key text, OUT r_outcome integer)
LANGUAGE plpgsql AS $body$
DECLARE
    v_now     timestamptz := statement_timestamp();
    v_key     text;
    v_nonce   text;
    v_token   bigint;
    v_expires timestamptz;
BEGIN
    FOR v_key IN SELECT DISTINCT u.k COLLATE "C" FROM unnest(p_keys) AS u(k) ORDER BY 1 LOOP
        SELECT l.nonce, l.token, l.expires_at INTO v_nonce, v_token, v_expires
        FROM public.leases AS l WHERE l.key = v_key
        FOR UPDATE;
        r_outcome := CASE WHEN NOT FOUND THEN 4
                          WHEN v_nonce <> p_nonce OR (p_token <> 0 AND v_token <> p_token) THEN 2
                          WHEN v_expires > v_now THEN 0
                          WHEN v_expires = to_timestamp(0)
                               OR v_expires < v_now - interval '13140000 hours' THEN 3
                          ELSE 1 END;
        IF r_outcome <> 0 THEN
            r_key := v_key;
            RETURN;
        END IF;
    END LOOP;
    UPDATE public.leases AS l SET expires_at = v_now + p_ttl, renewed_at = v_now
    WHERE l.key = ANY (p_keys);
    r_outcome := 0;
END
$body$;
-- +goose StatementEnd

-- leases_setrelease: end acquisition (p_nonce, p_token; 0: by nonce alone)
-- on every key of p_keys that it still holds, as release.sql ends one, and
-- notify channel p_channel (unless '') of each released key that a waiter
-- marked. Returns outcome 0 and no key if it held them all, or else the
-- first key in order that it no longer held, with that key's outcome as
-- release.sql gives it (1 expired, 2 superseded, 3 force-released, 4 no
-- row), after releasing the others. It locks key by key in byte order
-- before it writes.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION public.leases_setrelease(
    p_keys text[], p_nonce text, p_token bigint, p_channel text,
    OUT r_key text, OUT r_outcome integer)
LANGUAGE plpgsql AS $body$
DECLARE
    v_now      timestamptz := statement_timestamp();
    v_key      text;
    v_nonce    text;
    v_token    bigint;
    v_expires  timestamptz;
    v_watched  timestamptz;
    v_outcome  integer;
    v_released text[] := '{}';
BEGIN
    r_outcome := 0;
    FOR v_key IN SELECT DISTINCT u.k COLLATE "C" FROM unnest(p_keys) AS u(k) ORDER BY 1 LOOP
        SELECT l.nonce, l.token, l.expires_at, l.watched_until
        INTO v_nonce, v_token, v_expires, v_watched
        FROM public.leases AS l WHERE l.key = v_key
        FOR UPDATE;
        v_outcome := CASE WHEN NOT FOUND THEN 4
                          WHEN v_nonce <> p_nonce OR (p_token <> 0 AND v_token <> p_token) THEN 2
                          WHEN v_expires > v_now THEN 0
                          WHEN v_expires = to_timestamp(0)
                               OR v_expires < v_now - interval '13140000 hours' THEN 3
                          ELSE 1 END;
        IF v_outcome = 0 THEN
            v_released := v_released || v_key;
            IF v_watched > v_now AND p_channel <> '' THEN
                PERFORM pg_notify(p_channel, v_key);
            END IF;
        ELSIF r_key IS NULL THEN
            r_key := v_key;
            r_outcome := v_outcome;
        END IF;
    END LOOP;
    UPDATE public.leases AS l SET expires_at = v_now - interval '8760000 hours'
    WHERE l.key = ANY (v_released);
END
$body$;
-- +goose StatementEnd
