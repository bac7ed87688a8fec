package valkey_test

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/guard"
	"github.com/golib/lease/internal/keyspace"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/internal/testkit/valkeyacl"
	"github.com/golib/lease/lease"
)

// acquire acquires key on s with a fresh nonce, failing the test otherwise.
func acquire(t *testing.T, s *leasevalkey.Store, key, owner string, ttl time.Duration) lease.Acquisition {
	t.Helper()
	nonce := rand.Text()
	tok, err := s.Acquire(ctxT(t), lease.AcquireRequest{Key: key, Owner: owner, Nonce: nonce, TTL: ttl})
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	return lease.Acquisition{Key: key, Owner: owner, Nonce: nonce, Token: tok}
}

// serverMicros returns the server's clock in microseconds.
func serverMicros(t *testing.T, c valkey.Client) int64 {
	t.Helper()
	vals, err := c.Do(ctxT(t), c.B().Time().Build()).AsStrSlice()
	if err != nil || len(vals) != 2 {
		t.Fatalf("TIME: %v %v", vals, err)
	}
	sec, _ := strconv.ParseInt(vals[0], 10, 64)
	usec, _ := strconv.ParseInt(vals[1], 10, 64)
	return sec*1e6 + usec
}

func TestNewRejectsBadOptions(t *testing.T) {
	if _, err := leasevalkey.New(nil, leasevalkey.Options{}); err == nil {
		t.Error("New(nil client) succeeded")
	}
	c := standalone(t)
	for _, p := range []string{"a{", "}", "x{y}"} {
		if _, err := leasevalkey.New(c, leasevalkey.Options{Prefix: p}); err == nil {
			t.Errorf("New(Prefix %q) succeeded", p)
		}
	}
	s, err := leasevalkey.New(c, leasevalkey.Options{})
	if err != nil {
		t.Fatalf("New with zero Options: %v", err)
	}
	if s.Prefix() != leasevalkey.DefaultPrefix {
		t.Errorf("New with zero Options: prefix %q, want %q", s.Prefix(), leasevalkey.DefaultPrefix)
	}
}

// TestKeysStaySeparate acquires keys made to collide under a naive
// {prefix:key} layout, and checks that each has its own record, exactly
// one, named by RecordKey, in the slot its hash tag decides.
func TestKeysStaySeparate(t *testing.T) {
	t.Parallel()
	keys := []string{
		"a", "a}", "a}:token", "{a}", "{a}:x", "}{", "{", "}", "{}", "a b", " ", "%", "%7D", "a%7Db", "a}b",
		"ключ/日本語/🔒", "{user1000}.following", strings.Repeat("}", lease.MaxKeyLen),
		"{a}:%7Ba%7D", "{tenant/42}/job", "x{a{b}c}", "sem/permit/0", "sem/permit/1", "sem/permit/01", "{a}/permit/0",
	}
	for _, topo := range []struct {
		name   string
		client func(testing.TB) valkey.Client
	}{{"standalone", standalone}, {"cluster", cluster}} {
		t.Run(topo.name, func(t *testing.T) {
			t.Parallel()
			c := topo.client(t)
			s := newStore(t, c)
			held := make(map[string]lease.Acquisition)
			for i, k := range keys {
				held[k] = acquire(t, s, k, "owner-"+strconv.Itoa(i), time.Minute)
			}
			for i, k := range keys {
				r, err := s.Inspect(ctxT(t), k)
				if err != nil {
					t.Fatalf("Inspect(%q): %v", k, err)
				}
				if want := "owner-" + strconv.Itoa(i); !r.Held || r.Owner != want || r.Token != held[k].Token {
					t.Errorf("Inspect(%q) = %+v, want held by %s with token %d", k, r, want, held[k].Token)
				}
				rec := s.RecordKey(k)
				typ, err := c.Do(ctxT(t), c.B().Type().Key(rec).Build()).ToString()
				if err != nil || typ != "hash" {
					t.Errorf("TYPE %q = %q, %v; want hash", rec, typ, err)
				}
				if topo.name == "cluster" {
					checkSlot(t, c, k, rec)
				}
			}
			// Nothing but the records exists under the prefix.
			if topo.name == "standalone" {
				got := scanKeys(t, c, s.Prefix()+"*")
				if len(got) != len(keys) {
					t.Errorf("%d keys under prefix %q, want %d: %q", len(got), s.Prefix(), len(keys), got)
				}
			}
			for _, k := range keys {
				if err := s.Release(ctxT(t), held[k]); err != nil {
					t.Errorf("Release(%q): %v", k, err)
				}
			}
		})
	}
}

