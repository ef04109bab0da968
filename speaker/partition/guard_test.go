package partition

import (
	"testing"
	"time"
)

// NewTracker is a Guard with only isolation on, as the heartbeat sees it.
func NewTracker(self string, window time.Duration, now func() time.Time) *Guard {
	return New(Config{Self: self, Window: window, Now: now})
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

var (
	alone = Alone("node1")
	whole = Standing{Self: "node1", Live: []string{"node1", "node2", "node3"}}
)

func TestIsolated(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	const w = 3 * time.Second
	tr := NewTracker("node1", w, c.now)

	if tr.Isolated(whole) {
		t.Fatal("a speaker with peers is never isolated")
	}
	// Alone, with nobody else renewing: held back for one window only.
	if !tr.Isolated(alone) {
		t.Error("just found alone: must hold back for a window")
	}
	c.advance(w)
	if tr.Isolated(alone) {
		t.Error("alone for a window with no foreign renewal: the others are gone, take over")
	}
	// Another speaker renews: isolated again, for as long as it does.
	tr.Observe("node2", c.t)
	if !tr.Isolated(alone) {
		t.Error("node2 renewed just now: isolated")
	}
	c.advance(w - time.Millisecond)
	if !tr.Isolated(alone) {
		t.Error("node2's renewal is still within the window")
	}
	c.advance(time.Millisecond)
	if tr.Isolated(alone) {
		t.Error("node2 stopped renewing a window ago: not isolated")
	}
	// Its own renewals prove nothing; an old renewal does not move the
	// last sighting back.
	tr.Observe("node1", c.t)
	tr.Observe("node2", c.t.Add(-time.Hour))
	if tr.Isolated(alone) {
		t.Error("own renewal or an old one counted as a live peer")
	}
	// Peers back, then alone again: a new hold-down.
	tr.Isolated(whole)
	if !tr.Isolated(alone) {
		t.Error("alone again: hold back for a window")
	}
}

func TestShouldRenew(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	tr := NewTracker("node1", time.Second, c.now)
	if !tr.ShouldRenew(true, whole) {
		t.Error("the lowest member with peers renews")
	}
	if tr.ShouldRenew(false, whole) {
		t.Error("only the lowest member renews")
	}
	tr.Observe("node2", c.t)
	if tr.ShouldRenew(true, alone) {
		t.Error("an isolated speaker must not renew over the real cluster's heartbeat")
	}
	c.advance(2 * time.Second)
	if !tr.ShouldRenew(true, alone) {
		t.Error("the last speaker standing renews")
	}
}
