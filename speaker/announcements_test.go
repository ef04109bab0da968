package speaker

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/herald-lb/herald/config/v1beta1"
	"github.com/herald-lb/herald/speaker/view"
)

func TestAnnouncementName(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range []struct{ ns, name, node string }{
		{"shop", "web", "node1"},
		{"shop2", "web", "node1"},
		{"shop", "web", "node2"},
		{"shop-web", "x", "node1"}, // ns/name boundaries do not collide
		{"shop", "web-x", "node1"},
		{strings.Repeat("n", 63), strings.Repeat("s", 63), strings.Repeat("a.b-", 60)},
		{"shop", "web", "node-1.example.com"},
	} {
		n := AnnouncementName(view.ServiceRef{Namespace: c.ns, Name: c.name}, c.node)
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 || len(n) > 63 {
			t.Errorf("%v: %q is not a short valid name: %v", c, n, errs)
		}
		if seen[n] {
			t.Errorf("%v: %q collides", c, n)
		}
		seen[n] = true
	}
	if n := AnnouncementName(view.ServiceRef{Namespace: "shop", Name: "web"}, "node1"); !strings.HasPrefix(n, "web-node1-") {
		t.Errorf("name %q does not read as service and node", n)
	}
}

// A node announcing one Service both ways has two ServiceAnnouncements.
func TestAnnouncementNameOfProtocols(t *testing.T) {
	ref := view.ServiceRef{Namespace: "shop", Name: strings.Repeat("w", 63)}
	l2 := AnnouncementNameOf(view.Announcement{Service: ref, Node: "node1", Protocol: "layer2"})
	bgp := AnnouncementNameOf(view.Announcement{Service: ref, Node: "node1", Protocol: "bgp"})
	if l2 != AnnouncementName(ref, "node1") {
		t.Errorf("layer-2 name %q changed", l2)
	}
	if l2 == bgp || !strings.Contains(bgp, "-node1-bgp-") {
		t.Errorf("bgp name %q (layer 2: %q)", bgp, l2)
	}
	if errs := validation.IsDNS1123Subdomain(bgp); len(errs) > 0 || len(bgp) > 63 {
		t.Errorf("%q is not a short valid name: %v", bgp, errs)
	}
}

type writerEnv struct {
	t   *testing.T
	ctx context.Context
	dyn *dynamicfake.FakeDynamicClient
	w   *StatusWriter
	inf cache.SharedIndexInformer
}

// newWriterEnv: pod, when set, owns the objects written too.
func newWriterEnv(t *testing.T, node, pod string, uids map[string]types.UID) *writerEnv {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{AnnouncementGVR: "ServiceAnnouncementList"})
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, "herald-system", nil)
	inf := f.ForResource(AnnouncementGVR).Informer()
	owner := func(r view.ServiceRef) types.UID { return uids[r.Namespace+"/"+r.Name] }
	w := NewStatusWriter(StatusConfig{Node: node, Namespace: "herald-system", Dynamic: dyn, Services: inf, Owner: owner,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if pod != "" {
		w.OwnedByPod(pod, "uid-"+types.UID(pod))
	}
	f.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
	go w.Run(ctx)
	return &writerEnv{t: t, ctx: ctx, dyn: dyn, w: w, inf: inf}
}

func (e *writerEnv) list() map[string]v1beta1.ServiceAnnouncement {
	e.t.Helper()
	l, err := e.dyn.Resource(AnnouncementGVR).Namespace("herald-system").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]v1beta1.ServiceAnnouncement{}
	for _, u := range l.Items {
		var sa v1beta1.ServiceAnnouncement
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &sa); err != nil {
			e.t.Fatal(err)
		}
		out[u.GetName()] = sa
	}
	return out
}

func (e *writerEnv) wait(what string, cond func(map[string]v1beta1.ServiceAnnouncement) bool) map[string]v1beta1.ServiceAnnouncement {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := e.list()
		if cond(got) {
			return got
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s; have %+v", what, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ann(ns, name, node string, ips ...string) view.Announcement {
	a := view.Announcement{Service: view.ServiceRef{Namespace: ns, Name: name}, Node: node, Protocol: "layer2", Interfaces: []string{"eth0"}}
	for _, ip := range ips {
		a.IPs = append(a.IPs, netip.MustParseAddr(ip))
	}
	return a
}

// The speaker's pod owns what it writes, next to a Service of the same
// namespace: the garbage collector removes the objects the speaker could
// not (helm uninstall deletes its Role first).
func TestAnnouncementWriterOwnedByPod(t *testing.T) {
	e := newWriterEnv(t, "node1", "herald-speaker-x", map[string]types.UID{"herald-system/dns": "uid-dns"})
	e.w.Set([]view.Announcement{ann("shop", "web", "node1", "198.51.100.200"), ann("herald-system", "dns", "node1", "198.51.100.201")})
	webName := AnnouncementName(view.ServiceRef{Namespace: "shop", Name: "web"}, "node1")
	dnsName := AnnouncementName(view.ServiceRef{Namespace: "herald-system", Name: "dns"}, "node1")
	got := e.wait("both written", func(m map[string]v1beta1.ServiceAnnouncement) bool { return len(m) == 2 })
	pod := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "herald-speaker-x", UID: "uid-herald-speaker-x"}
	if or := got[webName].OwnerReferences; len(or) != 1 || or[0] != pod {
		t.Errorf("web owner references = %v, want the pod", or)
	}
	if or := got[dnsName].OwnerReferences; len(or) != 2 || or[0].UID != "uid-dns" || or[1] != pod {
		t.Errorf("dns owner references = %v, want the Service and the pod", or)
	}
}