// permitKey matches the key of a semaphore's permit.
var permitKey = regexp.MustCompile(`^(.+)/permit/(0|[1-9][0-9]*)$`)

// checkSlot checks that rec lies in the slot of key itself if key holds a
// hash tag, in that of its semaphore's escaped key if key is a permit's,
// and otherwise in the slot of key's escaped form alone.
func checkSlot(t *testing.T, c valkey.Client, key, rec string) {
	t.Helper()
	escape := strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D", "/", "%2F").Replace
	esc := escape(key)
	if m := permitKey.FindStringSubmatch(key); m != nil {
		esc = escape(m[1])
	}
	if keyspace.HashTag(key) != key {
		esc = key
	}
	slotOf := func(k string) int64 {
		n, err := c.Do(ctxT(t), c.B().ClusterKeyslot().Key(k).Build()).AsInt64()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT: %v", err)
		}
		return n
	}
	if got, want := slotOf(rec), slotOf(esc); got != want {
		t.Errorf("record of %q is in slot %d, want %d (the slot of its escaped key)", key, got, want)
	}
}

func scanKeys(t *testing.T, c valkey.Client, match string) []string {
	t.Helper()
	var keys []string
	cursor := uint64(0)
	for {
		e, err := c.Do(ctxT(t), c.B().Scan().Cursor(cursor).Match(match).Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Fatalf("SCAN: %v", err)
		}
		keys = append(keys, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			return keys
		}
	}
}

func TestInvalidKeys(t *testing.T) {
	t.Parallel()
	s := newStore(t, standalone(t))
	for _, k := range []string{"", strings.Repeat("k", 64<<10), "a\x00b", "new\nline", "\xff"} {
		_, err := s.Acquire(ctxT(t), lease.AcquireRequest{Key: k, Owner: "o", Nonce: "n", TTL: time.Second})
		if !errors.Is(err, lease.ErrInvalidKey) {
			t.Errorf("Acquire(%.20q) = %v, want ErrInvalidKey", k, err)
		}
		if _, err := s.Inspect(ctxT(t), k); !errors.Is(err, lease.ErrInvalidKey) {
			t.Errorf("Inspect(%.20q) = %v, want ErrInvalidKey", k, err)
		}
	}
}

