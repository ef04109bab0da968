package speaker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/herald-lb/herald/config/v1beta1"
	l2plan "github.com/herald-lb/herald/speaker/layer2/plan"
	"github.com/herald-lb/herald/speaker/view"
)

// Labels and the annotation on ServiceAnnouncements. The node is an
// annotation because a node name may be longer than a label value allows;
// the labels are for `kubectl get -l`.
const (
	LabelServiceNamespace = "herald.io/service-namespace"
	LabelServiceName      = "herald.io/service-name"
	LabelNode             = "herald.io/node"
	AnnotationNode        = "herald.io/node"
)

// AnnouncementGVR is the ServiceAnnouncement resource.
var AnnouncementGVR = v1beta1.GroupVersion.WithResource("serviceannouncements")

// AnnouncementName names the layer-2 ServiceAnnouncement of a Service
// announced by a node: readable (service and node, shortened) and
// collision-free across namespaces and nodes (a hash of all three).
func AnnouncementName(svc view.ServiceRef, node string) string {
	return announcementName(svc, node, "")
}

// AnnouncementNameOf names the ServiceAnnouncement of a: layer-2 ones as
// AnnouncementName, others with the protocol in the name and the hash,
// since a node may announce one Service both ways.
func AnnouncementNameOf(a view.Announcement) string {
	if a.Protocol == l2plan.Protocol {
		return AnnouncementName(a.Service, a.Node)
	}
	return announcementName(a.Service, a.Node, a.Protocol)
}

func announcementName(svc view.ServiceRef, node, protocol string) string {
	key := svc.Namespace + "/" + svc.Name + "/" + node
	if protocol != "" {
		key += "/" + protocol
	}
	sum := sha256.Sum256([]byte(key))
	short := func(s string, n int) string {
		s = strings.ReplaceAll(s, ".", "-")
		if len(s) > n {
			s = s[:n]
		}
		return strings.Trim(s, "-")
	}
	// At most 63 characters: 30 + 1 + 20 + 1 + 10, the protocol's room
	// taken from the Service's part.
	svcLen, suffix := 30, ""
	if protocol != "" {
		svcLen, suffix = 30-len(protocol)-1, protocol+"-"
	}
	name := short(svc.Name, svcLen) + "-" + short(node, 20) + "-" + suffix
	return name + hex.EncodeToString(sum[:])[:10]
}

// AnnouncementWriter keeps this node's ServiceAnnouncements in the API as
// the speaker loop last set them, from its own queue: a slow or failing
// API server delays the status, never the announcements.
type AnnouncementWriter struct {
	node, ns string
	res      dynamic.ResourceInterface
	lister   cache.GenericLister
	// owner returns the Service's UID when it is in ns (owner
	// references cannot cross namespaces), "" otherwise.
	owner func(view.ServiceRef) types.UID
	// pod, when set, also owns every object written (OwnedByPod).
	pod   *metav1.OwnerReference
	log   *slog.Logger
	queue workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	desired map[string]view.Announcement
	sweep   map[string]bool
}

// NewAnnouncementWriter writes into namespace ns through dyn, reading the
// current objects from inf (an informer on ServiceAnnouncements in ns).
func NewAnnouncementWriter(node, ns string, dyn dynamic.Interface, inf cache.SharedIndexInformer,
	owner func(view.ServiceRef) types.UID, log *slog.Logger) *AnnouncementWriter {
	w := &AnnouncementWriter{
		node: node, ns: ns,
		res:     dyn.Resource(AnnouncementGVR).Namespace(ns),
		lister:  cache.NewGenericLister(inf.GetIndexer(), AnnouncementGVR.GroupResource()),
		owner:   owner,
		log:     log,
		desired: map[string]view.Announcement{},
		sweep:   map[string]bool{},
		queue:   newWriteQueue(),
	}
	onEveryEvent(inf, w.objectChanged)
	return w
}

// newWriteQueue is a writer's queue of object names, retrying a failed
// write from 200 ms up to every 30 s.
func newWriteQueue() workqueue.TypedRateLimitingInterface[string] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 30*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{})
}

// onEveryEvent calls changed with the object of every event of inf:
// writers are level-triggered on their own objects, so someone deleting
// or editing one gets it written back.
func onEveryEvent(inf cache.SharedIndexInformer, changed func(obj any)) {
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    changed,
		UpdateFunc: func(_, obj any) { changed(obj) },
		DeleteFunc: changed,
	})
}

