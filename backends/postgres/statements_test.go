package postgres_test

import (
	"context"
	"errors"
	"fmt"
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
// outcome, sends exactly one statement and no transaction control, also
// with AsyncCommit: the semaphore and set operations too, whose one
// statement calls a function of migration 005.
func TestOneStatementPerOperation(t *testing.T) {
	t.Parallel()
	url := newDatabase(t)
	for _, o := range []leasepostgres.Options{
		{DisableNotify: true},
		{DisableNotify: true, AsyncCommit: true, Table: "leases_async"},
	} {
		t.Run(fmt.Sprintf("AsyncCommit=%v", o.AsyncCommit), func(t *testing.T) {
			t.Parallel()
			oneStatementPerOperation(t, url, o)
		})
	}
}

func oneStatementPerOperation(t *testing.T, url string, o leasepostgres.Options) {
	log := &statementLog{}
	pool := newPool(t, url, func(c *pgxpool.Config) { c.ConnConfig.Tracer = log })
	s := newStore(t, pool, o)
	ctx := ctxT(t)
	log.take()

	a := lease.Acquisition{Key: "k", Owner: "a", Nonce: "nonce-a"}
	b := lease.Acquisition{Key: "k", Owner: "b", Nonce: "nonce-b"}
	p := lease.Acquisition{Owner: "p", Nonce: "nonce-p"}
	set := lease.Acquisition{Owner: "set", Nonce: "nonce-set"}
	setKeys := []string{"set/1", "set/2", "set/3"}
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
		{"acquire (granted again)", func() (err error) {
			a.Nonce = "nonce-a2"
			a.Token, err = s.Acquire(ctx, lease.AcquireRequest{Key: a.Key, Owner: a.Owner, Nonce: a.Nonce, TTL: time.Minute})
			return err
		}},
		{"acquire (preferred, held by another)", func() error {
			_, err := s.Acquire(ctx, lease.AcquireRequest{Key: b.Key, Owner: b.Owner, Nonce: b.Nonce, TTL: time.Minute, Preferred: true})
			return wantErr(err, lease.ErrNotAcquired)
		}},
		{"hand off (handed off)", func() (err error) {
			_, err = s.HandOff(ctx, a, lease.Offer{Candidates: []string{b.Owner}, Window: time.Minute})
			return err
		}},
		{"hand off (handed off before)", func() error {
			_, err := s.HandOff(ctx, a, lease.Offer{Candidates: []string{b.Owner}, Window: time.Minute})
			return wantErr(err, lease.ErrLost)
		}},
		{"acquire (the candidate)", func() error {
			_, err := s.Acquire(ctx, lease.AcquireRequest{Key: b.Key, Owner: b.Owner, Nonce: b.Nonce, TTL: time.Minute})
			return err
		}},
		{"acquire permit (granted)", func() (err error) {
			_, p.Token, err = s.AcquirePermit(ctx, lease.AcquireRequest{Key: "sem", Owner: p.Owner, Nonce: p.Nonce, TTL: time.Minute}, 1)
			return err
		}},
		{"acquire permit (same nonce)", func() error {
			_, _, err := s.AcquirePermit(ctx, lease.AcquireRequest{Key: "sem", Owner: p.Owner, Nonce: p.Nonce, TTL: time.Minute}, 1)
			return err
		}},
		{"acquire permit (all held)", func() error {
			_, _, err := s.AcquirePermit(ctx, lease.AcquireRequest{Key: "sem", Owner: b.Owner, Nonce: b.Nonce, TTL: time.Minute}, 1)
			return wantErr(err, lease.ErrNotAcquired)
		}},
		{"acquire set (granted)", func() (err error) {
			set.Token, err = s.AcquireSet(ctx, setKeys, lease.AcquireRequest{Owner: set.Owner, Nonce: set.Nonce, TTL: time.Minute})
			return err
		}},
		{"acquire set (same nonce)", func() error {
			_, err := s.AcquireSet(ctx, setKeys, lease.AcquireRequest{Owner: set.Owner, Nonce: set.Nonce, TTL: time.Minute})
			return err
		}},
		{"acquire set (a key held)", func() error {
			_, err := s.AcquireSet(ctx, []string{"set/3", "set/4"}, lease.AcquireRequest{Owner: b.Owner, Nonce: b.Nonce, TTL: time.Minute})
			return wantErr(err, lease.ErrNotAcquired)
		}},
		{"renew set (renewed)", func() error { return s.RenewSet(ctx, setKeys, set, time.Minute) }},
		{"renew set (superseded)", func() error {
			return wantErr(s.RenewSet(ctx, setKeys, lease.Acquisition{Nonce: b.Nonce, Token: set.Token}, time.Minute), lease.ErrLost)
		}},
		{"release set (released)", func() error { return s.ReleaseSet(ctx, setKeys, set) }},
		{"release set (expired)", func() error { return wantErr(s.ReleaseSet(ctx, setKeys, set), lease.ErrLost) }},
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

// TestAsyncCommit checks that AsyncCommit sets synchronous_commit off for
// the transaction of each writing statement and for nothing after it: on
// a pgx.Tx the setting is seen later in that transaction, and on a
// one-connection pool the connection keeps its own setting (on; the
// shared test server's default is off).
func TestAsyncCommit(t *testing.T) {
	t.Parallel()
	url := newDatabase(t)
	pool := newPool(t, url, func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	})
	o := leasepostgres.Options{AsyncCommit: true, DisableNotify: true}
	s := newStore(t, pool, o)
	ctx := ctxT(t)
	setting := func(db leasepostgres.DB) string {
		t.Helper()
		var v string
		if err := db.QueryRow(ctx, "SHOW synchronous_commit").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}

	a := lease.Acquisition{Key: "k", Owner: "a", Nonce: "nonce-a"}
	var err error
	if a.Token, err = s.Acquire(ctx, lease.AcquireRequest{Key: a.Key, Owner: a.Owner, Nonce: a.Nonce, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := s.Renew(ctx, a, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	if v := setting(pool); v != "on" {
		t.Errorf("after the operations the pool's connection has synchronous_commit = %q, want on", v)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	ts, err := leasepostgres.New(tx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	if v := setting(tx); v != "on" {
		t.Fatalf("synchronous_commit = %q before the acquire, want on", v)
	}
	if _, err := ts.Acquire(ctx, lease.AcquireRequest{Key: "t", Owner: "a", Nonce: "nonce-t", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if v := setting(tx); v != "off" {
		t.Errorf("synchronous_commit = %q in the acquire's transaction, want off", v)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if v := setting(pool); v != "on" {
		t.Errorf("after the transaction the connection has synchronous_commit = %q, want on", v)
	}

	// The calls of the functions of migration 005 set it in their FROM
	// list.
	for _, step := range []struct {
		name string
		op   func(s *leasepostgres.Store) error
	}{
		{"acquire permit", func(s *leasepostgres.Store) error {
			_, _, err := s.AcquirePermit(ctx, lease.AcquireRequest{Key: "sem", Owner: "a", Nonce: "nonce-p", TTL: time.Minute}, 2)
			return err
		}},
		{"acquire set", func(s *leasepostgres.Store) error {
			_, err := s.AcquireSet(ctx, []string{"x", "y"}, lease.AcquireRequest{Owner: "a", Nonce: "nonce-s", TTL: time.Minute})
			return err
		}},
		{"renew set", func(s *leasepostgres.Store) error {
			return s.RenewSet(ctx, []string{"x", "y"}, lease.Acquisition{Nonce: "nonce-s"}, time.Minute)
		}},
		{"release set", func(s *leasepostgres.Store) error {
			return s.ReleaseSet(ctx, []string{"x", "y"}, lease.Acquisition{Nonce: "nonce-s"})
		}},
	} {
		name, op := step.name, step.op
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			ts, err := leasepostgres.New(tx, o)
			if err != nil {
				return err
			}
			defer ts.Close()
			if err := op(ts); err != nil {
				return err
			}
			if v := setting(tx); v != "off" {
				t.Errorf("synchronous_commit = %q in the transaction of %s, want off", v, name)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if v := setting(pool); v != "on" {
		t.Errorf("after the transactions the connection has synchronous_commit = %q, want on", v)
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
