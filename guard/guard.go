// Package guard holds the coordinates of one acquisition inside one backend:
// what a write needs in order to happen only if, at that instant, the lease
// record still shows this acquisition. Backends that keep their lease
// records where user data can live (the same Valkey slot, the same
// PostgreSQL database) return a Guard from their Guard method; middleware
// such as package cache checks it atomically with the write.
//
// A Guard is a value: it carries no connection and no secret, and cannot
// renew or release a lease.
package guard

import (
	"errors"
	"fmt"

	"github.com/golib/lease/lease"
)

// ErrNotCurrent means a guarded write was refused because the lease record
// no longer shows the guard's acquisition. Nothing was written.
var ErrNotCurrent = errors.New("guard: lease is no longer held by this acquisition")

// Kind names the backend a Guard belongs to.
type Kind string

// Kinds of the backends in this module.
const (
	Valkey   Kind = "valkey"
	Postgres Kind = "postgres"
)

// Guard is the coordinates of one acquisition in one backend.
type Guard struct {
	kind   Kind
	record string
	snap   lease.Snapshot
}

// New returns a Guard. It is meant for backends: record is the backend's
// address of the lease record (a Valkey key, a PostgreSQL table name), in
// whatever form that backend's guarded writes understand.
//
// A Guard is a plain value that anyone can build, so code that puts
// Record() into a statement or a script must validate it first (for
// example, that it is a quoted, schema-qualified table name), never trust
// it.
func New(kind Kind, record string, snap lease.Snapshot) (Guard, error) {
	if kind == "" || record == "" || !snap.Valid() {
		return Guard{}, fmt.Errorf("guard: incomplete coordinates (kind %q, key %q, token %d)", kind, snap.Key, snap.Token)
	}
	return Guard{kind: kind, record: record, snap: snap}, nil
}

// Kind returns the backend kind.
func (g Guard) Kind() Kind { return g.kind }

// Record returns the backend's address of the lease record.
func (g Guard) Record() string { return g.record }

// Key returns the lease key.
func (g Guard) Key() string { return g.snap.Key }

// Owner returns the owner string of the acquisition.
func (g Guard) Owner() string { return g.snap.Owner }

// Token returns the acquisition's fencing token.
func (g Guard) Token() lease.Token { return g.snap.Token }

// Snapshot returns the acquisition's snapshot.
func (g Guard) Snapshot() lease.Snapshot { return g.snap }

// IsZero reports whether g is the zero Guard.
func (g Guard) IsZero() bool { return g.kind == "" }

// NotCurrentError reports a guarded write refused because the lease record
// no longer shows the guard's acquisition. It matches ErrNotCurrent.
type NotCurrentError struct {
	Key   string
	Token lease.Token
	// Detail says what the record showed instead, if known.
	Detail string
}

func (e *NotCurrentError) Error() string {
	s := fmt.Sprintf("guard: lease %q token %d is no longer current", e.Key, e.Token)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is reports whether target is ErrNotCurrent.
func (e *NotCurrentError) Is(target error) bool { return target == ErrNotCurrent }
