package speaker

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/herald-lb/herald/speaker/handover"
	"github.com/herald-lb/herald/speaker/members"
)

// TestHandoverOnPlannedMove: the node that takes an address over from a
// drained (live) member forwards the connections it never saw to that
// member's address, before it answers; the forward ends when the member
// dies. A takeover from a dead member forwards nothing.
func TestHandoverOnPlannedMove(t *testing.T) {
	nodes := []string{"node1", "node2", "node3"}
	ip := ipFor(t, "node1", nodes...)
	next := winner(ip, "node2", "node3")
	kernel := &handover.Fake{}
	l := newLabWith(t, next, nodes, func(d *Deps) { d.Handover, d.HandoverKeep = kernel, time.Hour })
	node1IP := netip.MustParseAddr("198.51.100.11")
	l.src.set(func(sn *Snapshot) {
		for i := range sn.Nodes {
			if sn.Nodes[i].Name == "node1" {
				sn.Nodes[i].Addresses = []netip.Addr{node1IP}
			}
		}
	})
	l.service("web", false, ip)
	l.sp.Sync()
	if l.answersAnywhere(ip) || kernel.Applied != 1 || len(kernel.Entries) != 0 {
		t.Fatalf("before the drain: answering %v, kernel %+v; want no answer and one empty apply (clearing a dead process's)", l.answersAnywhere(ip), kernel)
	}
	l.cluster.Set(members.Member{Name: "node1", Meta: members.Meta{Interfaces: []string{"eth0"}, Drained: true}})
	l.sp.Sync()
	want := []handover.Entry{{Addr: addr(ip), Iface: "eth0", Via: node1IP, From: "node1"}}
	if !l.answers(ip) || !slices.EqualFunc(kernel.Entries, want, sameButTime) {
		t.Fatalf("after node1's drain: answering %v, entries %v; want %v", l.answers(ip), kernel.Entries, want)
	}
	applied := kernel.Applied
	l.sp.Sync()
	if kernel.Applied != applied {
		t.Errorf("an unchanged round applied the entries again")
	}
	l.cluster.Remove("node1")
	l.sp.Sync()
	if len(kernel.Entries) != 0 {
		t.Errorf("node1 dead, yet forwarding to it: %v", kernel.Entries)
	}

	// A failover: the former holder is dead when the address moves.
	f := &handover.Fake{}
	o := newLabWith(t, next, nodes, func(d *Deps) { d.Handover, d.HandoverKeep = f, time.Hour })
	o.service("web", false, ip)
	o.sp.Sync()
	o.cluster.Remove("node1")
	o.sp.Sync()
	if !o.answers(ip) || len(f.Entries) != 0 {
		t.Errorf("after node1 died: answering %v, entries %v; want the address and no forward", o.answers(ip), f.Entries)
	}
}

// TestHandoverAfterStart: a speaker that starts (its process crashed and
// came back) and wins an address at once forwards to the node that held
// it meanwhile: the winner without it.
func TestHandoverAfterStart(t *testing.T) {
	nodes := []string{"node1", "node2", "node3"}
	ip := ipFor(t, "node1", nodes...)
	interim := winner(ip, "node2", "node3")
	kernel := &handover.Fake{}
	l := newLabWith(t, "node1", nodes, func(d *Deps) { d.Handover, d.HandoverKeep = kernel, time.Hour })
	interimIP := netip.MustParseAddr("2001:db8::7")
	l.src.set(func(sn *Snapshot) {
		for i := range sn.Nodes {
			if sn.Nodes[i].Name == interim {
				sn.Nodes[i].Addresses = []netip.Addr{netip.MustParseAddr("198.51.100.7"), interimIP}
			}
		}
	})
	l.service("web", false, ip)
	l.sp.Sync()
	want := []handover.Entry{{Addr: addr(ip), Iface: "eth0", Via: netip.MustParseAddr("198.51.100.7"), From: interim}}
	if !l.answers(ip) || !slices.EqualFunc(kernel.Entries, want, sameButTime) {
		t.Fatalf("answering %v, entries %v; want %v", l.answers(ip), kernel.Entries, want)
	}
}

func sameButTime(a, b handover.Entry) bool {
	a.At, b.At = time.Time{}, time.Time{}
	return a == b
}

// TestHandoverAdoptsWhatAPredecessorLeft: a speaker that finds entries in
// the kernel (its predecessor restarted in place) keeps them, with their
// time, while it holds the address.
func TestHandoverAdoptsWhatAPredecessorLeft(t *testing.T) {
	nodes := []string{"node1", "node2", "node3"}
	ip := ipFor(t, "node1", nodes...)
	at := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	left := handover.Entry{Addr: addr(ip), Iface: "eth0", Via: netip.MustParseAddr("198.51.100.12"), From: "node2", At: at}
	kernel := &handover.Fake{Entries: []handover.Entry{left}}
	l := newLabWith(t, "node1", nodes, func(d *Deps) { d.Handover, d.HandoverKeep = kernel, time.Hour })
	l.src.set(func(sn *Snapshot) {
		for i := range sn.Nodes {
			if sn.Nodes[i].Name == "node2" {
				sn.Nodes[i].Addresses = []netip.Addr{left.Via}
			}
		}
	})
	l.service("web", false, ip)
	l.sp.Sync()
	if !l.answers(ip) || len(kernel.Entries) != 1 || kernel.Entries[0] != left {
		t.Fatalf("answering %v, entries %v; want %v kept as it was", l.answers(ip), kernel.Entries, left)
	}
}
