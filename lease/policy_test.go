package lease_test

import (
	"errors"
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
		{30 * time.Second, lease.PolicyOptions{TTL: 30 * time.Second, RenewEvery: 10 * time.Second, SafetyMargin: 5 * time.Second, OperationTimeout: 3 * time.Second, Retry: 100 * time.Millisecond}},
		{time.Minute * 10, lease.PolicyOptions{TTL: 10 * time.Minute, RenewEvery: 200 * time.Second, SafetyMargin: 100 * time.Second, OperationTimeout: 5 * time.Second, Retry: 100 * time.Millisecond}},
		{time.Second, lease.PolicyOptions{TTL: time.Second, RenewEvery: time.Second / 3, SafetyMargin: time.Second / 6, OperationTimeout: 100 * time.Millisecond, Retry: 50 * time.Millisecond}},
		{lease.MinTTL, lease.PolicyOptions{TTL: lease.MinTTL, RenewEvery: lease.MinTTL / 3, SafetyMargin: lease.MinTTL / 6, OperationTimeout: lease.MinTTL / 10, Retry: lease.MinTTL / 20}},
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
		{"negative Wait", lease.PolicyOptions{TTL: 30 * s, Wait: -s}, "Wait (-1s) must not be negative"},
		{"negative MaxAttempts", lease.PolicyOptions{TTL: 30 * s, MaxAttempts: -1}, "MaxAttempts (-1) must not be negative"},
		{"margin equals TTL", lease.PolicyOptions{TTL: 30 * s, SafetyMargin: 30 * s}, "SafetyMargin (30s) must be less than TTL (30s)"},
		{"renewal cannot be retried", lease.PolicyOptions{TTL: 30 * s, RenewEvery: 21 * s, OperationTimeout: 2 * s}, "must not exceed TTL−SafetyMargin (25s)"},
		{"renewal too late", lease.PolicyOptions{TTL: 30 * s, RenewEvery: 26 * s}, "RenewEvery (26s)"},
		{"attempts without wait", lease.PolicyOptions{TTL: 30 * s, MaxAttempts: 3}, "MaxAttempts (3) above 1 requires Wait > 0"},
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
