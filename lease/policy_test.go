package lease_test

import (
	"errors"
	"math"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/golib/lease/lease"
)

func TestNewPolicySeedExample(t *testing.T) {
	p, err := lease.NewPolicy(lease.PolicyOptions{
		TTL: 30 * time.Second, RenewEvery: 10 * time.Second, SafetyMargin: 5 * time.Second,
		Retry: 100 * time.Millisecond, Wait: 2 * time.Second, MaxAttempts: 20, OperationTimeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatalf("seed example rejected: %v", err)
	}
	if got := p.LocalLifetime(); got != 25*time.Second {
		t.Fatalf("LocalLifetime = %v, want 25s", got)
	}
}

func TestNewPolicyDefaults(t *testing.T) {
	for _, tc := range []struct {
		ttl  time.Duration
		want lease.PolicyOptions
	}{
		{30 * time.Second, lease.PolicyOptions{TTL: 30 * time.Second, RenewEvery: 10 * time.Second, SafetyMargin: 5 * time.Second, OperationTimeout: 3 * time.Second, Retry: 100 * time.Millisecond, Poll: 30 * time.Second}},
		{time.Minute * 10, lease.PolicyOptions{TTL: 10 * time.Minute, RenewEvery: 200 * time.Second, SafetyMargin: 100 * time.Second, OperationTimeout: 5 * time.Second, Retry: 100 * time.Millisecond, Poll: 10 * time.Minute}},
		{time.Second, lease.PolicyOptions{TTL: time.Second, RenewEvery: time.Second / 3, SafetyMargin: time.Second / 6, OperationTimeout: 100 * time.Millisecond, Retry: 50 * time.Millisecond, Poll: time.Second}},
		{lease.MinTTL, lease.PolicyOptions{TTL: lease.MinTTL, RenewEvery: lease.MinTTL / 3, SafetyMargin: lease.MinTTL / 6, OperationTimeout: lease.MinTTL / 10, Retry: lease.MinTTL / 20, Poll: lease.MinTTL}},
	} {
		p, err := lease.NewPolicy(lease.PolicyOptions{TTL: tc.ttl})
		if err != nil {
			t.Errorf("NewPolicy(TTL %v): %v; the defaults must always be valid", tc.ttl, err)
			continue
		}
		if got := p.Options(); got != tc.want {
			t.Errorf("NewPolicy(TTL %v).Options() = %+v, want %+v", tc.ttl, got, tc.want)
		}
	}
}

func TestNewPolicyRules(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name string
		o    lease.PolicyOptions
		want string // a fragment of the error naming field and rule
	}{
		{"TTL zero", lease.PolicyOptions{}, "TTL (0s) must be between"},
		{"TTL too short", lease.PolicyOptions{TTL: time.Millisecond}, "TTL (1ms) must be between"},
		{"TTL too long", lease.PolicyOptions{TTL: 25 * time.Hour}, "TTL (25h0m0s) must be between"},
		{"negative RenewEvery", lease.PolicyOptions{TTL: 30 * s, RenewEvery: -s}, "RenewEvery (-1s) must not be negative"},
		{"negative SafetyMargin", lease.PolicyOptions{TTL: 30 * s, SafetyMargin: -s}, "SafetyMargin (-1s) must not be negative"},
		{"negative OperationTimeout", lease.PolicyOptions{TTL: 30 * s, OperationTimeout: -s}, "OperationTimeout (-1s) must not be negative"},
		{"negative Retry", lease.PolicyOptions{TTL: 30 * s, Retry: -s}, "Retry (-1s) must not be negative"},
		{"negative Poll", lease.PolicyOptions{TTL: 30 * s, Poll: -s}, "Poll (-1s) must not be negative"},
		{"negative Wait", lease.PolicyOptions{TTL: 30 * s, Wait: -s}, "Wait (-1s) must not be negative"},
		{"negative MaxAttempts", lease.PolicyOptions{TTL: 30 * s, MaxAttempts: -1}, "MaxAttempts (-1) must not be negative"},
		{"margin equals TTL", lease.PolicyOptions{TTL: 30 * s, SafetyMargin: 30 * s}, "SafetyMargin (30s) must be less than TTL (30s)"},
		{"renewal cannot be retried", lease.PolicyOptions{TTL: 30 * s, RenewEvery: 21 * s, OperationTimeout: 2 * s}, "must not exceed TTL−SafetyMargin (25s)"},
		{"renewal too late", lease.PolicyOptions{TTL: 30 * s, RenewEvery: 26 * s}, "RenewEvery (26s)"},
		{"huge RenewEvery", lease.PolicyOptions{TTL: 30 * s, RenewEvery: math.MaxInt64}, "RenewEvery (2562047h47m16.854775807s) must not exceed TTL (30s)"},
		{"huge Retry", lease.PolicyOptions{TTL: 30 * s, Retry: math.MaxInt64 - s}, "Retry (2562047h47m15.854775807s) must not exceed TTL (30s)"},
		{"huge OperationTimeout", lease.PolicyOptions{TTL: 30 * s, OperationTimeout: math.MaxInt64/2 + 1}, "OperationTimeout (1281023h53m38.427387904s) must not exceed TTL (30s)"},
		{"Poll over TTL", lease.PolicyOptions{TTL: 30 * s, Poll: 30*s + 1}, "Poll (30.000000001s) must not exceed TTL (30s)"},
		{"huge Poll", lease.PolicyOptions{TTL: 30 * s, Poll: math.MaxInt64}, "Poll (2562047h47m16.854775807s) must not exceed TTL (30s)"},
		{"sum that overflows", lease.PolicyOptions{TTL: 30 * s, RenewEvery: math.MaxInt64, OperationTimeout: math.MaxInt64/2 + 1, Retry: math.MaxInt64 - s}, "must not exceed TTL (30s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := lease.NewPolicy(tc.o)
			if !errors.Is(err, lease.ErrInvalidPolicy) {
				t.Fatalf("NewPolicy(%+v) = %v, want ErrInvalidPolicy", tc.o, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func TestNewPolicyBoundary(t *testing.T) {
	// Exactly at the limit of the renewal rule is allowed; one nanosecond
	// over is not.
	o := lease.PolicyOptions{TTL: 30 * time.Second, SafetyMargin: 5 * time.Second, Retry: time.Second, OperationTimeout: 2 * time.Second, RenewEvery: 20 * time.Second}
	if _, err := lease.NewPolicy(o); err != nil {
		t.Fatalf("policy at the limit rejected: %v", err)
	}
	o.RenewEvery++
	if _, err := lease.NewPolicy(o); !errors.Is(err, lease.ErrInvalidPolicy) {
		t.Fatalf("policy 1ns over the limit = %v, want ErrInvalidPolicy", err)
	}
}

// FuzzNewPolicy checks that NewPolicy never panics, that every error wraps
// ErrInvalidPolicy, and that every policy it accepts keeps the documented
// rules, computed without overflow.
func FuzzNewPolicy(f *testing.F) {
	s := int64(time.Second)
	f.Add(30*s, 10*s, 5*s, 2*s, s/10, 2*s, 20)
	f.Add(int64(lease.MinTTL), int64(0), int64(0), int64(0), int64(0), int64(0), 0)
	f.Add(30*s, int64(math.MaxInt64), int64(0), int64(math.MaxInt64/2+1), int64(math.MaxInt64)-s, int64(0), 0)
	f.Fuzz(func(t *testing.T, ttl, renew, margin, timeout, retry, wait int64, attempts int) {
		o := lease.PolicyOptions{TTL: time.Duration(ttl), RenewEvery: time.Duration(renew), SafetyMargin: time.Duration(margin),
			OperationTimeout: time.Duration(timeout), Retry: time.Duration(retry), Wait: time.Duration(wait), MaxAttempts: attempts}
		p, err := lease.NewPolicy(o)
		if err != nil {
			if !errors.Is(err, lease.ErrInvalidPolicy) {
				t.Fatalf("NewPolicy(%+v) = %v, which does not wrap ErrInvalidPolicy", o, err)
			}
			return
		}
		g := p.Options()
		n := func(d time.Duration) *big.Int { return big.NewInt(int64(d)) }
		need := new(big.Int).Add(n(g.RenewEvery), n(g.Retry))
		need.Add(need, new(big.Int).Mul(big.NewInt(2), n(g.OperationTimeout)))
		switch {
		case g.TTL < lease.MinTTL || g.TTL > lease.MaxTTL:
			t.Fatalf("accepted TTL %v", g.TTL)
		case g.RenewEvery <= 0 || g.SafetyMargin <= 0 || g.OperationTimeout <= 0 || g.Retry <= 0 || g.Wait < 0 || g.MaxAttempts < 0:
			t.Fatalf("accepted %+v: a duration is not positive after defaults", g)
		case g.Poll <= 0 || g.Poll > g.TTL:
			t.Fatalf("accepted Poll %v with TTL %v; want 0 < Poll ≤ TTL after defaults", g.Poll, g.TTL)
		case g.SafetyMargin >= g.TTL:
			t.Fatalf("accepted SafetyMargin %v ≥ TTL %v", g.SafetyMargin, g.TTL)
		case need.Cmp(n(g.TTL-g.SafetyMargin)) > 0:
			t.Fatalf("accepted %+v: RenewEvery + Retry + 2×OperationTimeout = %v exceeds TTL−SafetyMargin", g, need)
		case g.Wait != o.Wait || g.MaxAttempts != o.MaxAttempts:
			t.Fatalf("NewPolicy(%+v) changed Wait or MaxAttempts to %v, %d; zero means unbounded and stays zero", o, g.Wait, g.MaxAttempts)
		}
	})
}

func TestNewPolicyPoll(t *testing.T) {
	// Poll is kept as given, from tiny to TTL itself.
	for _, poll := range []time.Duration{1, time.Second, 30 * time.Second} {
		p, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second, Poll: poll})
		if err != nil {
			t.Fatalf("Poll %v rejected: %v", poll, err)
		}
		if got := p.Options().Poll; got != poll {
			t.Fatalf("Poll %v became %v", poll, got)
		}
	}
}
