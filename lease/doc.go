// Package lease gives a process a fenced, time-bounded lease on a key: "only
// one of us does X at a time, and a stale one can never corrupt data".
//
// It depends on the standard library only: its one import from this module,
// the observer plumbing it shares with cache and leasequeue, imports
// nothing else. Leases live in a Backend: the Valkey and PostgreSQL
// backends of this module coordinate replicas, and the memory backend
// serves tests and single-process programs.
//
// # Model
//
// A Client acquires leases for one owner (a name such as
// "billing-worker/host-1"). Acquire returns a Handle for one acquisition,
// with a fencing Token that the backend issued: strictly greater than every
// token issued for that key before. The backend alone decides when a lease
// expires, on its own clock. The client keeps a conservative local
// deadline (Handle.Deadline): the time the acquiring request was sent plus
// TTL − SafetyMargin, so network delay can only make the client's view
// shorter than the backend's.
//
// Policy holds the timings: TTL, renewal cadence, safety margin, retry
// pause, what bounds Acquire's waiting, and the timeout of each backend
// call. NewPolicy validates them as a whole. Acquire waits for the lease
// until it is granted or its context ends, as sync.Mutex.Lock does, unless
// the policy's Wait or MaxAttempts bound it; TryAcquire makes one attempt.
//
// # Renewal and loss
//
// Handle.StartManaged renews in the background. Its Managed value closes
// Lost and cancels Context (with a cause wrapping ErrLost) the moment the
// backend says the acquisition is gone, or the local deadline passes
// without a confirmed renewal. Run the protected work under Context.
//
// # Semaphores and sets
//
// Client.AcquirePermit takes one of n permits of a semaphore: a lease on
// the permit key PermitKey(key, slot) whose token is above every earlier
// token of any permit of the semaphore, so that a resource can be fenced
// per slot (Handle.Snapshot) or per semaphore (Handle.SnapshotFor(key)).
// Client.AcquireSet takes the leases on several keys all or nothing, with
// one token above each key's earlier tokens; fence each key's resource
// with Handle.SnapshotFor. Both wait, retry and clean up as Acquire does,
// and need a backend with the PermitAcquirer or SetAcquirer capability.
// docs/semaphores-and-sets.md says which primitive to choose and how to
// fence it.
//
// # What a lease does not do
//
// A lease does not stop work that outlives it: a process paused by garbage
// collection, a VM migration or SIGSTOP wakes up still "holding" a lease
// that has expired. Pass Handle.Token (or Handle.Snapshot) to every
// protected write and let the storage reject a token lower than the last
// one it accepted; packages fence and cache do that for PostgreSQL and
// Valkey.
//
// # Errors
//
// Failure to acquire is a *NotAcquiredError (ErrNotAcquired) naming the
// holder. A *LostError (ErrLost) says the acquisition is no longer current
// and why. ErrIndeterminate means the outcome of a request is unknown; an
// Acquire error that does not match it means no grant exists or can still
// appear for that call. ErrMisconfigured marks a refusal no retry cures (a
// missing table or privilege, a wrong password): Acquire returns it at once
// instead of waiting. Cancellation never reads as success. Every error
// names the operation and the key once:
// lease: renew "billing/nightly": token 7 lost: superseded. Test errors with
// errors.Is and errors.As, never by their text.
package lease
