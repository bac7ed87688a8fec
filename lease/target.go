package lease

import (
	"context"
	"errors"
	"reflect"
	"sync"
)

// kind is what one acquire call acquires.
type kind uint8

const (
	leaseKind  kind = iota // one key: Backend.Acquire
	permitKind             // one permit of a semaphore: PermitAcquirer
	setKind                // every key of a set: SetAcquirer
)

// target is what one Acquire, AcquirePermit or AcquireSet call acquires:
// the loop of Client.acquire is the same for all three, and asks target
// what one attempt is, which keys a waiter watches and how to clean up.
type target struct {
	kind kind
	op   string // "acquire", "acquire permit" or "acquire set", for errors
	// key names the call in errors and events: the lease key, the
	// semaphore's key, or the set's keys joined by ",".
	key     string
	permits int            // permitKind
	keys    []string       // setKind: sorted, without duplicates
	pa      PermitAcquirer // permitKind
	sa      SetAcquirer    // setKind
}

// grant is what one successful attempt got.
type grant struct {
	key   string // the handle's key: the lease key, the permit key, or target.key
	slot  int    // permitKind
	token Token
}

// attempt asks the backend once.
func (t *target) attempt(ctx context.Context, b Backend, req AcquireRequest) (grant, error) {
	switch t.kind {
	case permitKind:
		slot, tok, err := t.pa.AcquirePermit(ctx, req, t.permits)
		if err != nil {
			return grant{}, permitsHeld(t.permits, err)
		}
		return grant{key: PermitKey(t.key, slot), slot: slot, token: tok}, nil
	case setKind:
		tok, err := t.sa.AcquireSet(ctx, t.keys, req)
		return grant{key: t.key, token: tok}, nameMember(t.key, err)
	}
	tok, err := b.Acquire(ctx, req)
	return grant{key: t.key, token: tok}, err
}

// watched returns the keys whose release may let a refused attempt
// succeed: the lease key, every permit key below the number of permits,
// or every key of the set.
func (t *target) watched() []string {
	switch t.kind {
	case permitKind:
		keys := make([]string, t.permits)
		for i := range keys {
			keys[i] = PermitKey(t.key, i)
		}
		return keys
	case setKind:
		return t.keys
	}
	return []string{t.key}
}

// cleanup releases, under ctx, what the attempts of acquisition a may
// have granted: g if an attempt was granted too late (g.token is then not
// 0), and, if anyUnanswered, whatever an unanswered attempt may have
// granted (identified by nonce alone, token 0): for a semaphore, any of
// its permits below the number of permits. It returns nil if a release
// ended a grant, an error matching ErrLost if every release found nothing
// held, and otherwise the first other error.
func (t *target) cleanup(ctx context.Context, b Backend, a Acquisition, g grant, anyUnanswered bool) error {
	switch t.kind {
	case permitKind:
		if !anyUnanswered {
			a.Key = g.key // a late grant: that permit only
			return b.Release(ctx, a)
		}
		// Any slot may have been granted; with token 0 each release ends
		// only a grant to this acquisition's nonce.
		a.Token = 0
		var lost, failed error
		ended := false
		for i := range t.permits {
			a.Key = PermitKey(t.key, i)
			switch err := b.Release(ctx, a); {
			case err == nil:
				ended = true
			case errors.Is(err, ErrLost):
				lost = err
			case failed == nil:
				failed = err
			}
		}
		switch {
		case failed != nil:
			return failed
		case ended:
			return nil
		}
		return lost
	case setKind:
		if anyUnanswered {
			a.Token = 0
		}
		return t.sa.ReleaseSet(ctx, t.keys, a)
	}
	if anyUnanswered {
		a.Token = 0
	}
	return b.Release(ctx, a)
}

// watch sets up one release watch on every key of keys with w, all or
// none: it returns one channel that receives a value after any of them is
// released, and a function that stops every watch.
func watch(ctx context.Context, w ReleaseWatcher, keys []string) (<-chan struct{}, func(), error) {
	if len(keys) == 1 {
		return w.WatchReleases(ctx, keys[0])
	}
	chans := make([]<-chan struct{}, 0, len(keys))
	stops := make([]func(), 0, len(keys))
	stopAll := func() {
		for _, stop := range stops {
			stop()
		}
	}
	for _, k := range keys {
		ch, stop, err := w.WatchReleases(ctx, k)
		if err != nil {
			stopAll()
			return nil, nil, err
		}
		chans, stops = append(chans, ch), append(stops, stop)
	}
	// One goroutine forwards a value from any of the channels, however
	// many there are: a semaphore may have MaxPermits of them.
	out := make(chan struct{}, 1)
	done := make(chan struct{})
	cases := make([]reflect.SelectCase, 0, len(chans)+1)
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(done)})
	for _, ch := range chans {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			if i, _, _ := reflect.Select(cases); i == 0 {
				return
			}
			select {
			case out <- struct{}{}:
			default: // a wake-up is already pending
			}
		}
	})
	var once sync.Once
	return out, func() {
		once.Do(func() {
			close(done)
			wg.Wait()
			stopAll()
		})
	}, nil
}
