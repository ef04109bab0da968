package layer2

import (
	"context"
	"testing"
	"time"
)

// TestWake: ticks closer than Pause keep it awake; a longer gap is a
// pause, seen before the next tick (a responder that runs first) and for
// Quiet after the tick that ends it.
func TestWake(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 2, 0, 0, 0, time.UTC)
	w := NewWake(500*time.Millisecond, time.Second, t0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for i := 1; i <= 10; i++ {
		if gap := w.Tick(at(time.Duration(i) * 150 * time.Millisecond)); gap != 0 {
			t.Fatalf("tick %d, 150 ms apart: a pause of %s", i, gap)
		}
	}
	last := at(1500 * time.Millisecond)
	if !w.Awake(last.Add(400 * time.Millisecond)) {
		t.Fatal("400 ms after a tick: not awake")
	}
	// Stopped for 3 s: a request handled before the ticker runs again.
	if w.Awake(last.Add(3 * time.Second)) {
		t.Fatal("3 s after the last tick: awake")
	}
	end := last.Add(3 * time.Second)
	if gap := w.Tick(end); gap != 3*time.Second {
		t.Fatalf("the tick after 3 s: pause %s", gap)
	}
	if w.Awake(end.Add(900 * time.Millisecond)) {
		t.Fatal("900 ms after the pause ended: awake, want quiet for 1 s")
	}
	w.Tick(end.Add(400 * time.Millisecond))
	w.Tick(end.Add(800 * time.Millisecond))
	if !w.Awake(end.Add(time.Second)) {
		t.Fatal("1 s after the pause ended, ticking: not awake")
	}
}

// TestResponderPaused: while Wake says the process was just paused, a
// request for an announced IP is not answered (counted as paused), and
// no gratuitous announcement goes out; awake again, both are.
func TestResponderPaused(t *testing.T) {
	g := &rig{arp: newFakeConn(), ndp: newFakeConn(), groups: &fakeGroups{}, a: announced(), clock: newFakeClock()}
	start := time.Now()
	wake := NewWake(time.Hour, time.Hour, start)
	wake.Tick(start.Add(2 * time.Hour)) // a pause ended just now: quiet for an hour
	r, err := NewResponder(ourIf, Sockets{ARP: g.arp, NDP: g.ndp, Groups: g.groups}, g.a, Options{Wake: wake})
	if err != nil {
		t.Fatal(err)
	}
	g.r = r
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel, g.done = cancel, make(chan error, 1)
	go func() { g.done <- r.Run(ctx) }()
	t.Cleanup(func() { g.stop(t) })

	g.arp.feed(t, arpReq().bytes())
	g.ndp.feed(t, nsReq().bytes())
	if err := r.Gratuitous(vip4); err != nil {
		t.Fatal(err)
	}
	g.arp.sync(t)
	g.ndp.sync(t)
	g.arp.none(t)
	g.ndp.none(t)
	if got := r.Stats().Ignored[ReasonPaused]; got != 2 {
		t.Errorf("paused: %d requests counted, want 2", got)
	}

	wake.mu.Lock()
	wake.quiet = time.Time{} // awake
	wake.mu.Unlock()
	g.arp.feed(t, arpReq().bytes())
	g.arp.next(t)
}
