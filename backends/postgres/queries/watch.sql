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
-- the key after the hand-off notified must try again.
WITH marked AS (
    UPDATE public.leases AS l
    SET watched_until = clock_timestamp() + interval '5 minutes'
    WHERE l.key = $1::text
      AND (l.watched_until IS NULL OR l.watched_until < clock_timestamp() + interval '4 minutes')
    RETURNING l.expires_at > clock_timestamp() AND l.candidates IS NULL AS held
)
SELECT coalesce(
    (SELECT m.held FROM marked AS m),
    (SELECT l.expires_at > clock_timestamp() AND l.candidates IS NULL AND l.watched_until > clock_timestamp()
     FROM public.leases AS l
     WHERE l.key = $1::text AND NOT EXISTS (SELECT FROM marked)),
    false)
