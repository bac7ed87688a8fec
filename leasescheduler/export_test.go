package leasescheduler

import "context"

// Holding is holding, for the tests of how a task finds its run's lease.
func (l *Locker) Holding(ctx context.Context) (*Lock, error) { return l.holding(ctx) }
