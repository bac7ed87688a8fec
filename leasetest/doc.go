// Package leasetest helps test code that uses leases, and backends that
// store them.
//
// # Fake clock
//
// FakeClock is a lease.Clock whose time moves only when a test says so.
// Give the same FakeClock to a lease.Client and to the memory backend and
// every deadline, retry and renewal becomes deterministic.
//
// # Conformance suite
//
// RunBackendSuite checks that a lease.Backend keeps the contract documented
// on lease.Backend: one winner among concurrent acquirers, tokens that only
// go up, renew and release that refuse any acquisition but the current
// one, expiry decided by the backend, cancellation that never reads as
// success, and the history a record keeps (when the key was acquired and
// last renewed, how many times its holder changed). Every backend of this module runs it, and so can a third party's:
//
//	func TestConformance(t *testing.T) {
//		leasetest.RunBackendSuite(t, leasetest.Suite{
//			NewBackend: func(t *testing.T) lease.Backend { return newMyBackend(t) },
//		})
//	}
//
// Optional capabilities (lease.ReleaseWatcher, lease.Lister,
// lease.ForceReleaser, lease.PermitAcquirer, lease.SetAcquirer) have cases
// of their own, which a backend that lacks the capability skips. The
// semaphore and set cases check at most N permit holders, permit and set
// tokens above every earlier token (also after a record's end, with
// Suite.NewRetentionBackend), what lowering the number of permits does,
// idempotent retries, refused forged and stale releases, waiters woken by
// a release rather than by polling, sets taken all or nothing and without
// deadlock, partial loss of a set, and fences (package fence's Memory)
// admitting permit and set snapshots and refusing superseded ones. The
// keys of each set share a hash tag ("{…}"), as a Valkey cluster needs.
package leasetest
