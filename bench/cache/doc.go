// Package cache holds benchmarks of package cache: the hit path against a
// plain GET of the same value on the same valkey-server, and a stampede of
// 1,000 concurrent misses on one key. It has no code of its own; see
// docs/performance.md for the results and the command that produces them.
package cache
