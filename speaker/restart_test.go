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
)

// A member that leaves restarting in place keeps its address for the
// hold: the address does not move, and does not move back when the new
// speaker joins.
func TestRestartInPlaceKeepsAddresses(t *testing.T) {
	nodes := []string{"node1", "node2"}
	ip := ipFor(t, "node2", nodes...)
	l := newLab(t, "node1", nodes...)
	l.sp.d.RestartHold = time.Hour
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
	if len(l.sp.held) != 0 {
		t.Errorf("held after the join: %v", l.sp.held)
	}
}

// Once the hold ends without a new speaker, the address is taken over.
func TestRestartHoldEnds(t *testing.T) {
	nodes := []string{"node1", "node2"}
	ip := ipFor(t, "node2", nodes...)
	l := newLab(t, "node1", nodes...)
	l.sp.d.RestartHold = 50 * time.Millisecond
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
		l := newLab(t, "node1", nodes...)
		l.sp.d.RestartHold = c.hold
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
