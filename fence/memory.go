package fence

import (
	"sync"

	"github.com/golib/lease/lease"
)

// Memory is an in-memory fence for resources that live in one process: the
// reference implementation of the rule, used in tests, examples and the
// documentation. It is safe for concurrent use; the zero value is ready to
// use. Like the resources it fences, it is lost with the process.
type Memory struct {
	mu    sync.Mutex
	marks map[string]Mark
}

// Do runs write if snap is admitted (see Mark.Admit) by the fence of every
// resource in resources, and advances those fences if write returns nil.
// It holds a lock while write runs, so fenced writes through one Memory
// never interleave. If a fence refuses snap, write is not called and Do
// returns the *StaleError or *ForeignLeaseError of the first refusing
// resource, in sorted order. If write fails, no fence moves and Do returns
// write's error. A nil write claims the resources (see Claim).
func (m *Memory) Do(snap lease.Snapshot, resources []string, write func() error) error {
	if err := ValidateSnapshot(snap); err != nil {
		return err
	}
	rs, err := sortedResources(resources)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	next := make([]Mark, len(rs))
	for i, r := range rs {
		if next[i], err = m.marks[r].Admit(r, snap); err != nil {
			return err
		}
	}
	if write != nil {
		if err := write(); err != nil {
			return err
		}
	}
	if m.marks == nil {
		m.marks = make(map[string]Mark)
	}
	for i, r := range rs {
		m.marks[r] = next[i]
	}
	return nil
}

// Mark returns the fence of resource.
func (m *Memory) Mark(resource string) Mark {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.marks[resource]
}
