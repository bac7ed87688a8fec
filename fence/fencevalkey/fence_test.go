package fencevalkey_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/fence"
	"github.com/golib/lease/fence/fencevalkey"
	"github.com/golib/lease/lease"
)

// valkeyClients runs f on a standalone server and on a cluster.
func valkeyClients(t *testing.T, f func(t *testing.T, c valkey.Client)) {
	t.Run("Standalone", func(t *testing.T) { t.Parallel(); f(t, standalone(t)) })
	t.Run("Cluster", func(t *testing.T) { t.Parallel(); f(t, cluster(t)) })
}

func get(t *testing.T, c valkey.Client, key string) valkey.ValkeyResult {
	t.Helper()
	return c.Do(t.Context(), c.B().Get().Key(key).Build())
}

func TestValkeyCommands(t *testing.T) {
	t.Parallel()
	valkeyClients(t, func(t *testing.T, c valkey.Client) {
		v := newFence(t, c)
		ctx := ctxT(t)
		s := snap("jobs", 1)
		k := func(name string) string { return dataKey(v, name, "jobs/7") }
		replies, err := v.Do(ctx, s, "jobs/7",
			fencevalkey.Set(k("status"), "running", fencevalkey.SetOptions{TTL: 90 * time.Second}),
			fencevalkey.Set(k("status"), "ignored", fencevalkey.SetOptions{NX: true}),
			fencevalkey.Set(k("missing"), "ignored", fencevalkey.SetOptions{XX: true}),
			fencevalkey.Set(k("status"), "done", fencevalkey.SetOptions{KeepTTL: true}),
			fencevalkey.Set(k("px"), "v", fencevalkey.SetOptions{TTL: 1500 * time.Millisecond}),
			fencevalkey.HSet(k("job"), "state", "done", "by", "worker-a"),
			fencevalkey.IncrBy(k("count"), 41),
			fencevalkey.IncrBy(k("count"), 1),
			fencevalkey.Expire(k("job"), time.Hour),
			fencevalkey.Expire(k("count"), 2500*time.Millisecond),
			fencevalkey.XAdd(k("events"), fencevalkey.XAddOptions{MaxLen: 100, Approx: true}, "event", "done"),
			fencevalkey.XAdd(k("nostream"), fencevalkey.XAddOptions{NoMkStream: true}, "event", "x"),
			fencevalkey.Set(k("gone"), "x", fencevalkey.SetOptions{}),
			fencevalkey.Del(k("gone")),
		)
		if err != nil {
			t.Fatal(err)
		}
		if len(replies) != 14 {
			t.Fatalf("%d replies; want 14", len(replies))
		}
		str := func(i int) string { s, _ := replies[i].ToString(); return s }
		num := func(i int) int64 { n, _ := replies[i].AsInt64(); return n }
		if str(0) != "OK" || !replies[1].IsNil() || !replies[2].IsNil() || str(3) != "OK" {
			t.Errorf("SET replies: %v", replies[:4])
		}
		if num(5) != 2 || num(6) != 41 || num(7) != 42 || num(8) != 1 || num(9) != 1 || num(13) != 1 {
			t.Errorf("HSET/INCRBY/EXPIRE/DEL replies: %v", replies)
		}
		if id := str(10); !strings.Contains(id, "-") || !replies[11].IsNil() {
			t.Errorf("XADD replies: %v, %v", replies[10], replies[11])
		}
		if got, _ := get(t, c, k("status")).ToString(); got != "done" {
			t.Errorf("status = %q", got)
		}
		ttl, _ := c.Do(ctx, c.B().Pttl().Key(k("status")).Build()).AsInt64()
		if ttl <= 0 || ttl > 90_000 {
			t.Errorf("status PTTL = %d; want the 90s of the first SET, kept", ttl)
		}
		if n, _ := c.Do(ctx, c.B().Exists().Key(k("nostream"), k("gone"), k("missing")).Build()).AsInt64(); n != 0 {
			t.Errorf("%d of nostream, gone, missing exist", n)
		}
		// The fence key never expires and records the fence.
		fk := v.FenceKey("jobs/7")
		if ttl, _ := c.Do(ctx, c.B().Pttl().Key(fk).Build()).AsInt64(); ttl != -1 {
			t.Errorf("fence key PTTL = %d; want -1", ttl)
		}
		rec, _ := c.Do(ctx, c.B().Hgetall().Key(fk).Build()).AsStrMap()
		if rec["key"] != "jobs" || rec["token"] != "1" || rec["owner"] != s.Owner {
			t.Errorf("fence key = %v", rec)
		}
	})
}

