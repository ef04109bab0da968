package speaker

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/herald-lb/herald/config/v1beta1"
	"github.com/herald-lb/herald/speaker/view"
)

func listNodeAnnouncements(t *testing.T, ctx context.Context, dyn *dynamicfake.FakeDynamicClient) map[string]v1beta1.NodeAnnouncement {
	t.Helper()
	l, err := dyn.Resource(NodeAnnouncementGVR).Namespace("herald-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]v1beta1.NodeAnnouncement{}
	for _, u := range l.Items {
		var na v1beta1.NodeAnnouncement
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &na); err != nil {
			t.Fatal(err)
		}
		out[u.GetName()] = na
	}
	return out
}

// TestNodeAnnouncementWriter: one object named after the node, its status
// as the plan set it; unchanged summaries write nothing; an edit or a
// delete by someone else is written back; another node's object is left
// alone until swept; a graceful stop removes ours.
func TestNodeAnnouncementWriter(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{NodeAnnouncementGVR: "NodeAnnouncementList"})
	writes := 0
	dyn.PrependReactor("*", "nodeannouncements", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetVerb() == "create" || a.GetVerb() == "update" || a.GetVerb() == "delete" {
			writes++
		}
		return false, nil, nil
	})
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, "herald-system", nil)
	inf := f.ForResource(NodeAnnouncementGVR).Informer()
	w := NewStatusWriter(StatusConfig{Node: "node1", Namespace: "herald-system", Dynamic: dyn, Nodes: inf,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	pod := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "herald-speaker-x", UID: "uid-x"}
	w.OwnedByPod(pod.Name, pod.UID)
	f.Start(ctx.Done())
	// The fake API drops the events between an informer's list and its
	// watch: see a sentinel come and go before writing anything.
	cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
	sentinel := &unstructured.Unstructured{}
	sentinel.SetAPIVersion(v1beta1.GroupVersion.String())
	sentinel.SetKind("NodeAnnouncement")
	sentinel.SetNamespace("herald-system")
	sentinel.SetName("sentinel")
	if _, err := dyn.Resource(NodeAnnouncementGVR).Namespace("herald-system").Create(ctx, sentinel, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitInformer(t, func() bool { o, _ := w.node.current("sentinel"); return o != nil })
	if err := dyn.Resource(NodeAnnouncementGVR).Namespace("herald-system").Delete(ctx, "sentinel", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitInformer(t, func() bool { o, _ := w.node.current("sentinel"); return o == nil })
	writes = 0
	go w.Run(ctx)
	wait := func(what string, cond func(map[string]v1beta1.NodeAnnouncement) bool) map[string]v1beta1.NodeAnnouncement {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			got := listNodeAnnouncements(t, ctx, dyn)
			if cond(got) {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; have %+v", what, got)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	sum := view.NodeSummary{Node: "node1", Protocol: "bgp", Advertisements: []view.NodeAdvertisement{
		{Name: "all", IPv4Peers: []string{"ebgp", "ibgp"}, IPv6Peers: []string{"v6"}}, {Name: "edge", IPv4Peers: []string{"ebgp"}},
	}}
	w.SetNode(&sum)
	got := wait("node1's object with status", func(m map[string]v1beta1.NodeAnnouncement) bool { return m["node1"].Status.Node == "node1" })
	n1 := got["node1"]
	want := v1beta1.NodeAnnouncementStatus{Node: "node1", Protocol: "bgp", Advertisements: []v1beta1.NodeAdvertisement{
		{Name: "all", IPv4Peers: []string{"ebgp", "ibgp"}, IPv6Peers: []string{"v6"}}, {Name: "edge", IPv4Peers: []string{"ebgp"}},
	}}
	if !sameNodeStatus(n1.Status, want) || n1.Annotations[AnnotationNode] != "node1" || n1.Labels[LabelNode] != "node1" {
		t.Errorf("object %+v", n1)
	}
	if len(n1.OwnerReferences) != 1 || n1.OwnerReferences[0] != pod {
		t.Errorf("owner references %v, want the pod", n1.OwnerReferences)
	}
	// Create, then the status; the same summary again: no write.
	waitInformer(t, func() bool { o, _ := w.node.current("node1"); return o != nil && o.Object["status"] != nil })
	before := writes
	same := sum
	w.SetNode(&same)
	time.Sleep(100 * time.Millisecond)
	// Creating takes two writes, and a third when the writer's cache
	// has not seen its own status yet when the object's add event
	// makes it look again (the update then writes the same status).
	if before < 2 || before > 3 || writes != before {
		t.Errorf("writes: %d to create, %d more for an unchanged summary", before, writes-before)
	}

	// Someone else's edit and delete are undone.
	cur, _ := dyn.Resource(NodeAnnouncementGVR).Namespace("herald-system").Get(ctx, "node1", metav1.GetOptions{})
	_ = unstructured.SetNestedField(cur.Object, "tampered", "status", "reason")
	if _, err := dyn.Resource(NodeAnnouncementGVR).Namespace("herald-system").UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("the edit undone", func(m map[string]v1beta1.NodeAnnouncement) bool { return m["node1"].Status.Reason == "" })
	if err := dyn.Resource(NodeAnnouncementGVR).Namespace("herald-system").Delete(ctx, "node1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("written back", func(m map[string]v1beta1.NodeAnnouncement) bool { return m["node1"].Status.Node == "node1" })

	// A node that may not advertise says why.
	w.SetNode(&view.NodeSummary{Node: "node1", Protocol: "bgp", Reason: "the node's network is unavailable"})
	wait("the reason", func(m map[string]v1beta1.NodeAnnouncement) bool {
		return m["node1"].Status.Reason != "" && len(m["node1"].Status.Advertisements) == 0
	})

	// node2's object stays until swept.
	other := &unstructured.Unstructured{}
	other.SetAPIVersion(v1beta1.GroupVersion.String())
	other.SetKind("NodeAnnouncement")
	other.SetNamespace("herald-system")
	other.SetName("node2")
	other.SetAnnotations(map[string]string{AnnotationNode: "node2"})
	if _, err := dyn.Resource(NodeAnnouncementGVR).Namespace("herald-system").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitInformer(t, func() bool { return strings.Join(w.Nodes(), ",") == "node1,node2" })
	time.Sleep(100 * time.Millisecond)
	if _, ok := listNodeAnnouncements(t, ctx, dyn)["node2"]; !ok {
		t.Fatal("node2's object deleted without a sweep")
	}
	w.Sweep("node2")
	wait("node2's swept", func(m map[string]v1beta1.NodeAnnouncement) bool { _, ok := m["node2"]; return !ok && len(m) == 1 })

	// No summary (BGP has nothing to do here): no object.
	w.SetNode(nil)
	wait("node1's deleted", func(m map[string]v1beta1.NodeAnnouncement) bool { return len(m) == 0 })

	// A graceful stop removes ours, and it stays removed.
	w.SetNode(&sum)
	wait("node1's again", func(m map[string]v1beta1.NodeAnnouncement) bool { return m["node1"].Status.Node == "node1" })
	waitInformer(t, func() bool { o, _ := w.node.current("node1"); return o != nil })
	w.SetNode(nil)
	if err := w.DeleteOwn(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if m := listNodeAnnouncements(t, ctx, dyn); len(m) != 0 {
		t.Fatalf("left or written back after DeleteOwn: %v", m)
	}
}

// TestNodeAnnouncementWriterWithoutCRD: when NodeAnnouncements cannot be
// listed (the CRD is missing after an upgrade), Run waits without writing
// and ends with its context. (run.go keeps this informer out of the
// caches the speaker waits for, so announcing goes on.)
func TestNodeAnnouncementWriterWithoutCRD(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{NodeAnnouncementGVR: "NodeAnnouncementList"})
	dyn.PrependReactor("list", "nodeannouncements", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errNotFoundResource
	})
	creates := 0
	dyn.PrependReactor("create", "nodeannouncements", func(k8stesting.Action) (bool, runtime.Object, error) {
		creates++
		return true, nil, errNotFoundResource
	})
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, "herald-system", nil)
	inf := f.ForResource(NodeAnnouncementGVR).Informer()
	w := NewStatusWriter(StatusConfig{Node: "node1", Namespace: "herald-system", Dynamic: dyn, Nodes: inf,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	f.Start(ctx.Done())
	w.SetNode(&view.NodeSummary{Node: "node1", Protocol: "bgp"})
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return when its context ended")
	}
	if creates != 0 || inf.HasSynced() {
		t.Errorf("creates %d, synced %v without the resource", creates, inf.HasSynced())
	}
}

var errNotFoundResource = apierrors.NewNotFound(NodeAnnouncementGVR.GroupResource(), "")
