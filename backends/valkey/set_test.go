package valkey_test

import (
	"crypto/rand"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/lease"
)

// acquireSet acquires the set keys on s with a fresh nonce, or returns
// the error.
func acquireSet(t *testing.T, s *leasevalkey.Store, keys []string, owner string, ttl time.Duration) (lease.Acquisition, error) {
	t.Helper()
	nonce := rand.Text()
	tok, err := s.AcquireSet(ctxT(t), keys, lease.AcquireRequest{Owner: owner, Nonce: nonce, TTL: ttl})
	return lease.Acquisition{Owner: owner, Nonce: nonce, Token: tok}, err
}

// tagged returns the keys, each with the hash tag {tag} in front.
func tagged(tag string, keys ...string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = "{" + tag + "}" + k
	}
	return out
}

// TestSets acquires a set all or nothing, with one token above every
// key's last one; retries it idempotently; renews it; and releases it,
// refusing a forged release.
func TestSets(t *testing.T) {
	t.Parallel()
	for _, topo := range topologies {
		t.Run(topo.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			s := newStore(t, topo.client(t))
			keys := tagged("acct", "/17", "/42", "/99")
			// Earlier tokens of two keys, one far ahead of the clock.
			a := acquire(t, s, keys[0], "o", time.Minute)
			b := acquire(t, s, keys[1], "o", time.Minute)
			// Held by another: nothing is taken.
			_, err := acquireSet(t, s, keys, "set", time.Minute)
			var na *lease.NotAcquiredError
			if !errors.As(err, &na) || na.Key != keys[0] || na.Holder != "o" || na.Token != a.Token {
				t.Fatalf("AcquireSet with %q held = %v, want held by o", keys[0], err)
			}
			if err := s.Release(ctx, a); err != nil {
				t.Fatal(err)
			}
			_, err = acquireSet(t, s, keys, "set", time.Minute)
			if !errors.As(err, &na) || na.Key != keys[1] || na.Token != b.Token {
				t.Fatalf("AcquireSet with %q held = %v, want it named", keys[1], err)
			}
			for _, k := range []string{keys[0], keys[2]} {
				if r, err := s.Inspect(ctx, k); err != nil || r.Held {
					t.Fatalf("after a refused AcquireSet, %q is %+v, %v; want free", k, r, err)
				}
			}
			if err := s.Release(ctx, b); err != nil {
				t.Fatal(err)
			}
			set, err := acquireSet(t, s, keys, "set", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if set.Token <= b.Token {
				t.Fatalf("the set's token %d is not above %d", set.Token, b.Token)
			}
			for _, k := range keys {
				if r, err := s.Inspect(ctx, k); err != nil || !r.Held || r.Owner != "set" || r.Token != set.Token {
					t.Fatalf("Inspect(%q) = %+v, %v; want held by the set with token %d", k, r, err, set.Token)
				}
			}
			// A retry of an unanswered attempt: the same token, extended.
			tok, err := s.AcquireSet(ctx, keys, lease.AcquireRequest{Owner: "set", Nonce: set.Nonce, TTL: time.Hour})
			if err != nil || tok != set.Token {
				t.Fatalf("retry = %d, %v; want %d", tok, err, set.Token)
			}
			if r, _ := s.Inspect(ctx, keys[2]); r.Remaining < 59*time.Minute {
				t.Fatalf("after the retry %q has %v left, want an hour", keys[2], r.Remaining)
			}
			if err := s.RenewSet(ctx, keys, set, 2*time.Hour); err != nil {
				t.Fatal(err)
			}
			if r, _ := s.Inspect(ctx, keys[1]); r.Remaining < 119*time.Minute {
				t.Fatalf("after RenewSet %q has %v left, want two hours", keys[1], r.Remaining)
			}
			// A forged release (right token, wrong nonce) changes nothing.
			forged := set
			forged.Nonce = rand.Text()
			var lost *lease.LostError
			if err := s.ReleaseSet(ctx, keys, forged); !errors.As(err, &lost) || lost.Key != keys[0] || lost.Reason != lease.Superseded {
				t.Fatalf("forged ReleaseSet = %v, want Superseded on %q", err, keys[0])
			}
			if err := s.RenewSet(ctx, keys, forged, time.Minute); !errors.As(err, &lost) || lost.Reason != lease.Superseded {
				t.Fatalf("forged RenewSet = %v, want Superseded", err)
			}
			for _, k := range keys {
				if r, _ := s.Inspect(ctx, k); !r.Held {
					t.Fatalf("%q was released by a forged ReleaseSet", k)
				}
			}
			if err := s.ReleaseSet(ctx, keys, set); err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				if r, err := s.Inspect(ctx, k); err != nil || r.Held || r.Token != set.Token {
					t.Fatalf("after ReleaseSet %q is %+v, %v; want free, token %d", k, r, err, set.Token)
				}
			}
			if err := s.ReleaseSet(ctx, keys, set); !errors.As(err, &lost) || lost.Reason != lease.Expired {
				t.Fatalf("a second ReleaseSet = %v, want Expired", err)
			}
		})
	}
}