// TestValkeyGroupAllOrNothing: a group with a command that would fail
// writes nothing, not even the commands before it or the fence.
func TestValkeyGroupAllOrNothing(t *testing.T) {
	t.Parallel()
	valkeyClients(t, func(t *testing.T, c valkey.Client) {
		v := newFence(t, c)
		ctx := ctxT(t)
		k := func(name string) string { return dataKey(v, name, "g") }
		if _, err := v.Do(ctx, snap("k", 1), "g",
			fencevalkey.HSet(k("hash"), "f", "v"),
			fencevalkey.Set(k("text"), "abc", fencevalkey.SetOptions{}),
			fencevalkey.Set(k("big"), "9200000000000000000", fencevalkey.SetOptions{}),
		); err != nil {
			t.Fatal(err)
		}
		for name, bad := range map[string]fencevalkey.Command{
			"INCRBY on a hash":              fencevalkey.IncrBy(k("hash"), 1),
			"HSET on a string":              fencevalkey.HSet(k("text"), "f", "v"),
			"XADD on a hash":                fencevalkey.XAdd(k("hash"), fencevalkey.XAddOptions{}, "f", "v"),
			"INCRBY on text":                fencevalkey.IncrBy(k("text"), 1),
			"INCRBY near overflow":          fencevalkey.IncrBy(k("big"), 1),
			"INCRBY to overflow":            fencevalkey.IncrBy(k("fresh"), -9_200_000_000_000_000_000),
			"HSET after SET in the group":   fencevalkey.HSet(k("first"), "f", "v"),
			"INCRBY after SET in the group": fencevalkey.IncrBy(k("first"), 1),
		} {
			_, err := v.Do(ctx, snap("k", 2), "g",
				fencevalkey.Set(k("first"), "written?", fencevalkey.SetOptions{}),
				bad,
			)
			if err == nil || !strings.Contains(err.Error(), "nothing written") {
				t.Errorf("%s: %v; want a refusal", name, err)
			}
			if n, _ := c.Do(ctx, c.B().Exists().Key(k("first")).Build()).AsInt64(); n != 0 {
				t.Fatalf("%s: the first command was applied", name)
			}
			if tok, _ := c.Do(ctx, c.B().Hget().Key(v.FenceKey("g")).Field("token").Build()).ToString(); tok != "1" {
				t.Fatalf("%s: fence token = %q; want 1", name, tok)
			}
		}
		// Types change within the group as the commands go.
		if _, err := v.Do(ctx, snap("k", 2), "g",
			fencevalkey.Del(k("hash")), fencevalkey.IncrBy(k("hash"), 5),
			fencevalkey.Set(k("text"), "7", fencevalkey.SetOptions{}), fencevalkey.IncrBy(k("text"), 1),
		); err != nil {
			t.Fatalf("DEL then INCRBY, SET then INCRBY: %v", err)
		}
		if got, _ := get(t, c, k("text")).ToString(); got != "8" {
			t.Fatalf("text = %q; want 8", got)
		}
	})
}

