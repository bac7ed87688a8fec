-- Watch: mark key $1 as waited for, for five minutes, so that its release
-- notifies (release.sql). Rows marked for at least four more minutes are
-- left alone, so that many waiters do not rewrite the row.
--
-- $1 key.
UPDATE public.leases AS l
SET watched_until = clock_timestamp() + interval '5 minutes'
WHERE l.key = $1::text
  AND (l.watched_until IS NULL OR l.watched_until < clock_timestamp() + interval '4 minutes')
