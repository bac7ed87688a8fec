package fencevalkey_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"
	"pgregory.net/rapid"

	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/lease"
)

// maxID is the last stream ID Valkey can issue: after it, XADD fails.
const maxID = "18446744073709551615-18446744073709551615"

// hostileStates set up a data key in a state that can make a command of a
// fenced group fail on the server: every type, integers at the edge of
// int64, strings that only look like integers, streams at the end of their
// IDs, TTLs at the limits.
var hostileStates = []struct {
	name  string
	setup func(b valkey.Builder, key string) []valkey.Completed
}{
	{"none", func(valkey.Builder, string) []valkey.Completed { return nil }},
	{"text", str("abc")},
	{"empty string", str("")},
	{"int max", str("9223372036854775807")},
	{"int max-1", str("9223372036854775806")},
	{"int min", str("-9223372036854775808")},
	{"int min+1", str("-9223372036854775807")},
	{"int 9.2e18", str("9199999999999999999")},
	{"uint64 max", str("18446744073709551615")},
	{"leading zero", str("01")},
	{"minus zero", str("-0")},
	{"plus sign", str("+1")},
	{"space", str(" 1")},
	{"decimal", str("1.5")},
	{"exponent", str("1e3")},
	{"hash", func(b valkey.Builder, k string) []valkey.Completed {
		return []valkey.Completed{b.Hset().Key(k).FieldValue().FieldValue("f", "v").Build()}
	}},
	{"list", func(b valkey.Builder, k string) []valkey.Completed {
		return []valkey.Completed{b.Rpush().Key(k).Element("a").Build()}
	}},
	{"set", func(b valkey.Builder, k string) []valkey.Completed {
		return []valkey.Completed{b.Sadd().Key(k).Member("a").Build()}
	}},
	{"zset", func(b valkey.Builder, k string) []valkey.Completed {
		return []valkey.Completed{b.Zadd().Key(k).ScoreMember().ScoreMember(1, "a").Build()}
	}},
	{"stream", func(b valkey.Builder, k string) []valkey.Completed {
		return []valkey.Completed{b.Xadd().Key(k).Id("*").FieldValue().FieldValue("f", "v").Build()}
	}},
	{"stream at the last ID", streamAt(maxID)},
	{"stream one before the last ID", streamAt("18446744073709551615-18446744073709551614")},
	{"stream two before the last ID", streamAt("18446744073709551615-18446744073709551613")},
	{"stream at the last ms", streamAt("18446744073709551615-0")},
	{"stream at the last seq", streamAt("18446744073709551614-18446744073709551615")},
	{"empty stream at the last ID", func(b valkey.Builder, k string) []valkey.Completed {
		return []valkey.Completed{
			b.Xadd().Key(k).Id("1-1").FieldValue().FieldValue("f", "v").Build(),
			b.Xdel().Key(k).Id("1-1").Build(),
			b.Xsetid().Key(k).LastId(maxID).Build(),
		}
	}},
	{"string with the longest TTL", func(b valkey.Builder, k string) []valkey.Completed {
		return []valkey.Completed{b.Set().Key(k).Value("1").Build(), b.Pexpireat().Key(k).MillisecondsTimestamp(1 << 62).Build()}
	}},
	{"hash with a TTL", func(b valkey.Builder, k string) []valkey.Completed {
		return []valkey.Completed{b.Hset().Key(k).FieldValue().FieldValue("f", "v").Build(), b.Expire().Key(k).Seconds(3600).Build()}
	}},
}

func str(v string) func(valkey.Builder, string) []valkey.Completed {
	return func(b valkey.Builder, k string) []valkey.Completed {
		return []valkey.Completed{b.Set().Key(k).Value(v).Build()}
	}
}

func streamAt(id string) func(valkey.Builder, string) []valkey.Completed {
	return func(b valkey.Builder, k string) []valkey.Completed {
		return []valkey.Completed{
			b.Xadd().Key(k).Id("1-1").FieldValue().FieldValue("f", "v").Build(),
			b.Xsetid().Key(k).LastId(id).Build(),
		}
	}
}

