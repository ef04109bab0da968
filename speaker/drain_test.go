package speaker

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/herald-lb/herald/internal/lbapi"
	bgpplan "github.com/herald-lb/herald/speaker/bgp/plan"
	"github.com/herald-lb/herald/speaker/layer2/election"
	"github.com/herald-lb/herald/speaker/members"
	"github.com/herald-lb/herald/speaker/view"
)

// mark sets the drain mark of node's Node as the Node informer reads it.
func (l *lab) mark(node, value string, set bool) {
	l.src.set(func(sn *Snapshot) {
		for i := range sn.Nodes {
			if sn.Nodes[i].Name == node {
				sn.Nodes[i].Drained, sn.Nodes[i].DrainErr = false, nil
				if set {
					sn.Nodes[i].Drained, _, sn.Nodes[i].DrainErr = lbapi.ParseDrain(node, value)
				}
			}
		}
	})
}

func (l *lab) answers(ip string) bool { return l.sp.Announcements().Announcing(addr(ip), "eth0") }

func (l *lab) answersAnywhere(ip string) bool {
	return l.sp.Announcements().AnnouncingAnywhere(addr(ip))
}

// TestDrainHandsAddressesOverOnceTheOthersKnow: a drained node keeps
// answering until its Drained metadata is out (the others take over from
// it, not after it), then stops; seen from the runner-up, a drained
// member loses its addresses. Undo claims them back, again only once
// the metadata is out, and never answers twice meanwhile.
func TestDrainHandsAddressesOverOnceTheOthersKnow(t *testing.T) {
	nodes := []string{"node1", "node2", "node3"}
	ip := ipFor(t, "node1", nodes...)
	l := newLab(t, "node1", nodes...)
	l.service("web", false, ip)
	l.sp.Sync()
	l.sp.publishOnce()
	if !l.answers(ip) {
		t.Fatalf("node1 does not announce %s, which it wins", ip)
	}

	l.mark("node1", "true", true)
	l.sp.Sync()
	if !l.answers(ip) {
		t.Fatal("stopped answering before the others could know of the drain: a gap")
	}
	l.sp.publishOnce()
	if d := testutil.ToFloat64(l.sp.d.Metrics.drained); d != 1 || !selfMember(l.cluster, "node1").Meta.Drained {
		t.Fatalf("herald_speaker_drained = %v, metadata %+v: want 1 and Drained", d, selfMember(l.cluster, "node1").Meta)
	}
	l.sp.Sync()
	if l.answersAnywhere(ip) {
		t.Fatal("drained and published, yet still announcing")
	}
	if why := l.sp.State().IPs[0].Excluded.Reason("node1"); why != election.ReasonDrained {
		t.Errorf("node1 excluded for %q, want %q", why, election.ReasonDrained)
	}

	// The runner-up takes the address over with a gratuitous burst.
	next := winner(ip, "node2", "node3")
	o := newLab(t, next, nodes...)
	o.cluster.Set(members.Member{Name: "node1", Meta: members.Meta{Interfaces: []string{"eth0"}}})
	o.service("web", false, ip)
	o.sp.Sync()
	if o.answersAnywhere(ip) {
		t.Fatalf("%s announces %s before node1 is drained", next, ip)
	}
	o.cluster.Set(members.Member{Name: "node1", Meta: members.Meta{Interfaces: []string{"eth0"}, Drained: true}})
	o.sp.Sync()
	if !o.answers(ip) {
		t.Fatalf("%s did not take %s over from the drained node1", next, ip)
	}
	if g := o.responders.live("eth0").takeGratuitous(); !slices.Contains(g, addr(ip)) {
		t.Errorf("%s took %s over without a gratuitous burst: %v", next, ip, g)
	}

	// Undo: claimed back only once the others know.
	l.mark("node1", "", false)
	l.sp.Sync()
	if l.answersAnywhere(ip) {
		t.Fatal("claimed the address back before the others could know of the undo: two answers")
	}
	if got := testutil.ToFloat64(l.sp.d.Metrics.drained); got != 0 {
		t.Errorf("herald_speaker_drained = %v after undo, want 0", got)
	}
	l.sp.publishOnce()
	if selfMember(l.cluster, "node1").Meta.Drained {
		t.Fatal("undone, yet the metadata still says drained")
	}
	l.sp.Sync()
	if !l.answers(ip) {
		t.Fatal("undone, yet not announcing the address it wins")
	}
}