func TestAnnouncementWriter(t *testing.T) {
	e := newWriterEnv(t, "node1", "", map[string]types.UID{"herald-system/dns": "uid-dns"})
	e.w.Set([]view.Announcement{
		ann("shop", "web", "node1", "198.51.100.200", "2001:db8:0:1::200"),
		ann("herald-system", "dns", "node1", "198.51.100.201"),
	})
	webName := AnnouncementName(view.ServiceRef{Namespace: "shop", Name: "web"}, "node1")
	dnsName := AnnouncementName(view.ServiceRef{Namespace: "herald-system", Name: "dns"}, "node1")
	got := e.wait("two announcements with status", func(m map[string]v1beta1.ServiceAnnouncement) bool {
		return len(m) == 2 && m[webName].Status.Node == "node1" && m[dnsName].Status.Node == "node1"
	})
	web := got[webName]
	if web.Status.Service != (v1beta1.ServiceReference{Namespace: "shop", Name: "web"}) || web.Status.Protocol != "layer2" ||
		strings.Join(web.Status.IPs, ",") != "198.51.100.200,2001:db8:0:1::200" || strings.Join(web.Status.Interfaces, ",") != "eth0" {
		t.Errorf("web status = %+v", web.Status)
	}
	if web.Labels[LabelServiceName] != "web" || web.Labels[LabelServiceNamespace] != "shop" || web.Labels[LabelNode] != "node1" || web.Annotations[AnnotationNode] != "node1" {
		t.Errorf("web labels %v annotations %v", web.Labels, web.Annotations)
	}
	if len(web.OwnerReferences) != 0 {
		t.Errorf("owner reference across namespaces: %v", web.OwnerReferences)
	}
	if or := got[dnsName].OwnerReferences; len(or) != 1 || or[0].UID != "uid-dns" || or[0].Kind != "Service" {
		t.Errorf("dns owner references = %v, want the Service", or)
	}

	// An update rewrites the status; someone deleting ours gets it back.
	e.w.Set([]view.Announcement{ann("shop", "web", "node1", "198.51.100.200"), ann("herald-system", "dns", "node1", "198.51.100.201")})
	e.wait("web with one IP", func(m map[string]v1beta1.ServiceAnnouncement) bool {
		return len(m[webName].Status.IPs) == 1
	})
	if err := e.dyn.Resource(AnnouncementGVR).Namespace("herald-system").Delete(e.ctx, dnsName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.wait("dns written back", func(m map[string]v1beta1.ServiceAnnouncement) bool { return m[dnsName].Status.Node == "node1" })

	// Another node's object is left alone, until swept.
	other := &unstructured.Unstructured{}
	other.SetAPIVersion(v1beta1.GroupVersion.String())
	other.SetKind("ServiceAnnouncement")
	other.SetNamespace("herald-system")
	other.SetName("web-node2-x")
	other.SetAnnotations(map[string]string{AnnotationNode: "node2"})
	if _, err := e.dyn.Resource(AnnouncementGVR).Namespace("herald-system").Create(e.ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.w.Set([]view.Announcement{ann("shop", "web", "node1", "198.51.100.200")})
	e.wait("dns deleted, node2's kept", func(m map[string]v1beta1.ServiceAnnouncement) bool {
		_, dns := m[dnsName]
		_, o := m["web-node2-x"]
		return !dns && o && len(m) == 2
	})
	waitInformer(t, func() bool { return strings.Join(e.w.Nodes(), ",") == "node1,node2" })
	e.w.Sweep("node2")
	e.wait("node2's swept", func(m map[string]v1beta1.ServiceAnnouncement) bool {
		_, o := m["web-node2-x"]
		return !o && len(m) == 1
	})

	// A graceful stop removes ours, and they stay removed.
	waitInformer(t, func() bool { return strings.Join(e.w.Nodes(), ",") == "node1" })
	e.w.Set(nil)
	if err := e.w.DeleteOwn(e.ctx); err != nil {
		t.Fatal(err)
	}
	if m := e.list(); len(m) != 0 {
		t.Fatalf("left after DeleteOwn: %v", m)
	}
	time.Sleep(200 * time.Millisecond)
	if m := e.list(); len(m) != 0 {
		t.Fatalf("written back after DeleteOwn: %v", m)
	}
}

func waitInformer(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("informer did not catch up")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
