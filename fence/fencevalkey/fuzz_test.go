package fencevalkey_test

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencevalkey"
)

// FuzzResourceName: ValidateResource never panics, accepts what the rules
// allow, and a valid brace-free name is a hash tag that puts the fence key
// and every key naming {resource} in one slot.
func FuzzResourceName(f *testing.F) {
	for _, s := range []string{"invoice/42", "", "a{b}", "tab\there", "é", "\xff", strings.Repeat("x", 1025), "{", "}", "a b", "\u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := fence.ValidateResource(name)
		valid := name != "" && len(name) <= fence.MaxResourceLen && utf8.ValidString(name) &&
			!strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r >= 0x7f && r < 0xa0 || r == utf8.RuneError })
		if (err == nil) != valid {
			t.Fatalf("ValidateResource(%q) = %v; want valid %v", name, err, valid)
		}
		if err != nil {
			if !errors.Is(err, fence.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		var m fence.Memory
		if err := m.Do(snap("k", 3), []string{name, name}, nil); err != nil {
			t.Fatal(err)
		}
		if got := m.Mark(name); got != (fence.Mark{Key: "k", Token: 3}) {
			t.Fatalf("Mark(%q) = %v", name, got)
		}
		if !strings.ContainsAny(name, "{}") {
			fk := fencevalkey.DefaultPrefix + "{" + name + "}"
			if a, b := fencevalkey.KeySlot(fk), fencevalkey.KeySlot("data:{"+name+"}:x{y}"); a != b {
				t.Fatalf("fence key slot %d, data key slot %d", a, b)
			}
		}
	})
}

// FuzzValkeyCommands: the Go checks and the script's checks agree. A group
// the Go side accepts is never refused by the script for its shape, and
// its values read back byte for byte; a group the Go side refuses is never
// sent.
func FuzzValkeyCommands(f *testing.F) {
	f.Add("jobs/1", "value", false, false, int64(0), false, int64(1), int64(0), false, uint8(2))
	f.Add("r", "\x00\xff\r\n", true, false, int64(1500), false, int64(-5), int64(10), true, uint8(4))
	f.Add("r", "", true, true, int64(-1), true, int64(1<<62), int64(-1), true, uint8(1))
	f.Add("r{", "v", false, true, int64(time.Second), true, int64(0), int64(0), false, uint8(0))
	c := standalone(f)
	v := newFence(f, c)
	f.Fuzz(func(t *testing.T, resource, value string, nx, xx bool, ttlMillis int64, keepTTL bool, delta, maxLen int64, approx bool, fields uint8) {
		ctx := ctxT(t)
		tag := "{" + resource + "}"
		var fv []string
		for i := range int(fields % 6) {
			fv = append(fv, "f"+string(rune('a'+i)), value)
		}
		ttl := time.Duration(ttlMillis) * time.Millisecond
		cmds := []fencevalkey.Command{
			fencevalkey.Set("s:"+tag, value, fencevalkey.SetOptions{NX: nx, XX: xx, TTL: ttl, KeepTTL: keepTTL}),
			fencevalkey.HSet("h:"+tag, fv...),
			fencevalkey.IncrBy("n:"+tag, delta%(1<<40)),
			fencevalkey.Expire("h:"+tag, ttl),
			fencevalkey.XAdd("x:"+tag, fencevalkey.XAddOptions{MaxLen: maxLen, Approx: approx}, fv...),
			fencevalkey.Del("d:" + tag),
		}
		_, err := v.Do(ctx, snap("fuzz", 1), resource, cmds...)
		if errors.Is(err, fence.ErrInvalid) {
			return
		}
		if err != nil {
			t.Fatalf("the Go side accepted what the script refused: %v", err)
		}
		if !xx { // the keys start empty: SET NX sets, SET XX does not
			got, err := c.Do(ctx, c.B().Get().Key("s:"+tag).Build()).ToString()
			if err != nil || got != value {
				t.Fatalf("GET = %q, %v; want %q", got, err, value)
			}
		}
		// Start the next input from empty keys.
		for _, k := range []string{"s:", "h:", "n:", "x:"} {
			if err := c.Do(ctx, c.B().Del().Key(k+tag).Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
	})
}
