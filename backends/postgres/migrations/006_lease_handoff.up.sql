-- Hand-off, preferred candidates and change notifications (lease.HandOffer,
-- AcquireRequest.Preferred, lease.ChangeWatcher): five columns, and the
-- functions of 005_lease_groups that grant a row again, so that a grant
-- clears a hand-off's candidates.
--
-- A hand-off (queries/handoff.sql) keeps the row's owner and nonce, gives
-- it a new token, sets its expiry to the end of the offer's window and
-- candidates to the owners it is offered to. While the expiry is ahead, a
-- row with candidates is a standing offer: acquire.sql grants it only to
-- a candidate, with the offered token; renew.sql and release.sql never
-- extend or end it, and tell its old holder that it handed the lease off.
-- Once the expiry passed the offer has lapsed: the key is free, and sweep.sql
-- removes the row a retention later, as it removes an expired lease's.
-- Every grant clears candidates, so a row with candidates whose nonce is
-- that of an acquisition is the record of that acquisition's hand-off.
-- How the last acquisition ended is read from the expiry (release.sql,
-- forcerelease.sql) and, for a hand-off, from candidates.
--
-- preferred and preferred_until: the owner of an Acquire with
-- AcquireRequest.Preferred that found the key held (queries/
-- acquirepreferred.sql), and until when; preferred_at: when that owner
-- was recorded, so that the statement that records a new one can tell
-- and announce it to change watchers.
--
-- None of them has an index, on purpose: acquire, renew and release
-- update the row, and an index on a column they write would end their HOT
-- updates. Columns added without a default rewrite nothing.
ALTER TABLE public.leases
    ADD COLUMN IF NOT EXISTS candidates text[],
    ADD COLUMN IF NOT EXISTS preferred text,
    ADD COLUMN IF NOT EXISTS preferred_until timestamptz,
    ADD COLUMN IF NOT EXISTS preferred_at timestamptz;

-- leases_permit and leases_setacquire as 005_lease_groups defines them,
-- except that a grant also clears candidates.
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
            transitions = l.transitions + 1,
            candidates = NULL
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
        acquired_at = v_now, renewed_at = v_now, candidates = NULL,
        transitions = l.transitions
                      + CASE WHEN l.expires_at <= v_now AND l.key <> ALL (v_new) THEN 1 ELSE 0 END
    WHERE l.key = ANY (p_keys);
END
$body$;
-- +goose StatementEnd
