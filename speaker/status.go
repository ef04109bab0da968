package speaker

import (
	"context"
	"errors"
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
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/herald-lb/herald/speaker/view"
)

// StatusWriter is the speaker's one status writer (its StatusSink): it
// keeps this node's ServiceAnnouncements and, with BGP, its
// NodeAnnouncement in the API as the loop last set them, from queues of
// its own, so a slow or failing API server delays the status, never the
// announcements. Both kinds go through the same objectWriter; a
// statusKind says what differs.
type StatusWriter struct {
	svc  *objectWriter[view.Announcement]
	node *objectWriter[view.NodeSummary] // nil without BGP
}

// StatusConfig sets a StatusWriter up.
type StatusConfig struct {
	Node, Namespace string
	Dynamic         dynamic.Interface
	// Services is an informer on the ServiceAnnouncements in Namespace;
	// nil: none are written (tests of the other kind).
	Services cache.SharedIndexInformer
	// Nodes is an informer on the NodeAnnouncements in Namespace; nil:
	// none are written (no BGP).
	Nodes cache.SharedIndexInformer
	// Owner returns a Service's UID when it is in Namespace (owner
	// references cannot cross namespaces), "" otherwise.
	Owner func(view.ServiceRef) types.UID
	Log   *slog.Logger
}

// NewStatusWriter returns the writer of c.Node's status objects.
func NewStatusWriter(c StatusConfig) *StatusWriter {
	w := &StatusWriter{}
	if c.Services != nil {
		w.svc = newObjectWriter(serviceAnnouncements(c.Owner), c.Node, c.Namespace, c.Dynamic, c.Services, c.Log)
	}
	if c.Nodes != nil {
		w.node = newObjectWriter(nodeAnnouncements, c.Node, c.Namespace, c.Dynamic, c.Nodes, c.Log)
	}
	return w
}

// OwnedByPod makes the speaker's pod an owner of the objects written
// from now on (call it before Run): when the pod is deleted and the
// speaker could not remove them, the garbage collector does. An object
// owned by a Service too (one in the same namespace) stays as long as
// that Service does.
func (w *StatusWriter) OwnedByPod(name string, uid types.UID) {
	pod := &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: name, UID: uid}
	for _, o := range w.writers() {
		o.setPod(pod)
	}
}

// Set implements StatusSink.
func (w *StatusWriter) Set(anns []view.Announcement) {
	if w.svc == nil {
		return
	}
	want := map[string]view.Announcement{}
	for _, a := range anns {
		want[AnnouncementNameOf(a)] = a
	}
	w.svc.set(want)
}

// SetNode implements StatusSink; nil deletes this node's object.
func (w *StatusWriter) SetNode(sum *view.NodeSummary) {
	if w.node == nil {
		return
	}
	want := map[string]view.NodeSummary{}
	if sum != nil {
		want[w.node.node] = *sum
	}
	w.node.set(want)
}

