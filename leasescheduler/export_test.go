package leasescheduler

import (
	"context"

	"github.com/go-co-op/gocron/v2"
)

// RunJobTask runs the task of Locker.Job whose locker is locker, as
// gocron would: gocron's Task hides its function.
func RunJobTask(ctx context.Context, locker gocron.Locker) error {
	return locker.(*jobLocker).run(ctx)
}

// RunElectorJob runs the task that e.Job(name, fn) returns, as gocron
// would.
func RunElectorJob(ctx context.Context, e *Elector, name string, fn JobFunc) error {
	return electorTask{e, name, fn}.run(ctx)
}
