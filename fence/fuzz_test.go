package fence_test

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/lease"
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
			fk := fence.DefaultPrefix + "{" + name + "}"
			if a, b := fence.KeySlot(fk), fence.KeySlot("data:{"+name+"}:x{y}"); a != b {
				t.Fatalf("fence key slot %d, data key slot %d", a, b)
			}
		}
	})
}

// FuzzPostgresResource: any valid resource name is stored and found again
// byte for byte, and any value written under the fence reads back exactly.
func FuzzPostgresResource(f *testing.F) {
	f.Add("invoice/42", []byte("total=250"), uint64(1))
	f.Add("quote ' \" \\ ; --", []byte{0, 1, 2, 0xff}, uint64(1<<53-1))
	f.Add("日本語/🙂", []byte(""), uint64(1<<63-1))
	f.Add("x", []byte("y"), uint64(1<<63))
	pool := newPool(f)
	if _, err := pool.Exec(ctxT(f), `CREATE TABLE blobs (resource text PRIMARY KEY, body bytea NOT NULL)`); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, resource string, value []byte, token uint64) {
		ctx := ctxT(t)
		s := snap("fuzz", lease.Token(token))
		err := fence.Tx(ctx, pool, s, []string{resource}, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO blobs VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE SET body = EXCLUDED.body`, resource, value)
			return err
		})
		switch {
		case fence.ValidateResource(resource) != nil || token == 0 || token >= 1<<63:
			if !errors.Is(err, fence.ErrInvalid) {
				t.Fatalf("Tx(%q, token %d) = %v; want ErrInvalid", resource, token, err)
			}
			return
		case errors.Is(err, fence.ErrImplausibleToken):
			if token < uint64(time.Now().Add(fence.MaxTokenLead-time.Minute).UnixMicro()) {
				t.Fatalf("Tx(%q, token %d) = %v; the token is plausible", resource, token, err)
			}
			return
		case errors.Is(err, fence.ErrStale):
			return // an earlier input wrote this resource with a higher token
		case err != nil:
			t.Fatalf("Tx(%q, token %d): %v", resource, token, err)
		case token > uint64(time.Now().Add(fence.MaxTokenLead+time.Minute).UnixMicro()):
			t.Fatalf("Tx(%q, token %d) wrote with an implausible token", resource, token)
		}
		var got []byte
		var m fence.Mark
		err = pool.QueryRow(ctx, `SELECT b.body, f.lease_key, f.token FROM blobs b JOIN public.lease_fences f USING (resource) WHERE resource = $1`, resource).
			Scan(&got, &m.Key, &m.Token)
		if err != nil || string(got) != string(value) || m != (fence.Mark{Key: "fuzz", Token: lease.Token(token)}) {
			t.Fatalf("read back %q: %q %v, %v; want %q and token %d", resource, got, m, err, value, token)
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
		cmds := []fence.Command{
			fence.Set("s:"+tag, value, fence.SetOptions{NX: nx, XX: xx, TTL: ttl, KeepTTL: keepTTL}),
			fence.HSet("h:"+tag, fv...),
			fence.IncrBy("n:"+tag, delta%(1<<40)),
			fence.Expire("h:"+tag, ttl),
			fence.XAdd("x:"+tag, fence.XAddOptions{MaxLen: maxLen, Approx: approx}, fv...),
			fence.Del("d:" + tag),
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