func TestValkeyClientSideChecks(t *testing.T) {
	t.Parallel()
	c := standalone(t)
	v := newFence(t, c)
	ctx := ctxT(t)
	for name, call := range map[string]func() error{
		"other slot": func() error {
			_, err := v.Do(ctx, snap("k", 1), "r", fencevalkey.Set("plain-key", "v", fencevalkey.SetOptions{}))
			return err
		},
		"fence key":      func() error { _, err := v.Do(ctx, snap("k", 1), "r", fencevalkey.Del(v.FenceKey("r"))); return err },
		"brace":          func() error { return v.Claim(ctx, snap("k", 1), "a{b}") },
		"empty resource": func() error { return v.Claim(ctx, snap("k", 1), "") },
		"no token":       func() error { return v.Claim(ctx, snap("k", 0), "r") },
		"zero command":   func() error { _, err := v.Do(ctx, snap("k", 1), "r", fencevalkey.Command{}); return err },
		"NX and XX": func() error {
			_, err := v.Do(ctx, snap("k", 1), "r", fencevalkey.Set("{r}", "v", fencevalkey.SetOptions{NX: true, XX: true}))
			return err
		},
		"TTL+KEEPTTL": func() error {
			_, err := v.Do(ctx, snap("k", 1), "r", fencevalkey.Set("{r}", "v", fencevalkey.SetOptions{TTL: time.Second, KeepTTL: true}))
			return err
		},
		"TTL µs": func() error {
			_, err := v.Do(ctx, snap("k", 1), "r", fencevalkey.Set("{r}", "v", fencevalkey.SetOptions{TTL: time.Microsecond}))
			return err
		},
		"negative TTL": func() error {
			_, err := v.Do(ctx, snap("k", 1), "r", fencevalkey.Expire("{r}", -time.Second))
			return err
		},
		"odd HSET": func() error { _, err := v.Do(ctx, snap("k", 1), "r", fencevalkey.HSet("{r}", "f")); return err },
		"empty XADD": func() error {
			_, err := v.Do(ctx, snap("k", 1), "r", fencevalkey.XAdd("{r}", fencevalkey.XAddOptions{}))
			return err
		},
		"Approx alone": func() error {
			_, err := v.Do(ctx, snap("k", 1), "r", fencevalkey.XAdd("{r}", fencevalkey.XAddOptions{Approx: true}, "f", "v"))
			return err
		},
		"empty key": func() error { _, err := v.Do(ctx, snap("k", 1), "r", fencevalkey.Del("")); return err },
	} {
		if err := call(); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: %v; want ErrInvalid", name, err)
		}
	}
	if n, _ := c.Do(ctx, c.B().Exists().Key(v.FenceKey("r")).Build()).AsInt64(); n != 0 {
		t.Fatal("a refused call wrote the fence")
	}
	if _, err := fencevalkey.New(c, fencevalkey.Options{Prefix: "a{"}); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("NewValkey with a brace in the prefix: %v", err)
	}
	if _, err := fencevalkey.New(nil, fencevalkey.Options{}); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("NewValkey(nil): %v", err)
	}
}

