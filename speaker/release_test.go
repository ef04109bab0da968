package speaker

import (
	"bytes"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/herald-lb/herald/speaker/handover"
	l2plan "github.com/herald-lb/herald/speaker/layer2/plan"
	"github.com/herald-lb/herald/speaker/layer2/release"
	"github.com/herald-lb/herald/speaker/members"
)

// releasing is a peer's metadata: eth0, and it releases what it loses.
func releasing(drained bool) members.Meta {
	return members.Meta{Interfaces: []string{"eth0"}, Releases: true, Drained: drained}
}

// outbox collects what a lab's speaker sends to node.
func (l *lab) outbox(node string) chan []byte {
	ch := make(chan []byte, 8)
	l.cluster.OnSend = func(to string, msg []byte) {
		if to == node {
			ch <- msg
		}
	}
	return ch
}

func receive(t *testing.T, ch chan []byte, what string) []byte {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(5 * time.Second):
		t.Fatalf("no message: %s", what)
		return nil
	}
}

// undoneBesideReleasing is node1, with a Service whose address it wins
// beside node2, which releases, drained and then undone (not published).
func undoneBesideReleasing(t *testing.T) (*lab, string) {
	t.Helper()
	ip := ipFor(t, "node1", "node1", "node2")
	l := newLab(t, "node1", "node1", "node2")
	l.cluster.Set(members.Member{Name: "node2", Meta: releasing(false)})
	l.service("web", false, ip)
	l.drainThenUndo(ip)
	return l, ip
}

// drainThenUndo drains node1 (published: it no longer answers for ip),
// then undoes the drain, not published yet.
func (l *lab) drainThenUndo(ip string) {
	l.t.Helper()
	l.mark("node1", "true", true)
	l.sp.Sync()
	l.sp.publishOnce()
	l.sp.Sync()
	if l.answersAnywhere(ip) {
		l.t.Fatal("drained, yet answering")
	}
	l.mark("node1", "", false)
	l.sp.Sync()
}

func (l *lab) reason(ip string) string {
	got, _ := l.sp.State().Lookup(addr(ip))
	return got.Reason
}

// TestDrainHandOffByRelease: between speakers that release, a drain and
// its undo move the address with one node answering at a time and no
// wait on gossip: the node losing the address stops, then tells the
// winner, which answers on that word and not before.
func TestDrainHandOffByRelease(t *testing.T) {
	nodes := []string{"node1", "node2"}
	ip := ipFor(t, "node1", nodes...)
	l := newLab(t, "node1", nodes...)
	l.cluster.Set(members.Member{Name: "node2", Meta: releasing(false)})
	l.service("web", false, ip)
	kernel := &handover.Fake{}
	o := newLabWith(t, "node2", nodes, func(d *Deps) { d.Handover, d.HandoverKeep = kernel, time.Hour })
	node1IP := netip.MustParseAddr("198.51.100.11")
	o.src.set(func(sn *Snapshot) { sn.Nodes[0].Addresses = []netip.Addr{node1IP} })
	o.cluster.Set(members.Member{Name: "node1", Meta: releasing(false)})
	o.service("web", false, ip)
	l.sp.Sync()
	l.sp.publishOnce()
	o.sp.Sync()
	if !l.answers(ip) || o.answersAnywhere(ip) {
		t.Fatalf("before the drain: node1 answers %v, node2 %v; want node1 alone", l.answers(ip), o.answersAnywhere(ip))
	}
	toNode1, toNode2 := o.outbox("node1"), l.outbox("node2")
	one := func(when string) {
		t.Helper()
		if l.answersAnywhere(ip) && o.answersAnywhere(ip) {
			t.Fatalf("%s: both nodes answer for %s", when, ip)
		}
	}

	// Drain: node2 learns of it and waits; node1 stops once its mark is
	// out, and says so.
	l.mark("node1", "true", true)
	l.sp.Sync()
	o.cluster.Set(members.Member{Name: "node1", Meta: releasing(true)})
	o.sp.Sync()
	one("node2 learned of the drain")
	if o.answersAnywhere(ip) || o.reason(ip) != l2plan.ReasonAwaiting {
		t.Fatalf("node2 answers %v, reason %q: want it waiting for node1", o.answersAnywhere(ip), o.reason(ip))
	}
	if got := testutil.ToFloat64(o.sp.d.Metrics.awaiting); got != 1 {
		t.Errorf("herald_speaker_handoffs_awaiting = %v, want 1", got)
	}
	// The forwarding of node1's connections is in place before node2
	// answers.
	if want := []handover.Entry{{Addr: addr(ip), Iface: "eth0", Via: node1IP, From: "node1"}}; !slices.EqualFunc(kernel.Entries, want, sameButTime) {
		t.Fatalf("waiting for node1: handover entries %v, want %v", kernel.Entries, want)
	}
	if !l.answers(ip) {
		t.Fatal("node1 stopped before its drain was published: a gap")
	}
	l.sp.publishOnce()
	l.sp.Sync()
	if l.answersAnywhere(ip) {
		t.Fatal("node1 drained and published, yet answering")
	}
	msg := receive(t, toNode2, "node1's release to node2")
	o.sp.Message(msg)
	if !o.answers(ip) {
		t.Fatal("node2 got node1's release but waits for its next election to answer")
	}
	o.sp.Sync()
	if !o.answers(ip) {
		t.Fatalf("node2 got node1's release but does not answer (reason %q)", o.reason(ip))
	}
	if g := o.responders.live("eth0").takeGratuitous(); !slices.Contains(g, addr(ip)) {
		t.Errorf("node2 took %s over without a gratuitous burst: %v", ip, g)
	}
	if got := testutil.ToFloat64(o.sp.d.Metrics.handoffs.WithLabelValues(string(release.Released))); got != 1 {
		t.Errorf(`herald_speaker_handoffs_total{outcome="released"} = %v, want 1`, got)
	}

	// Undo: node1 claims the address at once, without waiting for its
	// metadata to go out, and answers when node2 released it.
	l.mark("node1", "", false)
	l.sp.Sync()
	one("node1 undid its drain")
	if l.answersAnywhere(ip) || l.reason(ip) != l2plan.ReasonAwaiting {
		t.Fatalf("undone: node1 answers %v, reason %q; want it waiting for node2", l.answersAnywhere(ip), l.reason(ip))
	}
	l.sp.publishOnce()
	o.cluster.Set(members.Member{Name: "node1", Meta: releasing(false)})
	o.sp.Sync()
	if o.answersAnywhere(ip) {
		t.Fatal("node2 still answers after learning of the undo")
	}
	l.sp.Message(receive(t, toNode1, "node2's release to node1"))
	l.sp.Sync()
	if !l.answers(ip) {
		t.Fatalf("node1 got node2's release but does not answer (reason %q)", l.reason(ip))
	}
}