// OwnedByPod makes the speaker's pod an owner of the objects it creates
// from now on (call it before Run): when the pod is deleted and the
// speaker could not remove them, the garbage collector does. An object
// owned by a Service too (one in the same namespace) stays as long as
// that Service does.
func (w *AnnouncementWriter) OwnedByPod(name string, uid types.UID) {
	w.pod = &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: name, UID: uid}
}

func (w *AnnouncementWriter) objectChanged(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || u.GetNamespace() != w.ns {
		return
	}
	w.mu.Lock()
	_, mine := w.desired[u.GetName()]
	w.mu.Unlock()
	if mine || u.GetAnnotations()[AnnotationNode] == w.node {
		w.queue.Add(u.GetName())
	}
}

// Set implements StatusSink.
func (w *AnnouncementWriter) Set(anns []view.Announcement) {
	want := map[string]view.Announcement{}
	for _, a := range anns {
		want[AnnouncementNameOf(a)] = a
	}
	w.mu.Lock()
	changed := map[string]bool{}
	for name, a := range want {
		if old, ok := w.desired[name]; !ok || !old.Equal(a) {
			changed[name] = true
		}
	}
	for name := range w.desired {
		if _, ok := want[name]; !ok {
			changed[name] = true
		}
	}
	w.desired = want
	w.mu.Unlock()
	for name := range changed {
		w.queue.Add(name)
	}
}

// Nodes implements StatusSink.
func (w *AnnouncementWriter) Nodes() []string {
	objs, _ := w.lister.ByNamespace(w.ns).List(labels.Everything())
	set := map[string]bool{}
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			if n := announcementNode(u); n != "" {
				set[n] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// Sweep implements StatusSink.
func (w *AnnouncementWriter) Sweep(node string) {
	for _, name := range objectsOf(w.lister, w.ns, node) {
		w.mu.Lock()
		w.sweep[name] = true
		w.mu.Unlock()
		w.queue.Add(name)
	}
}

// objectsOf names the objects in the lister that are about node.
func objectsOf(lister cache.GenericLister, ns, node string) []string {
	objs, _ := lister.ByNamespace(ns).List(labels.Everything())
	var out []string
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok && announcementNode(u) == node {
			out = append(out, u.GetName())
		}
	}
	return out
}

// announcementNode is the node an object is about: the annotation, or
// for an object whose status was written by hand, the status.
func announcementNode(u *unstructured.Unstructured) string {
	if n := u.GetAnnotations()[AnnotationNode]; n != "" {
		return n
	}
	n, _, _ := unstructured.NestedString(u.Object, "status", "node")
	return n
}

// Run writes until ctx ends.
func (w *AnnouncementWriter) Run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		w.queue.ShutDown()
	}()
	runQueue(ctx, w.queue, w.reconcile, func(name string, err error) {
		w.log.Warn("writing a ServiceAnnouncement; retrying", "name", w.ns+"/"+name, "err", err)
	})
}

// runQueue reconciles the names queue hands out until it shuts down,
// retrying failures with the queue's backoff.
func runQueue(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string],
	reconcile func(context.Context, string) error, failed func(string, error)) {
	for {
		name, quit := queue.Get()
		if quit {
			return
		}
		err := reconcile(ctx, name)
		queue.Done(name)
		switch {
		case err == nil:
			queue.Forget(name)
		case ctx.Err() == nil:
			failed(name, err)
			queue.AddRateLimited(name)
		}
	}
}

// DeleteOwn deletes every ServiceAnnouncement of this node, on a graceful
// stop: the node no longer announces anything.
func (w *AnnouncementWriter) DeleteOwn(ctx context.Context) error {
	objs, _ := w.lister.ByNamespace(w.ns).List(labels.Everything())
	var errs []string
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok || announcementNode(u) != w.node {
			continue
		}
		err := w.res.Delete(ctx, u.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptrTo(u.GetUID())}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("deleting ServiceAnnouncements: %s", strings.Join(errs, "; "))
	}
	return nil
}

