package fxmodule

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/golib/lease/lease"
)

// NewZapObserver returns a lease.Observer that writes every event to logger
// as one structured line with the fields key, owner, token, latency and,
// for failures, error (acquisitions also carry attempts and waited; see
// lease.EventInfo and lease.Acquired for what they measure). Levels:
//
//   - Debug: renewals, and acquisitions that failed because the lease was
//     held by someone else or the caller gave up (normal contention and
//     shutdown), unless an attempt went unanswered;
//   - Info: acquisitions and releases;
//   - Warn: failed renewals (the renewer retries), other failed
//     acquisitions, and releases refused because the lease was already
//     gone;
//   - Error: losses, and releases whose outcome is unknown or that failed
//     (the lease may stay held until its TTL passes).
//
// A nil logger means zap.NewNop(): silent. The observer does not name the
// logger; Module passes logger.Named("lease").
func NewZapObserver(logger *zap.Logger) lease.Observer {
	if logger == nil {
		logger = zap.NewNop()
	}
	return zapObserver{logger}
}

type zapObserver struct{ l *zap.Logger }

func (o zapObserver) Observe(e lease.Event) {
	level, msg := zapcore.InfoLevel, "lease event"
	var extra []zap.Field
	switch e := e.(type) {
	case *lease.Acquired:
		msg = "lease acquired"
		extra = []zap.Field{zap.Int("attempts", e.Attempts), zap.Duration("waited", e.Waited)}
	case *lease.AcquireFailed:
		level, msg = zapcore.WarnLevel, "lease not acquired"
		if quietAcquireFailure(e.Err) {
			level = zapcore.DebugLevel
		}
		extra = []zap.Field{zap.Int("attempts", e.Attempts), zap.Duration("waited", e.Waited)}
	case *lease.Renewed:
		level, msg = zapcore.DebugLevel, "lease renewed"
	case *lease.RenewFailed:
		level, msg = zapcore.WarnLevel, "lease renewal failed"
	case *lease.Lost:
		level, msg = zapcore.ErrorLevel, "lease lost"
	case *lease.Released:
		msg = "lease released"
	case *lease.ReleaseFailed:
		level, msg = zapcore.ErrorLevel, "lease release failed"
		if errors.Is(e.Err, lease.ErrLost) {
			level = zapcore.WarnLevel
		}
	default:
		// A kind added to package lease after this observer was written.
		extra = []zap.Field{zap.String("event", fmt.Sprintf("%T", e))}
	}
	ce := o.l.Check(level, msg)
	if ce == nil {
		return
	}
	i := e.Info()
	fields := make([]zap.Field, 0, 7)
	fields = append(fields,
		zap.String("key", i.Key),
		zap.String("owner", i.Owner),
		zap.Uint64("token", uint64(i.Token)),
		zap.Duration("latency", i.Latency))
	fields = append(fields, extra...)
	if i.Err != nil {
		fields = append(fields, zap.Error(i.Err))
	}
	ce.Write(fields...)
}

// quietAcquireFailure reports whether err is an expected end of an
// acquisition: someone else holds the lease, or the caller gave up, and no
// attempt went unanswered (else the key may be held, by nobody, for a
// TTL).
func quietAcquireFailure(err error) bool {
	return !errors.Is(err, lease.ErrIndeterminate) &&
		(errors.Is(err, lease.ErrNotAcquired) || errors.Is(err, context.Canceled))
}
