package valkey

import (
	"regexp"
	"strings"
	"testing"
)

// TestWithRecord checks that each script gets exactly the helpers of
// lua/record.lua that it calls, each once, after its shebang line.
func TestWithRecord(t *testing.T) {
	calls := regexp.MustCompile(`\brecord_[a-z_]+\(`)
	defines := regexp.MustCompile(`(?m)^local function (record_[a-z_]+)\(`)
	_, helpers := recordHelpers(recordLua)
	if len(helpers) < 11 {
		t.Fatalf("recordHelpers found %d helpers in record.lua, want at least 11", len(helpers))
	}
	for name, src := range map[string]string{
		"acquire": acquireLua, "renew": renewLua, "release": releaseLua,
		"acquire_permit": acquirePermitLua, "acquire_set": acquireSetLua,
		"renew_set": renewSetLua, "release_set": releaseSetLua,
	} {
		got := withRecord(src)
		if !strings.HasPrefix(got, "#!lua\n-- record:") {
			t.Errorf("%s: does not start with the shebang and record.lua's header", name)
		}
		want := map[string]bool{}
		for _, c := range calls.FindAllString(src, -1) {
			want[strings.TrimSuffix(c, "(")] = true
		}
		if len(want) == 0 {
			t.Errorf("%s calls no helper", name)
		}
		seen := map[string]bool{}
		for _, m := range defines.FindAllStringSubmatch(got, -1) {
			if seen[m[1]] {
				t.Errorf("%s: %s defined twice", name, m[1])
			}
			seen[m[1]] = true
			if !want[m[1]] {
				t.Errorf("%s: gets %s, which it does not call", name, m[1])
			}
		}
		for h := range want {
			if !seen[h] {
				t.Errorf("%s: calls %s but does not get it", name, h)
			}
		}
		if !strings.HasSuffix(got, strings.SplitN(src, "\n", 2)[1]) {
			t.Errorf("%s: its body is not at the end", name)
		}
	}
}