func (w *AnnouncementWriter) reconcile(ctx context.Context, name string) error {
	w.mu.Lock()
	want, ok := w.desired[name]
	sweep := w.sweep[name]
	delete(w.sweep, name)
	w.mu.Unlock()
	cur, err := w.current(name)
	if err != nil {
		return err
	}
	if !ok {
		if cur == nil || (!sweep && announcementNode(cur) != w.node) {
			return nil // not ours
		}
		err := w.res.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptrTo(cur.GetUID())}})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	status := desiredStatus(want)
	if cur == nil {
		obj := &v1beta1.ServiceAnnouncement{
			TypeMeta: metav1.TypeMeta{APIVersion: v1beta1.GroupVersion.String(), Kind: "ServiceAnnouncement"},
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: w.ns,
				Labels: map[string]string{
					"app.kubernetes.io/name": "herald",
					LabelServiceNamespace:    want.Service.Namespace,
					LabelServiceName:         want.Service.Name,
				},
				Annotations: map[string]string{AnnotationNode: w.node},
			},
		}
		if len(validation.IsValidLabelValue(w.node)) == 0 {
			obj.Labels[LabelNode] = w.node
		}
		if uid := w.owner(want.Service); uid != "" {
			obj.OwnerReferences = []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Service", Name: want.Service.Name, UID: uid,
			}}
		}
		if w.pod != nil {
			obj.OwnerReferences = append(obj.OwnerReferences, *w.pod)
		}
		if cur, err = createOrGet(ctx, w.res, obj); err != nil {
			return err
		}
	}
	var have v1beta1.ServiceAnnouncement
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(cur.Object, &have); err != nil {
		return err
	}
	if sameStatus(have.Status, status) && have.Annotations[AnnotationNode] == w.node {
		return nil
	}
	return updateStatus(ctx, w.res, cur, &status)
}

// createOrGet creates obj; one created before and not in the cache yet
// is taken as it is.
func createOrGet(ctx context.Context, res dynamic.ResourceInterface, obj metav1.Object) (*unstructured.Unstructured, error) {
	ro, ok := obj.(runtime.Object)
	if !ok {
		return nil, fmt.Errorf("%T is not a runtime.Object", obj)
	}
	u, err := toUnstructured(ro)
	if err != nil {
		return nil, err
	}
	created, err := res.Create(ctx, u, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = res.Get(ctx, obj.GetName(), metav1.GetOptions{})
	}
	return created, err
}

// updateStatus writes status (a pointer to a status struct) into cur's
// status subresource.
func updateStatus(ctx context.Context, res dynamic.ResourceInterface, cur *unstructured.Unstructured, status any) error {
	upd := cur.DeepCopy()
	st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(status)
	if err != nil {
		return err
	}
	upd.Object["status"] = st
	_, err = res.UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	return err
}

func (w *AnnouncementWriter) current(name string) (*unstructured.Unstructured, error) {
	return cachedObject(w.lister, w.ns, name)
}

// cachedObject is the object in the lister, nil when there is none.
func cachedObject(lister cache.GenericLister, ns, name string) (*unstructured.Unstructured, error) {
	obj, err := lister.ByNamespace(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("unexpected %T in the cache", obj)
	}
	return u, nil
}

func desiredStatus(a view.Announcement) v1beta1.ServiceAnnouncementStatus {
	st := v1beta1.ServiceAnnouncementStatus{
		Service:    v1beta1.ServiceReference{Namespace: a.Service.Namespace, Name: a.Service.Name},
		Node:       a.Node,
		Protocol:   v1beta1.AnnouncementProtocol(a.Protocol),
		Interfaces: slices.Clone(a.Interfaces),
		Peers:      slices.Clone(a.Peers),
	}
	for _, ip := range a.IPs {
		st.IPs = append(st.IPs, ip.String())
	}
	for _, u := range a.Unannounced {
		st.Unannounced = append(st.Unannounced, v1beta1.UnannouncedIP{IP: u.Addr.String(), Reason: u.Reason, Detail: u.Detail})
	}
	return st
}

func sameStatus(a, b v1beta1.ServiceAnnouncementStatus) bool {
	return a.Service == b.Service && a.Node == b.Node && a.Protocol == b.Protocol &&
		slices.Equal(a.IPs, b.IPs) && slices.Equal(a.Interfaces, b.Interfaces) && slices.Equal(a.Peers, b.Peers) &&
		slices.Equal(a.Unannounced, b.Unannounced)
}

func toUnstructured(obj runtime.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

func ptrTo[T any](v T) *T { return &v }
