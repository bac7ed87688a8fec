package leasescheduler

import (
	"context"
	"errors"

	"github.com/robfig/cron/v3"

	"github.com/golib/lease/lease"
	"github.com/golib/lease/leasescheduler/jobevent"
)

// CronJob returns a robfig/cron job that runs fn under the lease of job, as
// Job does for gocron: if another replica runs job (or, with Options.Slots,
// has taken the slot), the run is skipped. logger, if not nil, receives
// skipped runs (Info) and errors (Error); robfig/cron's own loggers fit.
//
//	c := cron.New(cron.WithSeconds())
//	c.AddJob("0 */5 * * * *", locker.CronJob("report", report, cron.DefaultLogger))
func (l *Locker) CronJob(job string, fn JobFunc, logger cron.Logger) cron.Job {
	if logger == nil {
		logger = cron.DiscardLogger
	}
	l.o.Observer.Observe(&jobevent.Added{EventInfo: jobevent.EventInfo{Job: job}})
	return cron.FuncJob(func() {
		ctx := context.Background()
		k, err := l.lock(ctx, job)
		if errors.Is(err, lease.ErrNotAcquired) {
			logger.Info("skipped: another replica runs the job", "job", job, "reason", err.Error())
			return
		} else if err != nil {
			logger.Error(err, "lease not acquired", "job", job)
			return
		}
		err = call(ctx, k.Context(), k.Run(), fn)
		k.report(err, true)
		if uerr := k.Unlock(ctx); uerr != nil {
			logger.Error(uerr, "lease release failed", "job", job)
		}
		if err != nil {
			logger.Error(err, "job failed", "job", job)
		}
	})
}

// CronWrapper returns a robfig/cron JobWrapper that runs the wrapped job
// under the lease of job. It is for jobs that don't use the lease: the
// wrapped job gets no context and no token. Wrap one job per name:
//
//	c.AddJob(spec, cron.NewChain(locker.CronWrapper("report", logger)).Then(job))
func (l *Locker) CronWrapper(job string, logger cron.Logger) cron.JobWrapper {
	return func(inner cron.Job) cron.Job {
		return l.CronJob(job, func(context.Context, Run) error { inner.Run(); return nil }, logger)
	}
}
