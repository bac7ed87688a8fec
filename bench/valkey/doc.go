// Package valkey holds benchmarks of the Valkey lease backend against its
// peers (bsm/redislock, go-redsync/redsync, valkey-go's valkeylock) and
// against the floor, two raw EVALSHA calls of a no-op script, all on the
// same valkey-server in one run. It has no code of its own; see
// docs/performance.md for the results and the command that produces them.
package valkey
