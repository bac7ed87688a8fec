package valkey_test

import (
	"context"
	"crypto/rand"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/internal/testkit/backendenv"
	"github.com/golib/lease/internal/testkit/stall"
	"github.com/golib/lease/internal/testkit/tcpproxy"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// countingClient counts the requests a valkey-go client sends.
type countingClient struct {
	valkey.Client
	n atomic.Int64
}

func (c *countingClient) Do(ctx context.Context, cmd valkey.Completed) valkey.ValkeyResult {
	c.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c *countingClient) DoMulti(ctx context.Context, cmds ...valkey.Completed) []valkey.ValkeyResult {
	c.n.Add(int64(len(cmds)))
	return c.Client.DoMulti(ctx, cmds...)
}

// warmUp runs every script once through s, so that later calls are a
// single EVALSHA (the first run of a script in a process loads it).
func warmUp(t *testing.T, s *leasevalkey.Store) {
	t.Helper()
	ctx := ctxT(t)
	a := acquire(t, s, "warm-up", "o", time.Minute)
	if err := s.Renew(ctx, a, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Inspect(ctx, "warm-up"); err != nil {
		t.Fatal(err)
	}
	p := mustPermit(t, s, "warm-up", "o", 1, time.Minute)
	if err := s.Release(ctx, p.a); err != nil {
		t.Fatal(err)
	}
	keys := []string{"warm-up/1", "warm-up/2"}
	set, err := acquireSet(t, s, keys, "o", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RenewSet(ctx, keys, set, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseSet(ctx, keys, set); err != nil {
		t.Fatal(err)
	}
	if _, err := s.HandOff(ctx, a, lease.Offer{Candidates: []string{"o"}, Window: time.Minute}); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("HandOff of a released lease: %v", err)
	}
}

// commandStats returns the calls per command since the last CONFIG RESETSTAT.
func commandStats(t *testing.T, c valkey.Client) map[string]int64 {
	t.Helper()
	info, err := c.Do(ctxT(t), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	stats := make(map[string]int64)
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		stats[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.ParseInt(calls, 10, 64)
	}
	return stats
}

// TestOneRoundTripPerOperation counts, on the client and on a server with
// no other traffic, the requests each operation makes once its script is
// loaded: one each.
func TestOneRoundTripPerOperation(t *testing.T) {
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	admin := newClient(t, srv.Addr())
	counted := &countingClient{Client: newClient(t, srv.Addr())}
	s := newStore(t, counted)
	ctx := ctxT(t)
	ttl := time.Minute
	warmUp(t, s)

	var acq, set lease.Acquisition
	keys := []string{"s/1", "s/2", "s/3"}
	for _, op := range []struct {
		name   string
		script string // the command the server must see, once
		run    func() error
	}{
		{"acquire", "evalsha", func() (err error) {
			acq = lease.Acquisition{Key: "k", Owner: "o", Nonce: rand.Text()}
			acq.Token, err = s.Acquire(ctx, lease.AcquireRequest{Key: acq.Key, Owner: acq.Owner, Nonce: acq.Nonce, TTL: ttl})
			return err
		}},
		{"renew", "evalsha", func() error { return s.Renew(ctx, acq, ttl) }},
		{"inspect", "evalsha_ro", func() error { _, err := s.Inspect(ctx, "k"); return err }},
		{"release", "evalsha", func() error { return s.Release(ctx, acq) }},
		{"acquire permit", "evalsha", func() (err error) {
			_, _, err = s.AcquirePermit(ctx, lease.AcquireRequest{Key: "sem", Owner: "o", Nonce: rand.Text(), TTL: ttl}, 5)
			return err
		}},
		{"acquire set", "evalsha", func() (err error) {
			set = lease.Acquisition{Owner: "o", Nonce: rand.Text()}
			set.Token, err = s.AcquireSet(ctx, keys, lease.AcquireRequest{Owner: set.Owner, Nonce: set.Nonce, TTL: ttl})
			return err
		}},
		{"renew set", "evalsha", func() error { return s.RenewSet(ctx, keys, set, ttl) }},
		{"release set", "evalsha", func() error { return s.ReleaseSet(ctx, keys, set) }},
		{"hand off", "evalsha", func() error {
			_, err := s.HandOff(ctx, lease.Acquisition{Key: "k", Owner: "p", Nonce: "n", Token: 1}, lease.Offer{Candidates: []string{"q"}, Window: ttl})
			if errors.Is(err, lease.ErrLost) {
				return nil // refused on the server, in one request
			}
			return err
		}},
	} {
		if err := admin.Do(ctx, admin.B().ConfigResetstat().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		before := counted.n.Load()
		if err := op.run(); err != nil {
			t.Fatalf("%s: %v", op.name, err)
		}
		if n := counted.n.Load() - before; n != 1 {
			t.Errorf("%s sent %d requests, want 1", op.name, n)
		}
		stats := commandStats(t, admin)
		if stats[op.script] != 1 {
			t.Errorf("%s: server saw %s %d times, want once (stats %v)", op.name, op.script, stats[op.script], stats)
		}
		for _, other := range []string{"eval", "eval_ro", "evalsha", "evalsha_ro", "script|load"} {
			if other != op.script && stats[other] != 0 {
				t.Errorf("%s: server also saw %s %d times", op.name, other, stats[other])
			}
		}
	}
}

// TestErrorClassification checks what each kind of failure reads as.
func TestErrorClassification(t *testing.T) {
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	c := newClient(t, srv.Addr())
	s := newStore(t, c)
	ctx := ctxT(t)
	warmUp(t, s)

	t.Run("timeout after sending is indeterminate, and the retry resolves it", func(t *testing.T) {
		nonce := rand.Text()
		req := lease.AcquireRequest{Key: "paused", Owner: "o", Nonce: nonce, TTL: time.Minute}
		srv.Pause()
		actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := s.Acquire(actx, req)
		cancel()
		srv.Resume()
		if !errors.Is(err, lease.ErrIndeterminate) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire on a paused server = %v, want indeterminate wrapping the deadline", err)
		}
		if strings.Contains(err.Error(), nonce) {
			t.Fatalf("error %q reveals the nonce", err)
		}
		// The request may or may not have left the client before the
		// deadline; either way the retry must settle it: the same token
		// if the first attempt was applied, a fresh grant if not.
		r, err := s.Inspect(ctx, "paused")
		if err != nil {
			t.Fatal(err)
		}
		tok, err := s.Acquire(ctx, req)
		switch {
		case err != nil:
			t.Fatalf("retry = %v", err)
		case r.Held && tok != r.Token:
			t.Fatalf("retry = %d; want the token %d of the unanswered attempt, which was applied", tok, r.Token)
		case !r.Held && tok <= r.Token:
			t.Fatalf("retry = %d; want a fresh token above %d", tok, r.Token)
		}
		t.Logf("unanswered attempt applied: %v", r.Held)
	})

	t.Run("a paused server does not hold up WatchReleases", func(t *testing.T) {
		srv.Pause()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, stop, err := s.WatchReleases(wctx, "watched-while-paused")
		cancel()
		srv.Resume()
		if err != nil {
			t.Fatalf("WatchReleases on a paused server = %v, want the channel without waiting for the server", err)
		}
		stop()
	})

	t.Run("cancelled before sending is not indeterminate", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := s.Acquire(cctx, lease.AcquireRequest{Key: "k", Owner: "o", Nonce: "n", TTL: time.Second})
		if err == nil || errors.Is(err, lease.ErrIndeterminate) || !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire with a cancelled context = %v, want context.Canceled, not indeterminate", err)
		}
	})

	t.Run("missing ACL permission is a clear configuration error", func(t *testing.T) {
		if err := c.Do(ctx, c.B().AclSetuser().Username("limited").Rule("on", ">pw", "~other:*", "+@all").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		lc, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{srv.Addr()}, Username: "limited", Password: "pw", DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		defer lc.Close()
		ls, _ := leasevalkey.New(lc, leasevalkey.Options{})
		_, err = ls.Acquire(ctx, lease.AcquireRequest{Key: "k", Owner: "o", Nonce: "n", TTL: time.Second})
		if err == nil || errors.Is(err, lease.ErrIndeterminate) || !strings.Contains(err.Error(), "lacks a permission") {
			t.Fatalf("Acquire without key permission = %v, want a plain error about permissions", err)
		}
		if err := ls.Check(ctx); err == nil || !strings.Contains(err.Error(), "lacks a permission") {
			t.Fatalf("Check without key permission = %v, want it reported", err)
		}
	})

	t.Run("eviction policy is reported by Check", func(t *testing.T) {
		if err := c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue("maxmemory-policy", "allkeys-lru").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		defer c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue("maxmemory-policy", "noeviction").Build())
		err := s.Check(ctx)
		if err == nil || !strings.Contains(err.Error(), "allkeys-lru") || !strings.Contains(err.Error(), "noeviction") {
			t.Fatalf("Check with allkeys-lru = %v, want it reported", err)
		}
	})

	t.Run("a server that is down is not indeterminate once dialling fails", func(t *testing.T) {
		srv.Stop()
		defer srv.Restart()
		var last error
		for range 20 {
			_, last = s.Acquire(ctx, lease.AcquireRequest{Key: "down", Owner: "o", Nonce: "n", TTL: time.Second})
			if last != nil && !errors.Is(last, lease.ErrIndeterminate) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if last == nil || errors.Is(last, lease.ErrIndeterminate) || !strings.Contains(last.Error(), "not sent") {
			t.Fatalf("Acquire on a stopped server = %v, want a plain 'not sent' error", last)
		}
	})
}

// TestTokensRiseAcrossRestartWithoutPersistence restarts a server that
// keeps nothing on disk: the records are gone, and later tokens are still
// above every earlier one.
func TestTokensRiseAcrossRestartWithoutPersistence(t *testing.T) {
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	s := newStore(t, newClient(t, srv.Addr()))
	ctx := ctxT(t)
	var highest lease.Token
	var held lease.Acquisition
	for i := range 20 {
		held = acquire(t, s, "k", "o", time.Minute)
		if held.Token <= highest {
			t.Fatalf("token %d after %d", held.Token, highest)
		}
		highest = held.Token
		if i < 19 {
			if err := s.Release(ctx, held); err != nil {
				t.Fatal(err)
			}
		}
	}
	srv.Restart()
	lc, _ := lease.NewClient(s, lease.ClientOptions{Owner: "o"})
	p, _ := lease.NewPolicy(lease.PolicyOptions{TTL: time.Minute, Wait: 10 * time.Second, Retry: 50 * time.Millisecond})
	h, err := lc.Acquire(ctx, "k", p) // retries through the reconnect
	if err != nil {
		t.Fatal(err)
	}
	if h.Token() <= highest {
		t.Fatalf("token after restart %d, not above %d", h.Token(), highest)
	}
	// Other pooled connections may still have to notice the restart.
	err = lease.ErrIndeterminate
	for i := 0; i < 20 && errors.Is(err, lease.ErrIndeterminate); i++ {
		err = s.Renew(ctx, held, time.Minute)
	}
	var lost *lease.LostError
	if !errors.As(err, &lost) || lost.Reason != lease.Superseded {
		t.Fatalf("Renew of the lease held before the restart = %v, want superseded", err)
	}
	if err := h.Release(ctx); err != nil && !errors.Is(err, lease.ErrIndeterminate) {
		t.Fatal(err)
	}
}

// fence is a minimal fenced write for the tests (package fence will
// provide the real one): it writes ARGV[2] to KEYS[2] only if the token
// ARGV[1] is not below the highest token KEYS[1] has seen.
var fence = valkey.NewLuaScript(`
local high = tonumber(redis.call('GET', KEYS[1]) or '0')
local tok = tonumber(ARGV[1])
if tok < high then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
return 1`)

func fencedWrite(t *testing.T, c valkey.Client, tok lease.Token, value string) bool {
	t.Helper()
	n, err := fence.Exec(ctxT(t), c, []string{"fence:{data}", "value:{data}"}, []string{tok.String(), value}).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// lossObserver records when Lost fired and counts failed renewals.
type lossObserver struct {
	renewFailed atomic.Int64
}

func (o *lossObserver) Observe(e lease.Event) {
	if _, ok := e.(*lease.RenewFailed); ok {
		o.renewFailed.Add(1)
	}
}

// managedPolicy leaves a wide margin between the local deadline and the
// server's expiry (SafetyMargin), so that the loss is reported before the
// server frees the lease even on a busy machine.
func managedPolicy(t *testing.T) lease.Policy {
	p, err := lease.NewPolicy(lease.PolicyOptions{
		TTL: 2 * time.Second, SafetyMargin: 800 * time.Millisecond, RenewEvery: 300 * time.Millisecond,
		OperationTimeout: 200 * time.Millisecond, Retry: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPausedServerEndsOverlappingCalls: acquires that overlap on one
// lease.Client, on a paused server, each end with an unknown outcome when its OperationTimeout passes.
func TestPausedServerEndsOverlappingCalls(t *testing.T) {
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	s := newStore(t, newClient(t, srv.Addr()))
	defer srv.Resume()
	backendenv.CheckOverlappingTimeouts(t, s, srv.Pause)
}

// TestPausedServer pauses the server (SIGSTOP) for longer than the TTL: the
// managed holder reports the loss before the server could have freed the
// lease, and after the server resumes, a fence rejects the old token once
// the next holder wrote.
func TestPausedServer(t *testing.T) {
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	c := newClient(t, srv.Addr())
	s := newStore(t, c)
	obs := &lossObserver{}
	lc, _ := lease.NewClient(s, lease.ClientOptions{Owner: "old", Observer: obs})
	p := managedPolicy(t)
	h, err := lc.TryAcquire(ctxT(t), "job", p)
	if err != nil {
		t.Fatal(err)
	}
	if !fencedWrite(t, c, h.Token(), "old holder, before the pause") {
		t.Fatal("first fenced write refused")
	}
	m, err := h.StartManaged(context.Background())
	if err != nil {
		t.Fatalf("StartManaged: %v", err)
	}
	defer m.Stop(context.Background())

	stalls := stall.Start(t)
	srv.Pause()
	paused := true
	defer func() {
		if paused {
			srv.Resume()
		}
	}()
	select {
	case <-m.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the managed holder did not report a loss while the server was paused")
	}
	lostAt := time.Now()
	var lost *lease.LostError
	if !errors.As(m.Err(), &lost) || lost.Reason != lease.DeadlinePassed {
		t.Fatalf("loss = %v, want the local deadline passed", m.Err())
	}
	if m.Context().Err() == nil {
		t.Fatal("Managed.Context not cancelled on loss")
	}
	// The server's expiry is TTL after the last confirmed renewal was sent,
	// which is SafetyMargin after the local deadline. Time in which this
	// process did not run at all does not count against the renewer: no
	// code can notice a deadline while it is not scheduled (that is what
	// the fence below is for).
	serverExpiry := h.Deadline().Add(p.Options().SafetyMargin)
	stalled := stalls.Within(h.Deadline(), lostAt)
	t.Logf("loss reported %v after the local deadline (the process was stalled %v of it)",
		lostAt.Sub(h.Deadline()).Round(time.Millisecond), stalled.Round(time.Millisecond))
	if !lostAt.Add(-stalled).Before(serverExpiry) {
		t.Errorf("loss reported at %v, not before the server's expiry at %v (local deadline %v, process stalled %v)", lostAt, serverExpiry, h.Deadline(), stalled)
	}
	// Stay paused past the server-side expiry, then resume.
	time.Sleep(time.Until(h.Deadline().Add(p.TTL())))
	srv.Resume()
	paused = false

	next, _ := lease.NewClient(s, lease.ClientOptions{Owner: "new"})
	wait, _ := lease.NewPolicy(lease.PolicyOptions{TTL: time.Minute, Wait: 10 * time.Second, Retry: 50 * time.Millisecond})
	h2, err := next.Acquire(ctxT(t), "job", wait)
	if err != nil {
		t.Fatal(err)
	}
	if h2.Token() <= h.Token() {
		t.Fatalf("new token %d not above old %d", h2.Token(), h.Token())
	}
	if !fencedWrite(t, c, h2.Token(), "new holder") {
		t.Fatal("fenced write of the new holder refused")
	}
	if fencedWrite(t, c, h.Token(), "old holder, after the pause") {
		t.Fatal("fence accepted a write under the old token")
	}
	if err := h2.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// TestCutConnection cuts every connection to the server and refuses new
// ones: renewals fail, are retried, and the managed holder reports the loss
// when its local deadline passes.
func TestCutConnection(t *testing.T) {
	srv := testserver.Valkey(t)
	proxy := tcpproxy.Start(t, srv.Addr())
	s := newStore(t, newClient(t, proxy.Addr()))
	obs := &lossObserver{}
	lc, _ := lease.NewClient(s, lease.ClientOptions{Owner: "o", Observer: obs})
	h, err := lc.TryAcquire(ctxT(t), "cut", managedPolicy(t))
	if err != nil {
		t.Fatal(err)
	}
	m, err := h.StartManaged(context.Background())
	if err != nil {
		t.Fatalf("StartManaged: %v", err)
	}
	defer m.Stop(context.Background())
	proxy.Refuse(true)
	proxy.Cut()
	select {
	case <-m.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("no loss reported after the connection was cut")
	}
	var lost *lease.LostError
	if !errors.As(m.Err(), &lost) || lost.Reason != lease.DeadlinePassed || lost.Err == nil {
		t.Fatalf("loss = %v, want the local deadline passed, with the last renewal error", m.Err())
	}
	if n := obs.renewFailed.Load(); n < 2 {
		t.Fatalf("%d failed renewals before the loss, want retries", n)
	}
}

// TestLostAcquireReply lets an acquire reach the server but drops its
// reply: the attempt is indeterminate, and a retry with the same nonce
// returns the token it was granted.
func TestLostAcquireReply(t *testing.T) {
	srv := testserver.Valkey(t)
	direct := newStore(t, standalone(t))
	proxy := tcpproxy.Start(t, srv.Addr())
	s, _ := leasevalkey.New(newClient(t, proxy.Addr()), leasevalkey.Options{Prefix: direct.Prefix()})
	ctx := ctxT(t)
	req := lease.AcquireRequest{Key: "lost-reply", Owner: "o", Nonce: rand.Text(), TTL: time.Minute}
	warmUp(t, s) // so that the lost reply is the acquire's own, not SCRIPT LOAD's

	proxy.Swallow(true)
	actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := s.Acquire(actx, req)
	cancel()
	if !errors.Is(err, lease.ErrIndeterminate) {
		t.Fatalf("Acquire whose reply was lost = %v, want indeterminate", err)
	}
	r, err := direct.Inspect(ctx, req.Key)
	if err != nil || !r.Held {
		t.Fatalf("Inspect = %+v, %v; want the acquire applied", r, err)
	}
	proxy.Swallow(false)
	proxy.Cut() // the client's connection lost a reply; start afresh
	var tok lease.Token
	for range 50 {
		if tok, err = s.Acquire(ctx, req); err == nil || !errors.Is(err, lease.ErrIndeterminate) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || tok != r.Token {
		t.Fatalf("retry = %d, %v; want token %d", tok, err, r.Token)
	}
}
