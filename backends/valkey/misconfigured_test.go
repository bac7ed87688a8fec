package valkey_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golib/lease/lease"
)

// TestMisconfiguredEndsAcquireWait: a refusal that no retry cures (an ACL
// rule without a command the scripts run, a password changed since the
// client connected) matches lease.ErrMisconfigured, and Client.Acquire,
// however long its Wait, gives up at its first attempt with TryAcquire's
// error.
func TestMisconfiguredEndsAcquireWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, rule, hint string
		after            func(t *testing.T, s lease.Backend)
	}{
		{name: "ACL NOPERM", rule: strings.Replace(aclRule, " +persist ", " ", 1), hint: "lacks a permission"},
		{name: "wrong password", rule: aclRule, hint: "refused the client's login"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _, admin := aclStore(t, "leases", tc.rule)
			ctx := ctxT(t)
			if tc.name == "wrong password" {
				// The password changes and the user's connections end: the
				// client logs in again with the old one.
				if err := admin.Do(ctx, admin.B().AclSetuser().Username("leases").Rule("resetpass", ">changed").Build()).Error(); err != nil {
					t.Fatal(err)
				}
				if err := admin.Do(ctx, admin.B().ClientKill().User("leases").Build()).Error(); err != nil {
					t.Fatal(err)
				}
			}
			c, err := lease.NewClient(s, lease.ClientOptions{Owner: "waiter"})
			if err != nil {
				t.Fatal(err)
			}
			p, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Minute, Wait: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			// The first command after the kill may find the old connection
			// closed (an unknown outcome); the next ones log in again.
			var tryErr error
			for range 3 {
				if _, tryErr = c.TryAcquire(ctx, "k", p); !errors.Is(tryErr, lease.ErrIndeterminate) {
					break
				}
			}
			// Acquire too may meet another pooled connection the kill
			// closed, and then rightly says the outcome is unknown; only
			// an Acquire whose attempts were all answered is judged.
			var took time.Duration
			for range 3 {
				start := time.Now()
				_, err = c.Acquire(ctx, "k", p)
				took = time.Since(start)
				if !errors.Is(err, lease.ErrIndeterminate) {
					break
				}
			}
			t.Logf("Acquire after %v: %v", took, err)
			switch {
			case !errors.Is(err, lease.ErrMisconfigured) || errors.Is(err, lease.ErrIndeterminate):
				t.Fatalf("Acquire = %v, want lease.ErrMisconfigured", err)
			case tryErr == nil || err.Error() != tryErr.Error():
				t.Fatalf("Acquire = %v, want TryAcquire's error %v", err, tryErr)
			case !strings.Contains(err.Error(), tc.hint) || !strings.Contains(err.Error(), "configuration"):
				t.Fatalf("Acquire = %v, want it to say %q", err, tc.hint)
			case took > 2*time.Second:
				t.Fatalf("Acquire took %v, want it to give up at once", took)
			}
		})
	}
}
