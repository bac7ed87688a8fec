package leasetest

import (
	"context"
	"time"

	"github.com/golib/lease/lease"
)

func watchCases() []testCase {
	return []testCase{
		{"ReleaseWatcher/WakesOnRelease", func(e *env) {
			w, ok := e.b.(lease.ReleaseWatcher)
			if !ok {
				e.t.Skip("the backend does not implement lease.ReleaseWatcher")
			}
			key := e.key("k")
			other := e.key("other")
			a := e.acquire(key, "holder")
			b := e.acquire(other, "holder")
			ch, stop, err := w.WatchReleases(e.ctx(), key)
			if err != nil {
				e.t.Fatalf("WatchReleases: %v", err)
			}
			defer stop()
			// Spurious wake-ups are allowed (a listener that reconnects may
			// wake every watcher); drain them before the real test.
			if err := e.b.Release(e.ctx(), b); err != nil {
				e.t.Fatal(err)
			}
			for drained := false; !drained; {
				select {
				case <-ch:
				case <-time.After(100 * time.Millisecond):
					drained = true
				}
			}
			// Watches may need a moment to be registered on the server:
			// release, and if nothing arrives, acquire and release again.
			for i := 0; ; i++ {
				if err := e.b.Release(e.ctx(), a); err != nil {
					e.t.Fatal(err)
				}
				select {
				case <-ch:
					stop()
					stop() // stopping twice is harmless
					return
				case <-time.After(2 * time.Second):
				}
				if i == 2 {
					e.t.Fatal("no notification after three releases")
				}
				a = e.acquire(key, "holder")
			}
		}},
		{"ReleaseWatcher/ReleasedBeforeWatch", func(e *env) {
			// A waiter sets up its watch after an attempt found the key
			// held; a release in between must still wake it, once the
			// watch is in place.
			w, ok := e.b.(lease.ReleaseWatcher)
			if !ok {
				e.t.Skip("the backend does not implement lease.ReleaseWatcher")
			}
			key := e.key("k")
			if err := e.b.Release(e.ctx(), e.acquire(key, "holder")); err != nil {
				e.t.Fatal(err)
			}
			ch, stop, err := w.WatchReleases(e.ctx(), key)
			if err != nil {
				e.t.Fatalf("WatchReleases: %v", err)
			}
			defer stop()
			select {
			case <-ch:
			case <-time.After(10 * time.Second):
				e.t.Fatal("a watch set up after the key's release was not woken within 10s: a waiter that found the key held just before the release would sleep until the holder's lease would have ended")
			}
		}},
		{"ReleaseWatcher/CancelledSetup", func(e *env) {
			w, ok := e.b.(lease.ReleaseWatcher)
			if !ok {
				e.t.Skip("the backend does not implement lease.ReleaseWatcher")
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			ch, stop, err := w.WatchReleases(ctx, e.key("k"))
			if err == nil {
				if ch == nil || stop == nil {
					e.t.Fatal("WatchReleases returned no error but a nil channel or stop function")
				}
				stop()
			}
		}},
	}
}
