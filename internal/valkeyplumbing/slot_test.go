package valkeyplumbing_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/internal/valkeyplumbing"
)

// TestKeySlot compares KeySlot with the server's CLUSTER KEYSLOT, on
// names with hash tags of every shape and on random bytes.
func TestKeySlot(t *testing.T) {
	t.Parallel()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: testserver.ValkeyCluster(t).Addrs(), DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := []string{
		"", "a", "{a}", "x{a}y", "{}", "{}a", "a{}{b}", "{a}{b}", "a{b", "a}b{c}", "{user1000}.following",
		"foo{{bar}}zap", "{{}}", "123456789", "lease:{acct}:%7Bacct%7D%2F17", "lease:{exports}:permit:3",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		b := make([]byte, rng.IntN(16))
		for i := range b {
			b[i] = "ab{}x:%\x00\xff"[rng.IntN(9)]
		}
		names = append(names, string(b))
	}
	cmds := make(valkey.Commands, len(names))
	for i, n := range names {
		cmds[i] = c.B().ClusterKeyslot().Key(n).Build()
	}
	for i, res := range c.DoMulti(ctx, cmds...) {
		want, err := res.AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if got := valkeyplumbing.KeySlot(names[i]); int64(got) != want {
			t.Errorf("KeySlot(%q) = %d; the server says %d", names[i], got, want)
		}
	}
}

// TestCRC16 checks the checksum's reference value: CRC-16/XMODEM of
// "123456789" is 0x31C3, as the cluster specification states.
func TestCRC16(t *testing.T) {
	if got := valkeyplumbing.KeySlot("123456789"); got != 0x31C3%valkeyplumbing.Slots {
		t.Errorf("KeySlot(123456789) = %d, want %d", got, 0x31C3%valkeyplumbing.Slots)
	}
}
