package status

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/herald-lb/herald/config/informer"
	"github.com/herald-lb/herald/config/v1beta1"
	"github.com/herald-lb/herald/speaker/bgp/plan"
	"github.com/herald-lb/herald/speaker/view"
)

const heraldNS = "herald-system"

// object makes a herald.io object for the fake dynamic client.
func object(t *testing.T, kind, name string, obj any) *unstructured.Unstructured {
	t.Helper()
	// Through JSON: numbers become int64, as the API's.
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	m["apiVersion"], m["kind"] = v1beta1.GroupVersion.String(), kind
	data, _ = json.Marshal(m)
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	u.SetNamespace(heraldNS)
	u.SetName(name)
	return u
}

// bgpWorld is a cluster running BGP: pool "wan" (IPv4 and IPv6), one
// BGPAdvertisement "all" for it, peers tor4 (IPv4) and tor6 (IPv6), and
// three nodes' NodeAnnouncements: node1 sends both families, node2 has no
// IPv6 session, node3 is excluded from external load balancers.
func bgpWorld(t *testing.T, pool *v1beta1.IPAddressPool) []runtime.Object {
	if pool == nil {
		pool = &v1beta1.IPAddressPool{Spec: v1beta1.IPAddressPoolSpec{Addresses: []v1beta1.AddressEntry{"203.0.113.0/24", "2001:db8:5::/64"}}}
	}
	na := func(node, reason string, ads ...v1beta1.NodeAdvertisement) runtime.Object {
		return object(t, "NodeAnnouncement", node, &v1beta1.NodeAnnouncement{Status: v1beta1.NodeAnnouncementStatus{
			Node: node, Protocol: v1beta1.ProtocolBGP, Reason: reason, Advertisements: ads}})
	}
	return []runtime.Object{
		object(t, "IPAddressPool", "wan", pool),
		object(t, "BGPAdvertisement", "all", &v1beta1.BGPAdvertisement{Spec: v1beta1.BGPAdvertisementSpec{IPAddressPools: []v1beta1.ObjectName{"wan"}}}),
		object(t, "BGPPeer", "tor4", &v1beta1.BGPPeer{Spec: v1beta1.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "192.0.2.1"}}),
		object(t, "BGPPeer", "tor6", &v1beta1.BGPPeer{Spec: v1beta1.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "2001:db8:ff::1"}}),
		na("node1", "", v1beta1.NodeAdvertisement{Name: "all", IPv4Peers: []string{"tor4"}, IPv6Peers: []string{"tor6"}}),
		na("node2", "", v1beta1.NodeAdvertisement{Name: "all", IPv4Peers: []string{"tor4"}}),
		// A reason wins over the advertisements listed with it.
		na("node3", plan.ReasonExcluded, v1beta1.NodeAdvertisement{Name: "all", IPv4Peers: []string{"tor4"}}),
	}
}

func fakeDynamic(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	lists := map[schema.GroupVersionResource]string{
		v1beta1.GroupVersion.WithResource("serviceannouncements"): "ServiceAnnouncementList",
		NodeAnnouncementsGVR: "NodeAnnouncementList",
	}
	for _, k := range informer.Kinds {
		lists[informer.GVR(k.Resource)] = k.Kind + "List"
	}
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), lists, objs...)
}

func slice(ns, svc string, nodes ...string) *discoveryv1.EndpointSlice {
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: svc}}}
	for _, n := range nodes {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{"198.18.0.1"}, NodeName: ptrTo(n), Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(true)}})
	}
	return sl
}

// The cluster of the tests: shop/web (Cluster, served on node1), shop/idle
// (Cluster, no endpoint; the reporter says so), shop/local (Local, on
// node2, which published its ServiceAnnouncement).
func kubeWorld() *fake.Clientset {
	svc := func(name string, local bool, ips ...string) *corev1.Service {
		s := lb("shop", name, "wan", local, ips...)
		return &s
	}
	return fake.NewClientset(
		svc("web", false, "203.0.113.10", "2001:db8:5::10"),
		svc("idle", false, "203.0.113.11"),
		svc("local", true, "203.0.113.12"),
		slice("shop", "web", "node1"),
		slice("shop", "local", "node2"),
	)
}

