package valkey_test

import (
	"crypto/rand"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/internal/keyspace"
	"github.com/golib/lease/lease"
)

// topologies are the servers the store-level tests of semaphores and sets
// run on.
var topologies = []struct {
	name   string
	client func(testing.TB) valkey.Client
}{{"standalone", standalone}, {"cluster", cluster}}

// permit is one permit held in a test.
type permit struct {
	slot int
	a    lease.Acquisition
}

// acquirePermit takes a permit of sem among n with a fresh nonce, or
// returns the error.
func acquirePermit(t *testing.T, s *leasevalkey.Store, sem, owner string, n int, ttl time.Duration) (permit, error) {
	t.Helper()
	nonce := rand.Text()
	slot, tok, err := s.AcquirePermit(ctxT(t), lease.AcquireRequest{Key: sem, Owner: owner, Nonce: nonce, TTL: ttl}, n)
	return permit{slot, lease.Acquisition{Key: lease.PermitKey(sem, slot), Owner: owner, Nonce: nonce, Token: tok}}, err
}

// mustPermit is acquirePermit that fails the test on an error.
func mustPermit(t *testing.T, s *leasevalkey.Store, sem, owner string, n int, ttl time.Duration) permit {
	t.Helper()
	p, err := acquirePermit(t, s, sem, owner, n, ttl)
	if err != nil {
		t.Fatalf("AcquirePermit(%q, %d): %v", sem, n, err)
	}
	return p
}

