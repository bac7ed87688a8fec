package fencevalkey_test

import (
	"errors"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
)

func TestValkeyMark(t *testing.T) {
	t.Parallel()
	valkeyClients(t, func(t *testing.T, c valkey.Client) {
		v := newFence(t, c)
		ctx := ctxT(t)
		if m, err := v.Mark(ctx, "jobs/9"); err != nil || !m.IsZero() {
			t.Fatalf("Mark of an unfenced resource = %+v, %v; want the zero Mark", m, err)
		}
		tok := lease.Token(time.Now().UnixMicro()) // a plausible token: about the store's clock
		if err := v.Claim(ctx, snap("jobs", tok), "jobs/9"); err != nil {
			t.Fatal(err)
		}
		want := fence.Mark{Key: "jobs", Token: tok}
		if m, err := v.Mark(ctx, "jobs/9"); err != nil || m != want {
			t.Fatalf("Mark after Claim = %+v, %v; want %+v", m, err, want)
		}
		if _, err := v.Mark(ctx, ""); !errors.Is(err, fence.ErrInvalid) {
			t.Fatalf("Mark of an empty resource = %v, want ErrInvalid", err)
		}
	})
}
