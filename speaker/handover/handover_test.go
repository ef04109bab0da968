package handover

import (
	"net/netip"
	"slices"
	"testing"
	"time"
)

var (
	vip4  = netip.MustParseAddr("198.51.100.236")
	vip6  = netip.MustParseAddr("2001:db8:0:1::236")
	nodes = map[string][]netip.Addr{
		"a": {netip.MustParseAddr("198.51.100.12"), netip.MustParseAddr("2001:db8:0:1::12")},
		"b": {netip.MustParseAddr("198.51.100.13")},
	}
	t0 = time.Date(2026, 11, 28, 16, 0, 0, 0, time.UTC)
)

// round is a round of node c in which it holds held, having seen prev as
// the holders before (Before) and winning every address it holds.
func round(at time.Duration, held map[netip.Addr][]string, prev map[netip.Addr]string, live ...string) Round {
	l := map[string]bool{}
	for _, n := range live {
		l[n] = true
	}
	winners := map[netip.Addr]string{}
	for a := range held {
		winners[a] = "c"
	}
	return Round{Now: t0.Add(at), Keep: time.Hour, Self: "c", Held: held, Winners: winners,
		Before: func(a netip.Addr) string { return prev[a] }, Live: l, Addresses: nodes}
}

// TestTrackerPlannedMove: an address taken from a live member forwards to
// it on each interface, for Keep, and not once it is lost, the member is
// gone, or Keep passed.
func TestTrackerPlannedMove(t *testing.T) {
	tr := NewTracker()
	held := map[netip.Addr][]string{vip4: {"eth0", "eth1"}, vip6: {"eth0"}}
	prev := map[netip.Addr]string{vip4: "a", vip6: "a"}
	res := tr.Update(round(0, held, prev, "a", "b", "c"))
	want := []Entry{
		{vip4, "eth0", nodes["a"][0], "a", t0},
		{vip4, "eth1", nodes["a"][0], "a", t0},
		{vip6, "eth0", nodes["a"][1], "a", t0},
	}
	if !slices.Equal(res.Entries, want) || !res.Next.Equal(t0.Add(time.Hour)) {
		t.Fatalf("entries %v next %v, want %v and an hour on", res.Entries, res.Next, want)
	}
	// Later rounds see this node as the previous winner: the move stays.
	prev = map[netip.Addr]string{vip4: "c", vip6: "c"}
	if res := tr.Update(round(time.Minute, held, prev, "a", "b", "c")); len(res.Entries) != 3 {
		t.Fatalf("a later round: %v, want the three entries kept", res.Entries)
	}
	// vip6 lost: its entry stays for LostGrace (clients still send
	// here until the new holder's announcement reaches them), then only
	// vip4's entries stay.
	held = map[netip.Addr][]string{vip4: {"eth0", "eth1"}}
	res = tr.Update(round(2*time.Minute, held, prev, "a", "b", "c"))
	if len(res.Entries) != 3 || !res.Next.Equal(t0.Add(2*time.Minute+LostGrace)) {
		t.Fatalf("just after losing %s: %v next %v, want all three until %v", vip6, res.Entries, res.Next, t0.Add(2*time.Minute+LostGrace))
	}
	if res := tr.Update(round(2*time.Minute+LostGrace, held, prev, "a", "b", "c")); len(res.Entries) != 2 || res.Entries[0].Addr != vip4 {
		t.Fatalf("LostGrace after losing %s: %v", vip6, res.Entries)
	}
	// Keep over: nothing.
	if res := tr.Update(round(time.Hour, held, prev, "a", "b", "c")); len(res.Entries) != 0 || !res.Next.IsZero() {
		t.Fatalf("after Keep: %v next %v, want none", res.Entries, res.Next)
	}
}

// TestTrackerNotPlanned: an address taken from a dead member (until it is
// alive again, TestTrackerFalseDeath), from nobody, or held before
// forwards nowhere; Keep 0 forwards nothing.
func TestTrackerNotPlanned(t *testing.T) {
	held := map[netip.Addr][]string{vip4: {"eth0"}}
	for name, r := range map[string]Round{
		"former holder dead": round(0, held, map[netip.Addr]string{vip4: "a"}, "b", "c"),
		"new address":        round(0, held, map[netip.Addr]string{}, "a", "b", "c"),
		"this node's before": round(0, held, map[netip.Addr]string{vip4: "c"}, "a", "b", "c"),
	} {
		if res := NewTracker().Update(r); len(res.Entries) != 0 {
			t.Errorf("%s: %v, want none", name, res.Entries)
		}
	}
	r := round(0, held, map[netip.Addr]string{vip4: "a"}, "a", "c")
	r.Keep = 0
	if res := NewTracker().Update(r); len(res.Entries) != 0 {
		t.Errorf("Keep 0: %v, want none", res.Entries)
	}
	// Held already: a member that later appears as the previous winner
	// (a round that lost and regained it within) is not a new move.
	tr := NewTracker()
	tr.Update(round(0, held, map[netip.Addr]string{}, "a", "c"))
	if res := tr.Update(round(time.Second, held, map[netip.Addr]string{vip4: "a"}, "a", "c")); len(res.Entries) != 0 {
		t.Errorf("held throughout: %v, want none", res.Entries)
	}
}

