package leasetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/golib/lease/lease"
)

// adminCases check the optional operator capabilities, lease.Lister and
// lease.ForceReleaser; a backend without one skips its cases.
func adminCases() []testCase {
	return []testCase{
		{"Lister/PagesCoverEveryKey", func(e *env) {
			l := e.lister()
			prefix := e.key("")
			held := map[string]lease.Acquisition{}
			for _, s := range []string{"a", "b", "c", "d", "e"} {
				held[prefix+s] = e.acquire(prefix+s, "owner-"+s)
			}
			freed := e.acquire(prefix+"freed", "gone")
			if err := e.b.Release(e.ctx(), freed); err != nil {
				e.t.Fatal(err)
			}
			outside := e.acquire(strings.TrimSuffix(prefix, "/")+"-outside", "other")
			got := e.listAll(l, prefix, 2)
			if _, ok := got[outside.Key]; ok {
				e.t.Fatalf("List(%q) returned %q, which does not start with the prefix", prefix, outside.Key)
			}
			if len(got) != len(held)+1 {
				e.t.Fatalf("List(%q) returned %d keys %v, want %d", prefix, len(got), keys(got), len(held)+1)
			}
			for k, a := range held {
				r, ok := got[k]
				if !ok || !r.Held || r.Owner != a.Owner || r.Token != a.Token || r.Remaining <= 0 || r.Remaining > longTTL {
					e.t.Fatalf("List record of %q = %+v (found %v), want held by %q with token %d", k, r, ok, a.Owner, a.Token)
				}
			}
			if r := got[freed.Key]; r.Held || r.Token != freed.Token {
				e.t.Fatalf("List record of released %q = %+v, want free with token %d", freed.Key, r, freed.Token)
			}
		}},
		{"Lister/LimitBoundsThePage", func(e *env) {
			l := e.lister()
			prefix := e.key("")
			const n = 7
			for i := range n {
				e.acquire(fmt.Sprintf("%s%d", prefix, i), "owner")
			}
			for _, limit := range []int{1, 2, 5} {
				seen := map[string]bool{}
				cursor := ""
				for pages := 0; ; pages++ {
					if pages > 10000 {
						e.t.Fatalf("List(%q, limit %d) did not end after %d pages", prefix, limit, pages)
					}
					recs, next, err := l.List(e.ctx(), prefix, cursor, limit)
					if err != nil {
						e.t.Fatalf("List(%q, cursor %q, limit %d): %v", prefix, cursor, limit, err)
					}
					if len(recs) > limit {
						e.t.Fatalf("List(%q, cursor %q, limit %d) returned a page of %d records; limit bounds the page", prefix, cursor, limit, len(recs))
					}
					for _, r := range recs {
						seen[r.Key] = true
					}
					if next == "" {
						break
					}
					cursor = next
				}
				if len(seen) != n {
					e.t.Fatalf("List(%q) in pages of at most %d returned %d distinct keys, want %d", prefix, limit, len(seen), n)
				}
			}
		}},
		{"Lister/PrefixIsLiteral", func(e *env) {
			l := e.lister()
			base := e.key("")
			// Characters that are special to glob patterns, SQL LIKE and
			// the Valkey key encoding must match only themselves.
			in := []string{base + "x*{%}[?]_\\/1", base + "x*{%}[?]_\\/2"}
			out := []string{base + "xa{%}[?]_\\/1", base + "x*{%25}[?]_\\/1", base + "x*{%}[a]_\\/1", base + "x*{%}[?]a\\/1"}
			for _, k := range append(append([]string{}, in...), out...) {
				e.acquire(k, "owner")
			}
			got := e.listAll(l, base+"x*{%}[?]_\\/", 10)
			if len(got) != len(in) {
				e.t.Fatalf("List returned %v, want exactly %q", keys(got), in)
			}
			for _, k := range in {
				if _, ok := got[k]; !ok {
					e.t.Fatalf("List returned %v, want %q among them", keys(got), k)
				}
			}
		}},
		{"Lister/NoMatch", func(e *env) {
			got := e.listAll(e.lister(), e.key("nothing-here/"), 10)
			if len(got) != 0 {
				e.t.Fatalf("List of an unused prefix returned %v", keys(got))
			}
		}},
		{"ForceReleaser/FreesKeepsTokenAndEndsHolder", func(e *env) {
			f := e.forceReleaser()
			key := e.key("k")
			a := e.acquire(key, "stuck")
			prev, err := f.ForceRelease(e.ctx(), key, 0)
			if err != nil {
				e.t.Fatalf("ForceRelease: %v", err)
			}
			if !prev.Held || prev.Owner != a.Owner || prev.Token != a.Token || prev.Key != key {
				e.t.Fatalf("ForceRelease returned %+v, want the holder %q with token %d", prev, a.Owner, a.Token)
			}
			r := e.inspect(key)
			if r.Held || r.Token != a.Token {
				e.t.Fatalf("after ForceRelease, Inspect = %+v; want free with token %d kept", r, a.Token)
			}
			e.mustLose("the old holder's Renew", e.b.Renew(e.ctx(), a, longTTL), lease.ForceReleased)
			e.mustLose("the old holder's Release", e.b.Release(e.ctx(), a), lease.ForceReleased)
			b := e.acquire(key, "next")
			if b.Token <= a.Token {
				e.t.Fatalf("token after ForceRelease %d, want above %d", b.Token, a.Token)
			}
			e.mustLose("the old holder's Renew after takeover", e.b.Renew(e.ctx(), a, longTTL), lease.Superseded)
			e.mustHold(b)
		}},
		{"ForceReleaser/ByToken", func(e *env) {
			f := e.forceReleaser()
			key := e.key("k")
			a := e.acquire(key, "first")
			if err := e.b.Release(e.ctx(), a); err != nil {
				e.t.Fatal(err)
			}
			b := e.acquire(key, "second")
			prev, err := f.ForceRelease(e.ctx(), key, a.Token)
			e.mustLose("ForceRelease of an older token", err, lease.Superseded)
			if !prev.Held || prev.Token != b.Token {
				e.t.Fatalf("refused ForceRelease returned %+v, want the current holder with token %d", prev, b.Token)
			}
			e.mustHold(b)
			if prev, err = f.ForceRelease(e.ctx(), key, b.Token); err != nil || !prev.Held || prev.Token != b.Token {
				e.t.Fatalf("ForceRelease of the holder's token = %+v, %v; want the holder, nil", prev, err)
			}
			e.mustBeFree(key)
			_, err = f.ForceRelease(e.ctx(), key, b.Token)
			e.mustLose("ForceRelease of a force-released acquisition", err, lease.ForceReleased)
			c := e.acquire(key, "third")
			if err := e.b.Release(e.ctx(), c); err != nil {
				e.t.Fatal(err)
			}
			_, err = f.ForceRelease(e.ctx(), key, c.Token)
			e.mustLose("ForceRelease of a released acquisition", err, lease.Expired)
			_, err = f.ForceRelease(e.ctx(), e.key("never"), c.Token)
			e.mustLose("ForceRelease by token of a key never acquired", err, lease.RecordLost)
		}},
		{"ForceReleaser/FreeKey", func(e *env) {
			f := e.forceReleaser()
			key := e.key("k")
			prev, err := f.ForceRelease(e.ctx(), key, 0)
			if err != nil || prev.Held || prev.Token != 0 {
				e.t.Fatalf("ForceRelease of a key never acquired = %+v, %v; want free, token 0, nil", prev, err)
			}
			if r := e.inspect(key); r.Held || r.Token != 0 {
				e.t.Fatalf("after ForceRelease of a key never acquired, Inspect = %+v", r)
			}
			a := e.acquire(key, "owner")
			if err := e.b.Release(e.ctx(), a); err != nil {
				e.t.Fatal(err)
			}
			prev, err = f.ForceRelease(e.ctx(), key, 0)
			if err != nil || prev.Held || prev.Token != a.Token {
				e.t.Fatalf("ForceRelease of a released key = %+v, %v; want free with token %d, nil", prev, err, a.Token)
			}
			if b := e.acquire(key, "next"); b.Token <= a.Token {
				e.t.Fatalf("token %d after ForceRelease of a free key, want above %d", b.Token, a.Token)
			}
		}},
		{"ForceReleaser/WaiterGetsKey", func(e *env) {
			f := e.forceReleaser()
			key := e.key("k")
			e.acquire(key, "stuck")
			got := make(chan error, 1)
			go func() {
				p := e.policyWith(lease.PolicyOptions{Wait: 20 * time.Second, Retry: time.Second})
				h, err := e.client("waiter").Acquire(e.ctx(), key, p)
				if err == nil {
					err = h.Release(context.Background())
				}
				got <- err
			}()
			// Let the waiter make its first attempt and start waiting.
			e.wait(100 * time.Millisecond)
			if _, err := f.ForceRelease(e.ctx(), key, 0); err != nil {
				e.t.Fatalf("ForceRelease: %v", err)
			}
			if e.s.Clock != nil {
				// The waiter may be asleep on the fake clock, not watching.
				e.s.Clock.Advance(time.Second)
			}
			select {
			case err := <-got:
				if err != nil {
					e.t.Fatalf("waiter's Acquire after ForceRelease: %v", err)
				}
			case <-time.After(15 * time.Second):
				e.t.Fatal("the waiter did not get the key after ForceRelease")
			}
		}},
		{"ForceReleaser/HolderLearnsReason", func(e *env) {
			// The client's handle, and so a managed renewer, reports the
			// forced release as such.
			f := e.forceReleaser()
			key := e.key("k")
			h, err := e.client("stuck").TryAcquire(e.ctx(), key, e.policy())
			if err != nil {
				e.t.Fatal(err)
			}
			if _, err := f.ForceRelease(e.ctx(), key, 0); err != nil {
				e.t.Fatalf("ForceRelease: %v", err)
			}
			e.mustLose("Renew after ForceRelease", h.Renew(e.ctx()), lease.ForceReleased)
			if err := h.Release(e.ctx()); err == nil || !strings.Contains(err.Error(), "force-released") {
				e.t.Fatalf("Release after ForceRelease = %v, want an error that says force-released", err)
			}
		}},
		{"ForceReleaser/RacingAcquisitions", func(e *env) {
			// ForceRelease, with and without a token, races a holder that
			// acquires, renews and releases the key in a loop. What it
			// reports must be what happened: a holder it reports ended
			// must find its own Release refused as force-released, and a
			// holder refused as force-released must have been reported
			// ended by exactly one ForceRelease.
			f := e.forceReleaser()
			key := e.key("k")
			var (
				mu     sync.Mutex
				ended  = map[lease.Token]int{} // reported ended, how often
				holder = map[lease.Token]error{}
				fatal  error
			)
			endedCount := func() int {
				mu.Lock()
				defer mu.Unlock()
				return len(ended)
			}
			stop := make(chan struct{})
			forcer := make(chan error, 1)
			go func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						forcer <- nil
						return
					default:
					}
					var tok lease.Token
					if i%2 == 1 {
						r, err := e.b.Inspect(e.ctx(), key)
						if err != nil {
							forcer <- fmt.Errorf("Inspect: %w", err)
							return
						}
						if !r.Held {
							continue
						}
						tok = r.Token
					}
					prev, err := f.ForceRelease(e.ctx(), key, tok)
					var le *lease.LostError
					switch {
					case err == nil && prev.Held:
						if tok != 0 && prev.Token != tok {
							forcer <- fmt.Errorf("ForceRelease(%d) reported ending token %d", tok, prev.Token)
							return
						}
						mu.Lock()
						ended[prev.Token]++
						mu.Unlock()
					case err == nil:
					case tok != 0 && errors.As(err, &le) && (le.Reason == lease.Expired || le.Reason == lease.Superseded):
					default:
						forcer <- fmt.Errorf("ForceRelease(%d): %w", tok, err)
						return
					}
				}
			}()
			cycles := 0
			for ; cycles < 5000 && (cycles < 200 || endedCount() < 3); cycles++ {
				a := e.acquire(key, fmt.Sprintf("holder-%d", cycles))
				err := e.b.Renew(e.ctx(), a, longTTL)
				if err == nil {
					err = e.b.Release(e.ctx(), a)
				}
				var le *lease.LostError
				if err != nil && (!errors.As(err, &le) || le.Reason != lease.ForceReleased) {
					fatal = fmt.Errorf("holder of token %d: %w", a.Token, err)
					break
				}
				mu.Lock()
				holder[a.Token] = err
				mu.Unlock()
			}
			close(stop)
			if err := <-forcer; err != nil {
				e.t.Fatal(err)
			}
			if fatal != nil {
				e.t.Fatal(fatal)
			}
			forced := 0
			for tok, err := range holder {
				n := ended[tok]
				switch {
				case err == nil && n > 0:
					e.t.Errorf("ForceRelease reported ending token %d, but its holder renewed or released it afterwards", tok)
				case err != nil && n != 1:
					e.t.Errorf("the holder of token %d was refused as force-released (%v), but %d ForceRelease calls reported ending it, want 1", tok, err, n)
				case err != nil:
					forced++
				}
			}
			for tok := range ended {
				if _, ok := holder[tok]; !ok {
					e.t.Errorf("ForceRelease reported ending token %d, which no holder was granted", tok)
				}
			}
			if forced == 0 {
				e.t.Errorf("in %d cycles no ForceRelease ended a holder: the race was not exercised", cycles)
			}
			e.t.Logf("%d acquisitions, %d ended by ForceRelease", cycles, forced)
		}},
		{"ForceReleaser/InvalidKey", func(e *env) {
			f := e.forceReleaser()
			if _, err := f.ForceRelease(e.ctx(), "", 0); err == nil || !errors.Is(err, lease.ErrInvalidKey) {
				e.t.Fatalf("ForceRelease of an empty key = %v, want ErrInvalidKey", err)
			}
		}},
	}
}

