package testserver_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/golib/lease/internal/testkit/testserver"
)

func newValkeyClient(t *testing.T, addrs ...string) valkey.Client {
	t.Helper()
	client, err := valkey.NewClient(valkey.ClientOption{
		InitAddress:       addrs,
		ForceSingleClient: len(addrs) == 1,
		DisableCache:      true,
		DisableRetry:      true,
	})
	if err != nil {
		t.Fatalf("valkey.NewClient(%v): %v", addrs, err)
	}
	t.Cleanup(client.Close)
	return client
}

// valkeyVersion returns the server's version from INFO server.
func valkeyVersion(ctx context.Context, t *testing.T, client valkey.Client) string {
	t.Helper()
	info, err := client.Do(ctx, client.B().Info().Section("server").Build()).ToString()
	if err != nil {
		t.Fatalf("INFO server: %v", err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "valkey_version:"); ok {
			return v
		}
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return "redis " + v
		}
	}
	return "unknown"
}

func TestSharedValkey(t *testing.T) {
	t.Parallel()
	v := testserver.Valkey(t)
	client := newValkeyClient(t, v.Addr())
	ctx := t.Context()
	if got, err := client.Do(ctx, client.B().Ping().Build()).ToString(); err != nil || got != "PONG" {
		t.Fatalf("PING = %q, %v; want PONG", got, err)
	}
	t.Logf("shared Valkey %s at %s", valkeyVersion(ctx, t, client), v.Addr())
	if testserver.Valkey(t) != v {
		t.Errorf("second Valkey(t) returned a different server")
	}
}

func TestValkeyPauseResume(t *testing.T) {
	t.Parallel()
	srv := testserver.StartValkey(t, testserver.ValkeyOptions{})
	client := newValkeyClient(t, srv.Addr())
	ctx := t.Context()
	t.Logf("dedicated Valkey %s at %s, pid %d", valkeyVersion(ctx, t, client), srv.Addr(), srv.PID())
	if err := client.Do(ctx, client.B().Arbitrary("DEBUG", "SLEEP", "0").Build()).Error(); err != nil {
		t.Errorf("DEBUG SLEEP 0: %v (want the DEBUG command enabled)", err)
	}

	srv.Pause()
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := client.Do(short, client.B().Ping().Build()).Error()
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("PING to a paused server: %v; want %v", err, context.DeadlineExceeded)
	}

	srv.Resume()
	// The timed-out command may have taken the connection with it; a new
	// client shows the server itself answers again.
	client = newValkeyClient(t, srv.Addr())
	if err := client.Do(ctx, client.B().Ping().Build()).Error(); err != nil {
		t.Errorf("PING after Resume: %v", err)
	}
}

func TestValkeyKillRestart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		appendOnly bool
		wantKept   bool
	}{
		{"NoPersistence", false, false},
		{"AppendOnlyAlways", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := testserver.StartValkey(t, testserver.ValkeyOptions{AppendOnly: tc.appendOnly})
			ctx := t.Context()
			client := newValkeyClient(t, srv.Addr())
			if err := client.Do(ctx, client.B().Set().Key("k").Value("v").Build()).Error(); err != nil {
				t.Fatalf("SET: %v", err)
			}
			pid := srv.PID()
			srv.Kill()
			if got := srv.PID(); got != 0 {
				t.Errorf("PID after Kill = %d; want 0", got)
			}
			srv.Restart()
			if got := srv.PID(); got == 0 || got == pid {
				t.Errorf("PID after Restart = %d; want a new process (was %d)", got, pid)
			}
			client = newValkeyClient(t, srv.Addr())
			got, err := client.Do(ctx, client.B().Get().Key("k").Build()).ToString()
			switch {
			case tc.wantKept && (err != nil || got != "v"):
				t.Errorf("GET after kill -9 and restart = %q, %v; want the key kept", got, err)
			case !tc.wantKept && !valkey.IsValkeyNil(err):
				t.Errorf("GET after kill -9 and restart = %q, %v; want the key gone", got, err)
			}

			srv.Stop()
			srv.Restart()
			client = newValkeyClient(t, srv.Addr())
			_, err = client.Do(ctx, client.B().Get().Key("k").Build()).ToString()
			if kept := err == nil; kept != tc.wantKept {
				t.Errorf("GET after stop and restart: %v; want kept=%v", err, tc.wantKept)
			}
		})
	}
}
