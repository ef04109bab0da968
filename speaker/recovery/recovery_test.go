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
