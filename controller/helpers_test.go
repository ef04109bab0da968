package controller

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/herald-lb/herald/config/informer"
	"github.com/herald-lb/herald/config/v1beta1"
)

const ns = "herald-system"

// event is one recorded event.
type event struct {
	Object, Type, Reason, Message string
}

func (e event) String() string {
	return fmt.Sprintf("%s %s %s: %s", e.Object, e.Type, e.Reason, e.Message)
}

// recorder records events with the object they are about.
type recorder struct {
	mu     sync.Mutex
	events []event
}

func (r *recorder) Event(obj runtime.Object, typ, reason, msg string) {
	a, err := apimeta.Accessor(obj)
	name := "?"
	if err == nil {
		name = a.GetNamespace() + "/" + a.GetName()
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		name = u.GetKind() + " " + name
	}
	r.mu.Lock()
	r.events = append(r.events, event{name, typ, reason, msg})
	r.mu.Unlock()
}

func (r *recorder) Eventf(obj runtime.Object, typ, reason, format string, args ...any) {
	r.Event(obj, typ, reason, fmt.Sprintf(format, args...))
}

func (r *recorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, typ, reason, format string, args ...any) {
	r.Event(obj, typ, reason, fmt.Sprintf(format, args...))
}

// take returns the events recorded since the last take.
func (r *recorder) take() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

// env is a controller over fake clients. The informers are not started:
// refresh copies the fakes' objects into the caches, so every step is
// deterministic.
type env struct {
	t    testing.TB
	ctx  context.Context
	c    *Controller
	kube *fake.Clientset
	dyn  *dynamicfake.FakeDynamicClient
	rec  *recorder
	// clock hands out creation timestamps, one second apart.
	clock time.Time
}

var listKinds = func() map[schema.GroupVersionResource]string {
	m := map[schema.GroupVersionResource]string{}
	for _, k := range informer.Kinds {
		m[informer.GVR(k.Resource)] = k.Kind + "List"
	}
	return m
}()

