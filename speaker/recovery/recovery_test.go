package recovery

import (
	"testing"
	"time"
)

func TestTracker(t *testing.T) {
	now := time.Unix(1000, 0)
	tr := NewTracker(30*time.Second, func() time.Time { return now })
	if r, _ := tr.Recovering(); r {
		t.Fatal("a speaker never counted out is not recovering (a fresh start must not be)")
	}
	tr.CountedOut()
	if r, left := tr.Recovering(); !r || left != 30*time.Second {
		t.Fatalf("just counted out: recovering=%v left=%v, want true 30s", r, left)
	}
	now = now.Add(20 * time.Second)
	tr.CountedOut() // flapped again: the hold starts over
	now = now.Add(29 * time.Second)
	if r, left := tr.Recovering(); !r || left != time.Second {
		t.Fatalf("29s after the second flap: recovering=%v left=%v, want true 1s", r, left)
	}
	now = now.Add(time.Second)
	if r, _ := tr.Recovering(); r {
		t.Fatal("a full hold after the last flap: still recovering")
	}
}

func TestDisabled(t *testing.T) {
	var nilTracker *Tracker
	nilTracker.CountedOut()
	if r, _ := nilTracker.Recovering(); r {
		t.Fatal("nil tracker recovering")
	}
	tr := NewTracker(0, nil)
	tr.CountedOut()
	if r, _ := tr.Recovering(); r {
		t.Fatal("hold 0 disables recovery")
	}
}

func TestIsolation(t *testing.T) {
	now := time.Unix(1000, 0)
	tr := NewTracker(30*time.Second, func() time.Time { return now })
	steps := []struct {
		after    time.Duration
		isolated bool
		want     bool // recovering after this sync
		why      string
	}{
		{0, false, false, "never isolated"},
		{time.Second, true, false, "isolated for 0 s"},
		{MinIsolation - 301*time.Millisecond, true, false, "isolated, under MinIsolation"},
		{300 * time.Millisecond, false, false, "a blip ended 1 ms short of MinIsolation: nothing counted"},
		{time.Second, true, false, "a new isolation starts its own clock"},
		{MinIsolation, true, true, "isolated for MinIsolation: counted out"},
		{10 * time.Second, false, true, "it ends: counted out again, the hold starts here"},
		{30*time.Second - time.Millisecond, false, true, "a full hold after the end, less a millisecond"},
		{time.Millisecond, false, false, "a full hold after the end"},
	}
	for _, s := range steps {
		now = now.Add(s.after)
		tr.Isolation(s.isolated)
		if r, _ := tr.Recovering(); r != s.want {
			t.Fatalf("%s: recovering %v, want %v", s.why, r, s.want)
		}
	}
	var nilTracker *Tracker
	nilTracker.Isolation(true)
	if got := nilTracker.LastCountedOut(); !got.IsZero() {
		t.Fatalf("nil tracker counted out at %v", got)
	}
}
