package speaker

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/herald-lb/herald/config/v1beta1"
	"github.com/herald-lb/herald/speaker/view"
)

// NodeAnnouncementGVR is the NodeAnnouncement resource.
var NodeAnnouncementGVR = v1beta1.GroupVersion.WithResource("nodeannouncements")

// NodeAnnouncementWriter keeps this node's NodeAnnouncement (named after
// the node) in the API as the BGP plan last set it, and deletes those of
// nodes whose speaker left, from its own queue like AnnouncementWriter.
//
// Its informer is not one the speaker waits for: a cluster upgraded
// without the new CRD (Helm does not upgrade crds/) keeps announcing, and
// only this status is missing, with a warning in the log.
type NodeAnnouncementWriter struct {
	node, ns string
	res      dynamic.ResourceInterface
	inf      cache.SharedIndexInformer
	lister   cache.GenericLister
	pod      *metav1.OwnerReference
	log      *slog.Logger
	queue    workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	desired *view.NodeSummary
	sweep   map[string]bool
}

// NewNodeAnnouncementWriter writes into namespace ns through dyn, reading
// the current objects from inf (an informer on NodeAnnouncements in ns).
func NewNodeAnnouncementWriter(node, ns string, dyn dynamic.Interface, inf cache.SharedIndexInformer, log *slog.Logger) *NodeAnnouncementWriter {
	w := &NodeAnnouncementWriter{
		node: node, ns: ns,
		res:    dyn.Resource(NodeAnnouncementGVR).Namespace(ns),
		inf:    inf,
		lister: cache.NewGenericLister(inf.GetIndexer(), NodeAnnouncementGVR.GroupResource()),
		log:    log,
		sweep:  map[string]bool{},
		queue:  newWriteQueue(),
	}
	onEveryEvent(inf, w.objectChanged)
	return w
}

// OwnedByPod makes the speaker's pod the owner of the object, as
// AnnouncementWriter.OwnedByPod.
func (w *NodeAnnouncementWriter) OwnedByPod(owner *metav1.OwnerReference) { w.pod = owner }

func (w *NodeAnnouncementWriter) objectChanged(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if u, ok := obj.(*unstructured.Unstructured); ok && u.GetNamespace() == w.ns && u.GetName() == w.node {
		w.queue.Add(w.node)
	}
}

// Set replaces this node's summary; nil deletes the object.
func (w *NodeAnnouncementWriter) Set(sum *view.NodeSummary) {
	w.mu.Lock()
	same := (w.desired == nil) == (sum == nil) && (sum == nil || w.desired.Equal(*sum))
	if sum != nil {
		c := *sum
		sum = &c
	}
	w.desired = sum
	w.mu.Unlock()
	if !same {
		w.queue.Add(w.node)
	}
}

// Nodes lists the nodes that have a NodeAnnouncement.
func (w *NodeAnnouncementWriter) Nodes() []string {
	objs, _ := w.lister.ByNamespace(w.ns).List(labels.Everything())
	var out []string
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			if n := announcementNode(u); n != "" {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Sweep deletes the NodeAnnouncements of node, whose speaker left.
func (w *NodeAnnouncementWriter) Sweep(node string) {
	for _, name := range objectsOf(w.lister, w.ns, node) {
		if name == w.node {
			continue
		}
		w.mu.Lock()
		w.sweep[name] = true
		w.mu.Unlock()
		w.queue.Add(name)
	}
}

// Run writes until ctx ends, once the informer has synced.
func (w *NodeAnnouncementWriter) Run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		w.queue.ShutDown()
	}()
	warn := time.AfterFunc(30*time.Second, func() {
		w.log.Warn("NodeAnnouncements cannot be read yet: this node's BGP status for Services with externalTrafficPolicy Cluster is not published (the announcing goes on). Is the nodeannouncements.herald.io CRD installed (Helm does not upgrade crds/: kubectl apply --server-side -f charts/herald/crds/) and may the speaker's ServiceAccount read it?")
	})
	synced := cache.WaitForCacheSync(ctx.Done(), w.inf.HasSynced)
	warn.Stop()
	if !synced {
		return
	}
	runQueue(ctx, w.queue, w.reconcile, func(name string, err error) {
		w.log.Warn("writing a NodeAnnouncement; retrying", "name", w.ns+"/"+name, "err", err)
	})
}

