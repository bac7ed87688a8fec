// Package leasescheduler runs scheduled jobs on exactly one replica, with
// leases from package lease: a drop-in for the distributed-lock hooks of
// github.com/go-co-op/gocron/v2, and a job wrapper for
// github.com/robfig/cron/v3.
//
// # Locker
//
// A Locker is a gocron.Locker, built in one call from the application's
// lease.Client. What it promises depends on Options.Slots:
//
//   - With Slots (Every builds one), each scheduled run runs on at most one
//     replica, once (within the limits under "One run per slot"): the
//     run's slot is leased and never released, so a replica whose timer
//     fires a little later finds the slot taken.
//   - Without Slots (Options{}), the only promise is that a job never runs
//     on two replicas at the same time. A job that is faster than the
//     spread of the replicas' timers runs once on each replica in turn:
//     three replicas may run a one-second job three times per tick.
//
// Most scheduled jobs want the first, so set Slots to the job's schedule
// grid. A job that uses its lease (a context cancelled on loss, the
// fencing token) is built with Locker.Job, which returns the job's task
// and a locker of the job's own, and names the lease once:
//
//	locker, err := leasescheduler.NewLocker(client, leasescheduler.Options{
//		Slots: leasescheduler.Every(time.Minute), // one run per minute, on the minute
//	})
//	s, err := gocron.NewScheduler(gocron.WithLocation(time.UTC))
//	task, jobLocker := locker.Job("report", report)
//	_, err = s.NewJob(gocron.CronJob("* * * * *", false), task,
//		gocron.WithDistributedJobLocker(jobLocker))
//
// gocron reads cron expressions in the scheduler's location, which is the
// process's local time zone unless gocron.WithLocation says otherwise;
// replicas in different zones (or a zone's daylight-saving change) then
// disagree about when "0 2 * * *" is. Give every replica the same
// location, UTC for preference.
//
// Lock never blocks: it makes one attempt to acquire the job's lease
// (bounded by the policy's OperationTimeout) and fails at once if another
// replica holds it, so that gocron skips the run. The lease is renewed
// while the job runs and released by Unlock, which works with an
// already-cancelled context. A plain gocron task works too, with the
// Locker itself as gocron's locker (gocron.WithDistributedLocker): gocron
// passes the job's name to Lock, which names the lease after it.
//
// # One run per slot
//
// A lock that lasts only as long as the run is not enough: replicas whose
// timers fire milliseconds apart take the free lock one after the other,
// and a fast job runs once on each. With Options.Slots, a run first
// acquires a second lease named after the job and the slot (the scheduled
// time) that the run belongs to, and never releases it: it expires half an
// interval after the slot has passed. Every replica attributes its run to
// the same slot, so only the first one runs it.
//
// gocron does not tell a Locker which scheduled time a run is for, so the
// slot is derived from the time Lock is called: Every(interval) puts the
// slots on a grid of multiples of interval since the Unix epoch (whole
// seconds, minutes, hours or UTC days) and attributes a run to the slot
// that starts at or before now + interval/4. A run may so start up to a
// quarter interval early (a wall clock slewed by NTP) or three quarters
// late and still be counted for its slot. Use it for jobs scheduled on
// that grid: a gocron CronJob such as "*/5 * * * *", or a DurationJob
// started on the grid (gocron.WithStartAt); EveryFrom moves the grid.
//
// Limits: the clocks of the replicas must agree to within about half an
// interval, or a replica whose clock is behind may run a slot again after
// its lease expired; and a run that starts more than three quarters of an
// interval late is counted for the next slot (which then does not run
// again). Slot leases are kept under three keys per job, used in turn, so
// they do not pile up in the backend.
//
// # Jobs that use the lease
//
// Locker.Job, Elector.Task and Locker.CronJob run a JobFunc: it gets a
// context that is cancelled the moment the lease is lost (or the scheduler
// stops the job), and a Run carrying the lease's fencing token. The task
// of Locker.Job runs with the lease that its own locker took for the run;
// if there is none (the job was not given that locker) it fails with
// ErrNoLock and does not run. A lease does not stop a paused process from
// writing after it has expired: pass the token to every write the job
// makes, so that the storage rejects a stale one (see package fence).
//
// # Elector
//
// An Elector is a gocron.Elector: one replica campaigns for a lease with
// package leaseservice and runs every job while it holds it. IsLeader
// reads local state and does no I/O; Check is a health check in the shape
// of leaseservice.Service.Check.
//
// # robfig/cron
//
// Locker.CronJob and Locker.CronWrapper give github.com/robfig/cron/v3 the
// same locking, around a job of their own since that scheduler has no
// locking hook.
//
// # Metrics
//
// Options.Observer and ElectorOptions.Observer receive an event for every
// scheduled run (package jobevent): it ran ok, failed, lost its lease, or
// did not start because another replica has it (skipped) or its lease
// could not be taken (error). A plain gocron task's error is not seen by
// the Locker, so its runs read unchecked; build the job with Locker.Job
// to have its failures counted. leaseprom.Metrics.Jobs and
// leaseotel.Telemetry.Jobs count the runs by job and result and keep each
// job's last success time, for an alert when a job has not succeeded in
// time. Jobs are named by the names given to Locker.Job, Locker.CronJob
// and Elector.Job (Elector.Task's runs have no name), or by gocron's name
// for a plain task.
package leasescheduler