// Nodes implements StatusSink.
func (w *StatusWriter) Nodes() []string {
	var out []string
	for _, o := range w.writers() {
		out = append(out, o.nodes()...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Sweep implements StatusSink.
func (w *StatusWriter) Sweep(node string) {
	for _, o := range w.writers() {
		o.sweepNode(node)
	}
}

// Run writes until ctx ends.
func (w *StatusWriter) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, o := range w.writers() {
		wg.Add(1)
		go func() { defer wg.Done(); o.run(ctx) }()
	}
	wg.Wait()
}

// DeleteOwn deletes every status object of this node, on a graceful
// stop: the node no longer announces anything. Set nil first, so the
// queues do not write back what it removes.
func (w *StatusWriter) DeleteOwn(ctx context.Context) error {
	var errs []error
	for _, o := range w.writers() {
		if err := o.deleteOwn(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// writers are the running object writers (the common part of both
// kinds).
func (w *StatusWriter) writers() []writer {
	var out []writer
	if w.svc != nil {
		out = append(out, w.svc)
	}
	if w.node != nil {
		out = append(out, w.node)
	}
	return out
}

// writer is an objectWriter of any kind.
type writer interface {
	setPod(*metav1.OwnerReference)
	nodes() []string
	sweepNode(node string)
	run(ctx context.Context)
	deleteOwn(ctx context.Context) error
}

// statusKind is what differs between the two status objects, W being
// what the loop wishes for one object.
type statusKind[W any] struct {
	gvr  schema.GroupVersionResource
	kind string
	// ours tells whether an object is this node's to delete when it is
	// not wished for.
	ours func(name string, u *unstructured.Unstructured, node string) bool
	// watched tells whether an event on u concerns this node's writer
	// (besides the objects it wishes for).
	watched func(u *unstructured.Unstructured, node string) bool
	equal   func(a, b W) bool
	// object is a new object (labels beyond herald's, and owners beyond
	// the pod) with meta.
	object func(meta metav1.ObjectMeta, want W) runtime.Object
	// status is the status subresource wished for, and same compares it
	// with the object's.
	status func(W) any
	same   func(cur *unstructured.Unstructured, status any) (bool, error)
	// optional: the informer may never sync (the CRD is newer than the
	// speaker's install); run waits for it, warning after a while,
	// without holding the speaker up.
	optional string
}

// objectWriter keeps one kind of this node's status objects in the API:
// level-triggered on the objects' events, so someone deleting or editing
// one gets it written back, and writing from its own queue.
type objectWriter[W any] struct {
	kind     statusKind[W]
	node, ns string
	res      dynamic.ResourceInterface
	inf      cache.SharedIndexInformer
	lister   cache.GenericLister
	// pod, when set, also owns every object written (OwnedByPod).
	pod   *metav1.OwnerReference
	log   *slog.Logger
	queue workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	desired map[string]W
	sweep   map[string]bool
}

func newObjectWriter[W any](k statusKind[W], node, ns string, dyn dynamic.Interface, inf cache.SharedIndexInformer, log *slog.Logger) *objectWriter[W] {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &objectWriter[W]{
		kind: k, node: node, ns: ns,
		res:     dyn.Resource(k.gvr).Namespace(ns),
		inf:     inf,
		lister:  cache.NewGenericLister(inf.GetIndexer(), k.gvr.GroupResource()),
		log:     log,
		desired: map[string]W{},
		sweep:   map[string]bool{},
		// Retry a failed write from 200 ms up to every 30 s.
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{}),
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.objectChanged,
		UpdateFunc: func(_, obj any) { w.objectChanged(obj) },
		DeleteFunc: w.objectChanged,
	})
	return w
}

func (w *objectWriter[W]) setPod(pod *metav1.OwnerReference) { w.pod = pod }

func (w *objectWriter[W]) objectChanged(obj any) {
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
	if mine || w.kind.watched(u, w.node) {
		w.queue.Add(u.GetName())
	}
}

// set replaces the objects wished for, by name, and queues the changes.
func (w *objectWriter[W]) set(want map[string]W) {
	w.mu.Lock()
	changed := map[string]bool{}
	for name, a := range want {
		if old, ok := w.desired[name]; !ok || !w.kind.equal(old, a) {
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

// nodes lists the nodes that have objects of this kind.
func (w *objectWriter[W]) nodes() []string {
	set := map[string]bool{}
	for _, u := range w.list() {
		if n := announcementNode(u); n != "" {
			set[n] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// sweepNode deletes the objects of node, whose speaker left.
func (w *objectWriter[W]) sweepNode(node string) {
	for _, u := range w.list() {
		if announcementNode(u) != node || w.kind.ours(u.GetName(), u, w.node) {
			continue
		}
		w.mu.Lock()
		w.sweep[u.GetName()] = true
		w.mu.Unlock()
		w.queue.Add(u.GetName())
	}
}

func (w *objectWriter[W]) list() []*unstructured.Unstructured {
	objs, _ := w.lister.ByNamespace(w.ns).List(labels.Everything())
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			out = append(out, u)
		}
	}
	return out
}

// run writes until ctx ends.
func (w *objectWriter[W]) run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		w.queue.ShutDown()
	}()
	if w.kind.optional != "" {
		warn := time.AfterFunc(30*time.Second, func() { w.log.Warn(w.kind.optional) })
		synced := cache.WaitForCacheSync(ctx.Done(), w.inf.HasSynced)
		warn.Stop()
		if !synced {
			return
		}
	}
	for {
		name, quit := w.queue.Get()
		if quit {
			return
		}
		err := w.reconcile(ctx, name)
		w.queue.Done(name)
		switch {
		case err == nil:
			w.queue.Forget(name)
		case ctx.Err() == nil:
			w.log.Warn("writing a "+w.kind.kind+"; retrying", "name", w.ns+"/"+name, "err", err)
			w.queue.AddRateLimited(name)
		}
	}
}

// deleteOwn deletes this node's objects.
func (w *objectWriter[W]) deleteOwn(ctx context.Context) error {
	var errs []string
	for _, u := range w.list() {
		if !w.kind.ours(u.GetName(), u, w.node) {
			continue
		}
		err := w.res.Delete(ctx, u.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptrTo(u.GetUID())}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("deleting %ss: %s", w.kind.kind, strings.Join(errs, "; "))
	}
	return nil
}

func (w *objectWriter[W]) reconcile(ctx context.Context, name string) error {
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
		if cur == nil || (!sweep && !w.kind.ours(name, cur, w.node)) {
			return nil // not ours
		}
		err := w.res.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptrTo(cur.GetUID())}})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	status := w.kind.status(want)
	if cur == nil {
		meta := metav1.ObjectMeta{
			Name: name, Namespace: w.ns,
			Labels:      map[string]string{"app.kubernetes.io/name": "herald"},
			Annotations: map[string]string{AnnotationNode: w.node},
		}
		if len(validation.IsValidLabelValue(w.node)) == 0 {
			meta.Labels[LabelNode] = w.node
		}
		obj := w.kind.object(meta, want)
		if mo, ok := obj.(metav1.Object); ok && w.pod != nil {
			mo.SetOwnerReferences(append(mo.GetOwnerReferences(), *w.pod))
		}
		if cur, err = createOrGet(ctx, w.res, obj); err != nil {
			return err
		}
	}
	same, err := w.kind.same(cur, status)
	if err != nil {
		return err
	}
	if same && cur.GetAnnotations()[AnnotationNode] == w.node {
		return nil
	}
	return updateStatus(ctx, w.res, cur, status)
}

func (w *objectWriter[W]) current(name string) (*unstructured.Unstructured, error) {
	obj, err := w.lister.ByNamespace(w.ns).Get(name)
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

// announcementNode is the node an object is about: the annotation, or
// for an object whose status was written by hand, the status.
func announcementNode(u *unstructured.Unstructured) string {
	if n := u.GetAnnotations()[AnnotationNode]; n != "" {
		return n
	}
	n, _, _ := unstructured.NestedString(u.Object, "status", "node")
	return n
}

// createOrGet creates obj; one created before and not in the cache yet
// is taken as it is.
func createOrGet(ctx context.Context, res dynamic.ResourceInterface, obj runtime.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	created, err := res.Create(ctx, u, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = res.Get(ctx, u.GetName(), metav1.GetOptions{})
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

func ptrTo[T any](v T) *T { return &v }