func serviceAnnouncements(t *testing.T) []runtime.Object {
	local := v1beta1.ServiceAnnouncement{Status: v1beta1.ServiceAnnouncementStatus{
		Service: v1beta1.ServiceReference{Namespace: "shop", Name: "local"}, Node: "node2", Protocol: v1beta1.ProtocolBGP,
		Peers: []string{"tor4"}, IPs: []string{"203.0.113.12"}}}
	idle := v1beta1.ServiceAnnouncement{Status: v1beta1.ServiceAnnouncementStatus{
		Service: v1beta1.ServiceReference{Namespace: "shop", Name: "idle"}, Node: "node1", Protocol: v1beta1.ProtocolBGP,
		Unannounced: []v1beta1.UnannouncedIP{{IP: "203.0.113.11", Reason: plan.ReasonNoEndpoints}}}}
	return []runtime.Object{object(t, "ServiceAnnouncement", "local-node2", &local), object(t, "ServiceAnnouncement", "idle-node1", &idle)}
}

func runJSON(t *testing.T, o Options, kube *fake.Clientset, dyn *dynamicfake.FakeDynamicClient) Report {
	t.Helper()
	o.Output = "json"
	var b strings.Builder
	if err := run(context.Background(), o, kube, dyn, &b); err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal([]byte(b.String()), &r); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	return r
}

func address(t *testing.T, r Report, name, ip string) Address {
	t.Helper()
	for _, s := range r.Services {
		for _, a := range s.Addresses {
			if s.Name == name && a.IP == ip {
				return a
			}
		}
	}
	t.Fatalf("no %s %s in %+v", name, ip, r.Services)
	return Address{}
}

func announcers(a Address) string {
	var out []string
	for _, w := range a.AnnouncedBy {
		out = append(out, w.String())
	}
	return strings.Join(out, ", ")
}

// A Cluster Service is advertised, per address family, by the nodes whose
// NodeAnnouncement lists a BGPAdvertisement covering it with a peer of
// that family; a node with a reason contributes nothing; a Service with
// no serving endpoint gets nobody, with the reporter's reason; a Local
// Service is still read from its ServiceAnnouncements.
func TestRunResolvesClusterFromNodeAnnouncements(t *testing.T) {
	refusedEdit := &v1beta1.IPAddressPool{
		ObjectMeta: metav1.ObjectMeta{Generation: 2},
		Spec:       v1beta1.IPAddressPoolSpec{Addresses: []v1beta1.AddressEntry{"not an address"}},
		Status: v1beta1.IPAddressPoolStatus{InForce: &v1beta1.InForce{Generation: 1,
			Spec: runtime.RawExtension{Raw: []byte(`{"addresses":["203.0.113.0/24","2001:db8:5::/64"]}`)}}},
	}
	// An edit dropping addresses Services hold stays refused while they
	// hold them (the Services' addresses are read to know it).
	droppingInUse := refusedEdit.DeepCopy()
	droppingInUse.Spec.Addresses = []v1beta1.AddressEntry{"2001:db8:5::/64"}
	for _, c := range []struct {
		name string
		pool *v1beta1.IPAddressPool
		o    Options
	}{
		{"all Services", nil, Options{HeraldNamespace: heraldNS}},
		{"one namespace", nil, Options{HeraldNamespace: heraldNS, Namespace: "shop"}},
		// The version in force, not the refused edit, as the speakers.
		{"pool edit refused", refusedEdit, Options{HeraldNamespace: heraldNS}},
		{"pool edit dropping addresses in use", droppingInUse, Options{HeraldNamespace: heraldNS}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runJSON(t, c.o, kubeWorld(), fakeDynamic(append(bgpWorld(t, c.pool), serviceAnnouncements(t)...)...))
			if len(r.Warnings) != 0 {
				t.Errorf("warnings %v", r.Warnings)
			}
			if got, want := announcers(address(t, r, "web", "203.0.113.10")), "node1 (bgp to tor4), node2 (bgp to tor4)"; got != want {
				t.Errorf("web IPv4: %q, want %q", got, want)
			}
			if got, want := announcers(address(t, r, "web", "2001:db8:5::10")), "node1 (bgp to tor6)"; got != want {
				t.Errorf("web IPv6: %q, want %q (node2 has no IPv6 peer)", got, want)
			}
			idle := address(t, r, "idle", "203.0.113.11")
			if len(idle.AnnouncedBy) != 0 || idle.Problem != "nobody announces it: bgp: "+plan.ReasonNoEndpoints ||
				len(idle.Reasons) != 1 || idle.Reasons[0].Node != "node1" {
				t.Errorf("idle: %+v, want nobody and node1's reason", idle)
			}
			if got, want := announcers(address(t, r, "local", "203.0.113.12")), "node2 (bgp to tor4)"; got != want {
				t.Errorf("local: %q, want %q (its ServiceAnnouncement only)", got, want)
			}
		})
	}
	// One Service by name, in text: the table names the nodes.
	var b strings.Builder
	o := Options{HeraldNamespace: heraldNS, Namespace: "shop", Name: "web", Output: "text"}
	if err := run(context.Background(), o, kubeWorld(), fakeDynamic(bgpWorld(t, nil)...), &b); err != nil {
		t.Fatal(err)
	}
	want := "shop web 203.0.113.10 wan Cluster node1 (bgp to tor4), node2 (bgp to tor4)\nshop web 2001:db8:5::10 wan Cluster node1 (bgp to tor6)"
	if !strings.Contains(norm(b.String()), want) || strings.Contains(b.String(), "idle") {
		t.Errorf("got:\n%s\nwant the lines:\n%s", b.String(), want)
	}
}

