package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	leasepostgres "github.com/golib/lease/backends/postgres"
	"github.com/golib/lease/lease"
)

// tableVariants are the lease tables the sweep tests run on: logged and
// UNLOGGED, the second with names that need quoting.
var tableVariants = []leasepostgres.Options{
	{},
	{Schema: "sweep unlogged", Table: "Lease \"Table\"", Unlogged: true},
}

func variantName(o leasepostgres.Options) string {
	if o.Unlogged {
		return "unlogged"
	}
	return "logged"
}

// eachTable runs f on a fresh store of each table variant, with retention.
func eachTable(t *testing.T, retention time.Duration, f func(t *testing.T, s *leasepostgres.Store, pool *pgxpool.Pool)) {
	t.Helper()
	url := newDatabase(t)
	for _, o := range tableVariants {
		t.Run(variantName(o), func(t *testing.T) {
			t.Parallel()
			o.Retention = retention
			pool := newPool(t, url, func(c *pgxpool.Config) { c.MaxConns = 12 })
			f(t, newStore(t, pool, o), pool)
		})
	}
}

// sweepAll walks the whole table with s and returns what it removed and
// how many pages it took.
func sweepAll(t *testing.T, s *leasepostgres.Store, limit int, dryRun bool) (removed []string, pages int) {
	t.Helper()
	cursor := ""
	for {
		p, err := s.Sweep(ctxT(t), lease.SweepOptions{Cursor: cursor, Limit: limit, DryRun: dryRun})
		if err != nil {
			t.Fatalf("Sweep(cursor %q): %v", cursor, err)
		}
		pages++
		removed = append(removed, p.Removed...)
		if p.Next == "" {
			return removed, pages
		}
		if p.Next <= cursor {
			t.Fatalf("Sweep(cursor %q): next %q does not advance", cursor, p.Next)
		}
		cursor = p.Next
	}
}

