-- The tables of github.com/golib/lease/leasequeue on PostgreSQL.
--
-- public.leasequeue_jobs holds the items of every queue, one row per item.
-- An item is claimed under a lease per item; the row's fence (fence_key,
-- fence_token) is the lease key and the highest token that wrote the row,
-- and every write of a claim (begin, complete, fail) is refused unless the
-- row's fence admits the claim's token, in the same statement. visible_at
-- is when pollers look at the item next: once a pending item is due, and
-- once a running item's lease may have expired. Done and dead rows are
-- removed after their retention by PostgresSource.Sweep (migration 004).
--
-- public.leasequeue_jobs_members records the worker names of partition
-- groups (leasequeue.PostgresRoster). Whether a member is live is decided
-- by its membership lease, not by this table.
CREATE TABLE IF NOT EXISTS public.leasequeue_jobs (
    queue       text        NOT NULL,
    id          text        NOT NULL,
    state       text        NOT NULL DEFAULT 'pending'
                            CHECK (state IN ('pending', 'running', 'done', 'dead')),
    attempts    integer     NOT NULL DEFAULT 0,
    visible_at  timestamptz NOT NULL DEFAULT now(),
    fence_key   text,
    fence_token bigint      CHECK (fence_token > 0),
    owner       text,
    last_error  text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, id)
);

-- The items pollers look at: for each queue, running items (whose claim
-- may expire) and pending ones, each in the order they are due.
CREATE INDEX IF NOT EXISTS leasequeue_jobs_due ON public.leasequeue_jobs (queue, state, visible_at)
    WHERE state IN ('pending', 'running');

CREATE TABLE IF NOT EXISTS public.leasequeue_jobs_members (
    group_name text        NOT NULL,
    worker     text        NOT NULL,
    joined_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_name, worker)
);
