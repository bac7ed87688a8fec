package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// SetListenIdle sets how long the idle listener of s keeps its connection.
// Call it before the first WatchReleases.
func SetListenIdle(s *Store, d time.Duration) { s.idle = d }

// WaitMarked waits until the listener listens (for up to 30 seconds)
// and the keys watched so far are marked as waited for: they are marked
// once it listens.
func WaitMarked(s *Store) {
	for deadline := time.Now().Add(30 * time.Second); !Listening(s) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	s.w.arms.Wait()
}

// Listening reports whether the listener's LISTEN is in effect.
func Listening(s *Store) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.listening
}

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

// NewWithListenPool is New with the listener's connections (and those of
// its marks) taken from lp.
func NewWithListenPool(db DB, o Options, lp interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
}) (*Store, error) {
	s, err := New(db, o)
	if err == nil {
		s.lisPool = lp
	}
	return s, err
}
