package speaker

import (
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/herald-lb/herald/speaker/members"
	"github.com/herald-lb/herald/speaker/partition"
)

// A member that leaves restarting in place keeps its address for the
// hold: the address does not move, and does not move back when the new
// speaker joins.
func TestRestartInPlaceKeepsAddresses(t *testing.T) {
	nodes := []string{"node1", "node2"}
	ip := ipFor(t, "node2", nodes...)
	l := newLabWith(t, "node1", nodes, restartHold(time.Hour))
	l.service("web", false, ip)
	l.sp.Sync()
	if l.sp.Announcements().AnnouncingAnywhere(addr(ip)) {
		t.Fatal("node1 announces node2's address before anything happened")
	}
	l.cluster.LeaveRestarting("node2")
	l.sp.Sync()
	if l.sp.Announcements().AnnouncingAnywhere(addr(ip)) {
		t.Fatal("node1 took over the address of a speaker restarting in place")
	}
	// The new speaker joins: nothing moves.
	l.cluster.Set(members.Member{Name: "node2", Meta: members.Meta{Interfaces: []string{"eth0"}}})
	l.sp.Sync()
	if l.sp.Announcements().AnnouncingAnywhere(addr(ip)) {
		t.Fatal("node1 announces node2's address after node2 came back")
	}
	if held, _, _ := l.sp.partition.Held(nil); len(held) != 0 {
		t.Errorf("held after the join: %v", held)
	}
}

// Once the hold ends without a new speaker, the address is taken over.
func TestRestartHoldEnds(t *testing.T) {
	nodes := []string{"node1", "node2"}
	ip := ipFor(t, "node2", nodes...)
	l := newLabWith(t, "node1", nodes, restartHold(50*time.Millisecond))
	l.service("web", false, ip)
	l.sp.Sync()
	l.cluster.LeaveRestarting("node2")
	l.sp.Sync()
	if l.sp.Announcements().AnnouncingAnywhere(addr(ip)) {
		t.Fatal("taken over at once")
	}
	time.Sleep(60 * time.Millisecond)
	l.sp.Sync()
	if !l.sp.Announcements().AnnouncingAnywhere(addr(ip)) {
		t.Fatal("not taken over after the hold")
	}
}

// Without a hold, or after a plain leave, the address moves at once.
func TestLeaveWithoutRestartHold(t *testing.T) {
	nodes := []string{"node1", "node2"}
	ip := ipFor(t, "node2", nodes...)
	for _, c := range []struct {
		name  string
		hold  time.Duration
		leave func(*members.Fake)
	}{
		{"hold 0", 0, func(c *members.Fake) { c.LeaveRestarting("node2") }},
		{"plain leave", time.Hour, func(c *members.Fake) { c.Leave("node2") }},
		{"death", time.Hour, func(c *members.Fake) { c.Remove("node2") }},
	} {
		l := newLabWith(t, "node1", nodes, restartHold(c.hold))
		l.service("web", false, ip)
		l.sp.Sync()
		c.leave(l.cluster)
		l.sp.Sync()
		if !l.sp.Announcements().AnnouncingAnywhere(addr(ip)) {
			t.Errorf("%s: the address did not move", c.name)
		}
	}
}

func TestDecideRestart(t *testing.T) {
	yes := true
	now := metav1.Now()
	owner := metav1.OwnerReference{Kind: "DaemonSet", Name: "herald-speaker", UID: "ds1", Controller: &yes}
	pod := func(deleting bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "herald-speaker-x", OwnerReferences: []metav1.OwnerReference{owner}}}
		if deleting {
			p.DeletionTimestamp = &now
		}
		return p
	}
	ds := func(uid types.UID, deleting bool) *appsv1.DaemonSet {
		d := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "herald-speaker", UID: uid}}
		if deleting {
			d.DeletionTimestamp = &now
		}
		return d
	}
	node := func(mod func(*corev1.Node)) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
		if mod != nil {
			mod(n)
		}
		return n
	}
	good := RestartFacts{Hold: time.Minute, Pod: pod(true), DaemonSet: ds("ds1", false), Node: node(nil)}
	if d := DecideRestart(good); !d.InPlace {
		t.Fatalf("a rolling update on a healthy node: %+v", d)
	}
	for name, c := range map[string]struct {
		mod  func(*RestartFacts)
		want string
	}{
		"hold off":         {func(f *RestartFacts) { f.Hold = 0 }, "--restart-hold"},
		"pod unreadable":   {func(f *RestartFacts) { f.Pod, f.PodErr = nil, errors.New("forbidden") }, "forbidden"},
		"not in a pod":     {func(f *RestartFacts) { f.Pod = nil }, "not in a pod"},
		"pod not deleted":  {func(f *RestartFacts) { f.Pod = pod(false) }, "not being deleted"},
		"no owner":         {func(f *RestartFacts) { f.Pod.OwnerReferences = nil }, "no DaemonSet owner"},
		"ds unreadable":    {func(f *RestartFacts) { f.DaemonSet, f.DaemonSetErr = nil, errors.New("forbidden") }, "unreadable"},
		"ds replaced":      {func(f *RestartFacts) { f.DaemonSet = ds("ds2", false) }, "gone or replaced"},
		"ds gone":          {func(f *RestartFacts) { f.DaemonSet = nil }, "gone or replaced"},
		"ds being deleted": {func(f *RestartFacts) { f.DaemonSet = ds("ds1", true) }, "being deleted"},
		"node unknown":     {func(f *RestartFacts) { f.Node, f.NodeErr = nil, errors.New("not found") }, "node unreadable"},
		"cordoned":         {func(f *RestartFacts) { f.Node = node(func(n *corev1.Node) { n.Spec.Unschedulable = true }) }, "cordoned"},
		"not ready": {func(f *RestartFacts) {
			f.Node = node(func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionUnknown })
		}, "not Ready"},
		"no ready condition": {func(f *RestartFacts) { f.Node = node(func(n *corev1.Node) { n.Status.Conditions = nil }) }, "not Ready"},
		"out of service": {func(f *RestartFacts) {
			f.Node = node(func(n *corev1.Node) {
				n.Spec.Taints = []corev1.Taint{{Key: outOfServiceTaint, Effect: corev1.TaintEffectNoExecute}}
			})
		}, "out-of-service"},
	} {
		f := good
		f.Pod = pod(true)
		c.mod(&f)
		d := DecideRestart(f)
		if d.InPlace || !strings.Contains(d.Reason, c.want) {
			t.Errorf("%s: %+v, want a hand-over saying %q", name, d, c.want)
		}
	}
}

