package valkeyplumbing_test

import (
	"context"
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/golib/lease/internal/testkit/faults"
	"github.com/golib/lease/internal/testkit/testserver"
	"github.com/golib/lease/internal/valkeyplumbing"
)

// probeLua applies every helper to pairs of tokens a, b (ARGV in pairs)
// and returns, per pair: less(a, b), add(a, b), max(a, b), valid(a).
const probeLua = `
local out = {}
for i = 1, #ARGV, 2 do
  local a, b = ARGV[i], ARGV[i + 1]
  out[#out + 1] = tokens.less(a, b) and 1 or 0
  out[#out + 1] = tokens.add(a, b)
  out[#out + 1] = tokens.max(a, b)
  out[#out + 1] = tokens.valid(a) and 1 or 0
end
return out
`

// largestLua returns tokens.clock and tokens.largest of the TIME reply
// {ARGV[1], ARGV[2]}.
const largestLua = `
local t = {ARGV[1], ARGV[2]}
return {tokens.clock(t), tokens.largest(t)}
`

// edges are the uint64 values where doubles, int64 and uint64 end, and
// the carries of decimal addition.
var edges = []uint64{0, 1, 9, 10, 99, 100, 1<<53 - 1, 1 << 53, 1<<53 + 1, 1<<63 - 1, 1 << 63, math.MaxUint64 - 1, math.MaxUint64,
	9_999_999_999_999_999, 10_000_000_000_000_000_000}

// token draws a uint64: often an edge or near one, otherwise any.
func token() *rapid.Generator[uint64] {
	return rapid.OneOf(
		rapid.Uint64(),
		rapid.SampledFrom(edges),
		rapid.Custom(func(t *rapid.T) uint64 {
			return rapid.SampledFrom(edges).Draw(t, "edge") + rapid.Uint64Range(0, 3).Draw(t, "plus") - rapid.Uint64Range(0, 3).Draw(t, "minus")
		}),
	)
}

// TestTokenHelpersAreExact runs the Lua token helpers on the server and
// checks them against math/big: comparisons, sums and maxima are exact for
// every uint64, the edges of doubles and of int64 included, and a decimal
// is valid exactly when it is a canonical token.
func TestTokenHelpersAreExact(t *testing.T) {
	c := faults.ValkeyClient(t, testserver.Valkey(t).Addr())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	probe := valkeyplumbing.TokenScript(probeLua, 3_600_000_000)
	rapid.Check(t, func(rt *rapid.T) {
		pairs := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) [2]uint64 {
			return [2]uint64{token().Draw(t, "a"), token().Draw(t, "b")}
		}), 1, 16).Draw(rt, "pairs")
		args := make([]string, 0, 2*len(pairs))
		for _, p := range pairs {
			args = append(args, strconv.FormatUint(p[0], 10), strconv.FormatUint(p[1], 10))
		}
		got, err := c.Do(ctx, c.B().Eval().Script(probe).Numkeys(0).Arg(args...).Build()).ToArray()
		if err != nil || len(got) != 4*len(pairs) {
			rt.Fatalf("probe %q: %v, %v", args, got, err)
		}
		for i, p := range pairs {
			a, b := new(big.Int).SetUint64(p[0]), new(big.Int).SetUint64(p[1])
			less, _ := got[4*i].AsInt64()
			sum, _ := got[4*i+1].ToString()
			greater, _ := got[4*i+2].ToString()
			valid, _ := got[4*i+3].AsInt64()
			if (less == 1) != (a.Cmp(b) < 0) {
				rt.Errorf("less(%d, %d) = %d", p[0], p[1], less)
			}
			if want := new(big.Int).Add(a, b).String(); sum != want {
				rt.Errorf("add(%d, %d) = %s; want %s", p[0], p[1], sum, want)
			}
			if want := strconv.FormatUint(max(p[0], p[1]), 10); greater != want {
				rt.Errorf("max(%d, %d) = %s; want %s", p[0], p[1], greater, want)
			}
			if (valid == 1) != (p[0] != 0) {
				rt.Errorf("valid(%d) = %d", p[0], valid)
			}
		}
	})
}

