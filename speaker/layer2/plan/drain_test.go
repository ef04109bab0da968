package plan

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/herald-lb/herald/speaker/layer2/election"
	"github.com/herald-lb/herald/speaker/view"
)

// TestDrainMovesOnlyTheDrainedNodesAddresses: draining a node moves the
// addresses it won, and only those, to the others (every node agreeing);
// undo gives back exactly those, as rendezvous hashing ranks them, and
// moves nothing else. A Local address whose only endpoint is on the
// drained node stays with it.
func TestDrainMovesOnlyTheDrainedNodesAddresses(t *testing.T) {
	var svcs []view.Service
	for i := range 60 {
		svcs = append(svcs, svc(fmt.Sprintf("s%02d", i), "lan", fmt.Sprintf("192.0.2.%d", i+1)))
	}
	local := svc("only-on-node2", "lan", "192.0.2.200")
	local.Local, local.ReadyNodes = true, map[string]bool{"node2": true}
	svcs = append(svcs, local)
	winners := func(in Input) map[netip.Addr]string {
		out := map[netip.Addr]string{}
		for _, ip := range everywhere(t, in)["node1"].IPs {
			out[ip.Addr] = ip.Winner
		}
		return out
	}
	in := testInput(svcs...)
	before := winners(in)
	held := 0
	for a, w := range before {
		if w == "node2" && a != addr("192.0.2.200") {
			held++
		}
	}
	if held == 0 {
		t.Fatal("node2 wins none of 60 addresses: the test shows nothing")
	}

	member(&in, "node2").Drained = true
	drained := winners(in)
	for a, w := range drained {
		switch {
		case a == addr("192.0.2.200"):
			if w != "node2" {
				t.Errorf("%s (Local, its only endpoint on node2) went to %q: drained, node2 must keep what no other node may announce", a, w)
			}
		case w == "node2":
			t.Errorf("%s still won by the drained node2", a)
		case before[a] != "node2" && w != before[a]:
			t.Errorf("%s moved from %s to %s: only the drained node's addresses may move", a, before[a], w)
		}
	}
	st := Compute(as(in, "node1"))
	ip, _ := st.Lookup(addr("192.0.2.1"))
	if why := ip.Excluded.Reason("node2"); why != election.ReasonDrained {
		t.Errorf("node2 excluded for %q, want %q", why, election.ReasonDrained)
	}

	member(&in, "node2").Drained = false
	undone := winners(in)
	back := 0
	for a, w := range undone {
		if w != before[a] {
			t.Errorf("after undo %s is won by %s, before the drain by %s", a, w, before[a])
		}
		if w != drained[a] {
			back++
		}
	}
	if back != held {
		t.Errorf("undo moved %d addresses, want the %d node2 held before", back, held)
	}
	t.Logf("60 addresses over 3 nodes: the drain moved node2's %d, undo moved the same %d back, nothing else moved", held, back)
}