// allowedCommands are every command and option of the allow-list, on key,
// at the limits of their arguments.
func allowedCommands(key string) map[string]fencevalkey.Command {
	const maxTTL = 100 * 365 * 24 * time.Hour
	return map[string]fencevalkey.Command{
		"SET":                fencevalkey.Set(key, "v", fencevalkey.SetOptions{}),
		"SET NX":             fencevalkey.Set(key, "v", fencevalkey.SetOptions{NX: true}),
		"SET XX":             fencevalkey.Set(key, "v", fencevalkey.SetOptions{XX: true}),
		"SET EX max":         fencevalkey.Set(key, "v", fencevalkey.SetOptions{TTL: maxTTL}),
		"SET PX 1":           fencevalkey.Set(key, "v", fencevalkey.SetOptions{TTL: time.Millisecond}),
		"SET PX max":         fencevalkey.Set(key, "v", fencevalkey.SetOptions{TTL: maxTTL - time.Millisecond}),
		"SET XX KEEPTTL":     fencevalkey.Set(key, "v", fencevalkey.SetOptions{XX: true, KeepTTL: true}),
		"HSET":               fencevalkey.HSet(key, "f", "v", "g", "w"),
		"DEL":                fencevalkey.Del(key),
		"INCRBY 1":           fencevalkey.IncrBy(key, 1),
		"INCRBY -1":          fencevalkey.IncrBy(key, -1),
		"INCRBY max":         fencevalkey.IncrBy(key, 1<<63-1),
		"INCRBY min":         fencevalkey.IncrBy(key, -1<<63),
		"INCRBY 0":           fencevalkey.IncrBy(key, 0),
		"EXPIRE max":         fencevalkey.Expire(key, maxTTL),
		"EXPIRE 1s":          fencevalkey.Expire(key, time.Second),
		"PEXPIRE max":        fencevalkey.Expire(key, maxTTL-time.Millisecond),
		"XADD":               fencevalkey.XAdd(key, fencevalkey.XAddOptions{}, "f", "v"),
		"XADD NOMKSTREAM":    fencevalkey.XAdd(key, fencevalkey.XAddOptions{NoMkStream: true}, "f", "v"),
		"XADD MAXLEN 1":      fencevalkey.XAdd(key, fencevalkey.XAddOptions{MaxLen: 1}, "f", "v"),
		"XADD MAXLEN ~ 1000": fencevalkey.XAdd(key, fencevalkey.XAddOptions{MaxLen: 1000, Approx: true}, "f", "v"),
	}
}

// keyState is what a key holds, exactly: its serialized value and its
// absolute expiry.
func keyState(ctx context.Context, c valkey.Client, key string) (string, error) {
	dump, err := c.Do(ctx, c.B().Dump().Key(key).Build()).ToString()
	if valkey.IsValkeyNil(err) {
		dump, err = "(none)", nil
	}
	if err != nil {
		return "", err
	}
	at, err := c.Do(ctx, c.B().Pexpiretime().Key(key).Build()).AsInt64()
	return fmt.Sprintf("value sha256 %x expires %d", sha256.Sum256([]byte(dump)), at), err
}

// TestValkeyHostileState: for every allow-listed command, once and twice
// in a group after a write of another key, on a key in every hostile
// state, the group is applied entirely or not at all, and an error that
// says nothing was written is true (issue 13, break 4).
func TestValkeyHostileState(t *testing.T) {
	t.Parallel()
	c := standalone(t)
	v := newFence(t, c)
	ctx := ctxT(t)
	var applied, refused int
	i := 0
	for _, st := range hostileStates {
		for name := range allowedCommands("x") {
			for _, times := range []int{1, 2} {
				i++
				resource := fmt.Sprintf("h%d", i)
				key, marker := dataKey(v, "data", resource), dataKey(v, "marker", resource)
				for _, cmd := range st.setup(c.B(), key) {
					if err := c.Do(ctx, cmd).Error(); err != nil {
						t.Fatalf("%s: setup: %v", st.name, err)
					}
				}
				if err := v.Claim(ctx, snap("k", 1), resource); err != nil {
					t.Fatal(err)
				}
				before, err := keyState(ctx, c, key)
				if err != nil {
					t.Fatal(err)
				}
				cmds := []fencevalkey.Command{fencevalkey.Set(marker, "written", fencevalkey.SetOptions{})}
				for range times {
					cmds = append(cmds, allowedCommands(key)[name])
				}
				_, err = v.Do(ctx, snap("k", 2), resource, cmds...)
				what := fmt.Sprintf("%s ×%d on %s", name, times, st.name)
				if errors.Is(err, lease.ErrIndeterminate) {
					t.Fatalf("%s: %v", what, err)
				}
				tok, _ := c.Do(ctx, c.B().Hget().Key(v.FenceKey(resource)).Field("token").Build()).ToString()
				n, _ := c.Do(ctx, c.B().Exists().Key(marker).Build()).AsInt64()
				after, _ := keyState(ctx, c, key)
				if err == nil {
					applied++
					if tok != "2" || n != 1 {
						t.Errorf("%s: applied, but fence token %q, marker written %v", what, tok, n == 1)
					}
					continue
				}
				refused++
				if !strings.Contains(err.Error(), "nothing written") {
					t.Errorf("%s: error does not say nothing was written: %v", what, err)
				}
				if tok != "1" || n != 0 || after != before {
					t.Errorf("%s: refused (%v), but written: fence token %q, marker written %v, key %s, was %s", what, err, tok, n == 1, after, before)
				}
			}
		}
	}
	t.Logf("%d groups applied, %d refused", applied, refused)
	if applied == 0 || refused == 0 {
		t.Fatalf("%d applied, %d refused: the states do not exercise both outcomes", applied, refused)
	}
}