// TestTrackerFormerHolderDies: the former holder dying stops the forward
// (packets sent to a node that is down are lost, not reset); alive again
// within Keep (a death refuted: its kernel and conntrack never stopped),
// it is forwarded to again.
func TestTrackerFormerHolderDies(t *testing.T) {
	tr := NewTracker()
	held := map[netip.Addr][]string{vip4: {"eth0"}}
	if res := tr.Update(round(0, held, map[netip.Addr]string{vip4: "a"}, "a", "c")); len(res.Entries) != 1 {
		t.Fatalf("%v", res.Entries)
	}
	prev := map[netip.Addr]string{vip4: "c"}
	if res := tr.Update(round(time.Second, held, prev, "c")); len(res.Entries) != 0 || !res.Next.Equal(t0.Add(time.Hour)) {
		t.Fatalf("a dead: %v next %v, want none until a is back, the move ending an hour on", res.Entries, res.Next)
	}
	want := []Entry{{vip4, "eth0", nodes["a"][0], "a", t0}}
	if res := tr.Update(round(2*time.Second, held, prev, "a", "c")); !slices.Equal(res.Entries, want) {
		t.Fatalf("a back: %v, want %v", res.Entries, want)
	}
	if res := tr.Update(round(time.Hour, held, prev, "a", "c")); len(res.Entries) != 0 {
		t.Fatalf("a back after Keep: %v, want none", res.Entries)
	}
}

// TestTrackerFalseDeath: an address taken from a member declared dead
// (a speaker starved of CPU misses memberlist's probes) is forwarded to
// it from the round that sees it alive again, which is a moment later
// while it keeps off its addresses for the recovery hold. Before, the
// new holder reset every connection the member had carried.
func TestTrackerFalseDeath(t *testing.T) {
	tr := NewTracker()
	held := map[netip.Addr][]string{vip4: {"eth0"}}
	if res := tr.Update(round(0, held, map[netip.Addr]string{vip4: "a"}, "b", "c")); len(res.Entries) != 0 {
		t.Fatalf("a dead: %v, want none", res.Entries)
	}
	want := []Entry{{vip4, "eth0", nodes["a"][0], "a", t0}}
	prev := map[netip.Addr]string{vip4: "c"}
	if res := tr.Update(round(300*time.Millisecond, held, prev, "a", "b", "c")); !slices.Equal(res.Entries, want) {
		t.Fatalf("a alive again: %v, want %v", res.Entries, want)
	}
	// a takes its address back after the hold: this node forwards its
	// connections there for LostGrace still (clients that missed the
	// move), then stops.
	if res := tr.Update(round(30*time.Second, nil, map[netip.Addr]string{vip4: "a"}, "a", "b", "c")); !slices.Equal(res.Entries, want) {
		t.Fatalf("a holds it again: %v, want %v for LostGrace", res.Entries, want)
	}
	if res := tr.Update(round(30*time.Second+LostGrace, nil, map[netip.Addr]string{vip4: "a"}, "a", "b", "c")); len(res.Entries) != 0 {
		t.Fatalf("LostGrace after a took it back: %v, want none", res.Entries)
	}
}

// TestTrackerNoAddress: a former holder without an address of the
// family is reported, not forwarded to.
func TestTrackerNoAddress(t *testing.T) {
	held := map[netip.Addr][]string{vip6: {"eth0"}}
	res := NewTracker().Update(round(0, held, map[netip.Addr]string{vip6: "b"}, "b", "c"))
	if len(res.Entries) != 0 || len(res.Unreachable) != 1 {
		t.Fatalf("entries %v unreachable %v", res.Entries, res.Unreachable)
	}
}

// TestTrackerWonBeforeAnswering: rounds in which this node won an address
// without answering for it yet (its proxy not ready) keep the former
// holder, seen as the winner before them.
func TestTrackerWonBeforeAnswering(t *testing.T) {
	tr := NewTracker()
	live := map[string]bool{"a": true, "c": true}
	r := Round{Now: t0, Keep: time.Hour, Self: "c", Live: live, Addresses: nodes,
		Winners: map[netip.Addr]string{vip4: "a"}}
	tr.Update(r) // a holds it
	r.Winners = map[netip.Addr]string{vip4: "c"}
	if res := tr.Update(r); len(res.Entries) != 0 {
		t.Fatalf("won, not answering: %v", res.Entries)
	}
	r.Held = map[netip.Addr][]string{vip4: {"eth0"}}
	res := tr.Update(r)
	if len(res.Entries) != 1 || res.Entries[0].From != "a" {
		t.Fatalf("answering at last: %v, want the forward to a", res.Entries)
	}
}

// TestTrackerAdopt: entries a predecessor left go on, and end as theirs
// would.
func TestTrackerAdopt(t *testing.T) {
	tr := NewTracker()
	tr.Adopt([]Entry{{vip4, "eth0", nodes["a"][0], "a", t0}})
	held := map[netip.Addr][]string{vip4: {"eth0"}}
	res := tr.Update(round(time.Minute, held, nil, "a", "c"))
	if len(res.Entries) != 1 || !res.Entries[0].At.Equal(t0) || !res.Next.Equal(t0.Add(time.Hour)) {
		t.Fatalf("adopted: %v next %v", res.Entries, res.Next)
	}
}