// TestSetTokenAboveEveryKey: the set's token is above a key's token that
// is ahead of the clock (as after the clock stepped back).
func TestSetTokenAboveEveryKey(t *testing.T) {
	t.Parallel()
	c := standalone(t)
	s := newStore(t, c)
	keys := []string{"a", "b", "c"}
	ahead := int64(1) << 52
	if err := c.Do(ctxT(t), c.B().Hset().Key(s.RecordKey("b")).FieldValue().FieldValue("token", strconv.FormatInt(ahead, 10)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	set, err := acquireSet(t, s, keys, "o", time.Minute)
	if err != nil || int64(set.Token) != ahead+1 {
		t.Fatalf("AcquireSet = %d, %v; want token %d", set.Token, err, ahead+1)
	}
}

// TestSetPartlyLost: a set whose key was force-released renews none of
// its keys, names the lost key, and releases the others; a retry of its
// acquisition takes every key again with a new token; a clean-up by nonce
// alone (token 0) releases what the nonce holds.
func TestSetPartlyLost(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s := newStore(t, standalone(t))
	keys := []string{"p/1", "p/2", "p/3"}
	set, err := acquireSet(t, s, keys, "o", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ForceRelease(ctx, keys[1], set.Token); err != nil {
		t.Fatal(err)
	}
	var lost *lease.LostError
	if err := s.RenewSet(ctx, keys, set, time.Hour); !errors.As(err, &lost) || lost.Key != keys[1] || lost.Reason != lease.ForceReleased {
		t.Fatalf("RenewSet = %v, want ForceReleased on %q", err, keys[1])
	}
	if r, _ := s.Inspect(ctx, keys[0]); r.Remaining > time.Minute {
		t.Fatalf("a refused RenewSet extended %q to %v", keys[0], r.Remaining)
	}
	tok, err := s.AcquireSet(ctx, keys, lease.AcquireRequest{Owner: "o", Nonce: set.Nonce, TTL: time.Minute})
	if err != nil || tok <= set.Token {
		t.Fatalf("re-acquiring the partly held set = %d, %v; want a token above %d", tok, err, set.Token)
	}
	if _, err := s.ForceRelease(ctx, keys[0], tok); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseSet(ctx, keys, lease.Acquisition{Nonce: set.Nonce}); !errors.As(err, &lost) || lost.Key != keys[0] || lost.Reason != lease.ForceReleased {
		t.Fatalf("ReleaseSet by nonce = %v, want ForceReleased on %q", err, keys[0])
	}
	for _, k := range keys[1:] {
		if r, _ := s.Inspect(ctx, k); r.Held {
			t.Fatalf("ReleaseSet by nonce left %q held", k)
		}
	}
}

// TestSetsAcrossSlots: on a cluster, a set whose keys' records are in
// different hash slots is refused before any I/O, with an error that
// matches ErrInvalidKey and says how to tag the keys; a standalone server
// takes it.
func TestSetsAcrossSlots(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	counted := &countingClient{Client: cluster(t)}
	s := newStore(t, counted)
	keys := []string{"accounts/17", "accounts/42"}
	set := lease.Acquisition{Nonce: "n", Token: 1}
	for _, err := range []error{
		func() error {
			_, err := s.AcquireSet(ctx, keys, lease.AcquireRequest{Owner: "o", Nonce: "n", TTL: time.Minute})
			return err
		}(),
		s.RenewSet(ctx, keys, set, time.Minute),
		s.ReleaseSet(ctx, keys, set),
	} {
		if !errors.Is(err, lease.ErrInvalidKey) || !strings.Contains(err.Error(), `keys "accounts/17" and "accounts/42" are in different hash slots`) ||
			!strings.Contains(err.Error(), `"{acct}/17" and "{acct}/42"`) {
			t.Errorf("a set across slots on a cluster: %v", err)
		}
	}
	if n := counted.n.Load(); n != 0 {
		t.Errorf("the refused sets sent %d requests", n)
	}
	if _, err := acquireSet(t, newStore(t, standalone(t)), keys, "o", time.Minute); err != nil {
		t.Errorf("the set on a standalone server: %v", err)
	}
}

// TestSetsRefuseBadArguments: empty, too large, unsorted or repeated
// sets fail before any I/O.
func TestSetsRefuseBadArguments(t *testing.T) {
	t.Parallel()
	counted := &countingClient{Client: standalone(t)}
	s := newStore(t, counted)
	many := make([]string, lease.MaxSetKeys+1)
	for i := range many {
		many[i] = "k" + strconv.Itoa(1000+i)
	}
	for _, keys := range [][]string{nil, many, {"b", "a"}, {"a", "a"}, {"a", ""}} {
		if _, err := acquireSet(t, s, keys, "o", time.Minute); err == nil {
			t.Errorf("AcquireSet(%.40q) succeeded", keys)
		}
	}
	if n := counted.n.Load(); n != 0 {
		t.Errorf("the refused sets sent %d requests", n)
	}
}

// TestOverlappingSets: acquisitions of overlapping sets racing on a
// cluster each take their whole set or nothing, never waiting on one
// another, and no key is ever held by two of them.
func TestOverlappingSets(t *testing.T) {
	t.Parallel()
	s := newStore(t, cluster(t))
	all := tagged("o", "a", "b", "c", "d")
	sets := [][]string{all[0:2], all[1:3], all[2:4], {all[0], all[3]}, all}
	var (
		mu   sync.Mutex
		held = map[string]string{}
		wg   sync.WaitGroup
		wins [5]int
	)
	for w, keys := range sets {
		wg.Go(func() {
			for range 20 {
				a, err := acquireSet(t, s, keys, "w"+strconv.Itoa(w), time.Minute)
				if errors.Is(err, lease.ErrNotAcquired) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, k := range keys {
					if other, ok := held[k]; ok {
						t.Errorf("%q granted to set %d while set %s holds it", k, w, other)
					}
					held[k] = strconv.Itoa(w)
				}
				wins[w]++
				mu.Unlock()
				mu.Lock()
				for _, k := range keys {
					delete(held, k)
				}
				mu.Unlock()
				if err := s.ReleaseSet(ctxT(t), keys, a); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for w, n := range wins {
		if n == 0 {
			t.Logf("set %d never won", w)
		}
	}
}

// TestSetReleaseWakesWatchers: ReleaseSet announces the release of each
// key on its release channel.
func TestSetReleaseWakesWatchers(t *testing.T) {
	t.Parallel()
	for _, topo := range topologies {
		t.Run(topo.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, topo.client(t))
			keys := tagged("w", "1", "2")
			set, err := acquireSet(t, s, keys, "o", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			var chans []<-chan struct{}
			for _, k := range keys {
				ch, stop, err := s.WatchReleases(ctxT(t), k)
				if err != nil {
					t.Fatal(err)
				}
				defer stop()
				drain(ch)
				chans = append(chans, ch)
			}
			if err := s.ReleaseSet(ctxT(t), keys, set); err != nil {
				t.Fatal(err)
			}
			for i, ch := range chans {
				select {
				case <-ch:
				case <-ctxT(t).Done():
					t.Fatalf("no release notification for %q", keys[i])
				}
			}
		})
	}
}

// TestGroupsKeepHistory: permits and sets keep the records' history as
// Acquire and Renew do: when a key was acquired and last renewed, and how
// often its holder changed.
func TestGroupsKeepHistory(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s := newStore(t, standalone(t))
	inspect := func(key string) lease.Record {
		t.Helper()
		r, err := s.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	p := mustPermit(t, s, "hist", "o", 2, time.Minute)
	first := inspect(p.a.Key)
	if first.Transitions != 0 || first.AcquiredAt.IsZero() || !first.RenewedAt.Equal(first.AcquiredAt) {
		t.Fatalf("a first permit's record = %+v, want acquired and renewed at its grant, no transition", first)
	}
	time.Sleep(2 * time.Millisecond)
	if _, _, err := s.AcquirePermit(ctx, lease.AcquireRequest{Key: "hist", Owner: "o", Nonce: p.a.Nonce, TTL: time.Minute}, 2); err != nil {
		t.Fatal(err)
	}
	if r := inspect(p.a.Key); !r.RenewedAt.After(first.AcquiredAt) || !r.AcquiredAt.Equal(first.AcquiredAt) || r.Transitions != 0 {
		t.Fatalf("after a retry the permit's record = %+v, want renewed later, acquired as before", r)
	}
	if err := s.Release(ctx, p.a); err != nil {
		t.Fatal(err)
	}
	if r := inspect(mustPermit(t, s, "hist", "o2", 2, time.Minute).a.Key); r.Transitions != 1 || !r.AcquiredAt.After(first.AcquiredAt) {
		t.Fatalf("a second permit in slot 0: %+v, want one transition", r)
	}

	keys := []string{"hist/a", "hist/b"}
	if err := s.Release(ctx, acquire(t, s, keys[0], "o", time.Minute)); err != nil {
		t.Fatal(err)
	}
	set, err := acquireSet(t, s, keys, "o", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	a, b := inspect(keys[0]), inspect(keys[1])
	if a.Transitions != 1 || b.Transitions != 0 || !a.AcquiredAt.Equal(b.AcquiredAt) || a.AcquiredAt.IsZero() {
		t.Fatalf("the set's records = %+v and %+v, want one grant time, 1 and 0 transitions", a, b)
	}
	time.Sleep(2 * time.Millisecond)
	if err := s.RenewSet(ctx, keys, set, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if r := inspect(k); !r.RenewedAt.After(a.AcquiredAt) || !r.AcquiredAt.Equal(a.AcquiredAt) {
			t.Fatalf("after RenewSet %q = %+v, want renewed later", k, r)
		}
	}
}
