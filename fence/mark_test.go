package fence_test

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
)

func TestMarkAdmit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		mark fence.Mark
		snap lease.Snapshot
		want fence.Mark
		err  error
	}{
		{"fresh fence", fence.Mark{}, snap("k", 5), fence.Mark{Key: "k", Token: 5}, nil},
		{"higher token", fence.Mark{Key: "k", Token: 5}, snap("k", 6), fence.Mark{Key: "k", Token: 6}, nil},
		{"same token", fence.Mark{Key: "k", Token: 5}, snap("k", 5), fence.Mark{Key: "k", Token: 5}, nil},
		{"lower token", fence.Mark{Key: "k", Token: 5}, snap("k", 4), fence.Mark{Key: "k", Token: 5}, fence.ErrStale},
		{"other lease, higher", fence.Mark{Key: "k", Token: 5}, snap("j", 500), fence.Mark{Key: "k", Token: 5}, fence.ErrForeignLease},
		{"other lease, lower", fence.Mark{Key: "k", Token: 5}, snap("j", 1), fence.Mark{Key: "k", Token: 5}, fence.ErrForeignLease},
		{"top", fence.Mark{Key: "k", Token: math.MaxUint64 - 1}, snap("k", math.MaxUint64), fence.Mark{Key: "k", Token: math.MaxUint64}, nil},
	} {
		got, err := tc.mark.Admit("res", tc.snap)
		if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("%s: Admit = %v, %v; want %v, %v", tc.name, got, err, tc.want, tc.err)
		}
		if got.Token < tc.mark.Token {
			t.Errorf("%s: the mark went down", tc.name)
		}
	}
}

func TestErrorsNameTheResource(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		&fence.StaleError{Resource: "invoice/42", Key: "k", Token: 1, Current: 2},
		&fence.ForeignLeaseError{Resource: "invoice/42", Key: "k", Token: 1, FencedBy: "j", Current: 2},
		&fence.ConflictError{Resources: []string{"invoice/42"}, Err: errors.New("x")},
	} {
		if msg := err.Error(); msg[:7] != "fence: " || !strings.Contains(msg, `"invoice/42"`) {
			t.Errorf("%q does not start with fence: and name the resource", msg)
		}
	}
	if errors.Is(&fence.StaleError{}, fence.ErrForeignLease) || errors.Is(&fence.ForeignLeaseError{}, fence.ErrStale) {
		t.Error("stale and foreign errors match each other's sentinel")
	}
	if fence.IsRetryable(nil) || fence.IsRetryable(errors.New("x")) || !fence.IsRetryable(&fence.ConflictError{}) {
		t.Error("IsRetryable")
	}
}

// TestTokensThroughJSON: marks and errors carry tokens through JSON
// exactly, up to 2^64−1.
func TestTokensThroughJSON(t *testing.T) {
	t.Parallel()
	for _, tok := range []lease.Token{1<<53 - 1, 1<<53 + 1, 1<<63 - 1, math.MaxUint64} {
		b, err := json.Marshal(fence.Mark{Key: "k", Token: tok})
		if err != nil {
			t.Fatal(err)
		}
		var m fence.Mark
		if err := json.Unmarshal(b, &m); err != nil || m.Token != tok {
			t.Fatalf("%s → %v, %v; want token %d", b, m, err, tok)
		}
		b, _ = json.Marshal(&fence.StaleError{Resource: "r", Key: "k", Token: tok - 1, Current: tok})
		var se fence.StaleError
		if err := json.Unmarshal(b, &se); err != nil || se.Current != tok || se.Token != tok-1 {
			t.Fatalf("%s → %+v, %v", b, se, err)
		}
	}
}

func TestMemory(t *testing.T) {
	t.Parallel()
	var m fence.Memory
	boom := errors.New("boom")
	if err := m.Do(snap("k", 3), []string{"a"}, func() error { return boom }); err != boom {
		t.Fatalf("Do with a failing write = %v", err)
	}
	if !m.Mark("a").IsZero() {
		t.Fatalf("a failed write moved the fence to %v", m.Mark("a"))
	}
	if err := m.Do(snap("k", 3), []string{"b", "a"}, nil); err != nil {
		t.Fatal(err)
	}
	called := false
	err := m.Do(snap("k", 2), []string{"c", "b"}, func() error { called = true; return nil })
	var se *fence.StaleError
	if !errors.As(err, &se) || se.Resource != "b" || called || !m.Mark("c").IsZero() {
		t.Fatalf("stale Do = %v (called %v, c = %v)", err, called, m.Mark("c"))
	}
	if err := m.Do(snap("k", 3), nil, nil); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("Do without resources = %v", err)
	}
}
