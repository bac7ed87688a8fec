package leasequeue

// Crash stops q.Run as a crashed process would: no claim is renewed,
// released or written again. Run returns once its handlers have returned.
func (q *Queue) Crash() { q.crash() }

// Crash stops g.Run as a crashed process would: no lease is renewed or
// released again. Run returns once its handlers have returned.
func (g *Group) Crash() { g.crash() }

// Overdue reports whether the renewal of any lease the queue tracks is
// overdue.
func (q *Queue) Overdue() bool { return !q.track.healthy(q.clock.Now()) }