// A cluster whose NodeAnnouncement CRD is missing still shows its
// Services, says why Cluster ones may look unannounced, and keeps the
// ServiceAnnouncements' answers; another error on the list fails, naming
// the resource.
func TestRunWithoutNodeAnnouncementCRD(t *testing.T) {
	dyn := fakeDynamic(append(bgpWorld(t, nil), serviceAnnouncements(t)...)...)
	dyn.PrependReactor("list", "nodeannouncements", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(NodeAnnouncementsGVR.GroupResource(), "")
	})
	r := runJSON(t, Options{HeraldNamespace: heraldNS}, kubeWorld(), dyn)
	if !slices.Equal(r.Warnings, []string{WarningNoNodeAnnouncementCRD}) {
		t.Errorf("warnings %q", r.Warnings)
	}
	web := address(t, r, "web", "203.0.113.10")
	if len(web.AnnouncedBy) != 0 || web.Problem != "nobody announces it: bgp: no node has published a NodeAnnouncement" {
		t.Errorf("web: %+v", web)
	}
	if got := announcers(address(t, r, "local", "203.0.113.12")); got != "node2 (bgp to tor4)" {
		t.Errorf("local: %q", got)
	}
	var b strings.Builder
	if err := run(context.Background(), Options{HeraldNamespace: heraldNS, Output: "text"}, kubeWorld(), dyn, &b); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "NodeAnnouncement CRD"); n != 1 || !strings.Contains(b.String(), "kubectl apply --server-side -f charts/herald/crds/") {
		t.Errorf("text output says it %d times:\n%s", n, b.String())
	}

	dyn = fakeDynamic(bgpWorld(t, nil)...)
	dyn.PrependReactor("list", "nodeannouncements", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(NodeAnnouncementsGVR.GroupResource(), "", fmt.Errorf("no"))
	})
	err := run(context.Background(), Options{HeraldNamespace: heraldNS, Output: "json"}, kubeWorld(), dyn, &b)
	if err == nil || !strings.Contains(err.Error(), "listing NodeAnnouncements in herald-system") || !apierrors.IsForbidden(err) {
		t.Errorf("forbidden: %v", err)
	}
}

// An address shared with a Local Service in another namespace is the
// Local Service's (ServiceAnnouncements), even when only the Cluster one
// is shown.
func TestRunSharedWithLocal(t *testing.T) {
	web := lb("shop", "web", "wan", false, "203.0.113.10")
	other := lb("blog", "web", "wan", true, "203.0.113.10")
	kube := fake.NewClientset(&web, &other, slice("shop", "web", "node1"), slice("blog", "web", "node2"))
	r := runJSON(t, Options{HeraldNamespace: heraldNS, Namespace: "shop"}, kube, fakeDynamic(bgpWorld(t, nil)...))
	if a := address(t, r, "web", "203.0.113.10"); len(a.AnnouncedBy) != 0 {
		t.Errorf("shared with a Local Service, resolved as Cluster: %+v", a)
	}
}

