package leasequeue

import (
	"context"
	"slices"
	"sync"
)

// A Roster records the names of the workers of each group, so that every
// worker can find the others' membership leases. It records names only:
// whether a worker is live is decided by its membership lease alone,
// whatever the roster says, and workers remove the names of dead members
// as they find them. A Roster must be safe for concurrent use.
//
// MemoryRoster, ValkeyRoster and PostgresRoster are ready-made rosters.
type Roster interface {
	// Join adds worker to group. Adding a name that is there is no error.
	Join(ctx context.Context, group, worker string) error
	// Members returns the names recorded for group, in any order.
	Members(ctx context.Context, group string) ([]string, error)
	// Leave removes worker from group. Removing a name that is not there
	// is no error.
	Leave(ctx context.Context, group, worker string) error
}

// MemoryRoster is a Roster in the memory of one process, for tests and for
// groups whose workers share a process (and a memory lease backend). The
// zero value is ready to use.
type MemoryRoster struct {
	mu     sync.Mutex
	groups map[string]map[string]bool
}

var _ Roster = (*MemoryRoster)(nil)

// Join implements Roster.
func (r *MemoryRoster) Join(_ context.Context, group, worker string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.groups == nil {
		r.groups = make(map[string]map[string]bool)
	}
	if r.groups[group] == nil {
		r.groups[group] = make(map[string]bool)
	}
	r.groups[group][worker] = true
	return nil
}

// Members implements Roster; the names are sorted.
func (r *MemoryRoster) Members(_ context.Context, group string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for w := range r.groups[group] {
		out = append(out, w)
	}
	slices.Sort(out)
	return out, nil
}

// Leave implements Roster.
func (r *MemoryRoster) Leave(_ context.Context, group, worker string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.groups[group], worker)
	return nil
}
