// Package fencevalkey applies fenced writes to Valkey: a group of commands
// (Set, HSet, Del, IncrBy, Expire, XAdd) that one Lua script applies only
// if the resource's fence key admits the lease's snapshot, atomically, in
// one round trip (see [Fence.Do]). The rule, its errors (*fence.StaleError,
// *fence.ForeignLeaseError, *fence.ImplausibleTokenError) and their
// sentinels are those of package [fence], whose documentation explains
// them, with the retirement of fences by [Fence.Sweep].
//
// The package links valkey-go and no other driver; imported next to
// valkey-go, it keeps its own name:
//
//	fences, err := fencevalkey.New(client, fencevalkey.Options{})
//	replies, err := fences.Do(ctx, h.Snapshot(), "jobs/7",
//		fencevalkey.HSet("job:{jobs/7}", "state", "done"),
//		fencevalkey.IncrBy("jobs-done:{jobs/7}", 1))
package fencevalkey
