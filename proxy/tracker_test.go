package proxy

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/proxy/rules"
)

func TestTrackerChanges(t *testing.T) {
	kicks := 0
	tr := NewTracker(testNode, func() { kicks++ })
	web := rules.ServiceKey{Namespace: "shop", Name: "web"}

	tr.UpdateService(clusterIPService("shop", "web", "10.96.0.10"))
	tr.UpdateSlice(slice("shop", "web", "web-1", 8080, "http", corev1.ProtocolTCP, ep{"10.244.1.20", testNode, true}))
	if kicks != 2 {
		t.Errorf("%d kicks, want 2", kicks)
	}
	s := tr.Snapshot()
	if !s.Changed[web] || len(s.Services) != 1 || len(s.Endpoints[rules.ServicePortName{Namespace: "shop", Name: "web", Port: "http"}]) != 1 {
		t.Fatalf("%+v", s)
	}
	if s := tr.Snapshot(); len(s.Changed) != 0 {
		t.Errorf("changes not reset: %v", s.Changed)
	}

	// Same content again (a resync, a status update, labels): no change.
	svc := clusterIPService("shop", "web", "10.96.0.10")
	svc.Labels = map[string]string{"team": "a"}
	svc.ResourceVersion = "42"
	tr.UpdateService(svc)
	sl := slice("shop", "web", "web-1", 8080, "http", corev1.ProtocolTCP, ep{"10.244.1.20", testNode, true})
	sl.ResourceVersion = "43"
	tr.UpdateSlice(sl)
	if kicks != 2 || len(tr.Snapshot().Changed) != 0 {
		t.Errorf("no-op updates counted as changes (kicks %d)", kicks)
	}

	// A second slice; deleting the first keeps the second's endpoints.
	tr.UpdateSlice(slice("shop", "web", "web-2", 8080, "http", corev1.ProtocolTCP, ep{"10.244.2.20", otherNode, true}))
	tr.DeleteSlice(slice("shop", "web", "web-1", 8080, "http", corev1.ProtocolTCP))
	s = tr.Snapshot()
	got := s.Endpoints[rules.ServicePortName{Namespace: "shop", Name: "web", Port: "http"}]
	if !s.Changed[web] || len(got) != 1 || got[0].IP.String() != "10.244.2.20" {
		t.Errorf("endpoints %+v", got)
	}

	// Another proxy takes the Service over: it leaves the model.
	svc = clusterIPService("shop", "web", "10.96.0.10")
	svc.Labels = map[string]string{LabelServiceProxyName: "other"}
	tr.UpdateService(svc)
	if s := tr.Snapshot(); !s.Changed[web] || len(s.Services) != 0 {
		t.Errorf("skipped Service still there: %+v", s.Services)
	}
	// Deleting what is not there is not a change.
	k := kicks
	tr.DeleteService("shop", "nope")
	tr.DeleteSlice(slice("shop", "nope", "nope-1", 80, "", corev1.ProtocolTCP))
	if kicks != k {
		t.Error("deleting unknown objects asked for a sync")
	}
	// A slice without the service-name label is not a Service's.
	orphan := slice("shop", "web", "orphan", 80, "http", corev1.ProtocolTCP, ep{"10.244.9.9", testNode, true})
	delete(orphan.Labels, "kubernetes.io/service-name")
	tr.UpdateSlice(orphan)
	if kicks != k {
		t.Error("an orphan slice asked for a sync")
	}
}

func TestTrackerProblemsOnlyOnChange(t *testing.T) {
	tr := NewTracker(testNode, nil)
	svc := clusterIPService("shop", "web", "10.96.0.10")
	svc.Spec.ExternalIPs = []string{"not-an-ip"}
	if p := tr.UpdateService(svc); len(p) != 1 {
		t.Fatalf("problems %v", p)
	}
	if p := tr.UpdateService(svc); len(p) != 0 {
		t.Errorf("problems reported again on an unchanged Service: %v", p)
	}
}

func TestTrackerNode(t *testing.T) {
	kicks := 0
	tr := NewTracker(testNode, func() { kicks++ })
	if tr.UpdateNode(node(otherNode, "192.0.2.11")); kicks != 0 || tr.Node().Seen {
		t.Fatal("another node's object was taken")
	}
	n := node(testNode, "192.0.2.10", "2001:db8::10")
	n.Spec.PodCIDRs = []string{"10.244.1.0/24"}
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "198.51.100.10"})
	tr.UpdateNode(n)
	info := tr.Node()
	if kicks != 1 || !info.Seen || !info.Eligible || len(info.IPs) != 3 || len(info.PodCIDRs) != 1 {
		t.Fatalf("%+v", info)
	}
	if !tr.Snapshot().NodeChanged {
		t.Error("first sight of the node is a node change")
	}
	// Draining by the autoscaler: eligibility only, no sync.
	d := n.DeepCopy()
	d.Spec.Taints = []corev1.Taint{{Key: TaintToBeDeleted, Effect: corev1.TaintEffectNoSchedule}}
	if !tr.UpdateNode(d) || tr.Node().Eligible || kicks != 1 {
		t.Errorf("taint: eligible %v kicks %d", tr.Node().Eligible, kicks)
	}
	d = n.DeepCopy()
	now := metav1.NewTime(time.Now())
	d.DeletionTimestamp = &now
	tr.UpdateNode(d)
	if tr.Node().Eligible {
		t.Error("a node being deleted is eligible")
	}
	tr.UpdateNode(n)
	tr.DeleteNode(testNode)
	if tr.Node().Eligible {
		t.Error("a deleted node is eligible")
	}
}