func newEnv(t testing.TB, opts ...func(*Options)) *env {
	t.Helper()
	o := DefaultOptions()
	o.Namespace = ns
	for _, f := range opts {
		f(&o)
	}
	e := &env{t: t, ctx: t.Context(), kube: fake.NewClientset(), rec: &recorder{},
		clock: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	e.dyn = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds)
	e.c = New(o, e.kube, e.dyn, e.rec, NewMetrics(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	// Every pool is announced, as in a working cluster, unless a test
	// removes this (removeEverythingAdvertisement).
	everything := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1beta1.GroupVersion.String(), "kind": "L2Advertisement",
		"metadata": map[string]any{"name": "everything", "namespace": ns, "uid": "uid-l2-everything", "generation": int64(1)},
		"spec":     map[string]any{},
	}}
	if _, err := e.dyn.Resource(informer.GVR("l2advertisements")).Namespace(ns).Create(e.ctx, everything, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return e
}

// removeEverythingAdvertisement deletes the L2Advertisement newEnv
// creates, which leaves the pools unannounced.
func (e *env) removeEverythingAdvertisement() {
	e.t.Helper()
	if err := e.dyn.Resource(informer.GVR("l2advertisements")).Namespace(ns).Delete(e.ctx, "everything", metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) tick() metav1.Time {
	e.clock = e.clock.Add(time.Second)
	return metav1.NewTime(e.clock)
}

// addPool creates an IPAddressPool.
func (e *env) addPool(name string, addrs []string, mod ...func(*v1beta1.IPAddressPool)) {
	e.t.Helper()
	p := &v1beta1.IPAddressPool{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1beta1.GroupVersion.String(), Kind: "IPAddressPool"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-pool-" + name), Generation: 1, CreationTimestamp: e.tick()},
	}
	for _, a := range addrs {
		p.Spec.Addresses = append(p.Spec.Addresses, v1beta1.AddressEntry(a))
	}
	for _, m := range mod {
		m(p)
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.dyn.Resource(informer.GVR("ipaddresspools")).Namespace(ns).Create(e.ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// setPoolAddresses changes a pool's addresses (and its generation).
func (e *env) setPoolAddresses(name string, addrs ...string) {
	e.t.Helper()
	r := e.dyn.Resource(informer.GVR("ipaddresspools")).Namespace(ns)
	u, err := r.Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	list := make([]any, len(addrs))
	for i, a := range addrs {
		list[i] = a
	}
	if err := unstructured.SetNestedSlice(u.Object, list, "spec", "addresses"); err != nil {
		e.t.Fatal(err)
	}
	u.SetGeneration(u.GetGeneration() + 1)
	if _, err := r.Update(e.ctx, u, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) pool(name string) v1beta1.IPAddressPool {
	e.t.Helper()
	u, err := e.dyn.Resource(informer.GVR("ipaddresspools")).Namespace(ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var p v1beta1.IPAddressPool
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *env) addNamespace(name string, labels map[string]string) {
	e.t.Helper()
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := e.kube.CoreV1().Namespaces().Create(e.ctx, n, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// addService creates a Service with the next creation timestamp.
func (e *env) addService(svc *corev1.Service) {
	e.t.Helper()
	svc.CreationTimestamp = e.tick()
	if _, err := e.kube.CoreV1().Services(svc.Namespace).Create(e.ctx, svc, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) updateService(namespace, name string, mod func(*corev1.Service)) {
	e.t.Helper()
	svc := e.svc(namespace, name)
	mod(svc)
	if _, err := e.kube.CoreV1().Services(namespace).Update(e.ctx, svc, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) deleteService(namespace, name string) {
	e.t.Helper()
	if err := e.kube.CoreV1().Services(namespace).Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
	// The informer's delete event.
	e.c.queue.Add(item{namespace: namespace, name: name})
}

func (e *env) svc(namespace, name string) *corev1.Service {
	e.t.Helper()
	s, err := e.kube.CoreV1().Services(namespace).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// ips returns the Service's status IPs, comma-separated.
func (e *env) ips(namespace, name string) string {
	e.t.Helper()
	var out []string
	for _, in := range e.svc(namespace, name).Status.LoadBalancer.Ingress {
		out = append(out, in.IP)
	}
	return strings.Join(out, ",")
}

// refresh replaces the caches' content with the fakes' objects.
func (e *env) refresh() {
	e.t.Helper()
	svcs, err := e.kube.CoreV1().Services("").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var objs []any
	for i := range svcs.Items {
		objs = append(objs, &svcs.Items[i])
	}
	e.replace("Service", objs)
	nss, _ := e.kube.CoreV1().Namespaces().List(e.ctx, metav1.ListOptions{})
	objs = nil
	for i := range nss.Items {
		objs = append(objs, &nss.Items[i])
	}
	e.replace("Namespace", objs)
	secs, _ := e.kube.CoreV1().Secrets(ns).List(e.ctx, metav1.ListOptions{})
	objs = nil
	for i := range secs.Items {
		objs = append(objs, &secs.Items[i])
	}
	e.replace("Secret", objs)
	for _, k := range informer.Kinds {
		l, err := e.dyn.Resource(informer.GVR(k.Resource)).Namespace(ns).List(e.ctx, metav1.ListOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		objs = nil
		for i := range l.Items {
			objs = append(objs, &l.Items[i])
		}
		e.replace(k.Kind, objs)
	}
}

func (e *env) replace(kind string, objs []any) {
	if err := e.c.indexer[kind].Replace(objs, ""); err != nil {
		e.t.Fatal(err)
	}
}

// start runs what Run does after the caches synced, then reconciles.
func (e *env) start() {
	e.t.Helper()
	e.refresh()
	e.c.Start()
	e.drain()
	e.settle()
}

// settle reconciles the configuration and every Service until nothing
// is left to do, as the informers' events would make it, and writes the
// herald.io statuses.
func (e *env) settle() {
	e.t.Helper()
	for range 3 {
		e.refresh()
		e.c.queue.Add(configItem)
		e.c.enqueueAll()
		e.drain()
	}
	e.refresh()
	if n := e.c.writeStatuses(e.ctx); n > 0 {
		e.t.Fatalf("%d status writes failed", n)
	}
	e.refresh()
}

// drain processes the queue with caches as fresh as informers would
// keep them.
func (e *env) drain() {
	for e.c.queue.Len() > 0 {
		e.refresh()
		e.c.processNext(e.ctx)
	}
}

// writes counts the write actions on the fakes since the last call.
func (e *env) writes() []string {
	var out []string
	for _, a := range append(e.kube.Actions(), e.dyn.Actions()...) {
		switch a.GetVerb() {
		case "get", "list", "watch":
			continue
		}
		desc := a.GetVerb() + " " + a.GetResource().Resource
		if s := a.GetSubresource(); s != "" {
			desc += "/" + s
		}
		if n, ok := a.(k8stesting.GenericAction); ok {
			if m, err := apimeta.Accessor(n.GetValue()); err == nil {
				desc += " " + m.GetName()
			}
		}
		if p, ok := a.(k8stesting.PatchAction); ok {
			desc += " " + p.GetNamespace() + "/" + p.GetName()
		}
		out = append(out, desc)
	}
	e.kube.ClearActions()
	e.dyn.ClearActions()
	return out
}

// expectEvents checks that the events since the last call are exactly
// those matching the patterns (each a substring of "object type reason:
// message"), in order.
func (e *env) expectEvents(patterns ...string) {
	e.t.Helper()
	got := e.rec.take()
	ok := len(got) == len(patterns)
	for i := 0; ok && i < len(got); i++ {
		for _, p := range strings.Split(patterns[i], "|") {
			if !strings.Contains(got[i].String(), p) {
				ok = false
			}
		}
	}
	if !ok {
		var b strings.Builder
		for _, g := range got {
			b.WriteString("\n  " + g.String())
		}
		e.t.Errorf("events: want %d matching %q, got %d:%s", len(patterns), patterns, len(got), b.String())
	}
}

func mustAddrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

// metricValue gathers the registry and returns the value of the metric
// with the given name whose labels include want (label=value pairs).
func metricValue(t *testing.T, m *Metrics, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, mt := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range mt.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue metrics
				}
			}
			switch {
			case mt.Counter != nil:
				return mt.Counter.GetValue()
			case mt.Gauge != nil:
				return mt.Gauge.GetValue()
			}
		}
	}
	return 0
}

func testCounter(t *testing.T, m *Metrics, name, reason string) float64 {
	t.Helper()
	want := map[string]string{}
	if reason != "" {
		want["reason"] = reason
	}
	return metricValue(t, m, name, want)
}

func testGauge(t *testing.T, m *Metrics, name string) float64 {
	t.Helper()
	return metricValue(t, m, name, nil)
}

func testPoolGauge(t *testing.T, m *Metrics, name, pool, family string) float64 {
	t.Helper()
	return metricValue(t, m, name, map[string]string{"pool": pool, "family": family})
}