// DeleteOwn deletes this node's NodeAnnouncement, on a graceful stop.
func (w *NodeAnnouncementWriter) DeleteOwn(ctx context.Context) error {
	cur, err := w.current(w.node)
	if err != nil || cur == nil {
		return err
	}
	err = w.res.Delete(ctx, w.node, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptrTo(cur.GetUID())}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting NodeAnnouncement %s: %w", w.node, err)
	}
	return nil
}

func (w *NodeAnnouncementWriter) reconcile(ctx context.Context, name string) error {
	w.mu.Lock()
	var want *view.NodeSummary
	if name == w.node && w.desired != nil {
		c := *w.desired
		want = &c
	}
	sweep := w.sweep[name]
	delete(w.sweep, name)
	w.mu.Unlock()
	cur, err := w.current(name)
	if err != nil {
		return err
	}
	if want == nil {
		if cur == nil || (name != w.node && !sweep) {
			return nil
		}
		err := w.res.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptrTo(cur.GetUID())}})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	status := nodeStatus(*want)
	if cur == nil {
		obj := &v1beta1.NodeAnnouncement{
			TypeMeta: metav1.TypeMeta{APIVersion: v1beta1.GroupVersion.String(), Kind: "NodeAnnouncement"},
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: w.ns,
				Labels:      map[string]string{"app.kubernetes.io/name": "herald"},
				Annotations: map[string]string{AnnotationNode: w.node},
			},
		}
		if len(validation.IsValidLabelValue(w.node)) == 0 {
			obj.Labels[LabelNode] = w.node
		}
		if w.pod != nil {
			obj.OwnerReferences = []metav1.OwnerReference{*w.pod}
		}
		if cur, err = createOrGet(ctx, w.res, obj); err != nil {
			return err
		}
	}
	var have v1beta1.NodeAnnouncement
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(cur.Object, &have); err != nil {
		return err
	}
	if sameNodeStatus(have.Status, status) && have.Annotations[AnnotationNode] == w.node {
		return nil
	}
	return updateStatus(ctx, w.res, cur, &status)
}

func (w *NodeAnnouncementWriter) current(name string) (*unstructured.Unstructured, error) {
	return cachedObject(w.lister, w.ns, name)
}

func nodeStatus(s view.NodeSummary) v1beta1.NodeAnnouncementStatus {
	st := v1beta1.NodeAnnouncementStatus{Node: s.Node, Protocol: v1beta1.AnnouncementProtocol(s.Protocol), Reason: s.Reason}
	for _, a := range s.Advertisements {
		st.Advertisements = append(st.Advertisements, v1beta1.NodeAdvertisement{
			Name: a.Name, IPv4Peers: slices.Clone(a.IPv4Peers), IPv6Peers: slices.Clone(a.IPv6Peers),
		})
	}
	return st
}

func sameNodeStatus(a, b v1beta1.NodeAnnouncementStatus) bool {
	return a.Node == b.Node && a.Protocol == b.Protocol && a.Reason == b.Reason &&
		slices.EqualFunc(a.Advertisements, b.Advertisements, func(x, y v1beta1.NodeAdvertisement) bool {
			return x.Name == y.Name && slices.Equal(x.IPv4Peers, y.IPv4Peers) && slices.Equal(x.IPv6Peers, y.IPv6Peers)
		})
}

// statusWriters is a running speaker's StatusSink: its
// ServiceAnnouncements and, with BGP, its NodeAnnouncement.
type statusWriters struct {
	svc  *AnnouncementWriter
	node *NodeAnnouncementWriter // nil without BGP
}

func (s statusWriters) Set(anns []view.Announcement) { s.svc.Set(anns) }

func (s statusWriters) SetNode(sum *view.NodeSummary) {
	if s.node != nil {
		s.node.Set(sum)
	}
}

func (s statusWriters) Nodes() []string {
	out := s.svc.Nodes()
	if s.node != nil {
		out = append(out, s.node.Nodes()...)
		slices.Sort(out)
		out = slices.Compact(out)
	}
	return out
}

func (s statusWriters) Sweep(node string) {
	s.svc.Sweep(node)
	if s.node != nil {
		s.node.Sweep(node)
	}
}
