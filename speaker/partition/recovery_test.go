package partition

import (
	"testing"
	"time"
)

// majority is a joined speaker in a whole cluster: it holds back for
// nothing, so only refuted deaths count it out.
var majority = []string{"node1", "node2", "node3"}

func TestRecoveryHold(t *testing.T) {
	now := time.Unix(1000, 0)
	g := New(Config{Self: "node1", RecoveryHold: 30 * time.Second, Now: func() time.Time { return now }})
	if _, d := g.Sync(majority); d.Recovering {
		t.Fatal("a speaker never counted out is not recovering (a fresh start must not be)")
	}
	g.Refuted("node2")
	if _, d := g.Sync(majority); !d.Recovering || d.RecoveryLeft != 30*time.Second {
		t.Fatalf("just counted out: recovering=%v left=%v, want true 30s", d.Recovering, d.RecoveryLeft)
	}
	now = now.Add(20 * time.Second)
	g.Refuted("node2") // flapped again: the hold starts over
	now = now.Add(29 * time.Second)
	if _, d := g.Sync(majority); !d.Recovering || d.RecoveryLeft != time.Second {
		t.Fatalf("29s after the second flap: recovering=%v left=%v, want true 1s", d.Recovering, d.RecoveryLeft)
	}
	now = now.Add(time.Second)
	if _, d := g.Sync(majority); d.Recovering {
		t.Fatal("a full hold after the last flap: still recovering")
	}
}

func TestRecoveryDisabled(t *testing.T) {
	g := New(Config{Self: "node1"})
	g.Sync(majority)
	g.Refuted("node2")
	if _, d := g.Sync(majority); d.Recovering {
		t.Fatal("hold 0 disables recovery")
	}
}
