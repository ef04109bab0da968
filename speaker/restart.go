package speaker

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/herald-lb/herald/internal/daemon"
	l2plan "github.com/herald-lb/herald/speaker/layer2/plan"
)

// A restart in place is a speaker stopping only to be replaced on the
// same node: its pod deleted by a rolling update of its DaemonSet (or by
// hand) on a node that stays. The node's proxy rules stay in the kernel
// meanwhile, so the node keeps forwarding its addresses' traffic. Handing
// them to another node would break the connections in flight twice, at
// the hand-off and when the new speaker wins them back; instead the
// speaker leaves saying so (members.Meta.Restarting) and the others keep
// electing it for their restart hold. On BGP it leaves the sessions of
// peers with graceful restart to close without a NOTIFICATION, so those
// routers keep its routes as stale until the new speaker sends them again.

// DefaultRestartHold is --restart-hold's default: long enough for a
// DaemonSet to replace a pod whose image is on the node (2-8 s on the
// lab's real nodes), short enough that a node that does not come back
// loses its addresses well before any client gives up.
const DefaultRestartHold = 30 * time.Second

// restartFactsTimeout bounds the API reads at SIGTERM; on timeout the
// addresses are handed over as before.
const restartFactsTimeout = 2 * time.Second

// RestartFacts are what DecideRestart reads at SIGTERM.
type RestartFacts struct {
	// Hold is this speaker's --restart-hold (the others' is the same
	// when they share the chart's values); 0 turns restarts in place off.
	Hold time.Duration
	// Pod is the speaker's own Pod read at SIGTERM.
	Pod    *corev1.Pod
	PodErr error
	// DaemonSet is the pod's controlling DaemonSet, read then.
	DaemonSet    *appsv1.DaemonSet
	DaemonSetErr error
	// Node is this node, from the speaker's cache.
	Node    *corev1.Node
	NodeErr error
}

// RestartDecision says how the speaker leaves.
type RestartDecision struct {
	InPlace bool
	Reason  string
}

// outOfServiceTaint is set on a node that is shut down for good
// (non-graceful node shutdown).
const outOfServiceTaint = "node.kubernetes.io/out-of-service"

// DecideRestart is true only when everything says a new speaker starts
// on this node at once; any doubt hands the addresses over, as a
// graceful stop always did. A pod that is not being deleted stops with
// its node (a node shutdown) or by a failed probe; a cordoned or NotReady
// node is being taken down; a DaemonSet being deleted is an uninstall.
func DecideRestart(f RestartFacts) RestartDecision {
	no := func(format string, args ...any) RestartDecision {
		return RestartDecision{Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case f.Hold <= 0:
		return no("--restart-hold is 0")
	case f.PodErr != nil:
		return no("own pod unreadable: %v", f.PodErr)
	case f.Pod == nil:
		return no("not in a pod (no POD_NAME/POD_NAMESPACE)")
	case f.Pod.DeletionTimestamp == nil:
		return no("the pod is not being deleted (its node is shutting down, or a probe failed)")
	}
	owner := daemon.DaemonSetOwner(f.Pod)
	switch {
	case owner == nil:
		return no("the pod has no DaemonSet owner")
	case f.DaemonSetErr != nil:
		return no("DaemonSet %s unreadable: %v", owner.Name, f.DaemonSetErr)
	case f.DaemonSet == nil || f.DaemonSet.UID != owner.UID:
		return no("DaemonSet %s gone or replaced", owner.Name)
	case f.DaemonSet.DeletionTimestamp != nil:
		return no("DaemonSet %s being deleted", owner.Name)
	case f.NodeErr != nil:
		return no("node unreadable: %v", f.NodeErr)
	case f.Node == nil:
		return no("node unknown")
	case f.Node.Spec.Unschedulable:
		return no("node %s is cordoned", f.Node.Name)
	case !nodeReady(f.Node):
		return no("node %s is not Ready", f.Node.Name)
	}
	for _, t := range f.Node.Spec.Taints {
		if t.Key == outOfServiceTaint {
			return no("node %s is tainted %s", f.Node.Name, outOfServiceTaint)
		}
	}
	return RestartDecision{true, fmt.Sprintf("pod deleted while DaemonSet %s stays and node %s is schedulable and Ready: its replacement starts here", owner.Name, f.Node.Name)}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// gatherRestartFacts reads the facts within ctx: the pod and its
// DaemonSet from the API (a fresh read: the deletion is what matters),
// the node from the cache.
func gatherRestartFacts(ctx context.Context, kube kubernetes.Interface, o Options, nodes corelisters.NodeLister) RestartFacts {
	f := RestartFacts{Hold: o.RestartHold}
	if f.Hold <= 0 {
		return f
	}
	if o.PodNamespace == "" || o.PodName == "" {
		return f
	}
	f.Pod, f.PodErr = kube.CoreV1().Pods(o.PodNamespace).Get(ctx, o.PodName, metav1.GetOptions{})
	if f.PodErr != nil {
		return f
	}
	if owner := daemon.DaemonSetOwner(f.Pod); owner != nil {
		f.DaemonSet, f.DaemonSetErr = kube.AppsV1().DaemonSets(o.PodNamespace).Get(ctx, owner.Name, metav1.GetOptions{})
	}
	f.Node, f.NodeErr = nodes.Get(o.NodeName)
	return f
}

// heldRestarting logs the hold of a member that left restarting in
// place (partition.Guard.MemberLeft started it) and arms a sync for its
// end. Called by the memberlist callback.
func (s *Speaker) heldRestarting(name string) {
	hold := s.partition.RestartHold()
	s.d.Log.Info("a speaker restarts in place: it keeps its addresses while its node forwards them, until its replacement joins or the hold ends",
		"member", name, "hold", hold)
	time.AfterFunc(hold+10*time.Millisecond, s.Trigger)
}

// heldMembers are the members held for their restart that are not live,
// as election candidates; holds that ended, or whose member is back, are
// dropped. Owned by the loop.
func (s *Speaker) heldMembers(live map[string]bool) []l2plan.Member {
	held, back, expired := s.partition.Held(live)
	for _, name := range back {
		s.d.Log.Info("a restarted speaker is back", "member", name)
	}
	for _, name := range expired {
		s.d.Log.Warn("no speaker came back on a node whose speaker restarted in place: taking its addresses over", "member", name, "hold", s.partition.RestartHold())
	}
	return held
}
