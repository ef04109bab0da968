// Package heartbeat tells a speaker that is alone in memberlist whether it
// is isolated (the other speakers are alive and elect without it) or the
// last one standing, from a Lease in the API that the speakers renew.
//
// The lowest-named live member of each memberlist view renews the Lease
// every period, so the API carries a heartbeat of the cluster for one
// write per period however many nodes there are. A speaker alone in its
// view is isolated while another speaker renewed the Lease within the
// window, and for one window after it found itself alone (the others may
// not have renewed yet): it then announces only the addresses no other
// node may announce. A speaker whose peers really died takes their
// addresses over once the window has passed without a foreign renewal.
package heartbeat

import (
	"sync"
	"time"
)

// LeaseName is the Lease in herald's namespace that carries the heartbeat.
const LeaseName = "herald-speakers"

// Tracker is the decision, from renewals observed and membership; it has
// no side effects and takes its clock from the caller.
type Tracker struct {
	self   string
	window time.Duration
	now    func() time.Time

	mu          sync.Mutex
	lastForeign time.Time // when another speaker's renewal was last seen
	lonelySince time.Time // zero while this speaker has peers
}

// NewTracker returns a tracker for this speaker; window is how recent
// another speaker's renewal must be to count as proof that it is alive.
func NewTracker(self string, window time.Duration, now func() time.Time) *Tracker {
	if now == nil {
		now = time.Now
	}
	return &Tracker{self: self, window: window, now: now}
}

// Observe records a renewal of the Lease by holder at renewed. A renewal
// by this speaker is not evidence of anyone else.
func (t *Tracker) Observe(holder string, renewed time.Time) {
	if holder == "" || holder == t.self {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if renewed.After(t.lastForeign) {
		t.lastForeign = renewed
	}
}

// Isolated tells whether a speaker with no peer in memberlist (lonely)
// must hold back: another speaker renewed within the window, or it has
// been alone for less than a window. Not lonely is never isolated.
func (t *Tracker) Isolated(lonely bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if !lonely {
		t.lonelySince = time.Time{}
		return false
	}
	if t.lonelySince.IsZero() {
		t.lonelySince = now
	}
	return now.Sub(t.lonelySince) < t.window || now.Sub(t.lastForeign) < t.window
}

// ShouldRenew tells whether this speaker renews the Lease: it is the
// lowest-named member of its view (first) and not isolated. An isolated
// speaker never renews, so it cannot hide the real cluster's heartbeat.
func (t *Tracker) ShouldRenew(first, lonely bool) bool {
	return first && !t.Isolated(lonely)
}