// TestHandOffWaitIsBounded: a former holder that never releases (its
// view lags, or the message was lost) is answered over after
// release.MaxWait, with a sync armed for that moment.
func TestHandOffWaitIsBounded(t *testing.T) {
	nodes := []string{"node1", "node2"}
	ip := ipFor(t, "node1", nodes...)
	var skew atomic.Int64
	l := newLabWith(t, "node1", nodes, func(d *Deps) {
		d.TakeoverClock = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	})
	l.cluster.Set(members.Member{Name: "node2", Meta: releasing(false)})
	l.service("web", false, ip)
	l.drainThenUndo(ip)
	if l.reason(ip) != l2plan.ReasonAwaiting {
		t.Fatalf("undone: reason %q, want waiting for node2", l.reason(ip))
	}
	if l.sp.l2.relTimer == nil {
		t.Fatal("no sync armed for the end of the wait")
	}
	skew.Store(int64(release.MaxWait))
	l.sp.Sync()
	if !l.answers(ip) {
		t.Fatalf("after the longest wait: reason %q, want answering", l.reason(ip))
	}
	if got := testutil.ToFloat64(l.sp.d.Metrics.handoffs.WithLabelValues(string(release.TimedOut))); got != 1 {
		t.Errorf(`herald_speaker_handoffs_total{outcome="timeout"} = %v, want 1`, got)
	}
}

// TestNoWaitForOlderSpeakers: a holder that does not advertise releases
// (an older speaker) is not waited for, and this node claims only once
// its metadata is out, as before.
func TestNoWaitForOlderSpeakers(t *testing.T) {
	nodes := []string{"node1", "node2"}
	ip := ipFor(t, "node1", nodes...)
	l := newLab(t, "node1", nodes...) // node2's metadata has no Releases
	l.service("web", false, ip)
	l.drainThenUndo(ip)
	if l.answersAnywhere(ip) || l.reason(ip) == l2plan.ReasonAwaiting {
		t.Fatalf("undone, unpublished: answers %v, reason %q; want neither", l.answersAnywhere(ip), l.reason(ip))
	}
	l.sp.publishOnce()
	l.sp.Sync()
	if !l.answers(ip) {
		t.Fatalf("undone and published: reason %q, want answering", l.reason(ip))
	}
}

