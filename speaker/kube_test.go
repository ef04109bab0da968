package speaker

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/config/informer"
	"github.com/herald-lb/herald/config/v1beta1"
	"github.com/herald-lb/herald/internal/lbapi"
	"github.com/herald-lb/herald/speaker/view"
)

func lbService(ns, name string, local bool, ips ...string) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name),
			Annotations: map[string]string{lbapi.AnnotationAllocatedFromPool: "lan"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
	}
	if local {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	for _, ip := range ips {
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	return s
}

func ptr[T any](v T) *T { return &v }

func endpoint(node string, ready, serving, terminating bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{"198.18.1.5"}, NodeName: ptr(node),
		Conditions: discoveryv1.EndpointConditions{Ready: ptr(ready), Serving: ptr(serving), Terminating: ptr(terminating)}}
}

func TestKubeSourceSnapshot(t *testing.T) {
	class := "other.example/lb"
	classed := lbService("shop", "classed", false, "198.51.100.230")
	classed.Spec.LoadBalancerClass = &class
	badStatus := lbService("shop", "bad", false, "198.51.100.999")
	objs := []runtime.Object{
		lbService("shop", "web", true, "198.51.100.200", "2001:db8:0:1::200"),
		lbService("shop", "cluster", false, "198.51.100.201"),
		lbService("shop", "pending", false),
		classed, badStatus,
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "clusterip"}},
		&discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-a", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			Endpoints: []discoveryv1.Endpoint{
				endpoint("node1", true, true, false),
				endpoint("node2", false, true, true), // terminating, still serving
				endpoint("node3", false, false, false),
				{Addresses: []string{"198.18.9.9"}}, // no node: ignored
			},
		},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", Labels: map[string]string{"zone": "a"}},
			Spec:   corev1.NodeSpec{PodCIDRs: []string{"198.18.1.0/24"}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.51.100.11"}}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node2"},
			Status: corev1.NodeStatus{
				Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "2001:db8:0:1::12"}, {Type: corev1.NodeInternalIP, Address: "198.51.100.12"}},
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue}}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node3"}}, // no address yet
	}
	kube := fake.NewClientset(objs...)
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1beta1.GroupVersion.String(), "kind": "IPAddressPool",
		"metadata": map[string]any{"name": "lan", "namespace": "herald-system"},
		"spec":     map[string]any{"addresses": []any{"198.51.100.200-198.51.100.249"}},
	}}
	ad := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1beta1.GroupVersion.String(), "kind": "L2Advertisement",
		"metadata": map[string]any{"name": "lan", "namespace": "herald-system"},
		"spec":     map[string]any{"ipAddressPools": []any{"lan"}, "interfaces": []any{"eth0"}},
	}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		v1beta1.GroupVersion.WithResource("ipaddresspools"):   "IPAddressPoolList",
		v1beta1.GroupVersion.WithResource("l2advertisements"): "L2AdvertisementList",
	}, pool, ad)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := informers.NewSharedInformerFactory(kube, 0)
	sliceInf := f.Discovery().V1().EndpointSlices().Informer()
	if err := sliceInf.AddIndexers(cache.Indexers{sliceByService: sliceServiceKey}); err != nil {
		t.Fatal(err)
	}
	df := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, "herald-system", nil)
	src := &kubeSource{
		node: "node1", ns: "herald-system", v6: false, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		services: f.Core().V1().Services().Lister(), slices: sliceInf.GetIndexer(), nodes: f.Core().V1().Nodes().Lister(),
		listers: informer.Listers{
			config.KindIPAddressPool:   df.ForResource(informer.GVR("ipaddresspools")).Lister(),
			config.KindL2Advertisement: df.ForResource(informer.GVR("l2advertisements")).Lister(),
		},
	}
	f.Start(ctx.Done())
	df.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	df.WaitForCacheSync(ctx.Done())

	snap := src.Snapshot()
	var names []string
	for _, s := range snap.Services {
		names = append(names, s.Name)
	}
	// Not a LoadBalancer, another class, no IP yet, an unreadable status:
	// left out, and the others are there.
	if strings.Join(names, ",") != "cluster,web" {
		t.Fatalf("services = %v, want cluster,web", names)
	}
	web := snap.Services[1]
	want := view.Service{Namespace: "shop", Name: "web", Pool: "lan", Local: true,
		IPs:                     []netip.Addr{netip.MustParseAddr("198.51.100.200"), netip.MustParseAddr("2001:db8:0:1::200")},
		ReadyNodes:              map[string]bool{"node1": true},
		ServingTerminatingNodes: map[string]bool{"node2": true}}
	if !reflect.DeepEqual(web, want) {
		t.Errorf("web = %+v\nwant %+v", web, want)
	}
	// A Cluster Service's endpoints count too (BGP advertises it while
	// any serves); this one has none.
	if c := snap.Services[0]; c.ReadyNodes == nil || len(c.ReadyNodes)+len(c.ServingTerminatingNodes) != 0 {
		t.Errorf("cluster: endpoints %+v, want empty maps", c)
	}
	if !reflect.DeepEqual(snap.NodeIPs, []netip.Addr{netip.MustParseAddr("198.51.100.11")}) {
		t.Errorf("node IPs = %v, want node1's InternalIP", snap.NodeIPs)
	}
	if !reflect.DeepEqual(snap.Peers, []string{"198.51.100.12"}) {
		t.Errorf("peers = %v, want node2's IPv4 only (node3 has no address, node1 is this node)", snap.Peers)
	}
	if !reflect.DeepEqual(snap.PodCIDRs, []netip.Prefix{netip.MustParsePrefix("198.18.1.0/24")}) {
		t.Errorf("pod CIDRs = %v", snap.PodCIDRs)
	}
	if len(snap.Nodes) != 3 || !snap.Nodes[1].NetworkUnavailable || snap.Nodes[0].Labels["zone"] != "a" {
		t.Errorf("nodes = %+v", snap.Nodes)
	}
	if snap.Config == nil || snap.Config.Pools["lan"] == nil || len(snap.Config.L2Advertisements) != 1 || snap.Config.L2Advertisements[0].Interfaces[0] != "eth0" {
		t.Fatalf("config = %+v", snap.Config)
	}
	if o := src.Service(view.ServiceRef{Namespace: "shop", Name: "web"}); o == nil {
		t.Error("Service lookup for events failed")
	}
	if uid := src.ownerUID(view.ServiceRef{Namespace: "shop", Name: "web"}); uid != "" {
		t.Errorf("owner UID across namespaces: %q", uid)
	}
}