// TestValkeyScriptAllowList calls the script directly, as a caller who
// bypasses the Go API could: nothing but the allowed commands on the keys
// it was passed can run, and no fence or floor key is reachable as data.
func TestValkeyScriptAllowList(t *testing.T) {
	t.Parallel()
	c := standalone(t)
	ctx := ctxT(t)
	// The script takes the fence key as given; a prefix of this test's
	// own keeps a second run (-count=2) from finding the first one's.
	v := newFence(t, c)
	fk, floor, data := v.FenceKey("r"), v.FloorKey("r", "k"), dataKey(v, "data", "r")
	run := func(keys []string, args ...string) error {
		cmd := c.B().Eval().Script(fencevalkey.FenceLua).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
		return c.Do(ctx, cmd).Error()
	}
	head := []string{"k", "1", "o"}
	for name, args := range map[string][]string{
		"FLUSHALL":         {"1", "FLUSHALL", "3", "0"},
		"EVAL":             {"1", "EVAL", "3", "2", "return 1", "0"},
		"lower-case set":   {"1", "set", "3", "1", "v"},
		"CONFIG":           {"1", "CONFIG", "3", "2", "SET", "x"},
		"key index 1":      {"1", "SET", "1", "1", "v"},
		"key index 2":      {"1", "SET", "2", "1", "v"},
		"key index 4":      {"1", "SET", "4", "1", "v"},
		"key index 0":      {"1", "SET", "0", "1", "v"},
		"key by name":      {"1", "SET", "other{r}", "1", "v"},
		"SET GET option":   {"1", "SET", "3", "2", "v", "GET"},
		"SET EX 0":         {"1", "SET", "3", "3", "v", "EX", "0"},
		"SET PXAT":         {"1", "SET", "3", "3", "v", "PXAT", "1"},
		"DEL two keys":     {"1", "DEL", "3", "1", "other{r}"},
		"XADD explicit ID": {"1", "XADD", "3", "3", "1-1", "f", "v"},
		"XADD MINID":       {"1", "XADD", "3", "5", "MINID", "0", "*", "f", "v"},
		"INCRBY 1.5":       {"1", "INCRBY", "3", "1", "1.5"},
		"EXPIRE 0":         {"1", "EXPIRE", "3", "1", "0"},
		"args too few":     {"1", "SET", "3", "5", "v"},
		"args left over":   {"1", "DEL", "3", "0", "extra"},
		"count too high":   {"2", "DEL", "3", "0"},
		"count negative":   {"-1"},
	} {
		if err := run([]string{fk, floor, data}, append(head, args...)...); err == nil || !strings.Contains(err.Error(), "fence:") {
			t.Errorf("%s: %v; want a refusal", name, err)
		}
	}
	for name, args := range map[string][]string{
		"token 0":         {"k", "0", "o", "0"},
		"token 01":        {"k", "01", "o", "0"},
		"token -1":        {"k", "-1", "o", "0"},
		"token 1.0":       {"k", "1.0", "o", "0"},
		"token 21 digits": {"k", strings.Repeat("9", 21), "o", "0"},
		"empty key":       {"", "1", "o", "0"},
	} {
		if err := run([]string{fk, floor}, args...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// The floor key must be the floor key of the write's lease key.
	for name, keys := range map[string][]string{
		"no floor key":          {fk},
		"another lease's floor": {fk, v.FloorKey("r", "other")},
		"a data key as floor":   {fk, data},
		"floor key without tag": {fk, strings.TrimSuffix(fk, "{r}") + "{}:floor:k"},
	} {
		if err := run(keys, append(head, "0")...); err == nil || !strings.Contains(err.Error(), "floor key") {
			t.Errorf("%s: %v; want a refusal naming the floor key", name, err)
		}
	}
	if err := run([]string{fk, floor, fk}, append(head, "0")...); err == nil {
		t.Error("the fence key passed twice: accepted")
	}
	if err := run([]string{fk, floor, floor}, append(head, "1", "DEL", "3", "0")...); err == nil {
		t.Error("the floor key passed as a data key: accepted")
	}
	// Another resource's fence key, or any lease's floor key, passed as a
	// data key (the script must refuse them even if a caller skips the Go
	// checks).
	other := v.FenceKey("r2")
	if err := run([]string{fk, floor, other}, append(head, "1", "DEL", "3", "0")...); err == nil || !strings.Contains(err.Error(), "is a fence key") {
		t.Errorf("DEL of another resource's fence key: %v; want a refusal", err)
	}
	for _, f := range []string{v.FloorKey("r", "other"), v.FloorKey("r2", "k"), strings.TrimSuffix(fk, "{r}") + "{anything}:floor:"} {
		if err := run([]string{fk, floor, f}, append(head, "1", "DEL", "3", "0")...); err == nil || !strings.Contains(err.Error(), "is a floor key") {
			t.Errorf("DEL of floor key %q: %v; want a refusal", f, err)
		}
	}
	for _, ok := range []string{other + ":log", strings.TrimSuffix(fk, "{r}") + "{r}:floors", strings.TrimSuffix(fk, "{r}") + "{r}floor:k"} {
		if err := run([]string{fk, floor, ok}, append(head, "1", "DEL", "3", "0")...); err != nil {
			t.Errorf("DEL of a data key %q that starts like a fence or floor key: %v", ok, err)
		}
	}
	_ = c.Do(ctx, c.B().Del().Key(fk).Build()) // the calls above claimed r
	if n, _ := c.Do(ctx, c.B().Exists().Key(fk, floor, data).Build()).AsInt64(); n != 0 {
		t.Fatalf("refused scripts wrote %d keys", n)
	}
	// A well-formed call goes through.
	if err := run([]string{fk, floor, data}, append(head, "1", "SET", "3", "3", "v", "PX", "5000")...); err != nil {
		t.Fatal(err)
	}
}

// TestValkeyTokensCompareExactly: tokens compare as decimal strings, so
// neighbours of every length compare, and so does a fence key that holds a
// token above 2^53, where Lua numbers lose precision (written before
// implausible tokens were refused, or by hand).
func TestValkeyTokensCompareExactly(t *testing.T) {
	t.Parallel()
	c := standalone(t)
	v := newFence(t, c)
	ctx := ctxT(t)
	top := lease.Token(time.Now().Add(fence.MaxTokenLead - time.Minute).UnixMicro())
	for _, tok := range []lease.Token{9, 10, 99, 100, 1<<32 - 1, 1 << 32, top - 1, top} {
		if err := v.Claim(ctx, snap("k", tok), "r"); err != nil {
			t.Fatalf("Claim with %d: %v", tok, err)
		}
		err := v.Claim(ctx, snap("k", tok-1), "r")
		var se *fence.StaleError
		if !errors.As(err, &se) || se.Current != tok || se.Token != tok-1 {
			t.Fatalf("Claim with %d after %d = %v", tok-1, tok, err)
		}
	}
	for _, planted := range []lease.Token{1<<53 + 1, 1<<64 - 1} {
		if err := c.Do(ctx, c.B().Hset().Key(v.FenceKey("r")).FieldValue().FieldValue("token", planted.String()).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		err := v.Claim(ctx, snap("k", top), "r")
		var se *fence.StaleError
		if !errors.As(err, &se) || se.Current != planted {
			t.Fatalf("Claim with %d on a fence at %d = %v; want stale", top, planted, err)
		}
	}
}

// TestValkeyIndeterminate: an error after the request left is reported as
// possibly applied; a refused connection as not sent.
func TestValkeyErrors(t *testing.T) {
	t.Parallel()
	v := newFence(t, standalone(t))
	ctx, cancel := contextWithCancel(t)
	cancel()
	err := v.Claim(ctx, snap("k", 1), "r")
	if err == nil || errors.Is(err, lease.ErrIndeterminate) || !strings.Contains(err.Error(), "not sent") {
		t.Fatalf("Claim with a cancelled context = %v; want not sent", err)
	}
}

func TestValkeyWrongTypeFenceKey(t *testing.T) {
	t.Parallel()
	c := standalone(t)
	v := newFence(t, c)
	ctx := ctxT(t)
	if err := c.Do(ctx, c.B().Set().Key(v.FenceKey("r")).Value("x").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	err := v.Claim(ctx, snap("k", 1), "r")
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || errors.Is(err, lease.ErrIndeterminate) {
		t.Fatalf("Claim on a string fence key = %v; want WRONGTYPE, not applied", err)
	}
}

// TestValkeyLargeGroup: a group of many commands on repeated keys.
func TestValkeyLargeGroup(t *testing.T) {
	t.Parallel()
	c := standalone(t)
	v := newFence(t, c)
	ctx := ctxT(t)
	nk, hk := dataKey(v, "n", "big"), dataKey(v, "h", "big")
	var cmds []fencevalkey.Command
	for i := range 200 {
		cmds = append(cmds, fencevalkey.IncrBy(nk, 1), fencevalkey.HSet(hk, "f"+strconv.Itoa(i%50), "v"))
	}
	replies, err := v.Do(ctx, snap("k", 1), "big", cmds...)
	if err != nil || len(replies) != 400 {
		t.Fatalf("%d replies, %v", len(replies), err)
	}
	if n, _ := replies[398].AsInt64(); n != 200 {
		t.Fatalf("last INCRBY = %v; want 200", replies[398])
	}
	if n, _ := c.Do(ctx, c.B().Hlen().Key(hk).Build()).AsInt64(); n != 50 {
		t.Fatalf("HLEN = %d; want 50", n)
	}
}

// TestValkeyGroupCannotTouchAnotherFence: a resource whose fence key
// shares a hash slot with another resource's can still not delete or
// expire that fence through its data keys, so a stale write to the other
// resource stays refused.
func TestValkeyGroupCannotTouchAnotherFence(t *testing.T) {
	t.Parallel()
	v := newFence(t, standalone(t))
	ctx := ctxT(t)
	slot := fencevalkey.KeySlot(v.FenceKey("a"))
	var b string
	for i := 0; b == ""; i++ {
		if r := fmt.Sprint("b", i); fencevalkey.KeySlot(v.FenceKey(r)) == slot {
			b = r
		}
	}
	if err := v.Claim(ctx, snap("lease-a", 10), "a"); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []fencevalkey.Command{fencevalkey.Del(v.FenceKey("a")), fencevalkey.Expire(v.FenceKey("a"), time.Second), fencevalkey.Set(v.FenceKey("a"), "x", fencevalkey.SetOptions{})} {
		if _, err := v.Do(ctx, snap("lease-b", 1), b, cmd); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("resource %q: %s = %v, want ErrInvalid", b, cmd, err)
		}
	}
	var se *fence.StaleError
	if err := v.Claim(ctx, snap("lease-a", 5), "a"); !errors.As(err, &se) || se.Current != 10 {
		t.Fatalf("stale write to a after the attempts = %v, want refused below token 10", err)
	}
	// Data keys that merely start like a fence key are fine.
	log := strings.TrimSuffix(v.FenceKey(b), "}") + "}:log"
	if _, err := v.Do(ctx, snap("lease-b", 1), b, fencevalkey.XAdd(log, fencevalkey.XAddOptions{}, "f", "v")); err != nil {
		t.Fatalf("write to %q: %v", log, err)
	}
}