// TestValkeyHostileGroups: random groups of allow-listed commands over a
// few keys, each starting in a random hostile state, are applied entirely
// or not at all: a refused group leaves every key and the fence as they
// were, an applied one advances the fence.
func TestValkeyHostileGroups(t *testing.T) {
	t.Parallel()
	c := standalone(t)
	v := newFence(t, c)
	ctx := ctxT(t)
	names := slices.Sorted(maps.Keys(allowedCommands("x")))
	var applied, refused int
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		n++
		resource := fmt.Sprintf("g%d", n)
		keys := []string{dataKey(v, "a", resource), dataKey(v, "b", resource), dataKey(v, "c", resource)}
		for _, k := range keys {
			st := hostileStates[rapid.IntRange(0, len(hostileStates)-1).Draw(rt, "state")]
			rt.Logf("%s: %s", k, st.name)
			for _, cmd := range st.setup(c.B(), k) {
				if err := c.Do(ctx, cmd).Error(); err != nil {
					rt.Fatalf("setup %s: %v", st.name, err)
				}
			}
		}
		if err := v.Claim(ctx, snap("k", 1), resource); err != nil {
			rt.Fatal(err)
		}
		before := make([]string, len(keys))
		for i, k := range keys {
			s, err := keyState(ctx, c, k)
			if err != nil {
				rt.Fatal(err)
			}
			before[i] = s
		}
		var cmds []fencevalkey.Command
		for range rapid.IntRange(1, 8).Draw(rt, "commands") {
			k := rapid.SampledFrom(keys).Draw(rt, "key")
			cmds = append(cmds, allowedCommands(k)[rapid.SampledFrom(names).Draw(rt, "command")])
		}
		_, err := v.Do(ctx, snap("k", 2), resource, cmds...)
		if errors.Is(err, lease.ErrIndeterminate) {
			rt.Fatal(err)
		}
		tok, _ := c.Do(ctx, c.B().Hget().Key(v.FenceKey(resource)).Field("token").Build()).ToString()
		if err == nil {
			applied++
			if tok != "2" {
				rt.Fatalf("applied, but the fence token is %q", tok)
			}
			return
		}
		refused++
		if tok != "1" {
			rt.Fatalf("refused (%v), but the fence token is %q", err, tok)
		}
		for i, k := range keys {
			if after, _ := keyState(ctx, c, k); after != before[i] {
				rt.Fatalf("refused (%v), but key %d changed: %s, was %s", err, i, after, before[i])
			}
		}
	})
	t.Logf("%d groups applied, %d refused", applied, refused)
	if applied == 0 || refused == 0 {
		t.Fatalf("%d applied, %d refused: the groups do not exercise both outcomes", applied, refused)
	}
}

// TestValkeyFailureAfterTheChecks: a command that fails although the
// script's checks passed — here an ACL user without the right to run XADD —
// cannot be rolled back, and the error says what was applied instead of
// "nothing written".
func TestValkeyFailureAfterTheChecks(t *testing.T) {
	t.Parallel()
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	admin := newValkey(t, srv.Addr())
	ctx := ctxT(t)
	acl := []string{"ACL", "SETUSER", "fencer", "on", ">pw", "~*", "-@all", "+@connection", "+eval", "+evalsha", "+script|load",
		"+hmget", "+hset", "+type", "+get", "+time", "+xinfo|stream", "+set"}
	if err := admin.Do(ctx, admin.B().Arbitrary(acl...).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{srv.Addr()}, Username: "fencer", Password: "pw", DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v := newFence(t, c)
	k := func(name string) string { return dataKey(v, name, "r") }
	_, err = v.Do(ctx, snap("k", 1), "r", fencevalkey.Set(k("a"), "x", fencevalkey.SetOptions{}), fencevalkey.XAdd(k("s"), fencevalkey.XAddOptions{}, "f", "v"))
	if err == nil || strings.Contains(err.Error(), "nothing written") || !strings.Contains(err.Error(), "command 2 failed after the fence and the 1 commands before it were applied") || errors.Is(err, lease.ErrIndeterminate) {
		t.Fatalf("XADD without the right to run it = %v; want an error saying the fence and command 1 were applied", err)
	}
	if got, _ := admin.Do(ctx, admin.B().Get().Key(k("a")).Build()).ToString(); got != "x" {
		t.Fatalf("command 1 wrote %q; the error says it was applied", got)
	}
	// A missing right to a command the checks run (TYPE, before HSET)
	// refuses the whole group before any write.
	if err := admin.Do(ctx, admin.B().Arbitrary("ACL", "SETUSER", "fencer", "-type").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	_, err = v.Do(ctx, snap("k", 2), "r", fencevalkey.Set(k("b"), "x", fencevalkey.SetOptions{}), fencevalkey.HSet(k("h"), "f", "v"))
	if err == nil || !strings.Contains(err.Error(), "nothing written") || !strings.Contains(err.Error(), "type") {
		t.Fatalf("HSET without the right to TYPE = %v; want refused, nothing written", err)
	}
	if n, _ := admin.Do(ctx, admin.B().Exists().Key(k("b")).Build()).AsInt64(); n != 0 {
		t.Fatal("command 1 was applied; the error says nothing was written")
	}
	if tok, _ := admin.Do(ctx, admin.B().Hget().Key(v.FenceKey("r")).Field("token").Build()).ToString(); tok != "1" {
		t.Fatalf("fence token %q; want 1", tok)
	}
}
