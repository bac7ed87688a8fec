package testserver

import (
	"strings"
	"testing"
)

// A server that won't start is reported with the reason from its log.
func TestStartFailureShowsLog(t *testing.T) {
	if _, err := valkeyBin.get(findValkey); err != nil {
		unavailable(t, "no valkey-server", err)
	}
	_, err := startValkeyProc(valkeyConfig{extra: []string{"--no-such-option", "1"}})
	if err == nil {
		t.Fatal("valkey-server started with a bad option")
	}
	t.Logf("error: %v", err)
	for _, want := range []string{"exited while starting", "--- last lines of", "no-such-option"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
