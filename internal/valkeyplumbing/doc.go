// Package valkeyplumbing is the one home of what every package of this module
// that talks to Valkey needs to agree on: whether a request was applied, not
// applied, or has an unknown outcome ([Classify] and the reasons a server
// refused it, [NoPermission], [WrongType], [LoginRefused], [UnknownCommand],
// and whether no retry cures the refusal, [Misconfigured]), the shard-channel
// subscription that wakes waiters up ([Subscribe]), the Lua helpers
// that compare and advance fencing tokens exactly and bound them by the
// server's clock ([TokenScript]), a walk of the keys of every primary
// with SCAN ([ScanPrimaries]), the read-only twin of a script for a
// dry run ([NoWrites]), and the cluster hash slot of a name ([KeySlot]),
// which decides whether one script may touch several keys on a cluster.
//
// backends/valkey, fence, cache and leasequeue use it and keep no copy of
// their own; they only choose the words of their errors.
package valkeyplumbing