// TestMalformedMessageIgnored: garbage from the membership is dropped
// and changes nothing.
func TestMalformedMessageIgnored(t *testing.T) {
	l := newLab(t, "node1", "node1", "node2")
	l.sp.Message([]byte("\x00not json"))
	l.sp.Message(release.Encode(release.Message{From: "node2", To: "node9", Addrs: nil}))
	if n := l.sp.l2.releases.Len(); n != 0 {
		t.Fatalf("%d waits after garbage", n)
	}
}

// TestReleaseDuringSync: releases arrive on memberlist's goroutines while
// the loop runs its elections (go test -race checks the locking); once
// the last one is in, the address is answered.
func TestReleaseDuringSync(t *testing.T) {
	l, ip := undoneBesideReleasing(t)
	msg := release.Encode(release.Message{From: "node2", To: "node1", Addrs: []netip.Addr{addr(ip)}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 50 {
			l.sp.Message(msg)
		}
	}()
	for range 50 {
		l.sp.Sync()
	}
	<-done
	l.sp.Sync()
	if !l.answers(ip) {
		t.Fatalf("released, yet not answering (reason %q)", l.reason(ip))
	}
}

// TestReleaseDuringElection: a release that arrives after an election
// held the address back, but before the loop sets what it answers, is
// not undone by that election's result.
func TestReleaseDuringElection(t *testing.T) {
	l, ip := undoneBesideReleasing(t)
	held := l.sp.l2.state // the election that holds ip back
	if got, _ := held.Lookup(addr(ip)); got.Reason != l2plan.ReasonAwaiting {
		t.Fatalf("reason %q, want waiting", got.Reason)
	}
	l.sp.Message(release.Encode(release.Message{From: "node2", To: "node1", Addrs: []netip.Addr{addr(ip)}}))
	l.sp.l2.answer(held)
	if !l.answers(ip) {
		t.Fatal("a release that came during the election was undone by its result")
	}
}

// fakeNeighbors is the confirmed neighbour entries per interface.
type fakeNeighbors map[string]map[netip.Addr]net.HardwareAddr

func (f fakeNeighbors) Confirmed(iface string) (map[netip.Addr]net.HardwareAddr, error) {
	return f[iface], nil
}

// TestAnswersForTheNewHolder: a node that hands an address over answers
// for it with the new holder's MAC (from its neighbour table) until the
// new holder surely answers itself, not as its own; it stops when the
// address goes elsewhere, and without a neighbour entry it just stops.
func TestAnswersForTheNewHolder(t *testing.T) {
	nodes := []string{"node1", "node2", "node3"}
	ip := ipFor(t, "node1", nodes...)
	next := winner(ip, "node2", "node3")
	nextIP, nextMAC := netip.MustParseAddr("198.51.100.12"), mac(9)
	drained := func(nb fakeNeighbors) *lab {
		l := newLabWith(t, "node1", nodes, func(d *Deps) { d.Neighbors = nb })
		l.src.set(func(sn *Snapshot) {
			for i := range sn.Nodes {
				if sn.Nodes[i].Name == next {
					sn.Nodes[i].Addresses = []netip.Addr{nextIP}
				}
			}
		})
		for _, n := range []string{"node2", "node3"} {
			l.cluster.Set(members.Member{Name: n, Meta: releasing(false)})
		}
		l.service("web", false, ip)
		l.sp.Sync()
		l.sp.publishOnce()
		l.mark("node1", "true", true)
		l.sp.Sync()
		l.sp.publishOnce()
		l.sp.Sync()
		return l
	}
	l := drained(fakeNeighbors{"eth0": {nextIP: nextMAC}, "eth1": {nextIP: mac(8)}})
	ann := l.sp.Announcements()
	if l.answersAnywhere(ip) {
		t.Fatal("drained and published, yet announcing as its own")
	}
	if got := ann.AnsweringFor(addr(ip), "eth0"); !bytes.Equal(got, nextMAC) {
		t.Fatalf("answering for %s with %v, want %s's MAC %s", ip, got, next, nextMAC)
	}
	if !slices.Contains(ann.Listening("eth0"), addr(ip)) {
		t.Error("the responder no longer listens for the address it answers for the new holder")
	}
	// The new holder leaves: nothing is answered for it.
	l.cluster.Remove(next)
	l.sp.Sync()
	if got := ann.AnsweringFor(addr(ip), "eth0"); got != nil {
		t.Fatalf("%s left, yet answering for it with %s", next, got)
	}

	// No entry for the new holder on the interface (only on another
	// one): it stops, as before.
	o := drained(fakeNeighbors{"eth1": {nextIP: nextMAC}})
	if o.answersAnywhere(ip) || o.sp.Announcements().AnsweringFor(addr(ip), "eth0") != nil {
		t.Fatal("no neighbour entry for the new holder, yet answering")
	}
}
