package leasetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/golib/lease/leasetest"
)

var start = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func TestFakeClockFiresTimersInOrder(t *testing.T) {
	c := leasetest.NewFakeClock(start)
	late := c.NewTimer(3 * time.Second)
	early := c.NewTimer(time.Second)
	stopped := c.NewTimer(2 * time.Second)
	if !stopped.Stop() {
		t.Fatal("Stop of a pending timer reported false")
	}
	if stopped.Stop() {
		t.Fatal("second Stop reported true")
	}
	if n := c.Timers(); n != 2 {
		t.Fatalf("%d timers pending, want 2", n)
	}
	c.Advance(999 * time.Millisecond)
	select {
	case <-early.C():
		t.Fatal("timer fired before its deadline")
	default:
	}
	c.Advance(time.Millisecond)
	if got := <-early.C(); !got.Equal(start.Add(time.Second)) {
		t.Fatalf("early timer delivered %v, want its deadline", got)
	}
	c.Advance(time.Hour)
	if got := <-late.C(); !got.Equal(start.Add(3 * time.Second)) {
		t.Fatalf("late timer delivered %v, want its deadline", got)
	}
	select {
	case <-stopped.C():
		t.Fatal("a stopped timer fired")
	default:
	}
	if late.Stop() {
		t.Fatal("Stop of a fired timer reported true")
	}
	if now := c.Now(); !now.Equal(start.Add(time.Hour + time.Second)) {
		t.Fatalf("Now = %v", now)
	}
}

func TestFakeClockZeroTimerAndStepBack(t *testing.T) {
	c := leasetest.NewFakeClock(start)
	select {
	case <-c.NewTimer(0).C():
	default:
		t.Fatal("a timer of 0 did not fire at once")
	}
	tm := c.NewTimer(time.Minute)
	c.Set(start.Add(-time.Hour)) // the clock steps back: the timer fires later
	select {
	case <-tm.C():
		t.Fatal("timer fired when the clock stepped back")
	default:
	}
	c.Set(start.Add(time.Minute))
	<-tm.C()
}

func TestFakeClockWaitForTimers(t *testing.T) {
	c := leasetest.NewFakeClock(start)
	go func() {
		time.Sleep(10 * time.Millisecond)
		c.NewTimer(time.Second)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitForTimers(ctx, 1); err != nil {
		t.Fatalf("WaitForTimers: %v", err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	if err := c.WaitForTimers(short, 2); err == nil {
		t.Fatal("WaitForTimers(2) returned without a second timer")
	}
}
