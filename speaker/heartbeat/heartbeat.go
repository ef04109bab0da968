// Package heartbeat tells a speaker whose memberlist view is a minority
// of the speakers it knows of (alone, or one side of a partition) whether
// it is isolated (the other speakers are alive and elect without it) or
// what is left of the cluster, from a Lease in the API that the speakers
// renew.
//
// The lowest-named live member of each memberlist view renews the Lease
// every period, so the API carries a heartbeat of the cluster for one
// write per period however many nodes there are. A speaker in a minority
// (Standing.Minority) is isolated while a speaker outside its view
// renewed the Lease within the window, and for one window after it found
// itself in a minority (the others may not have renewed yet): it then
// announces only the addresses no other node may announce. A minority
// whose peers really died takes their addresses over once the window has
// passed without a renewal from outside.
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

	mu sync.Mutex
	// renewed is when each other speaker's renewal was last seen: in a
	// partition both sides' lowest members renew, and only a renewal
	// from outside the view is evidence of the others.
	renewed       map[string]time.Time
	minoritySince time.Time // zero while the view holds a majority
}

// NewTracker returns a tracker for this speaker; window is how recent
// another speaker's renewal must be to count as proof that it is alive.
func NewTracker(self string, window time.Duration, now func() time.Time) *Tracker {
	if now == nil {
		now = time.Now
	}
	return &Tracker{self: self, window: window, now: now, renewed: map[string]time.Time{}}
}

// Observe records a renewal of the Lease by holder at renewed. A renewal
// by this speaker is not evidence of anyone else.
func (t *Tracker) Observe(holder string, renewed time.Time) {
	if holder == "" || holder == t.self {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if renewed.After(t.renewed[holder]) {
		t.renewed[holder] = renewed
	}
}

// Isolated tells whether a speaker with standing s must hold back: its
// view is a minority, and a speaker outside it renewed within the window
// or the view has been a minority for less than a window. A majority is
// never isolated.
func (t *Tracker) Isolated(s Standing) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if !s.Minority() {
		t.minoritySince = time.Time{}
		return false
	}
	if t.minoritySince.IsZero() {
		t.minoritySince = now
	}
	if now.Sub(t.minoritySince) < t.window {
		return true
	}
	for holder, at := range t.renewed {
		if now.Sub(at) < t.window && s.Outside(holder) {
			return true
		}
	}
	return false
}

// ShouldRenew tells whether this speaker renews the Lease: it is the
// lowest-named member of its view (first) and not isolated. An isolated
// speaker never renews, so another minority cannot take its renewal for
// the rest of the cluster.
func (t *Tracker) ShouldRenew(first bool, s Standing) bool {
	return first && !t.Isolated(s)
}
