-- Watch: mark key $1 as waited for, for five minutes, so that its release
-- notifies (release.sql), and so do its hand-off and forced release
-- (handoff.sql, forcerelease.sql) and, as a change, a grant to a new
-- acquisition or a new preferred candidate (acquire.sql,
-- acquirepreferred.sql). Rows marked for at least four more minutes are
-- left alone, so that many waiters do not rewrite the row.
--
-- $1 key.
-- One row: whether the key is held by an acquisition whose release will
-- notify, so that the waiter need not ask again now. It is true when the
-- row shows a lease that has not expired and carries a mark: the version
-- this statement marked (the latest), or, when another waiter's mark
-- left the row alone, the version the statement's snapshot shows, marked
-- already, so any release that committed after it notified. It is false
-- without a row, for an expired or released lease, and for a row whose
-- snapshot version carries no mark (a mark set since could have come
-- after a release that did not notify): the waiter then asks again. It
-- is false for a standing offer (handoff.sql) too: a candidate that marks
-- the key after the hand-off notified must try again. The second column
-- says whether the key's row carries a mark now (this statement's, or
-- one it left alone).
--
-- A key without a row gets one that holds nothing, so that the key's
-- first grant finds the mark and notifies: a placeholder, with token 0,
-- owner and nonce '', an expiry of -infinity (free for anyone, also for
-- an acquire that began before this statement and waited for its
-- insert), and transitions -1, so that the first grant (acquire.sql, or a
-- semaphore's or a set's function) counts it as the row's first
-- acquisition, with 0 transitions, as on a new row. Inspect and List do
-- not show a row with token 0; sweep.sql removes it a retention after its
-- mark lapsed; Renew and Release of an acquisition whose row sweep.sql
-- removed and a placeholder replaced are answered as superseded. The
-- insert does nothing if another statement inserted the key since the
-- snapshot: then nothing is marked, and the second column says so, so
-- that the caller runs the statement again (with a new snapshot, which
-- has the row).
WITH marked AS (
    UPDATE public.leases AS l
    SET watched_until = clock_timestamp() + interval '5 minutes'
    WHERE l.key = $1::text
      AND (l.watched_until IS NULL OR l.watched_until < clock_timestamp() + interval '4 minutes')
    RETURNING l.expires_at > clock_timestamp() AND l.candidates IS NULL AS held
), added AS (
    INSERT INTO public.leases AS l (key, owner, nonce, token, expires_at, watched_until, transitions)
    SELECT $1::text, '', '', 0, '-infinity', clock_timestamp() + interval '5 minutes', -1
    WHERE NOT EXISTS (SELECT FROM public.leases AS e WHERE e.key = $1::text)
    ON CONFLICT (key) DO NOTHING
    RETURNING false AS held
)
SELECT coalesce(
    (SELECT m.held FROM marked AS m),
    (SELECT l.expires_at > clock_timestamp() AND l.candidates IS NULL AND l.watched_until > clock_timestamp()
     FROM public.leases AS l
     WHERE l.key = $1::text AND NOT EXISTS (SELECT FROM marked)),
    (SELECT a.held FROM added AS a),
    false),
       EXISTS (SELECT FROM marked) OR EXISTS (SELECT FROM added)
       OR EXISTS (SELECT FROM public.leases AS l WHERE l.key = $1::text AND l.watched_until > clock_timestamp())
