package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golib/lease/backends/memory"
	"github.com/golib/lease/lease"
)

// TestWatchHandOffMemory follows a key of the memory backend, the
// reference of the hand-off contract, through a hand-off, the
// candidate's acquisition and its expiry, and prints the offer with
// inspect. watch reads every hour: only Observe's change notifications
// and its read when the holder's time runs out show the changes in time.
// The tests against Valkey and PostgreSQL (watch_test.go) run the binary.
func TestWatchHandOffMemory(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := memory.New(memory.Options{})
	tgt := &target{backend: store, scope: "memory"}
	client := func(owner string) *lease.Client {
		c, err := lease.NewClient(store, lease.ClientOptions{Owner: owner, SweepEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	long, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	h, err := client("pod-a").TryAcquire(ctx, "reports", long)
	if err != nil {
		t.Fatal(err)
	}

	pr, pw := io.Pipe()
	wctx, stop := context.WithCancel(ctx)
	c := &cli{cfg: config{timeout: 5 * time.Second}, out: &countingWriter{w: pw}, errOut: io.Discard, getenv: os.Getenv}
	done := make(chan error, 1)
	go func() {
		done <- c.watch(wctx, tgt, "reports", time.Hour)
		pw.Close()
	}()
	lines := make(chan string, 10)
	go func() {
		defer close(lines)
		s := bufio.NewScanner(pr)
		for s.Scan() {
			lines <- s.Text()
		}
		io.Copy(io.Discard, pr)
	}()
	next := func(want ...string) {
		t.Helper()
		select {
		case l := <-lines:
			t.Logf("watch: %s", l)
			for _, s := range want {
				if !strings.Contains(l, s) {
					t.Fatalf("watch printed %q, want %q in it", l, s)
				}
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("no line from watch within 20s, want one with %q", want)
		}
	}
	inspect := func(want ...string) {
		t.Helper()
		var buf bytes.Buffer
		ic := &cli{cfg: config{timeout: 5 * time.Second}, out: &countingWriter{w: &buf}, errOut: io.Discard, getenv: os.Getenv}
		if err := ic.inspect(ctx, tgt, "reports"); err != nil {
			t.Fatal(err)
		}
		t.Logf("inspect:\n%s", buf.String())
		for _, s := range want {
			if !strings.Contains(buf.String(), s) {
				t.Fatalf("inspect printed\n%s\nwant %q in it", buf.String(), s)
			}
		}
	}

	next("held", `owner="pod-a" token=`+h.Token().String())
	_, err = store.Acquire(ctx, lease.AcquireRequest{Key: "reports", Owner: "pod-b", Nonce: "b-nonce", TTL: time.Minute, Preferred: true})
	if err == nil {
		t.Fatal("pod-b acquired a held key")
	}
	next("preferred", `preferred="pod-b"`, `owner="pod-a"`)
	inspect("PREFERRED", "pod-b")

	if err := h.HandOff(ctx, lease.Offer{Candidates: []string{"pod-b", "pod-c"}, Window: 50 * time.Second}); err != nil {
		t.Fatal(err)
	}
	r, err := store.Inspect(ctx, "reports")
	if err != nil {
		t.Fatal(err)
	}
	next("handed-off", "token="+r.Token.String(), `offered to "pod-b", "pod-c"`, `by owner="pod-a"`, "was token="+h.Token().String())
	inspect("offered", "CANDIDATES", "pod-b,pod-c", "ENDED", "handed-off", r.Token.String())

	short, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	hb, err := client("pod-b").TryAcquire(ctx, "reports", short)
	if err != nil {
		t.Fatal(err)
	}
	if hb.Token() != r.Token {
		t.Fatalf("pod-b's token %d, want the offered %d", hb.Token(), r.Token)
	}
	next("acquired", `owner="pod-b" token=`+r.Token.String())
	next("expired", `(was owner="pod-b" token=`+r.Token.String())
	inspect("free", "ENDED", "expired")

	stop()
	if err := <-done; err != nil {
		t.Fatalf("watch ended with %v, want nil after its context ended", err)
	}
}

// TestReleaseOfferMemory force-releases a key that a hand-off offers to
// its candidates: the dry run says it would end the offer, the release
// ends it (exit 0, not "not held"), and the key is free for anyone.
func TestReleaseOfferMemory(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := memory.New(memory.Options{})
	tgt := &target{backend: store, forcer: store, scope: "memory"}
	a, err := lease.NewClient(store, lease.ClientOptions{Owner: "pod-a", SweepEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	h, err := a.TryAcquire(ctx, "reports", p)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.HandOff(ctx, lease.Offer{Candidates: []string{"pod-b"}}); err != nil {
		t.Fatal(err)
	}
	r, err := store.Inspect(ctx, "reports")
	if err != nil {
		t.Fatal(err)
	}
	release := func(token lease.Token, yes bool, want ...string) error {
		t.Helper()
		var buf bytes.Buffer
		c := &cli{cfg: config{timeout: 5 * time.Second}, out: &countingWriter{w: &buf}, errOut: io.Discard, getenv: os.Getenv}
		err := c.release(ctx, tgt, "reports", token, yes)
		t.Logf("release --token %d (yes %v): %v\n%s", token, yes, err, buf.String())
		for _, s := range want {
			if !strings.Contains(buf.String(), s) && (err == nil || !strings.Contains(err.Error(), s)) {
				t.Fatalf("release printed\n%s(error %v), want %q in it", buf.String(), err, s)
			}
		}
		return err
	}
	if err := release(0, false, `dry run: would end the offer of "reports" to "pod-b"`, "nothing changed"); err != nil {
		t.Fatalf("dry run of the release of an offer: %v, want nil", err)
	}
	if err := release(r.Token+1, true, `"reports" is offered to "pod-b" with token`); err == nil {
		t.Fatal("release of an offer with another token succeeded")
	}
	if err := release(r.Token, true, `ended the offer of "reports" to "pod-b"`, "free now"); err != nil {
		t.Fatalf("release of an offer: %v, want nil", err)
	}
	tok, err := store.Acquire(ctx, lease.AcquireRequest{Key: "reports", Owner: "pod-c", Nonce: "c-nonce", TTL: time.Minute})
	if err != nil || tok <= r.Token {
		t.Fatalf("pod-c's acquire after the offer ended: token %d, %v; want one above %d", tok, err, r.Token)
	}
}
