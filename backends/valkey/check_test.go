package valkey_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// TestCheckEvictionPolicies sets each maxmemory-policy on a real server and
// checks that Diagnose calls it a problem exactly when it can evict held
// leases' records, which have no TTL.
func TestCheckEvictionPolicies(t *testing.T) {
	t.Parallel()
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	c := newClient(t, srv.Addr())
	s := newStore(t, c)
	ctx := ctxT(t)
	for _, tc := range []struct {
		policy  string
		problem bool
	}{
		{"noeviction", false},
		{"volatile-lru", false},
		{"volatile-lfu", false},
		{"volatile-random", false},
		{"volatile-ttl", false},
		{"allkeys-lru", true},
		{"allkeys-lfu", true},
		{"allkeys-random", true},
	} {
		if err := c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue("maxmemory-policy", tc.policy).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		r := s.Diagnose(ctx)
		err := r.Err()
		if tc.problem {
			if err == nil || !strings.Contains(err.Error(), tc.policy) || s.Check(ctx) == nil {
				t.Errorf("%s: Diagnose = %+v, want the policy reported as a problem", tc.policy, r)
			}
			continue
		}
		if err != nil || s.Check(ctx) != nil {
			t.Errorf("%s: Diagnose problems = %v, want none", tc.policy, err)
		}
		advised := len(r.Advice) == 1 && strings.Contains(r.Advice[0], tc.policy)
		if strings.HasPrefix(tc.policy, "volatile-") != advised {
			t.Errorf("%s: Diagnose advice = %q", tc.policy, r.Advice)
		}
	}
}

// TestEvictionKeepsLeasesUnderVolatilePolicy fills a real server's memory
// and checks the claim Diagnose rests on: volatile-lru evicts keys with a
// TTL, which may be released records within their retention, and never a
// held lease's record, even one that carried a TTL before it was acquired
// again, while allkeys-lru evicts held leases' records too.
func TestEvictionKeepsLeasesUnderVolatilePolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy   string
		withTTL  bool // whether the filler keys carry a TTL
		mayEvict bool
	}{
		{"volatile-lru", true, false},
		{"allkeys-lru", false, true},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			t.Parallel()
			srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
			c := newClient(t, srv.Addr())
			s := newStore(t, c)
			ctx := ctxT(t)
			const leases = 200
			tokens := make([]lease.Token, leases)
			for i := range leases {
				// Each held lease was released once, so its record carried
				// the retention as a TTL before it was acquired again; and
				// as many released records stay within their retention.
				for _, k := range []string{fmt.Sprintf("job/%d", i), fmt.Sprintf("done/%d", i)} {
					a := acquire(t, s, k, "o", time.Hour)
					if err := s.Release(ctx, a); err != nil {
						t.Fatal(err)
					}
				}
				tok, err := s.Acquire(ctx, lease.AcquireRequest{Key: fmt.Sprintf("job/%d", i), Owner: "o", Nonce: "n" + strconv.Itoa(i), TTL: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				tokens[i] = tok
			}
			info, err := c.Do(ctx, c.B().Info().Section("memory").Build()).ToString()
			if err != nil {
				t.Fatal(err)
			}
			used, _ := strconv.Atoi(field(info, "used_memory"))
			limit := strconv.Itoa(used + 2<<20)
			for _, kv := range [][2]string{{"maxmemory-policy", tc.policy}, {"maxmemory", limit}} {
				if err := c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue(kv[0], kv[1]).Build()).Error(); err != nil {
					t.Fatal(err)
				}
			}
			value := strings.Repeat("x", 16<<10)
			refused := 0
			for i := range 1000 { // 16 MB: far more than the 2 MB of room
				b := c.B().Set().Key("filler:" + strconv.Itoa(i)).Value(value)
				var err error
				if tc.withTTL {
					err = c.Do(ctx, b.Ex(time.Hour).Build()).Error()
				} else {
					err = c.Do(ctx, b.Build()).Error()
				}
				if err != nil {
					refused++
				}
			}
			evicted, ended := 0, 0
			for i := range leases {
				r, err := s.Inspect(ctx, fmt.Sprintf("job/%d", i))
				if err != nil {
					t.Fatal(err)
				}
				if !r.Held || r.Token != tokens[i] {
					evicted++
				}
				if r, err := s.Inspect(ctx, fmt.Sprintf("done/%d", i)); err != nil {
					t.Fatal(err)
				} else if r.Token == 0 {
					ended++
				}
			}
			stats, _ := c.Do(ctx, c.B().Info().Section("stats").Build()).ToString()
			t.Logf("%s: %d of %d held leases' records gone, %d of %d released records gone, %s evicted keys, %d filler writes refused",
				tc.policy, evicted, leases, ended, leases, field(stats, "evicted_keys"), refused)
			if field(stats, "evicted_keys") == "0" {
				t.Fatalf("%s: the server evicted nothing; the test did not fill its memory", tc.policy)
			}
			if !tc.mayEvict && evicted != 0 {
				t.Fatalf("%s evicted %d held leases' records; Diagnose calls it safe", tc.policy, evicted)
			}
			if tc.mayEvict && evicted == 0 {
				t.Fatalf("%s evicted no held lease's record under memory pressure; the test cannot tell the policies apart", tc.policy)
			}
		})
	}
}

func field(info, name string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}
