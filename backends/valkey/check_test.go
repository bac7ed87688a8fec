package valkey_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	leasevalkey "github.com/golib/lease/backends/valkey"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/internal/testkit/valkeyacl"
	"github.com/golib/lease/lease"
)

// TestCheckEvictionPolicies sets each maxmemory-policy on a real server and
// checks that Diagnose calls it a problem exactly when it can evict held
// leases' records, which have no TTL.
func TestCheckEvictionPolicies(t *testing.T) {
	t.Parallel()
	// With the append-only file, so that the only advice is the policy's.
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{AppendOnly: true})
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

// TestCheckPersistence starts real servers with appendonly no and yes, and
// checks that Diagnose advises of the first (not as a problem, saying what
// a restart costs) and not of the second, also as a user with the
// documented ACL rule, which may not run CONFIG.
func TestCheckPersistence(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		opts   testserver.ValkeyOptions
		advice bool
	}{
		{"appendonly no", testserver.ValkeyOptions{ExtraArgs: []string{"--appendonly", "no"}}, true},
		{"appendonly yes", testserver.ValkeyOptions{AppendOnly: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := testserver.StartValkey(t, tc.opts)
			admin := newClient(t, srv.Addr())
			user := valkeyacl.Login(t, admin, srv.Addr(), "leases", aclRule)
			ctx := ctxT(t)
			if err := user.Do(ctx, user.B().ConfigGet().Parameter("appendonly").Build()).Error(); !valkeyacl.Refused(err) {
				t.Fatalf("CONFIG GET as the documented user = %v, want it refused (the test shows Diagnose does without it)", err)
			}
			for name, c := range map[string]valkey.Client{"admin": admin, "documented user": user} {
				s, err := leasevalkey.New(c, leasevalkey.Options{}) // the prefix of the documented rule
				if err != nil {
					t.Fatal(err)
				}
				r := s.Diagnose(ctx)
				if r.Err() != nil {
					t.Fatalf("%s: Diagnose problems = %v, want none (persistence is advice)", name, r.Err())
				}
				advice := strings.Join(r.Advice, "\n")
				got := strings.Contains(advice, "appendonly is no")
				if got != tc.advice {
					t.Fatalf("%s: Diagnose advice = %q, want advice on appendonly: %v", name, r.Advice, tc.advice)
				}
				if !tc.advice {
					continue
				}
				for _, want := range []string{srv.Addr(), "a restart frees every lease at once", "Tokens still never go back", "fenced writes stay safe", "two processes may both believe they hold a lease", "appendonly yes", "docs/valkey-quickstart.md"} {
					if !strings.Contains(advice, want) {
						t.Errorf("%s: Diagnose advice %q lacks %q", name, advice, want)
					}
				}
			}
		})
	}
}

// withoutPersistence returns advice without the advice on appendonly,
// which every test server without the append-only file gets.
func withoutPersistence(advice []string) []string {
	return slices.DeleteFunc(slices.Clone(advice), func(a string) bool { return strings.Contains(a, "appendonly is no") })
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
