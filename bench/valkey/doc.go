// Package valkey holds benchmarks of the Valkey lease backend, through
// lease.Client (leasevalkey) and bare (leasevalkey-backend, the baseline),
// against its peers (bsm/redislock, go-redsync/redsync, valkey-go's
// valkeylock) and the floor, two raw EVALSHA calls of a no-op script, all
// on the same valkey-server in one run. It has no code of its own; see
// docs/performance.md for the results and run.sh for the command that
// produces them.
package valkey
