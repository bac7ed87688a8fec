package postgres

import "time"

// SetListenIdle sets how long the idle listener of s keeps its connection.
// Call it before the first WatchReleases.
func SetListenIdle(s *Store, d time.Duration) { s.idle = d }

// WaitMarked waits until the keys watched so far are marked as waited for.
func WaitMarked(s *Store) { s.w.arms.Wait() }

// Channel returns the notification channel of s.
func Channel(s *Store) string { return s.channel }

// ListenerRunning reports whether a listener goroutine serves s.
func ListenerRunning(s *Store) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.running
}

// Rearm marks the watched keys of s again, as the listener does every
// rearmEvery, and waits until it is done.
func Rearm(s *Store) {
	s.rearm()
	s.w.arms.Wait()
}