// TestRestartInPlaceTwoNodes: in a cluster of two, the speaker that stays
// while the other restarts in place is not alone: it is not isolated,
// not counted out (so not recovering when the other is back), and
// neither address moves, before, during or after the restart. Found on
// real nodes: a helm upgrade of two nodes moved an address and back.
func TestRestartInPlaceTwoNodes(t *testing.T) {
	nodes := []string{"node1", "node2"}
	for _, self := range nodes {
		peer := nodes[0]
		if peer == self {
			peer = nodes[1]
		}
		mine, theirs := ipFor(t, self, nodes...), ipFor(t, peer, nodes...)
		l, tr, now := partitionLab(t, self, nodes, partition.Config{RecoveryHold: time.Minute, RestartHold: time.Hour})
		l.service("web", false, mine, theirs)
		check := func(when string) {
			t.Helper()
			a := l.sp.Announcements()
			if !a.AnnouncingAnywhere(addr(mine)) || a.AnnouncingAnywhere(addr(theirs)) {
				t.Errorf("%s, %s: announcing %s %v and %s %v, want only its own", self, when, mine, a.AnnouncingAnywhere(addr(mine)), theirs, a.AnnouncingAnywhere(addr(theirs)))
			}
			if l.sp.State().Isolated {
				t.Errorf("%s, %s: isolated", self, when)
			}
			if r, _ := l.sp.partition.Recovering(); r {
				t.Errorf("%s, %s: counted out (recovering)", self, when)
			}
		}
		tr.Observe(peer, *now)
		l.sp.Sync()
		check("before")
		l.cluster.LeaveRestarting(peer)
		for range 5 { // past the heartbeat window
			*now = now.Add(time.Second)
			l.sp.Sync()
			check("while the other restarts")
		}
		l.cluster.Set(members.Member{Name: peer, Meta: members.Meta{Interfaces: []string{"eth0"}}})
		l.sp.Sync()
		check("after the other is back")
	}
}

// TestAloneAfterGracefulLeaves: a speaker whose only peer left for good
// (a plain graceful leave, not a restart) is the whole cluster: not a
// minority, so not isolated and not counted out; it takes the address.
func TestAloneAfterGracefulLeaves(t *testing.T) {
	nodes := []string{"node1", "node2"}
	theirs := ipFor(t, "node2", nodes...)
	l, _, now := partitionLab(t, "node1", nodes, partition.Config{RecoveryHold: time.Minute})
	l.service("web", false, theirs)
	l.sp.Sync()
	l.cluster.Leave("node2")
	for range 5 {
		*now = now.Add(time.Second)
		l.sp.Sync()
	}
	if l.sp.State().Isolated || !l.sp.Announcements().AnnouncingAnywhere(addr(theirs)) {
		t.Errorf("alone after node2 left gracefully: isolated %v, announcing %v", l.sp.State().Isolated, l.sp.Announcements().AnnouncingAnywhere(addr(theirs)))
	}
	if r, _ := l.sp.partition.Recovering(); r {
		t.Error("counted out after a graceful leave")
	}
}

// restartHold sets the speaker's restart hold (in its partition Guard).
func restartHold(hold time.Duration) func(*Deps) {
	return func(d *Deps) { d.Partition = partition.New(partition.Config{Self: d.Node, RestartHold: hold}) }
}
