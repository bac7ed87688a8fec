package testserver

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// recordTB records how a test would have ended instead of ending it.
type recordTB struct {
	testing.TB
	skipped, failed string
}

func (r *recordTB) Helper()                           {}
func (r *recordTB) Skipf(format string, args ...any)  { r.skipped = fmt.Sprintf(format, args...) }
func (r *recordTB) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestUnavailable(t *testing.T) {
	cause := errors.New("valkey-server not found")
	for _, tc := range []struct {
		require  string
		wantSkip bool
	}{
		{"", true},
		{"0", true},
		{"yes", true},
		{"1", false},
	} {
		t.Run("LEASE_REQUIRE_SERVERS="+tc.require, func(t *testing.T) {
			t.Setenv(envRequireServers, tc.require)
			rec := &recordTB{TB: t}
			unavailable(rec, "no shared Valkey server", cause)
			if tc.wantSkip {
				if rec.failed != "" || rec.skipped == "" {
					t.Fatalf("failed %q, skipped %q; want a skip", rec.failed, rec.skipped)
				}
				for _, want := range []string{"valkey-server not found", "make test", envValkeyAddr, envPostgresURL} {
					if !strings.Contains(rec.skipped, want) {
						t.Errorf("skip message %q does not mention %q", rec.skipped, want)
					}
				}
				return
			}
			if rec.skipped != "" || rec.failed == "" {
				t.Fatalf("failed %q, skipped %q; want a failure", rec.failed, rec.skipped)
			}
			if !strings.Contains(rec.failed, "valkey-server not found") {
				t.Errorf("failure %q does not give the reason", rec.failed)
			}
		})
	}
}

func TestDatabaseName(t *testing.T) {
	for _, tc := range []struct {
		test string
		want string
	}{
		{"TestX", "test_testx_7_1"},
		{"TestA/sub case#01", "test_testa_sub_case_01_7_1"},
		{"__Ünïcode--", "test_n_code_7_1"},
		{strings.Repeat("TestLong/", 10), "test_testlong_testlong_testlong_testlong_test_7_1"},
	} {
		got := databaseName(tc.test, 7, 1)
		if got != tc.want {
			t.Errorf("databaseName(%q) = %q; want %q", tc.test, got, tc.want)
		}
		if len(got) > 63 {
			t.Errorf("databaseName(%q) = %q is longer than 63 bytes", tc.test, got)
		}
	}
}

func TestLogTail(t *testing.T) {
	path := t.TempDir() + "/log"
	if got := logTail(path); got != "" {
		t.Errorf("logTail(missing) = %q; want empty", got)
	}
	var b strings.Builder
	for i := range 100 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	writeFile(t, path, b.String())
	got := logTail(path)
	if !strings.Contains(got, "line 99") || strings.Contains(got, "line 79\n") || !strings.Contains(got, "line 80") {
		t.Errorf("logTail = %q; want the last %d lines", got, logLines)
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
