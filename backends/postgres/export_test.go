package postgres

import "time"

// SetListenIdle sets how long the idle listener of s keeps its connection.
// Call it before the first WatchReleases.
func SetListenIdle(s *Store, d time.Duration) { s.idle = d }