// The BGP configuration takes its passwords from the controller's copy of
// those in force, never from the users' Secrets; a peer whose password the
// controller has not copied is left out, the others stay.
func TestKubeSourceBGPConfig(t *testing.T) {
	kube := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "herald-system", Name: "md5"},
		Data: map[string][]byte{"password": []byte("not-read")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "herald-system", Name: lbapi.PasswordsSecretName},
			Data: map[string][]byte{"router": []byte("s3cret")}})
	peer := func(name, secret string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": v1beta1.GroupVersion.String(), "kind": "BGPPeer",
			"metadata": map[string]any{"name": name, "namespace": "herald-system"},
			"spec": map[string]any{"myASN": int64(64513), "peerASN": int64(64512), "peerAddress": "198.51.100.1",
				"passwordSecret": map[string]any{"name": secret, "key": "password"}},
		}}
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		v1beta1.GroupVersion.WithResource("ipaddresspools"):    "IPAddressPoolList",
		v1beta1.GroupVersion.WithResource("l2advertisements"):  "L2AdvertisementList",
		v1beta1.GroupVersion.WithResource("bgppeers"):          "BGPPeerList",
		v1beta1.GroupVersion.WithResource("bgpadvertisements"): "BGPAdvertisementList",
		v1beta1.GroupVersion.WithResource("communities"):       "CommunityList",
		v1beta1.GroupVersion.WithResource("bfdprofiles"):       "BFDProfileList",
	}, peer("router", "md5"), peer("broken", "absent"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace("herald-system"))
	df := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, "herald-system", nil)
	lister := func(r string) cache.GenericLister {
		return df.ForResource(v1beta1.GroupVersion.WithResource(r)).Lister()
	}
	src := &kubeSource{ns: "herald-system", log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		listers: informer.Listers{config.KindIPAddressPool: lister("ipaddresspools"), config.KindL2Advertisement: lister("l2advertisements"),
			config.KindBGPPeer: lister("bgppeers"), config.KindBGPAdvertisement: lister("bgpadvertisements"),
			config.KindCommunity: lister("communities"), config.KindBFDProfile: lister("bfdprofiles")},
		secrets: f.Core().V1().Secrets().Lister(), services: f.Core().V1().Services().Lister()}
	f.Start(ctx.Done())
	df.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	df.WaitForCacheSync(ctx.Done())
	cfg := src.config()
	p := cfg.Peers["router"]
	if p == nil || p.Password.Reveal() != "s3cret" {
		t.Fatalf("peer router = %+v, want the copied password", p)
	}
	if cfg.Peers["broken"] != nil {
		t.Errorf("peer broken has no copied password and must be left out: %+v", cfg.Peers["broken"])
	}
	if src.BGPPeer("router") == nil || src.BGPPeer("nope") != nil {
		t.Error("BGPPeer lookups")
	}
}
