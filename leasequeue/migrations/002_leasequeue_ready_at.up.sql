-- ready_at is when an item became ready for its next attempt: when it was
-- enqueued, or when the retry delay after a failed attempt ends. Begin
-- reports the time since as the claim's age. Rows from before this
-- migration have no ready_at; their first attempt's age is counted from
-- created_at, later ones are reported as unknown.
ALTER TABLE public.leasequeue_jobs ADD COLUMN IF NOT EXISTS ready_at timestamptz;
ALTER TABLE public.leasequeue_jobs ALTER COLUMN ready_at SET DEFAULT now();