// TestTokens checks the token scheme: at least the server's clock in
// microseconds, above the last token even when that is ahead of the clock,
// and below 2^53.
func TestTokens(t *testing.T) {
	t.Parallel()
	c := standalone(t)
	s := newStore(t, c)
	before := serverMicros(t, c)
	a := acquire(t, s, "k", "o", time.Minute)
	if int64(a.Token) < before || a.Token >= 1<<53 {
		t.Fatalf("token %d, want between the server clock before (%d) and 2^53", a.Token, before)
	}
	if err := s.Release(ctxT(t), a); err != nil {
		t.Fatal(err)
	}
	// A counter far ahead of the clock (as after the clock stepped back)
	// still only goes up by one.
	ahead := int64(1) << 52
	if err := c.Do(ctxT(t), c.B().Hset().Key(s.RecordKey("k")).FieldValue().FieldValue("token", strconv.FormatInt(ahead, 10)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	b := acquire(t, s, "k", "o", time.Minute)
	if int64(b.Token) != ahead+1 {
		t.Fatalf("token after %d is %d, want %d", ahead, b.Token, ahead+1)
	}
	r, err := s.Inspect(ctxT(t), "k")
	if err != nil || r.Token != b.Token {
		t.Fatalf("Inspect = %+v, %v; want token %d", r, err, b.Token)
	}
}

// TestReleasedRecordKeepsToken checks that Inspect of a released key still
// reports its last token, from the record that release keeps.
func TestReleasedRecordKeepsToken(t *testing.T) {
	t.Parallel()
	s := newStore(t, standalone(t))
	a := acquire(t, s, "k", "o", time.Minute)
	if err := s.Release(ctxT(t), a); err != nil {
		t.Fatal(err)
	}
	r, err := s.Inspect(ctxT(t), "k")
	if err != nil || r.Held || r.Owner != "" || r.Token != a.Token {
		t.Fatalf("Inspect after release = %+v, %v; want free with token %d", r, err, a.Token)
	}
}

func TestWrongTypeIsNotApplied(t *testing.T) {
	t.Parallel()
	c := standalone(t)
	s := newStore(t, c)
	rec := s.RecordKey("k")
	if err := c.Do(ctxT(t), c.B().Set().Key(rec).Value("not a lease").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	_, err := s.Acquire(ctxT(t), lease.AcquireRequest{Key: "k", Owner: "o", Nonce: "secret-nonce", TTL: time.Second})
	if err == nil || errors.Is(err, lease.ErrIndeterminate) || !strings.Contains(err.Error(), "not a hash") {
		t.Fatalf("Acquire on a string record = %v, want a plain error saying the record is not a hash", err)
	}
	if strings.Contains(err.Error(), "secret-nonce") {
		t.Fatalf("error %q reveals the nonce", err)
	}
	if v, _ := c.Do(ctxT(t), c.B().Get().Key(rec).Build()).ToString(); v != "not a lease" {
		t.Fatalf("record changed to %q", v)
	}
}

func TestGuard(t *testing.T) {
	t.Parallel()
	c := standalone(t)
	s := newStore(t, c)
	lc, err := lease.NewClient(s, lease.ClientOptions{Owner: "guarded"})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := lease.NewPolicy(lease.PolicyOptions{TTL: time.Minute})
	h, err := lc.TryAcquire(ctxT(t), "g}{", p)
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Guard(h.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if g.Kind() != guard.Valkey || g.Record() != s.RecordKey("g}{") || g.Token() != h.Token() || g.Owner() != "guarded" {
		t.Fatalf("Guard = %+v", g)
	}
	// The documented check, as a guarded script would make it.
	check := valkey.NewLuaScriptReadOnly(`#!lua flags=no-writes
local r = redis.call('HMGET', KEYS[1], 'token', 'owner', 'expires')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if r[1] == ARGV[1] and r[2] == ARGV[2] and tonumber(r[3]) > now then return 1 end
return 0`)
	current := func() int64 {
		n, err := check.Exec(ctxT(t), c, []string{g.Record()}, []string{g.Token().String(), g.Owner()}).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if current() != 1 {
		t.Fatal("guard check fails while the lease is held")
	}
	if err := h.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if current() != 0 {
		t.Fatal("guard check passes after release")
	}
	if _, err := s.Guard(lease.Snapshot{Key: "k"}); err == nil {
		t.Fatal("Guard of a snapshot without token succeeded")
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, topo := range []struct {
		name   string
		client func(testing.TB) valkey.Client
	}{{"standalone", standalone}, {"cluster", cluster}} {
		t.Run(topo.name, func(t *testing.T) {
			t.Parallel()
			if err := newStore(t, topo.client(t)).Check(ctxT(t)); err != nil {
				t.Fatalf("Check on a well-configured server: %v", err)
			}
		})
	}
}

func TestWatchReleases(t *testing.T) {
	t.Parallel()
	for _, topo := range []struct {
		name   string
		client func(testing.TB) valkey.Client
	}{{"standalone", standalone}, {"cluster", cluster}} {
		t.Run(topo.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, topo.client(t))
			a := acquire(t, s, "w{}", "o", time.Minute)
			ch1, stop1, err := s.WatchReleases(ctxT(t), "w{}")
			if err != nil {
				t.Fatal(err)
			}
			ch2, stop2, err := s.WatchReleases(ctxT(t), "w{}")
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Release(ctxT(t), a); err != nil {
				t.Fatal(err)
			}
			for _, ch := range []<-chan struct{}{ch1, ch2} {
				select {
				case <-ch:
				case <-ctxT(t).Done():
					t.Fatal("no release notification")
				}
			}
			stop1()
			stop1() // a second stop is harmless
			// The subscription outlives the first watcher, not the last.
			b := acquire(t, s, "w{}", "o", time.Minute)
			if err := s.Release(ctxT(t), b); err != nil {
				t.Fatal(err)
			}
			select {
			case <-ch2:
			case <-ctxT(t).Done():
				t.Fatal("no release notification after the other watcher stopped")
			}
			stop2()
			// A new watch after the last one stopped subscribes again.
			ch3, stop3, err := s.WatchReleases(ctxT(t), "w{}")
			if err != nil {
				t.Fatal(err)
			}
			defer stop3()
			c := acquire(t, s, "w{}", "o", time.Minute)
			if err := s.Release(ctxT(t), c); err != nil {
				t.Fatal(err)
			}
			select {
			case <-ch3:
			case <-ctxT(t).Done():
				t.Fatal("no release notification after resubscribing")
			}
		})
	}
}

// TestWaitingAcquirerWakesOnRelease runs lease.Client's wait through the
// watcher: with a Retry far longer than the test, only the notification
// can hand the lease over.
func TestWaitingAcquirerWakesOnRelease(t *testing.T) {
	t.Parallel()
	s := newStore(t, standalone(t))
	lc, _ := lease.NewClient(s, lease.ClientOptions{Owner: "o"})
	hold, _ := lease.NewPolicy(lease.PolicyOptions{TTL: time.Hour})
	h, err := lc.TryAcquire(ctxT(t), "handover", hold)
	if err != nil {
		t.Fatal(err)
	}
	wait, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Hour, Retry: 10 * time.Minute, Wait: 20 * time.Minute, OperationTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		h2, err := lc.Acquire(ctxT(t), "handover", wait)
		if err == nil {
			err = h2.Release(context.Background())
		}
		got <- err
	}()
	// Release only once the waiter has seen the lease held and subscribed.
	awaitSubscribed(t, standalone(t), s)
	if err := h.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiting Acquire: %v", err)
	}
}

// numSub returns the number of subscribers to the release channel of the
// "handover" key.
func numSub(t *testing.T, c valkey.Client, s *leasevalkey.Store) int64 {
	t.Helper()
	vals, err := c.Do(ctxT(t), c.B().PubsubShardnumsub().Channel(s.RecordKey("handover")+":released").Build()).ToArray()
	if err != nil || len(vals) != 2 {
		t.Fatalf("PUBSUB SHARDNUMSUB: %v %v", vals, err)
	}
	n, _ := vals[1].AsInt64()
	return n
}

// aclRule is the ACL rule the documentation gives for a lease user.
const aclRule = valkeyacl.Lease

// aclStore starts a dedicated server with the ACL user named user (password
// "secret") and the rule, and returns a Store logged in as that user, the
// user's client and an administrator's client of the server.
func aclStore(t *testing.T, user, rule string) (s *leasevalkey.Store, c, admin valkey.Client) {
	t.Helper()
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	admin = newClient(t, srv.Addr())
	c = valkeyacl.Login(t, admin, srv.Addr(), user, rule)
	s, err := leasevalkey.New(c, leasevalkey.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s, c, admin
}

// TestDocumentedACLRuleIsEnough runs every operation, Check and a release
// watch as a user with exactly the documented rules, and nothing else;
// checks that the rules refuse what would reach other tenants' data; and
// that the documentation gives these rules.
func TestDocumentedACLRuleIsEnough(t *testing.T) {
	for _, doc := range []string{"doc.go", "../../docs/valkey-quickstart.md", "../../SECURITY.md"} {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(strings.Fields(string(text)), " "), "ACL SETUSER leases "+aclRule) {
			t.Errorf("%s does not give the rule ACL SETUSER leases %s", doc, aclRule)
		}
	}
	s, c, admin := aclStore(t, "leases", aclRule)
	ctx := ctxT(t)
	// The second round runs after the server forgot the scripts, as after
	// a restart or a failover: the calls fall back to EVAL and EVAL_RO.
	for round := range 2 {
		if round == 1 {
			if err := admin.Do(ctx, admin.B().ScriptFlush().Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Check(ctx); err != nil {
			t.Fatalf("Check: %v", err)
		}
		renewWatchRelease(ctx, t, s, "acl")
		permitsAndSets(ctx, t, s)
		if _, err := s.Inspect(ctx, "acl"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ForceRelease(ctx, "acl", 0); err != nil {
			t.Fatal(err)
		}
		sweepACL(ctx, t, c, admin, round)
	}
	valkeyacl.CheckAllUsed(t, admin, aclRule+" "+valkeyacl.Scan+" "+valkeyacl.Sweep)
	valkeyacl.CheckForbidden(t, admin, c, "other:{tenant}")
}

// sweepACL checks what the documentation says Sweep needs: as the user of
// c, with the documented rule alone, Sweep is refused and removes nothing,
// and Diagnose advises of it; a user with the rule, +scan +role and +del,
// created through admin, sweeps.
func sweepACL(ctx context.Context, t *testing.T, c, admin valkey.Client, round int) {
	t.Helper()
	text, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	if grants := valkeyacl.Scan + " " + valkeyacl.Sweep; !strings.Contains(string(text), grants) {
		t.Errorf("doc.go does not say that Sweep needs %s", grants)
	}
	s, err := leasevalkey.New(c, leasevalkey.Options{Retention: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	key := "acl/crashed/" + strconv.Itoa(round)
	acquire(t, s, key, "o", time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	if _, err := s.Sweep(ctx, lease.SweepOptions{Limit: 100}); err == nil || !strings.Contains(err.Error(), "permission") {
		t.Fatalf("Sweep with the documented rule = %v, want a permission error", err)
	}
	if advice := strings.Join(s.Diagnose(ctx).Advice, "\n"); !strings.Contains(advice, "DEL, SCAN, ROLE") {
		t.Errorf("Diagnose advice with the documented rule = %q, want the commands Sweep needs", advice)
	}
	var addr string
	for a := range admin.Nodes() {
		addr = a
	}
	sweeper, err := leasevalkey.New(valkeyacl.Login(t, admin, addr, "sweeper", aclRule+" "+valkeyacl.Scan+" "+valkeyacl.Sweep), leasevalkey.Options{Retention: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r := sweeper.Diagnose(ctx); r.Err() != nil || len(withoutPersistence(r.Advice)) != 0 {
		t.Errorf("Diagnose as the sweeper = %+v, want nothing to report", r)
	}
	if got := sweepAll(t, sweeper, 100, false); !slices.Contains(got, key) {
		t.Fatalf("Sweep with +scan +role +del removed %q, want %q among them", got, key)
	}
}

// TestScriptCommandsRefused: a user refused a command that the lease
// scripts run only on some paths (an ACL rule of an older version of this
// package, without +persist or +pexpire) is refused before anything is
// written: Acquire creates no record, Release and ForceRelease leave the
// lease held with no TTL on its record; and Check names the command at
// start-up.
func TestScriptCommandsRefused(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"persist", "pexpire"} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			s, _, admin := aclStore(t, "old", strings.Replace(aclRule, " +"+cmd+" ", " ", 1))
			ctx := ctxT(t)
			if err := s.Check(ctx); err == nil || !strings.Contains(err.Error(), strings.ToUpper(cmd)) {
				t.Fatalf("Check = %v, want a problem naming %s", err, strings.ToUpper(cmd))
			}
			if cmd == "persist" {
				_, err := s.Acquire(ctx, lease.AcquireRequest{Key: "acl", Owner: "o", Nonce: "n", TTL: time.Minute})
				if err == nil || errors.Is(err, lease.ErrIndeterminate) || !strings.Contains(err.Error(), "permission") {
					t.Fatalf("Acquire = %v, want a definite permission error", err)
				}
				if p := pttl(t, admin, s.RecordKey("acl")); p != -2 {
					t.Fatalf("record after the refused Acquire: PTTL %d, want -2 (none)", p)
				}
				_, err = acquireSet(t, s, []string{"acl/1", "acl/2"}, "o", time.Minute)
				if err == nil || errors.Is(err, lease.ErrIndeterminate) || !strings.Contains(err.Error(), "permission") {
					t.Fatalf("AcquireSet = %v, want a definite permission error", err)
				}
				if p := pttl(t, admin, s.RecordKey("acl/1")); p != -2 {
					t.Fatalf("record after the refused AcquireSet: PTTL %d, want -2 (none)", p)
				}
			}
			// A permit's grant is refused before its record is written.
			_, err := acquirePermit(t, s, "acl/sem", "o", 2, time.Minute)
			if err == nil || errors.Is(err, lease.ErrIndeterminate) || !strings.Contains(err.Error(), "permission") {
				t.Fatalf("AcquirePermit = %v, want a definite permission error", err)
			}
			for _, name := range []string{s.RecordKey(lease.PermitKey("acl/sem", 0)), keyspace.PermitTokens(s.Prefix(), "acl/sem")} {
				if p := pttl(t, admin, name); p != -2 {
					t.Fatalf("%q after the refused AcquirePermit: PTTL %d, want -2 (none)", name, p)
				}
			}
			if cmd == "persist" {
				return
			}
			a := acquire(t, s, "acl", "o", time.Minute)
			err = s.Release(ctx, a)
			if err == nil || errors.Is(err, lease.ErrIndeterminate) || errors.Is(err, lease.ErrLost) || !strings.Contains(err.Error(), "permission") {
				t.Fatalf("Release = %v, want a definite permission error", err)
			}
			if _, err := s.ForceRelease(ctx, "acl", 0); err == nil || !strings.Contains(err.Error(), "permission") {
				t.Fatalf("ForceRelease = %v, want a permission error", err)
			}
			if r, err := s.Inspect(ctx, "acl"); err != nil || !r.Held || r.Token != a.Token {
				t.Fatalf("after the refused releases Inspect = %+v, %v; want the lease still held", r, err)
			}
			if p := pttl(t, admin, s.RecordKey("acl")); p != -1 {
				t.Fatalf("held record after the refused releases: PTTL %d, want -1", p)
			}
			keys := []string{"acl/1", "acl/2"}
			set, err := acquireSet(t, s, keys, "o", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			err = s.ReleaseSet(ctx, keys, set)
			if err == nil || errors.Is(err, lease.ErrIndeterminate) || errors.Is(err, lease.ErrLost) || !strings.Contains(err.Error(), "permission") {
				t.Fatalf("ReleaseSet = %v, want a definite permission error", err)
			}
			for _, k := range keys {
				if r, err := s.Inspect(ctx, k); err != nil || !r.Held || r.Token != set.Token || pttl(t, admin, s.RecordKey(k)) != -1 {
					t.Fatalf("after the refused ReleaseSet Inspect(%q) = %+v, %v; want it still held, without a TTL", k, r, err)
				}
			}
		})
	}
}

// renewWatchRelease acquires key, renews it, watches for its release and
// releases it; then watches its changes, records a preferred candidate
// and hands the key off to it, which takes and releases it; failing t
// unless every step works and the release and the changes are announced.
func renewWatchRelease(ctx context.Context, t *testing.T, s *leasevalkey.Store, key string) {
	t.Helper()
	a := acquire(t, s, key, "o", time.Minute)
	if err := s.Renew(ctx, a, time.Minute); err != nil {
		t.Fatal(err)
	}
	ch, stop, err := s.WatchReleases(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := s.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatal("no release notification")
	}
	// A change watch, a preferred candidate and a hand-off to it.
	changes, stopChanges, err := s.WatchChanges(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer stopChanges()
	b := acquire(t, s, key, "o", time.Minute)
	if _, err := s.Acquire(ctx, lease.AcquireRequest{Key: key, Owner: "p", Nonce: rand.Text(), TTL: time.Minute, Preferred: true}); err == nil {
		t.Fatal("the preferred candidate acquired a held key")
	}
	if _, err := s.HandOff(ctx, b, lease.Offer{Candidates: []string{"p"}, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	c := acquire(t, s, key, "p", time.Minute)
	if err := s.Release(ctx, c); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changes:
	case <-ctx.Done():
		t.Fatal("no change notification")
	}
}

// permitsAndSets takes a permit of a semaphore and a set and ends them,
// failing t unless every step works.
func permitsAndSets(ctx context.Context, t *testing.T, s *leasevalkey.Store) {
	t.Helper()
	p := mustPermit(t, s, "acl/sem", "o", 3, time.Minute)
	if err := s.Release(ctx, p.a); err != nil {
		t.Fatal(err)
	}
	keys := tagged("acl", "/1", "/2")
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
}

// TestDocumentedACLRuleIsEnoughOnACluster: on a cluster the rule needs
// CLUSTER SHARDS too, which the documentation says.
func TestDocumentedACLRuleIsEnoughOnACluster(t *testing.T) {
	text, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), valkeyacl.Cluster) {
		t.Errorf("doc.go does not say that a cluster needs %s", valkeyacl.Cluster)
	}
	cl := testserver.StartValkeyCluster(t, 3)
	var admins []valkey.Client
	for _, n := range cl.Nodes() {
		admin, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{n.Addr()}, ForceSingleClient: true, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(admin.Close)
		admins = append(admins, admin)
	}
	c := valkeyacl.LoginCluster(t, admins, cl.Addrs(), "leases", aclRule+" "+valkeyacl.Cluster)
	s, err := leasevalkey.New(c, leasevalkey.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
	for _, key := range []string{"a", "b/c", "{d}"} { // on several nodes
		renewWatchRelease(ctx, t, s, key)
	}
	permitsAndSets(ctx, t, s)
	for _, n := range cl.Nodes() {
		user, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{n.Addr()}, ForceSingleClient: true, Username: "leases", Password: "secret"})
		if err != nil {
			t.Fatal(err)
		}
		defer user.Close()
		for _, cmd := range [][]string{{"FLUSHALL"}, {"KEYS", "*"}, {"CLUSTER", "RESET"}, {"CLUSTER", "FAILOVER"}} {
			if err := user.Do(ctx, user.B().Arbitrary(cmd...).Build()).Error(); !valkeyacl.Refused(err) {
				t.Errorf("%s on %s as the ACL user: %v; want NOPERM", strings.Join(cmd, " "), n.Addr(), err)
			}
		}
	}
}

// TestReleaseWithoutChannelRightsChangesNothing: a user that may use the
// lease keys but not their shard channels (ACL users get no channels by
// default) can neither acquire (a grant is announced to change watchers)
// nor release; the refusals are permission errors that change nothing,
// and Check names the problem at start-up.
func TestReleaseWithoutChannelRightsChangesNothing(t *testing.T) {
	s, _, admin := aclStore(t, "nochannels", strings.Replace(aclRule, "&lease:* ", "resetchannels ", 1))
	ctx := ctxT(t)
	if err := s.Check(ctx); err == nil || !strings.Contains(err.Error(), "release channel") || !strings.Contains(err.Error(), "permission") {
		t.Fatalf("Check = %v, want a permission problem with the release channel", err)
	}
	_, err := s.Acquire(ctx, lease.AcquireRequest{Key: "acl", Owner: "o", Nonce: rand.Text(), TTL: time.Minute})
	if err == nil || errors.Is(err, lease.ErrIndeterminate) || !strings.Contains(err.Error(), "permission") {
		t.Fatalf("Acquire = %v, want a definite permission error", err)
	}
	if r, err := s.Inspect(ctx, "acl"); err != nil || r.Token != 0 {
		t.Fatalf("after the refused acquire Inspect = %+v, %v; want no record", r, err)
	}
	// The administrator, on the same prefix, may.
	full, err := leasevalkey.New(admin, leasevalkey.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := acquire(t, full, "acl", "o", time.Minute)
	err = s.Release(ctx, a)
	if err == nil || errors.Is(err, lease.ErrIndeterminate) || errors.Is(err, lease.ErrLost) || !strings.Contains(err.Error(), "permission") {
		t.Fatalf("Release = %v, want a definite permission error", err)
	}
	r, err := s.Inspect(ctx, "acl")
	if err != nil || !r.Held || r.Token != a.Token {
		t.Fatalf("after the refused release Inspect = %+v, %v; want the lease still held", r, err)
	}
	if err := s.Renew(ctx, a, time.Minute); err != nil {
		t.Fatalf("Renew after the refused release: %v", err)
	}
}
