//go:build race

package lease_test

// race reports whether the race detector is on: it makes sync.Pool drop
// items at random, so allocation counts are not stable under it.
const race = true
