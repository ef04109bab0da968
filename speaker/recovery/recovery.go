// Package recovery decides whether this speaker is recovering: the
// cluster counted it out lately (memberlist declared it dead and it
// refuted, or it was isolated for MinIsolation or more), so it should not win addresses back from
// healthy nodes yet.
//
// Fast failure detection (a hard failover under a second) cannot tell a
// dead speaker from one paused for half a second, as a speaker starved of
// CPU is again and again. Without hysteresis each such pause moves its
// addresses away and, a moment later, back. A recovering speaker
// publishes the fact in its memberlist metadata and the election ranks it
// after every healthy candidate, so a flapping speaker loses its
// addresses once and takes them back only after Hold without being
// counted out again, so they move back once, not on every flap.
package recovery

import (
	"sync"
	"time"
)

// MinIsolation is how long an isolation must last to count this speaker
// out. A speaker finds itself isolated when its memberlist view lost the
// others, which is also what it sees when another speaker, not it, was
// too slow to answer probes for a moment: in a cluster of two the
// healthy one is then the "minority" by the tie-break. Counting that out
// moved its addresses to the slow node and back. A shorter isolation is
// a blip: the speaker answered nothing meanwhile, and if the others did
// declare it dead, its refutation of their dead message counts it out
// (CountedOut); the takeover check keeps two nodes from answering at
// once. Measured blips under load isolated a speaker for 0.3–0.44 s; a
// cut the others act on lasts at least their lone suspicion time
// (1.8 s with herald's memberlist timers).
const MinIsolation = 2 * time.Second

// Tracker records when the cluster last counted this speaker out. It has
// no side effects and takes its clock from the caller; the zero Hold
// disables it (never recovering).
type Tracker struct {
	hold time.Duration
	now  func() time.Time

	mu   sync.Mutex
	last time.Time
	// isolatedSince is when the current isolation began; zero: none.
	isolatedSince time.Time
}

// NewTracker returns a tracker that keeps the speaker recovering for hold
// after the last time it was counted out; now nil is time.Now.
func NewTracker(hold time.Duration, now func() time.Time) *Tracker {
	if now == nil {
		now = time.Now
	}
	return &Tracker{hold: hold, now: now}
}

// CountedOut records that the cluster counted this speaker out now.
func (t *Tracker) CountedOut() {
	if t == nil || t.hold <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.last = t.now()
}

// Isolation records whether this speaker is isolated at this sync. An
// isolation that has lasted MinIsolation counts it out at every sync,
// the one that ends it included, so the hold starts when it ends.
func (t *Tracker) Isolation(isolated bool) {
	if t == nil || t.hold <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if isolated && t.isolatedSince.IsZero() {
		t.isolatedSince = now
	}
	if !t.isolatedSince.IsZero() && now.Sub(t.isolatedSince) >= MinIsolation {
		t.last = now
	}
	if !isolated {
		t.isolatedSince = time.Time{}
	}
}

// LastCountedOut is when the cluster last counted this speaker out
// (zero: never, or a nil or disabled Tracker).
func (t *Tracker) LastCountedOut() time.Time {
	if t == nil || t.hold <= 0 {
		return time.Time{}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}

// Recovering tells whether the speaker is recovering and, if so, how long
// that lasts unless it is counted out again. A nil Tracker never is.
func (t *Tracker) Recovering() (bool, time.Duration) {
	if t == nil || t.hold <= 0 {
		return false, 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.last.IsZero() {
		return false, 0
	}
	left := t.hold - t.now().Sub(t.last)
	if left <= 0 {
		return false, 0
	}
	return true, left
}
