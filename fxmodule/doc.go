// Package fxmodule gives Uber Fx applications fenced leases by adding one
// module. Import it as leasefx:
//
//	import leasefx "github.com/golib/lease/fxmodule"
//
//	fx.New(
//		fx.Provide(newValkeyClient), // the application's own client
//		fx.Supply(leasefx.Config{Owner: "billing/" + hostname, Backend: leasefx.Valkey}),
//		leasefx.Module,
//		fx.Invoke(func(leases *leasefx.Leases) error {
//			_, err := leases.Go("nightly", runNightly, leasefx.RunOptions{ShutdownOnLoss: true})
//			return err
//		}),
//	)
//
// # What the module provides
//
// [Module] provides a *lease.Client, its lease.Backend, the default
// lease.Policy and *[Leases], all built by [New] from a [Config] and what the
// application already has: a valkey.Client or a *pgxpool.Pool, as
// Config.Backend says, or nothing at all for the Memory backend. It never
// provides what it does not own (no logger, no pool, no client) and never
// closes them. Its optional inputs are a *zap.Logger, a lease.Clock (for
// tests) and extra observers in the value group [ObserverGroup]. [Params]
// and [Result] are exported, so New works without Fx too.
//
// # Configuration
//
// [Config] is a plain struct with json and yaml tags: supply it with
// fx.Supply or build it from the application's configuration. New
// validates all of it (owner, backend, key prefix, every policy rule of
// lease.NewPolicy) when Fx first needs one of the module's values, so a
// bad value fails fx.New with an error naming the field, not the first
// acquisition. Start runs the PostgreSQL migrations
// (PostgresConfig.Migrate) and the Valkey server check (ValkeyConfig.Check)
// when asked to, so a missing table or an unsafe server fails app.Start.
//
// # Leases and functions
//
// [Leases.Go] runs a function only while this process holds a lease, for the
// app's lifetime, on package leaseservice: exactly one replica runs it at a
// time, and another takes over after it stops or loses the lease, woken by
// the release where the backend announces releases; while it waits it
// makes about one backend call per TTL. With
// [RunOptions].ShutdownOnLoss, a loss shuts the app down through
// fx.Shutdowner with a non-zero exit code. A function that fails is
// logged at Error and run again after a pause that grows from 1s to 1m
// (leaseservice.Options in [RunOptions].Service change it), so it never
// stays dead while the app runs; [RunOptions].ShutdownOnError shuts the
// app down instead. [Leases.Check] is a func() error for health checks
// (serve it with leaseservice.HealthHandler). [Leases.Acquire] hands out a
// renewed [Lease] for work the application drives itself.
//
// # Shutdown
//
// Start never waits for a lease: functions campaign in their own
// goroutines. Stop hands everything back in order: it stops taking new
// leases, cancels the work, waits for the functions within the stop
// deadline, stops renewing, and releases each lease under
// context.WithoutCancel with a bounded timeout. The lease of a function
// run with Go is handed off instead, when a successor is known
// (RunOptions.Service.Successors, or a preferred candidate waiting for
// the key), so that the next replica takes over at once; a failed
// hand-off is logged and followed by the release. [Leases.Observe] and
// the Service's Observe report a lease's holders and hand-offs. Every release that fails
// is logged and returned from [Leases.Stop] (Fx logs it and app.Stop
// fails); none is reported as success. See [Leases] for the details.
//
// # Logging
//
// Every lease event is one structured zap line (key, owner, token,
// latency, error) from [NewZapObserver] on logger.Named("lease"): renewals at
// Debug, losses at Error. Without a *zap.Logger in the graph the module is
// silent. Applications on log/slog can pass lease.NewSlogObserver to
// ObserverGroup instead.
package fxmodule