// Many nodes advertising one address: the table gives their count and
// peers, -o json lists every node.
func TestManyAdvertisers(t *testing.T) {
	svc := lb("shop", "web", "wan", false, "203.0.113.10")
	facts := Facts{Cluster: map[ServiceIP]Resolved{}}
	var by []Announcer
	for i := range 7 {
		peers := []string{"tor4"}
		if i%2 == 1 {
			peers = []string{"spine"}
		}
		by = append(by, Announcer{Node: fmt.Sprintf("node%d", i), Protocol: "bgp", Peers: peers})
	}
	facts.Cluster[ServiceIP{"shop", "web", netip.MustParseAddr("203.0.113.10")}] = Resolved{By: by}
	anns := []v1beta1.ServiceAnnouncement{sa("shop", "web", "node9", []string{"eth0"}, "203.0.113.10")}
	sts := BuildWith([]corev1.Service{svc}, anns, facts)
	if n := len(sts[0].Addresses[0].AnnouncedBy); n != 8 {
		t.Errorf("%d announcers, want 8", n)
	}
	var b strings.Builder
	if err := renderText(&b, sts); err != nil {
		t.Fatal(err)
	}
	if want := "node9 (layer2 on eth0), 7 nodes (bgp to spine,tor4)"; !strings.Contains(b.String(), want) {
		t.Errorf("got:\n%s\nwant %q", b.String(), want)
	}
	facts.Cluster[ServiceIP{"shop", "web", netip.MustParseAddr("203.0.113.10")}] = Resolved{By: by[:5]}
	b.Reset()
	_ = renderText(&b, BuildWith([]corev1.Service{svc}, nil, facts))
	if want := "node0 (bgp to tor4), node1 (bgp to spine), node2 (bgp to tor4), node3 (bgp to spine), node4 (bgp to tor4)"; !strings.Contains(b.String(), want) {
		t.Errorf("five nodes are named:\n%s", b.String())
	}
}

// Why nobody advertises a Cluster address, from the NodeAnnouncements.
func TestNobodyWhy(t *testing.T) {
	a := netip.MustParseAddr("2001:db8:5::10")
	served := []view.Service{{Namespace: "shop", Name: "web", IPs: []netip.Addr{a}, ReadyNodes: map[string]bool{"node1": true}}}
	sums := []view.NodeSummary{
		{Node: "node1", Protocol: "bgp", Advertisements: []view.NodeAdvertisement{{Name: "all", IPv4Peers: []string{"tor4"}}}},
		{Node: "node2", Protocol: "bgp", Reason: plan.ReasonNetworkUnavailable},
	}
	want := "bgp: no node's NodeAnnouncement lists a BGPAdvertisement covering it with an IPv6 peer (advertising nothing: " + plan.ReasonNetworkUnavailable + ": node2)"
	if got := nobodyWhy(a, served, sums); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if got := nobodyWhy(a, []view.Service{{IPs: []netip.Addr{a}}}, sums); got != "bgp: "+plan.ReasonNoEndpoints {
		t.Errorf("no endpoint: %q", got)
	}
}

// Only Services of herald's class (--lb-class) are resolved, as the
// speakers advertise only those.
func TestRunLBClass(t *testing.T) {
	web := lb("shop", "web", "wan", false, "203.0.113.10")
	web.Spec.LoadBalancerClass = ptrTo("example.com/herald")
	for class, want := range map[string]string{"": "", "example.com/herald": "node1 (bgp to tor4), node2 (bgp to tor4)"} {
		kube := fake.NewClientset(&web, slice("shop", "web", "node1"))
		r := runJSON(t, Options{HeraldNamespace: heraldNS, LBClass: class}, kube, fakeDynamic(bgpWorld(t, nil)...))
		if got := announcers(address(t, r, "web", "203.0.113.10")); got != want {
			t.Errorf("--lb-class %q: %q, want %q", class, got, want)
		}
	}
}
