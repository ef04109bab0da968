// Package recovery decides whether this speaker is recovering: the
// cluster counted it out lately (memberlist declared it dead and it
// refuted, or it was isolated), so it should not win addresses back from
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

// Tracker records when the cluster last counted this speaker out. It has
// no side effects and takes its clock from the caller; the zero Hold
// disables it (never recovering).
type Tracker struct {
	hold time.Duration
	now  func() time.Time

	mu   sync.Mutex
	last time.Time
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
