package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/lease"
)

// statementLog is a pgx.QueryTracer that records every statement sent.
type statementLog struct {
	mu  sync.Mutex
	sql []string
}

func (l *statementLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sql = append(l.sql, d.SQL)
	return ctx
}

func (l *statementLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// take returns the statements recorded since the last call.
func (l *statementLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sql
	l.sql = nil
	return s
}

// TestOneStatementPerOperation checks that every operation, whatever its
// outcome, sends exactly one statement and no transaction control.
func TestOneStatementPerOperation(t *testing.T) {
	t.Parallel()
	log := &statementLog{}
	pool := newPool(t, newDatabase(t), func(c *pgxpool.Config) { c.ConnConfig.Tracer = log })
	s := newStore(t, pool, leasepostgres.Options{DisableNotify: true})
	ctx := ctxT(t)
	log.take()

	a := lease.Acquisition{Key: "k", Owner: "a", Nonce: "nonce-a"}
	b := lease.Acquisition{Key: "k", Owner: "b", Nonce: "nonce-b"}
	steps := []struct {
		name string
		op   func() error
	}{
		{"acquire (granted)", func() (err error) {
			a.Token, err = s.Acquire(ctx, lease.AcquireRequest{Key: a.Key, Owner: a.Owner, Nonce: a.Nonce, TTL: time.Minute})
			return err
		}},
		{"acquire (same nonce)", func() error {
			_, err := s.Acquire(ctx, lease.AcquireRequest{Key: a.Key, Owner: a.Owner, Nonce: a.Nonce, TTL: time.Minute})
			return err
		}},
		{"acquire (held by another)", func() error {
			_, err := s.Acquire(ctx, lease.AcquireRequest{Key: b.Key, Owner: b.Owner, Nonce: b.Nonce, TTL: time.Minute})
			return wantErr(err, lease.ErrNotAcquired)
		}},
		{"renew (renewed)", func() error { return s.Renew(ctx, a, time.Minute) }},
		{"renew (superseded)", func() error { return wantErr(s.Renew(ctx, b, time.Minute), lease.ErrLost) }},
		{"inspect", func() error { _, err := s.Inspect(ctx, a.Key); return err }},
		{"release (released)", func() error { return s.Release(ctx, a) }},
		{"release (expired)", func() error { return wantErr(s.Release(ctx, a), lease.ErrLost) }},
		{"renew (expired)", func() error { return wantErr(s.Renew(ctx, a, time.Minute), lease.ErrLost) }},
		{"renew (no record)", func() error {
			return wantErr(s.Renew(ctx, lease.Acquisition{Key: "none", Nonce: "x", Token: 1}, time.Minute), lease.ErrLost)
		}},
		{"inspect (no record)", func() error { _, err := s.Inspect(ctx, "none"); return err }},
	}
	for _, st := range steps {
		if err := st.op(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		sent := log.take()
		if len(sent) != 1 {
			t.Errorf("%s sent %d statements, want 1: %q", st.name, len(sent), sent)
			continue
		}
		if up := strings.ToUpper(strings.TrimSpace(sent[0])); strings.HasPrefix(up, "BEGIN") || strings.HasPrefix(up, "SET") {
			t.Errorf("%s sent %q", st.name, sent[0])
		}
	}
}

var errUnexpectedSuccess = errors.New("unexpected success")

// wantErr returns nil if err matches target, and err (or a stand-in)
// otherwise.
func wantErr(err, target error) error {
	if err == nil {
		return errUnexpectedSuccess
	}
	if !errors.Is(err, target) {
		return err
	}
	return nil
}
