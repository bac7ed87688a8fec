package leasequeue

import "errors"

// Sentinel errors. Test for them with [errors.Is]. Besides these, claims
// report the errors of packages lease and fence: a *lease.NotAcquiredError
// when another worker holds an item, a *lease.LostError when a claim's
// lease is gone, a *fence.StaleError when a newer claim has written the
// item, and a *fence.ImplausibleTokenError (fence.ErrImplausibleToken)
// when a token is more than fence.MaxTokenLead ahead of the source's clock
// (see Source).
var (
	// ErrFinished means the item is done or dead: there is nothing left to
	// claim.
	ErrFinished = errors.New("leasequeue: item is finished")

	// ErrNotFound means the source does not know the item.
	ErrNotFound = errors.New("leasequeue: no such item")

	// ErrClosed means the claim was already completed, failed or released.
	ErrClosed = errors.New("leasequeue: claim is closed")

	// ErrUnhealthy means a renewal of one of the worker's leases is
	// overdue: the worker takes no new work until its renewals succeed
	// again.
	ErrUnhealthy = errors.New("leasequeue: lease renewals are failing; taking no new work")

	// ErrTooManyAttempts is the failure recorded for an item whose attempts
	// ran out without a recorded failure (its workers died while running
	// it).
	ErrTooManyAttempts = errors.New("leasequeue: too many attempts")
)