// TestTokenValidity: valid accepts canonical decimals of 1 to 20 digits
// and nothing else.
func TestTokenValidity(t *testing.T) {
	c := faults.ValkeyClient(t, testserver.Valkey(t).Addr())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	script := valkeyplumbing.TokenScript(`return tokens.valid(ARGV[1]) and 1 or 0`, 3_600_000_000)
	for s, want := range map[string]bool{
		"1": true, "18446744073709551615": true, "99999999999999999999": true,
		"": false, "0": false, "01": false, "-1": false, "+1": false, "1.0": false, "1e3": false, " 1": false,
		"1 ": false, "0x10": false, "100000000000000000000": false,
	} {
		got, err := c.Do(ctx, c.B().Eval().Script(script).Numkeys(0).Arg(s).Build()).AsInt64()
		if err != nil || (got == 1) != want {
			t.Errorf("valid(%q) = %d, %v; want %v", s, got, err, want)
		}
	}
}

// TestTokenLargest: the largest plausible token is the TIME reply in
// microseconds plus the lead, exactly, for any seconds, microseconds and
// lead.
func TestTokenLargest(t *testing.T) {
	c := faults.ValkeyClient(t, testserver.Valkey(t).Addr())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rapid.Check(t, func(rt *rapid.T) {
		sec := rapid.Uint64Range(1, 1<<44).Draw(rt, "seconds")
		usec := rapid.Uint64Range(0, 999_999).Draw(rt, "microseconds")
		lead := rapid.OneOf(rapid.Int64Range(0, math.MaxInt64), rapid.SampledFrom([]int64{0, 86_400_000_000, math.MaxInt64})).Draw(rt, "lead")
		script := valkeyplumbing.TokenScript(largestLua, lead)
		got, err := c.Do(ctx, c.B().Eval().Script(script).Numkeys(0).
			Arg(strconv.FormatUint(sec, 10), strconv.FormatUint(usec, 10)).Build()).AsStrSlice()
		if err != nil || len(got) != 2 {
			rt.Fatalf("largest: %q, %v", got, err)
		}
		now := new(big.Int).Add(new(big.Int).Mul(new(big.Int).SetUint64(sec), big.NewInt(1e6)), new(big.Int).SetUint64(usec))
		if got[0] != now.String() {
			rt.Errorf("clock(%d, %d) = %s; want %s", sec, usec, got[0], now)
		}
		if want := new(big.Int).Add(now, big.NewInt(lead)); got[1] != want.String() {
			rt.Errorf("largest(%d, %d) with lead %d = %s; want %s", sec, usec, lead, got[1], want)
		}
	})
}

// TestTokenScriptKeepsTheShebang: a script's "#!" line, which declares its
// flags, stays first (anywhere else it is a Lua syntax error), and a
// script without one gets the helpers too.
func TestTokenScriptKeepsTheShebang(t *testing.T) {
	src := "#!lua flags=no-writes\nreturn tokens.LEAD\n"
	got := valkeyplumbing.TokenScript(src, 1_000_000)
	if !strings.HasPrefix(got, "#!lua flags=no-writes\nlocal tokens = {LEAD = '1000000'}\n") || !strings.HasSuffix(got, "\nreturn tokens.LEAD\n") {
		t.Fatalf("TokenScript(%q) =\n%s", src, got)
	}
	c := faults.ValkeyClient(t, testserver.Valkey(t).Addr())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if v, err := c.Do(ctx, c.B().EvalRo().Script(got).Numkeys(0).Build()).ToString(); err != nil || v != "1000000" {
		t.Fatalf("EVAL_RO of the script = %q, %v; want the lead", v, err)
	}
	if v, err := c.Do(ctx, c.B().Eval().Script(valkeyplumbing.TokenScript("return tokens.LEAD", 1_000_000)).Numkeys(0).Build()).ToString(); err != nil || v != "1000000" {
		t.Fatalf("EVAL of a script without a shebang = %q, %v; want the lead", v, err)
	}
}