// TestDrainedNodeKeepsWhatNobodyElseMayAnnounce: a Local Service whose
// only endpoint is on the drained node stays answered there.
func TestDrainedNodeKeepsWhatNobodyElseMayAnnounce(t *testing.T) {
	l := newLab(t, "node1", "node1", "node2")
	l.service("web", true, "198.51.100.210")
	l.endpoints("web", "node1")
	l.mark("node1", "true", true)
	l.sp.Sync()
	l.sp.publishOnce()
	l.sp.Sync()
	if !l.answers("198.51.100.210") {
		t.Fatal("drained, the node dropped an address no other node may announce")
	}
}

// TestBadDrainMarkChangesNothing: a value herald does not read neither
// drains nor undrains the node, and the Services keep working.
func TestBadDrainMarkChangesNothing(t *testing.T) {
	nodes := []string{"node1", "node2"}
	ip := ipFor(t, "node1", nodes...)
	l := newLab(t, "node1", nodes...)
	l.service("web", false, ip)
	l.mark("node1", "yes", true)
	l.sp.Sync()
	l.sp.publishOnce()
	l.sp.Sync()
	if !l.answers(ip) || selfMember(l.cluster, "node1").Meta.Drained {
		t.Fatal("a bad drain mark on a node that was not drained drained it")
	}
	if _, logged := l.sp.logs["drain/mark"]; !logged {
		t.Error("the bad mark was not logged")
	}
	l.mark("node1", "true", true)
	l.sp.Sync()
	l.sp.publishOnce()
	l.sp.Sync()
	if l.answersAnywhere(ip) {
		t.Fatal("not drained by a good mark")
	}
	l.mark("node1", "ture", true)
	l.sp.Sync()
	l.sp.publishOnce()
	l.sp.Sync()
	if l.answersAnywhere(ip) || !l.sp.drain.wanted {
		t.Fatal("a typo on a drained node undrained it")
	}
	// The Node gone from the cache: the state stays too.
	l.src.set(func(sn *Snapshot) {
		sn.Nodes = slices.DeleteFunc(sn.Nodes, func(n view.Node) bool { return n.Name == "node1" })
	})
	l.sp.Sync()
	if !l.sp.drain.wanted {
		t.Fatal("the drain was forgotten when the Node left the cache")
	}
}

// TestBGPDrain: GRACEFUL_SHUTDOWN on every route for BGPDrainWait, then
// withdrawn with the reason on the NodeAnnouncement, sessions kept;
// undo advertises as before.
func TestBGPDrain(t *testing.T) {
	l, f := bgpLab(t, "node1", "node1", "node2")
	l.sp.d.BGPDrainWait = 150 * time.Millisecond
	l.bgpService("web", false, []string{"node2"}, "203.0.113.130")
	l.sp.Sync()
	router := addr("198.51.100.1")
	before := f.Routes(router)
	if len(before) != 1 || slices.Contains(before[0].Communities, bgpplan.GracefulShutdown) {
		t.Fatalf("routes before the drain %+v", before)
	}

	l.mark("node1", "true", true)
	l.sp.Sync()
	rs := f.Routes(router)
	if len(rs) != 1 || !slices.Equal(rs[0].Communities, []uint32{64512<<16 | 7, bgpplan.GracefulShutdown}) {
		t.Fatalf("routes while shutting down %+v, want the route with 64512:7 and 65535:0", rs)
	}
	if l.status.node == nil || l.status.node.Reason != "" {
		t.Errorf("NodeAnnouncement %+v while still advertising", l.status.node)
	}
	// The timer syncs at the end of the wait.
	deadline := time.Now().Add(5 * time.Second)
	for len(f.Routes(router)) > 0 && time.Now().Before(deadline) {
		select {
		case <-l.sp.loop.trigger:
			l.sp.Sync()
		case <-time.After(10 * time.Millisecond):
		}
	}
	if rs := f.Routes(router); len(rs) != 0 {
		t.Fatalf("routes %+v after the wait, want all withdrawn", rs)
	}
	if len(l.sp.d.BGP.Sessions()) != 1 {
		t.Errorf("sessions %+v: the drain must keep them", l.sp.d.BGP.Sessions())
	}
	if l.status.node == nil || l.status.node.Reason != bgpplan.ReasonDrained {
		t.Errorf("NodeAnnouncement %+v, want reason %q", l.status.node, bgpplan.ReasonDrained)
	}

	l.mark("node1", "", false)
	l.sp.Sync()
	if rs := f.Routes(router); !slices.EqualFunc(rs, before, bgpplan.Route.Equal) {
		t.Errorf("routes after undo %+v, want those of before %+v", rs, before)
	}
}