// keys returns the keys of the rows of s's table, in order.
func keys(t *testing.T, s *leasepostgres.Store, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(ctxT(t), "SELECT key FROM "+s.Table()+" ORDER BY key")
	if err != nil {
		t.Fatal(err)
	}
	ks, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

func hasRow(t *testing.T, s *leasepostgres.Store, pool *pgxpool.Pool, key string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(ctxT(t), "SELECT EXISTS (SELECT FROM "+s.Table()+" WHERE key = $1)", key).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestNewRejectsNegativeRetention(t *testing.T) {
	t.Parallel()
	for _, r := range []time.Duration{-2, -time.Hour} {
		if _, err := leasepostgres.New(&pgxpool.Pool{}, leasepostgres.Options{Retention: r}); err == nil || !strings.Contains(err.Error(), "Retention") {
			t.Errorf("New with Retention %v: %v, want an error naming Retention", r, err)
		}
	}
	for _, r := range []time.Duration{0, lease.KeepForever, time.Nanosecond, 30 * 24 * time.Hour} {
		s, err := leasepostgres.New(&pgxpool.Pool{}, leasepostgres.Options{Retention: r})
		if err != nil {
			t.Errorf("New with Retention %v: %v", r, err)
			continue
		}
		s.Close()
	}
}

// TestSweepRetentionBoundaries places one row of each kind just inside
// and just past a retention of an hour, by writing its expiry (and, for
// a row of the previous version, its token) relative to the database's
// clock, and checks that one sweep removes exactly those past it, and
// that a dry run lists the same rows first and removes nothing.
func TestSweepRetentionBoundaries(t *testing.T) {
	t.Parallel()
	eachTable(t, time.Hour, func(t *testing.T, s *leasepostgres.Store, pool *pgxpool.Pool) {
		ctx := ctxT(t)
		const (
			inside = "statement_timestamp() - interval '1 hour' + interval '1 minute'"
			past   = "statement_timestamp() - interval '1 hour' - interval '1 minute'"
			now    = "(extract(epoch FROM statement_timestamp()) * 1000000)::bigint"
		)
		rows := []struct {
			key, token, expiresAt string
			removed               bool
		}{
			{"expired/inside", now, inside, false},
			{"expired/past", now, past, true},
			{"live/new", now, "statement_timestamp() + interval '1 minute'", false},
			{"live/ancient-token", "1", "statement_timestamp() + interval '1 minute'", false},
			{"live/far", now, "statement_timestamp() + interval '24 hours'", false},
			{"released/inside", now, inside + " - interval '8760000 hours'", false},
			{"released/past", now, past + " - interval '8760000 hours'", true},
			{"released/clock-stepped-back", now, "statement_timestamp() + interval '1 minute' - interval '8760000 hours'", false},
			{"forced/inside", now, inside + " - interval '17520000 hours'", false},
			{"forced/past", now, past + " - interval '17520000 hours'", true},
			{"legacy-forced/token-inside", "(extract(epoch FROM " + inside + ") * 1000000)::bigint", "to_timestamp(0)", false},
			{"legacy-forced/token-past", "(extract(epoch FROM " + past + ") * 1000000)::bigint", "to_timestamp(0)", true},
		}
		var want []string
		for _, r := range rows {
			_, err := pool.Exec(ctx, "INSERT INTO "+s.Table()+" (key, owner, nonce, token, expires_at) VALUES ($1, 'o', $1, "+r.token+", "+r.expiresAt+")", r.key)
			if err != nil {
				t.Fatalf("insert %s: %v", r.key, err)
			}
			if r.removed {
				want = append(want, r.key)
			}
		}
		slices.Sort(want)
		before := keys(t, s, pool)
		listed, _ := sweepAll(t, s, 1000, true)
		if !slices.Equal(listed, want) {
			t.Errorf("dry run listed %q, want %q", listed, want)
		}
		if after := keys(t, s, pool); !slices.Equal(after, before) {
			t.Fatalf("the dry run removed rows: %q left of %q", after, before)
		}
		removed, _ := sweepAll(t, s, 1000, false)
		if !slices.Equal(removed, want) {
			t.Errorf("sweep removed %q, want %q", removed, want)
		}
		var left []string
		for _, k := range before {
			if !slices.Contains(want, k) {
				left = append(left, k)
			}
		}
		if after := keys(t, s, pool); !slices.Equal(after, left) {
			t.Errorf("rows left %q, want %q", after, left)
		}
	})
}

// TestSweepReleasedRow: a released key's row stays for the retention and
// is gone after it; the next acquisition's token is higher all the same.
func TestSweepReleasedRow(t *testing.T) {
	t.Parallel()
	const retention = 300 * time.Millisecond
	eachTable(t, retention, func(t *testing.T, s *leasepostgres.Store, pool *pgxpool.Pool) {
		ctx := ctxT(t)
		a := lease.Acquisition{Key: "k", Owner: "o", Nonce: "n1"}
		var err error
		if a.Token, err = s.Acquire(ctx, lease.AcquireRequest{Key: a.Key, Owner: a.Owner, Nonce: a.Nonce, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		// The server's release time lies between before and after: the
		// record may not go before before+retention, and must be gone
		// after after+retention, however slow the statement was.
		before := time.Now()
		if err := s.Release(ctx, a); err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		removed, _ := sweepAll(t, s, 10, false)
		if time.Since(before) < retention && len(removed) != 0 {
			t.Fatalf("Sweep within the retention removed %q", removed)
		}
		time.Sleep(time.Until(after.Add(retention + 10*time.Millisecond)))
		if removed, _ := sweepAll(t, s, 10, false); !slices.Equal(removed, []string{"k"}) {
			t.Fatalf("Sweep after the retention removed %q, want [k]", removed)
		}
		if hasRow(t, s, pool, "k") {
			t.Fatal("the released row is still there")
		}
		if r, err := s.Inspect(ctx, "k"); err != nil || r.Token != 0 || r.Held {
			t.Fatalf("Inspect after the sweep = %+v, %v; want no record", r, err)
		}
		next, err := s.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "o", Nonce: "n2", TTL: time.Minute})
		if err != nil || next <= a.Token {
			t.Fatalf("Acquire after the sweep: token %d, %v; want above %d", next, err, a.Token)
		}
		if err := s.Renew(ctx, a, time.Minute); !isLost(err, lease.Superseded) {
			t.Fatalf("the first holder's Renew = %v, want superseded", err)
		}
	})
}

// TestSweepExpiredRow: the row of a holder that never released (it
// crashed) is removed only once its lease expired and the retention
// passed since.
func TestSweepExpiredRow(t *testing.T) {
	t.Parallel()
	const (
		ttl       = 300 * time.Millisecond
		retention = 300 * time.Millisecond
	)
	eachTable(t, retention, func(t *testing.T, s *leasepostgres.Store, pool *pgxpool.Pool) {
		ctx := ctxT(t)
		sent := time.Now()
		a := lease.Acquisition{Key: "crashed", Owner: "o", Nonce: "n"}
		var err error
		if a.Token, err = s.Acquire(ctx, lease.AcquireRequest{Key: a.Key, Owner: a.Owner, Nonce: a.Nonce, TTL: ttl}); err != nil {
			t.Fatal(err)
		}
		returned := time.Now()
		// The lease ends between sent+ttl and returned+ttl.
		for _, at := range []time.Duration{0, ttl + retention/2} {
			time.Sleep(time.Until(sent.Add(at)))
			removed, _ := sweepAll(t, s, 10, false)
			if time.Since(sent) < ttl+retention && len(removed) != 0 {
				t.Fatalf("Sweep %v after the acquire removed %q: the lease or its retention had not ended", time.Since(sent), removed)
			}
		}
		if !hasRow(t, s, pool, a.Key) {
			t.Fatal("the row is gone before its retention ended")
		}
		time.Sleep(time.Until(returned.Add(ttl + retention + 10*time.Millisecond)))
		if removed, _ := sweepAll(t, s, 10, false); !slices.Equal(removed, []string{a.Key}) {
			t.Fatalf("Sweep after expiry and retention removed %q, want [%s]", removed, a.Key)
		}
		if err := s.Renew(ctx, a, time.Minute); !isLost(err, lease.RecordLost) {
			t.Fatalf("the crashed holder's Renew = %v, want record lost", err)
		}
		next, err := s.Acquire(ctx, lease.AcquireRequest{Key: a.Key, Owner: "o", Nonce: "n2", TTL: time.Minute})
		if err != nil || next <= a.Token {
			t.Fatalf("Acquire after the sweep: token %d, %v; want above %d", next, err, a.Token)
		}
	})
}

// TestSweepForceReleasedRow: a forced release records when it happened,
// and the row stays for the retention after that, however long the
// lease had been held.
func TestSweepForceReleasedRow(t *testing.T) {
	t.Parallel()
	const retention = 300 * time.Millisecond
	eachTable(t, retention, func(t *testing.T, s *leasepostgres.Store, pool *pgxpool.Pool) {
		ctx := ctxT(t)
		a := lease.Acquisition{Key: "forced", Owner: "o", Nonce: "n"}
		var err error
		if a.Token, err = s.Acquire(ctx, lease.AcquireRequest{Key: a.Key, Owner: a.Owner, Nonce: a.Nonce, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		// Held for longer than the retention before an operator ends it.
		time.Sleep(2 * retention)
		before := time.Now() // the server's release time lies between before and after
		if prev, err := s.ForceRelease(ctx, a.Key, 0); err != nil || !prev.Held || prev.Token != a.Token {
			t.Fatalf("ForceRelease = %+v, %v", prev, err)
		}
		after := time.Now()
		removed, _ := sweepAll(t, s, 10, false)
		if time.Since(before) < retention && len(removed) != 0 {
			t.Fatalf("Sweep within the retention of the forced release removed %q", removed)
		}
		if time.Since(before) < retention {
			if err := s.Renew(ctx, a, time.Minute); !isLost(err, lease.ForceReleased) {
				t.Fatalf("the holder's Renew within the retention = %v, want force released", err)
			}
		}
		time.Sleep(time.Until(after.Add(retention + 10*time.Millisecond)))
		if removed, _ := sweepAll(t, s, 10, false); !slices.Equal(removed, []string{a.Key}) {
			t.Fatalf("Sweep after the retention removed %q, want [%s]", removed, a.Key)
		}
		next, err := s.Acquire(ctx, lease.AcquireRequest{Key: a.Key, Owner: "o", Nonce: "n2", TTL: time.Minute})
		if err != nil || next <= a.Token {
			t.Fatalf("Acquire after the sweep: token %d, %v; want above %d", next, err, a.Token)
		}
	})
}

// TestLegacyForcedRow: a row whose expiry is the Unix epoch, as the
// previous version's forced release wrote it, is removed once its token
// is a retention old.
func TestLegacyForcedRow(t *testing.T) {
	t.Parallel()
	eachTable(t, time.Hour, func(t *testing.T, s *leasepostgres.Store, pool *pgxpool.Pool) {
		ctx := ctxT(t)
		a := lease.Acquisition{Key: "legacy", Owner: "o", Nonce: "n"}
		var err error
		if a.Token, err = s.Acquire(ctx, lease.AcquireRequest{Key: a.Key, Owner: a.Owner, Nonce: a.Nonce, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "UPDATE "+s.Table()+" SET expires_at = to_timestamp(0) WHERE key = $1", a.Key); err != nil {
			t.Fatal(err)
		}
		if removed, _ := sweepAll(t, s, 10, false); len(removed) != 0 {
			t.Fatalf("Sweep removed %q although the token is new", removed)
		}
		// Its token a retention and a second old: removed.
		if _, err := pool.Exec(ctx, "UPDATE "+s.Table()+" SET token = (extract(epoch FROM statement_timestamp() - interval '3601 seconds') * 1000000)::bigint WHERE key = $1", a.Key); err != nil {
			t.Fatal(err)
		}
		if removed, _ := sweepAll(t, s, 10, false); !slices.Equal(removed, []string{a.Key}) {
			t.Fatalf("Sweep removed %q, want [%s]", removed, a.Key)
		}
	})
}

// TestSweepKeepForever: with lease.KeepForever, Sweep removes nothing and
// does not even read the table.
func TestSweepKeepForever(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{Retention: time.Microsecond})
	ctx := ctxT(t)
	if _, err := pool.Exec(ctx, "INSERT INTO public.leases (key, owner, nonce, token, expires_at) SELECT 'k' || i, 'o', 'n', 1, to_timestamp(1) FROM generate_series(1, 10) AS i"); err != nil {
		t.Fatal(err)
	}
	forever, err := leasepostgres.New(pool, leasepostgres.Options{Retention: lease.KeepForever})
	if err != nil {
		t.Fatal(err)
	}
	defer forever.Close()
	for _, dry := range []bool{false, true} {
		p, err := forever.Sweep(ctx, lease.SweepOptions{Limit: 5, DryRun: dry})
		if err != nil || len(p.Removed) != 0 || p.Next != "" {
			t.Fatalf("Sweep with KeepForever (dry run %v) = %+v, %v; want an empty, final page", dry, p, err)
		}
	}
	if n := len(keys(t, s, pool)); n != 10 {
		t.Fatalf("%d rows left, want 10", n)
	}
	if _, err := s.Sweep(ctx, lease.SweepOptions{Limit: 0}); err == nil {
		t.Fatal("Sweep with Limit 0 succeeded")
	}
}

// TestSweepPages walks 2,500 rows, one in ten of them live, by pages of
// 1,000: three pages, each starting after the previous one's last key,
// and every ended row removed; then a Client's Sweep finds nothing left.
func TestSweepPages(t *testing.T) {
	t.Parallel()
	eachTable(t, time.Minute, func(t *testing.T, s *leasepostgres.Store, pool *pgxpool.Pool) {
		ctx := ctxT(t)
		_, err := pool.Exec(ctx, `INSERT INTO `+s.Table()+` (key, owner, nonce, token, expires_at)
SELECT format('key/%s', lpad(i::text, 5, '0')), 'o', 'n', 1,
       CASE WHEN i % 10 = 0 THEN statement_timestamp() + interval '1 hour'
            ELSE statement_timestamp() - interval '1 hour' END
FROM generate_series(1, 2500) AS i`)
		if err != nil {
			t.Fatal(err)
		}
		var (
			cursor  string
			pages   []lease.SweepPage
			removed []string
		)
		for {
			p, err := s.Sweep(ctx, lease.SweepOptions{Cursor: cursor, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			pages = append(pages, p)
			removed = append(removed, p.Removed...)
			if p.Next == "" {
				break
			}
			cursor = p.Next
		}
		if len(pages) != 3 || pages[0].Next != "key/01000" || pages[1].Next != "key/02000" {
			t.Fatalf("%d pages, nexts %q, %q; want 3 pages after key/01000 and key/02000", len(pages), pages[0].Next, pages[min(1, len(pages)-1)].Next)
		}
		if len(removed) != 2250 || !slices.IsSorted(removed) {
			t.Fatalf("removed %d rows (sorted: %v), want 2250", len(removed), slices.IsSorted(removed))
		}
		left := keys(t, s, pool)
		if len(left) != 250 {
			t.Fatalf("%d rows left, want the 250 live ones", len(left))
		}
		for _, k := range left {
			if !strings.HasSuffix(k, "0") {
				t.Fatalf("row %q left, which had ended", k)
			}
		}
		c, err := lease.NewClient(s, lease.ClientOptions{Owner: "sweeper", SweepEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := c.Sweep(ctx); err != nil || n != 0 {
			t.Fatalf("Client.Sweep = %d, %v; want 0 removed", n, err)
		}
	})
}

// TestSweepSkipsLockedRows: an ended row that another transaction has
// locked (an acquire in progress, or a guard check's FOR SHARE) is left
// for a later sweep, and the sweep does not wait for the lock; a row that
// the other transaction acquired is kept.
func TestSweepSkipsLockedRows(t *testing.T) {
	t.Parallel()
	s, pool := freshStore(t, leasepostgres.Options{Retention: time.Microsecond})
	ctx := ctxT(t)
	for _, k := range []string{"acquired", "guarded", "free"} {
		a := lease.Acquisition{Key: k, Owner: "o", Nonce: "n-" + k}
		var err error
		if a.Token, err = s.Acquire(ctx, lease.AcquireRequest{Key: a.Key, Owner: a.Owner, Nonce: a.Nonce, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	acquirer, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer acquirer.Rollback(context.WithoutCancel(ctx))
	inTx, err := leasepostgres.New(acquirer, leasepostgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer inTx.Close()
	if _, err := inTx.Acquire(ctx, lease.AcquireRequest{Key: "acquired", Owner: "o", Nonce: "again", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	guarded, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer guarded.Rollback(context.WithoutCancel(ctx))
	if _, err := guarded.Exec(ctx, "SELECT FROM public.leases WHERE key = 'guarded' FOR SHARE"); err != nil {
		t.Fatal(err)
	}

	quick, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	p, err := s.Sweep(quick, lease.SweepOptions{Limit: 10})
	if err != nil {
		t.Fatalf("Sweep beside the locks: %v", err)
	}
	if !slices.Equal(p.Removed, []string{"free"}) {
		t.Fatalf("Sweep beside the locks removed %q, want [free]", p.Removed)
	}
	if err := acquirer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := guarded.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if removed, _ := sweepAll(t, s, 10, false); !slices.Equal(removed, []string{"guarded"}) {
		t.Fatalf("Sweep after the locks removed %q, want [guarded]", removed)
	}
	if r, err := s.Inspect(ctx, "acquired"); err != nil || !r.Held {
		t.Fatalf("Inspect(acquired) = %+v, %v; want held", r, err)
	}
}

// TestSweepReadCommitted: on a database whose transactions default to
// SERIALIZABLE, Sweep runs its statement in a READ COMMITTED transaction
// of its own.
func TestSweepReadCommitted(t *testing.T) {
	t.Parallel()
	url := newDatabase(t)
	admin := newPool(t, url, nil)
	ctx := ctxT(t)
	if _, err := admin.Exec(ctx, "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_isolation = serializable', current_database()); END $$"); err != nil {
		t.Fatal(err)
	}
	log := &statementLog{}
	pool := newPool(t, url, func(c *pgxpool.Config) { c.ConnConfig.Tracer = log })
	s := newStore(t, pool, leasepostgres.Options{Retention: time.Microsecond})
	if _, err := pool.Exec(ctx, "INSERT INTO public.leases (key, owner, nonce, token, expires_at) VALUES ('k', 'o', 'n', 1, to_timestamp(1))"); err != nil {
		t.Fatal(err)
	}
	log.take()
	p, err := s.Sweep(ctx, lease.SweepOptions{Limit: 10})
	if err != nil || !slices.Equal(p.Removed, []string{"k"}) {
		t.Fatalf("Sweep = %+v, %v", p, err)
	}
	sent := log.take()
	if len(sent) != 3 || sent[0] != "begin isolation level read committed" || sent[2] != "commit" {
		t.Fatalf("Sweep sent %q, want begin isolation level read committed, the statement, commit", sent)
	}
}

// TestSweepOnConnAndTx runs Sweep on a Store built on a *pgx.Conn and on
// a pgx.Tx, where the removal happens with the caller's commit.
func TestSweepOnConnAndTx(t *testing.T) {
	t.Parallel()
	url := newDatabase(t)
	pool := newPool(t, url, nil)
	ctx := ctxT(t)
	if err := leasepostgres.Migrate(ctx, pool, leasepostgres.Options{}); err != nil {
		t.Fatal(err)
	}
	insert := func(key string) {
		t.Helper()
		if _, err := pool.Exec(ctx, "INSERT INTO public.leases (key, owner, nonce, token, expires_at) VALUES ($1, 'o', 'n', 1, to_timestamp(1))", key); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	onConn, err := leasepostgres.New(conn, leasepostgres.Options{Retention: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer onConn.Close()
	insert("conn")
	if p, err := onConn.Sweep(ctx, lease.SweepOptions{Limit: 10}); err != nil || !slices.Equal(p.Removed, []string{"conn"}) {
		t.Fatalf("Sweep on a *pgx.Conn = %+v, %v", p, err)
	}

	insert("tx")
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	onTx, err := leasepostgres.New(tx, leasepostgres.Options{Retention: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer onTx.Close()
	if p, err := onTx.Sweep(ctx, lease.SweepOptions{Limit: 10}); err != nil || !slices.Equal(p.Removed, []string{"tx"}) {
		t.Fatalf("Sweep on a pgx.Tx = %+v, %v", p, err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM public.leases").Scan(&n); err != nil || n != 1 {
		t.Fatalf("outside the transaction: %d rows, %v; want 1 until it commits", n, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM public.leases").Scan(&n); err != nil || n != 0 {
		t.Fatalf("after the commit: %d rows, %v; want 0", n, err)
	}
}

// grant is one acquisition observed by a worker of TestSweepRace, in
// local monotonic time: the request was sent at sent and answered at
// granted; the lease held at least until until (the earlier of the
// release's start and sent + TTL).
type grant struct {
	token                lease.Token
	sent, granted, until time.Time
	worker               int
}

// TestSweepRace runs acquire/release/expire loops on a few keys, three
// workers per key, beside a tight sweep loop with a retention of a
// microsecond, so that rows are removed between and during acquisitions.
// No acquisition may get a token below one granted before it was sent,
// and no two holders of a key may hold it at once (each holder's lease,
// seen from the client, runs from the answer to its acquire until the
// earlier of its release and its request's time plus the TTL).
func TestSweepRace(t *testing.T) {
	t.Parallel()
	eachTable(t, time.Microsecond, func(t *testing.T, s *leasepostgres.Store, pool *pgxpool.Pool) {
		const (
			keys    = 3
			workers = 3
			ttl     = 40 * time.Millisecond
			run     = 3 * time.Second
		)
		ctx := ctxT(t)
		stop := time.Now().Add(run)
		var (
			mu     sync.Mutex
			grants = make([][]grant, keys)
			wg     sync.WaitGroup
			swept  atomic.Int64
			errs   = make(chan error, keys*workers+2)
		)
		for k := range keys {
			key := fmt.Sprintf("race/%d", k)
			for w := range workers {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(k), uint64(w)))
					for n := 0; time.Now().Before(stop); n++ {
						a := lease.Acquisition{Key: key, Owner: "o", Nonce: fmt.Sprintf("%d-%d-%d", k, w, n)}
						sent := time.Now()
						tok, err := s.Acquire(ctx, lease.AcquireRequest{Key: key, Owner: a.Owner, Nonce: a.Nonce, TTL: ttl})
						if errors.Is(err, lease.ErrNotAcquired) {
							time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
							continue
						}
						if err != nil {
							errs <- fmt.Errorf("acquire: %w", err)
							return
						}
						g := grant{token: tok, sent: sent, granted: time.Now(), until: sent.Add(ttl), worker: w}
						a.Token = tok
						time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
						if rng.IntN(4) > 0 { // release
							if start := time.Now(); start.Before(g.until) {
								g.until = start
							}
							// A lease that expired before the release may
							// also have been swept, and acquired again:
							// any loss is an answer. That the lease was
							// not lost earlier is checkGrants' part.
							if err := s.Release(ctx, a); err != nil && !errors.As(err, new(*lease.LostError)) {
								errs <- fmt.Errorf("release: %w", err)
								return
							}
						} else { // crash: let it expire
							time.Sleep(ttl)
						}
						mu.Lock()
						grants[k] = append(grants[k], g)
						mu.Unlock()
					}
				})
			}
		}
		for range 2 {
			wg.Go(func() {
				for time.Now().Before(stop) {
					cursor := ""
					for {
						p, err := s.Sweep(ctx, lease.SweepOptions{Cursor: cursor, Limit: 2})
						if err != nil {
							errs <- fmt.Errorf("sweep: %w", err)
							return
						}
						swept.Add(int64(len(p.Removed)))
						if p.Next == "" {
							break
						}
						cursor = p.Next
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		total := 0
		for k, gs := range grants {
			total += len(gs)
			checkGrants(t, fmt.Sprintf("race/%d", k), gs)
		}
		t.Logf("%d grants, %d rows swept", total, swept.Load())
		if swept.Load() == 0 || total < 20 {
			t.Fatalf("%d grants, %d rows swept: the race did not happen", total, swept.Load())
		}
	})
}

// checkGrants checks the grants of one key: a grant answered before
// another was sent has a lower token, and no two leases overlap.
func checkGrants(t *testing.T, key string, gs []grant) {
	t.Helper()
	byGranted := slices.Clone(gs)
	slices.SortFunc(byGranted, func(a, b grant) int { return a.granted.Compare(b.granted) })
	bySent := slices.Clone(gs)
	slices.SortFunc(bySent, func(a, b grant) int { return a.sent.Compare(b.sent) })
	var (
		i    int
		high grant // the highest token among grants answered so far
	)
	for _, b := range bySent {
		for ; i < len(byGranted) && byGranted[i].granted.Before(b.sent); i++ {
			if byGranted[i].token > high.token {
				high = byGranted[i]
			}
		}
		if high.token != 0 && b.token <= high.token {
			t.Errorf("%s: token %d granted to worker %d after token %d had been granted to worker %d: tokens went down", key, b.token, b.worker, high.token, high.worker)
		}
	}
	var last grant // the lease held until the latest so far
	for _, g := range byGranted {
		if !g.until.After(g.granted) {
			continue // answered after its TTL: held for no time the client knows of
		}
		if !last.until.IsZero() && g.granted.Before(last.until) {
			t.Errorf("%s: worker %d held token %d from %v while worker %d held token %d until %v: two holders",
				key, g.worker, g.token, g.granted.Format(time.StampMicro), last.worker, last.token, last.until.Format(time.StampMicro))
		}
		if g.until.After(last.until) {
			last = g
		}
	}
}

// TestSweepExecModes sweeps with each of pgx's query exec modes, as a
// connection pooler in transaction mode needs some of them.
func TestSweepExecModes(t *testing.T) {
	t.Parallel()
	url := newDatabase(t)
	for i, mode := range []pgx.QueryExecMode{
		pgx.QueryExecModeCacheStatement,
		pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec,
		pgx.QueryExecModeExec,
		pgx.QueryExecModeSimpleProtocol,
	} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			pool := newPool(t, url, func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = mode })
			s := newStore(t, pool, leasepostgres.Options{Table: fmt.Sprintf("leases_%d", i), Retention: time.Minute})
			ctx := ctxT(t)
			if _, err := pool.Exec(ctx, "INSERT INTO "+s.Table()+" (key, owner, nonce, token, expires_at) VALUES ('a', 'o', 'n', 1, statement_timestamp() - interval '1 hour'), ('b', 'o', 'n', 1, statement_timestamp())"); err != nil {
				t.Fatal(err)
			}
			p, err := s.Sweep(ctx, lease.SweepOptions{Limit: 1, DryRun: true})
			if err != nil || !slices.Equal(p.Removed, []string{"a"}) || p.Next != "a" {
				t.Fatalf("dry run = %+v, %v; want [a], next a", p, err)
			}
			if removed, pages := sweepAll(t, s, 1, false); !slices.Equal(removed, []string{"a"}) || pages != 3 {
				t.Fatalf("Sweep removed %q in %d pages, want [a] in 3", removed, pages)
			}
		})
	}
}