func (e *env) lister() lease.Lister {
	e.t.Helper()
	l, ok := e.b.(lease.Lister)
	if !ok {
		e.t.Skip("the backend does not implement lease.Lister")
	}
	return l
}

func (e *env) forceReleaser() lease.ForceReleaser {
	e.t.Helper()
	f, ok := e.b.(lease.ForceReleaser)
	if !ok {
		e.t.Skip("the backend does not implement lease.ForceReleaser")
	}
	return f
}

// listAll follows List's cursor to the end and returns the records by
// key, failing on a record outside prefix or an endless listing.
func (e *env) listAll(l lease.Lister, prefix string, limit int) map[string]lease.Record {
	e.t.Helper()
	got := map[string]lease.Record{}
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 100000 {
			e.t.Fatalf("List(%q) did not end after %d pages", prefix, pages)
		}
		recs, next, err := l.List(e.ctx(), prefix, cursor, limit)
		if err != nil {
			e.t.Fatalf("List(%q, cursor %q): %v", prefix, cursor, err)
		}
		for _, r := range recs {
			if !strings.HasPrefix(r.Key, prefix) {
				e.t.Fatalf("List(%q) returned key %q", prefix, r.Key)
			}
			got[r.Key] = r
		}
		if next == "" {
			return got
		}
		cursor = next
	}
}

func keys(m map[string]lease.Record) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