// TestPermits takes every permit of a semaphore, lowest slot first, with
// tokens rising across the slots; refuses one more, naming the holder
// whose lease ends first; retries an acquisition idempotently; and
// grants a released slot again with a higher token. Each permit is an
// ordinary lease on its permit key.
func TestPermits(t *testing.T) {
	t.Parallel()
	for _, topo := range topologies {
		t.Run(topo.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			s := newStore(t, topo.client(t))
			for _, sem := range []string{"exports", "{tenant/7}exports"} {
				var held []permit
				ttls := []time.Duration{time.Minute, 30 * time.Second, 2 * time.Minute}
				for i, ttl := range ttls {
					p := mustPermit(t, s, sem, "w"+strconv.Itoa(i), 3, ttl)
					if p.slot != i {
						t.Fatalf("permit %d of %q is in slot %d", i, sem, p.slot)
					}
					if i > 0 && p.a.Token <= held[i-1].a.Token {
						t.Fatalf("permit %d of %q has token %d, not above %d", i, sem, p.a.Token, held[i-1].a.Token)
					}
					held = append(held, p)
				}
				_, err := acquirePermit(t, s, sem, "late", 3, time.Minute)
				var na *lease.NotAcquiredError
				if !errors.As(err, &na) || na.Key != sem || na.Holder != "w1" || na.Token != held[1].a.Token ||
					na.Remaining <= 0 || na.Remaining > 30*time.Second {
					t.Fatalf("a fourth permit of 3 = %v, want held by w1, whose lease ends first", err)
				}
				// A retry of an unanswered attempt gets its own permit back,
				// extended.
				retry := held[1].a
				slot, tok, err := s.AcquirePermit(ctx, lease.AcquireRequest{Key: sem, Owner: retry.Owner, Nonce: retry.Nonce, TTL: time.Hour}, 3)
				if err != nil || slot != 1 || tok != retry.Token {
					t.Fatalf("retry = slot %d token %d, %v; want slot 1 token %d", slot, tok, err, retry.Token)
				}
				if r, err := s.Inspect(ctx, lease.PermitKey(sem, 1)); err != nil || !r.Held || r.Remaining < 59*time.Minute {
					t.Fatalf("Inspect of the retried permit = %+v, %v; want it extended to an hour", r, err)
				}
				// Permits are leases: Renew and Release them by their keys.
				if err := s.Renew(ctx, held[0].a, time.Minute); err != nil {
					t.Fatal(err)
				}
				if err := s.Release(ctx, held[1].a); err != nil {
					t.Fatal(err)
				}
				again := mustPermit(t, s, sem, "again", 3, time.Minute)
				if again.slot != 1 || again.a.Token <= held[2].a.Token {
					t.Fatalf("after a release: slot %d token %d; want slot 1 above %d", again.slot, again.a.Token, held[2].a.Token)
				}
				for _, p := range []permit{held[0], held[2], again} {
					if err := s.Release(ctx, p.a); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}

// TestPermitsLowered: with fewer permits than before, no new permit is
// granted until fewer than the new number are held below it, permits
// beyond it last, and new tokens still rise above theirs, also above a
// token of a permit beyond the new number that is ahead of the clock (as
// after the clock stepped back), which the semaphore's token key keeps.
func TestPermitsLowered(t *testing.T) {
	t.Parallel()
	c := standalone(t)
	ctx := ctxT(t)
	s := newStore(t, c)
	const sem = "lowered"
	p0 := mustPermit(t, s, sem, "o", 3, time.Minute)
	p1 := mustPermit(t, s, sem, "o", 3, time.Minute)
	// Slot 1's token far ahead of the clock: the next permit, in slot 2,
	// goes above it.
	ahead := int64(1) << 52
	if err := c.Do(ctx, c.B().Hset().Key(s.RecordKey(lease.PermitKey(sem, 1))).FieldValue().FieldValue("token", strconv.FormatInt(ahead, 10)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	p1.a.Token = lease.Token(ahead)
	p2 := mustPermit(t, s, sem, "o", 3, time.Minute)
	if p2.slot != 2 || int64(p2.a.Token) != ahead+1 {
		t.Fatalf("third permit: slot %d token %d; want slot 2 token %d", p2.slot, p2.a.Token, ahead+1)
	}
	// Lowered to 2: both held, so none is granted.
	if _, err := acquirePermit(t, s, sem, "o", 2, time.Minute); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("a permit of 2 with 3 held = %v, want ErrNotAcquired", err)
	}
	// Slots 0 and 1 end: with 1 permit, slot 0 is granted, above slot 2's
	// token, which only the token key still knows.
	for _, p := range []permit{p0, p1} {
		if err := s.Release(ctx, p.a); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Do(ctx, c.B().Del().Key(s.RecordKey(lease.PermitKey(sem, 1))).Build()).AsInt64(); err != nil {
		t.Fatal(err)
	}
	q := mustPermit(t, s, sem, "o", 1, time.Minute)
	if q.slot != 0 || q.a.Token <= p2.a.Token {
		t.Fatalf("a permit of 1: slot %d token %d; want slot 0 above %d", q.slot, q.a.Token, p2.a.Token)
	}
	// Slot 2, beyond the new number, is still held.
	if r, err := s.Inspect(ctx, lease.PermitKey(sem, 2)); err != nil || !r.Held || r.Token != p2.a.Token {
		t.Fatalf("Inspect of slot 2 = %+v, %v; want held with token %d", r, err, p2.a.Token)
	}
	// The token key ends after the retention, as released records do.
	tokens := keyspace.PermitTokens(s.Prefix(), sem)
	if got := pttl(t, c, tokens); got <= 0 || got > lease.DefaultRetention.Milliseconds() {
		t.Fatalf("PTTL of the token key %q = %d, want the retention", tokens, got)
	}
	forever := newStoreWith(t, c, leasevalkey.Options{Retention: lease.KeepForever})
	mustPermit(t, forever, sem, "o", 1, time.Minute)
	if got := pttl(t, c, keyspace.PermitTokens(forever.Prefix(), sem)); got != -1 {
		t.Fatalf("PTTL of the token key with KeepForever = %d, want no TTL", got)
	}
}

// TestPermitsAtMostN: acquisitions racing for the permits of one
// semaphore never hold more than its number at once.
func TestPermitsAtMostN(t *testing.T) {
	t.Parallel()
	s := newStore(t, cluster(t))
	const n, workers = 3, 8
	errs := make(chan error, workers)
	granted := make(chan permit, workers)
	for range workers {
		go func() {
			nonce := rand.Text()
			slot, tok, err := s.AcquirePermit(ctxT(t), lease.AcquireRequest{Key: "race", Owner: "o", Nonce: nonce, TTL: time.Minute}, n)
			if err == nil {
				granted <- permit{slot, lease.Acquisition{Key: lease.PermitKey("race", slot), Owner: "o", Nonce: nonce, Token: tok}}
			}
			errs <- err
		}()
	}
	var refused int
	for range workers {
		if err := <-errs; errors.Is(err, lease.ErrNotAcquired) {
			refused++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	close(granted)
	slots := map[int]bool{}
	for p := range granted {
		if slots[p.slot] {
			t.Fatalf("slot %d granted twice", p.slot)
		}
		slots[p.slot] = true
	}
	if len(slots) != n || refused != workers-n {
		t.Fatalf("%d permits granted and %d refused, want %d and %d", len(slots), refused, n, workers-n)
	}
}

// TestPermitsRefuseBadArguments: a number of permits out of range, or a
// semaphore key too long for its permits' keys, fails before any I/O.
func TestPermitsRefuseBadArguments(t *testing.T) {
	t.Parallel()
	counted := &countingClient{Client: standalone(t)}
	s := newStore(t, counted)
	long := strings.Repeat("k", lease.MaxKeyLen-len("/permit/9"))
	for _, c := range []struct {
		key     string
		permits int
		want    string
	}{
		{"sem", 0, "0 permits"},
		{"sem", lease.MaxPermits + 1, "257 permits"},
		{"", 1, "invalid key"},
		{long, 11, "the key of permit 10"},
	} {
		_, _, err := s.AcquirePermit(ctxT(t), lease.AcquireRequest{Key: c.key, Owner: "o", Nonce: "n", TTL: time.Second}, c.permits)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("AcquirePermit(%.20q, %d) = %v, want an error about %q", c.key, c.permits, err, c.want)
		}
	}
	if n := counted.n.Load(); n != 0 {
		t.Errorf("the refused calls sent %d requests", n)
	}
	if _, _, err := s.AcquirePermit(ctxT(t), lease.AcquireRequest{Key: long, Owner: "o", Nonce: "n", TTL: time.Second}, 10); err != nil {
		t.Errorf("AcquirePermit of 10 permits of a key whose permit keys fit: %v", err)
	}
}

// TestPermitsOnAClusterShareASlot: every permit of a semaphore of the
// largest size, and its token key, are in one hash slot, so one script
// takes them on a cluster.
func TestPermitsOnAClusterShareASlot(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	s := newStore(t, c)
	for i := range lease.MaxPermits {
		p := mustPermit(t, s, "big", "o", lease.MaxPermits, time.Minute)
		if p.slot != i {
			t.Fatalf("permit %d in slot %d", i, p.slot)
		}
	}
	if _, err := acquirePermit(t, s, "big", "o", lease.MaxPermits, time.Minute); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("permit %d of %d = %v, want ErrNotAcquired", lease.MaxPermits+1, lease.MaxPermits, err)
	}
	want := slotOf(t, c, keyspace.PermitTokens(s.Prefix(), "big"))
	for _, i := range []int{0, 9, 10, lease.MaxPermits - 1} {
		if got := slotOf(t, c, s.RecordKey(lease.PermitKey("big", i))); got != want {
			t.Errorf("permit %d is in slot %d, the token key in %d", i, got, want)
		}
	}
}

// slotOf returns the server's hash slot of name.
func slotOf(t *testing.T, c valkey.Client, name string) int64 {
	t.Helper()
	n, err := c.Do(ctxT(t), c.B().ClusterKeyslot().Key(name).Build()).AsInt64()
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT %q: %v", name, err)
	}
	return n
}

// TestPermitReleaseWakesAWatcher: the release of a permit is announced on
// its key's release channel, as any lease's is.
func TestPermitReleaseWakesAWatcher(t *testing.T) {
	t.Parallel()
	for _, topo := range topologies {
		t.Run(topo.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, topo.client(t))
			p := mustPermit(t, s, "{w}sem", "o", 2, time.Minute)
			ch, stop, err := s.WatchReleases(ctxT(t), lease.PermitKey("{w}sem", p.slot))
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			drain(ch)
			if err := s.Release(ctxT(t), p.a); err != nil {
				t.Fatal(err)
			}
			select {
			case <-ch:
			case <-ctxT(t).Done():
				t.Fatal("no release notification")
			}
		})
	}
}

// drain takes the value a new watch sends once it is subscribed, waiting
// for it a little.
func drain(ch <-chan struct{}) {
	select {
	case <-ch:
	case <-time.After(200 * time.Millisecond):
	}
}
