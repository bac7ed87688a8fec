// Package refused holds the sentinel errors of refusals that code outside
// the refusing package must recognise without importing it: fence's stale
// token and cache's invalidated entry. fence.ErrStale and
// cache.ErrInvalidated are these values, so the metrics adapters name a
// refusal's outcome without linking pgx or valkey-go.
//
// It imports only the standard library.
package refused

import "errors"

var (
	// ErrStale is fence.ErrStale.
	ErrStale = errors.New("fence: stale token")
	// ErrInvalidated is cache.ErrInvalidated.
	ErrInvalidated = errors.New("cache: entry invalidated since the refresh began")
)
