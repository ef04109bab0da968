package controller

import (
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/herald-lb/herald/controller/allocator"
	"github.com/herald-lb/herald/internal/lbapi"
)

func ptr[T any](v T) *T { return &v }

func lbService(ns, name string, mod ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name)},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeLoadBalancer,
			Ports:      []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80}},
			Selector:   map[string]string{"app": name},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
		},
	}
	for _, m := range mod {
		m(s)
	}
	return s
}

func annotate(k, v string) func(*corev1.Service) {
	return func(s *corev1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[k] = v
	}
}

func TestHandles(t *testing.T) {
	other := func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr("example.com/other") }
	mine := func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr("herald.io/lb") }
	nodePort := func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }
	for _, tc := range []struct {
		name  string
		svc   *corev1.Service
		class string
		want  bool
	}{
		{"no class, no flag", lbService("a", "s"), "", true},
		{"other class, no flag", lbService("a", "s", other), "", false},
		{"no class, with flag", lbService("a", "s"), "herald.io/lb", false},
		{"my class, with flag", lbService("a", "s", mine), "herald.io/lb", true},
		{"other class, with flag", lbService("a", "s", other), "herald.io/lb", false},
		{"not a LoadBalancer", lbService("a", "s", nodePort), "", false},
	} {
		if got := lbapi.Handles(tc.svc, tc.class); got != tc.want {
			t.Errorf("%s: Handles = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRequestMapping(t *testing.T) {
	svc := lbService("shop", "web",
		annotate(lbapi.AnnotationLoadBalancerIPs, " 198.51.100.210 , 2001:db8:0:1::210"),
		annotate(lbapi.AnnotationAddressPool, " lan "),
		annotate(lbapi.AnnotationAllowSharedIP, " key "),
		func(s *corev1.Service) {
			s.Labels = map[string]string{"tier": "front"}
			s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyRequireDualStack)
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.Ports = []corev1.ServicePort{{Port: 80}, {Protocol: corev1.ProtocolUDP, Port: 53}}
			s.Spec.Selector = map[string]string{"b": "2", "a": "1"}
		})
	got, err := Request(svc, map[string]string{"team": "a"})
	if err != nil {
		t.Fatal(err)
	}
	want := allocator.Service{
		Namespace: "shop", Name: "web",
		NamespaceLabels: map[string]string{"team": "a"},
		Labels:          map[string]string{"tier": "front"},
		FamilyPolicy:    allocator.RequireDualStack,
		Families:        []allocator.Family{allocator.IPv6, allocator.IPv4},
		RequestedIPs:    []netip.Addr{netip.MustParseAddr("198.51.100.210"), netip.MustParseAddr("2001:db8:0:1::210")},
		Pool:            "lan",
		SharingKey:      "key",
		Ports:           []allocator.Port{{Protocol: "TCP", Port: 80}, {Protocol: "UDP", Port: 53}},
		LocalTraffic:    true,
		Backend:         "shop:a=1,b=2",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Request:\n got %+v\nwant %+v", got, want)
	}

	// spec.loadBalancerIP alone is honoured; the default policy is SingleStack.
	got, err = Request(lbService("shop", "old", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "198.51.100.220" }), nil)
	if err != nil || len(got.RequestedIPs) != 1 || got.RequestedIPs[0] != netip.MustParseAddr("198.51.100.220") || got.FamilyPolicy != allocator.SingleStack {
		t.Errorf("spec.loadBalancerIP: got %+v, %v", got, err)
	}
}

// Selectors select pods of their own namespace, and Services without a
// selector cannot be compared: both must keep Local Services apart.
func TestBackend(t *testing.T) {
	sel := func(m map[string]string) func(*corev1.Service) {
		return func(s *corev1.Service) { s.Spec.Selector = m }
	}
	a := backend(lbService("x", "a", sel(map[string]string{"app": "web", "v": "1"})))
	b := backend(lbService("x", "b", sel(map[string]string{"v": "1", "app": "web"})))
	c := backend(lbService("y", "c", sel(map[string]string{"app": "web", "v": "1"})))
	d := backend(lbService("x", "d", sel(nil)))
	e := backend(lbService("x", "e", sel(nil)))
	if a != b {
		t.Errorf("same selector, same namespace: %q != %q", a, b)
	}
	if a == c {
		t.Errorf("same selector in another namespace must differ: %q", c)
	}
	if d == e {
		t.Errorf("two Services without selector must differ: %q", d)
	}
}

func TestRequestBadInput(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mod       func(*corev1.Service)
		field     string
		contains  string
		keepsPool bool
	}{
		{"annotation and spec.loadBalancerIP", func(s *corev1.Service) {
			annotate(lbapi.AnnotationLoadBalancerIPs, "198.51.100.210")(s)
			s.Spec.LoadBalancerIP = "198.51.100.211"
		}, "annotation herald.io/loadBalancerIPs", "spec.loadBalancerIP", false},
		{"not an IP", annotate(lbapi.AnnotationLoadBalancerIPs, "198.51.100"), "annotation herald.io/loadBalancerIPs", `"198.51.100" is not an IP address`, false},
		{"two IPv4", annotate(lbapi.AnnotationLoadBalancerIPs, "198.51.100.1,198.51.100.2"), "annotation herald.io/loadBalancerIPs", "two IPv4 addresses", false},
		{"three entries", annotate(lbapi.AnnotationLoadBalancerIPs, "198.51.100.1,2001:db8::1,198.51.100.2"), "annotation herald.io/loadBalancerIPs", "3 entries", false},
		{"empty", annotate(lbapi.AnnotationLoadBalancerIPs, " "), "annotation herald.io/loadBalancerIPs", "is empty", false},
		{"trailing comma", annotate(lbapi.AnnotationLoadBalancerIPs, "198.51.100.1,"), "annotation herald.io/loadBalancerIPs", "empty entry", false},
		{"zone", annotate(lbapi.AnnotationLoadBalancerIPs, "fe80::1%eth0"), "annotation herald.io/loadBalancerIPs", "not an IP address", false},
		{"IPv4-mapped", annotate(lbapi.AnnotationLoadBalancerIPs, "::ffff:198.51.100.1"), "annotation herald.io/loadBalancerIPs", "write it as 198.51.100.1", false},
		{"bad spec.loadBalancerIP", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "nope" }, "spec.loadBalancerIP", `"nope" is not an IP address`, false},
		{"empty pool", annotate(lbapi.AnnotationAddressPool, ""), "annotation herald.io/address-pool", "is empty", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := lbService("shop", "web", tc.mod, annotate(lbapi.AnnotationAllowSharedIP, "k"))
			got, err := Request(svc, nil)
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("want a RequestError, got %v", err)
			}
			if re.Field != tc.field || !strings.Contains(re.Message, tc.contains) {
				t.Errorf("got %q, want field %q and message containing %q", err, tc.field, tc.contains)
			}
			// Everything but the request is there, for adoption.
			if got.Name != "web" || got.SharingKey != "k" || len(got.Ports) != 1 || len(got.RequestedIPs) != 0 || got.Pool != "" {
				t.Errorf("partial request: %+v", got)
			}
		})
	}
}

func TestStatusIPsAndIngress(t *testing.T) {
	svc := lbService("a", "b")
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{Hostname: "lb.example"}, {IP: "198.51.100.200"}, {IP: "2001:db8:0:1::200"}}
	ips, err := lbapi.StatusIPs(svc)
	if err != nil || len(ips) != 2 || ips[0].String() != "198.51.100.200" || ips[1].String() != "2001:db8:0:1::200" {
		t.Errorf("StatusIPs = %v, %v", ips, err)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "bogus"}}
	if _, err := lbapi.StatusIPs(svc); err == nil || !strings.Contains(err.Error(), "status.loadBalancer.ingress[0].ip") {
		t.Errorf("bad status IP: %v", err)
	}
	ing := Ingress(ips)
	if len(ing) != 2 || ing[0].IP != "198.51.100.200" || ing[0].IPMode == nil || *ing[0].IPMode != corev1.LoadBalancerIPModeVIP {
		t.Errorf("Ingress = %+v", ing)
	}
	if Ingress(nil) != nil {
		t.Error("Ingress(nil) must be nil")
	}
	// A server that drops ipMode must not make the controller write again.
	noMode := []corev1.LoadBalancerIngress{{IP: "198.51.100.200"}, {IP: "2001:db8:0:1::200"}}
	if !sameIngress(noMode, ing) {
		t.Error("ingress without ipMode should count as the same")
	}
	if sameIngress(noMode[:1], ing) {
		t.Error("different lengths compare equal")
	}
}

func TestServicePatch(t *testing.T) {
	svc := lbService("a", "b")
	var p map[string]any
	if err := json.Unmarshal(servicePatch(svc, Ingress([]netip.Addr{netip.MustParseAddr("198.51.100.200")}), "lan"), &p); err != nil {
		t.Fatal(err)
	}
	want := `{"metadata":{"annotations":{"herald.io/ip-allocated-from-pool":"lan"},"uid":"uid-a-b"},"status":{"loadBalancer":{"ingress":[{"ip":"198.51.100.200","ipMode":"VIP"}]}}}`
	if b, _ := json.Marshal(p); string(b) != want {
		t.Errorf("patch\n got %s\nwant %s", b, want)
	}
	// Releasing: null removes the annotation and the ingress list.
	want = `{"metadata":{"annotations":{"herald.io/ip-allocated-from-pool":null},"uid":"uid-a-b"},"status":{"loadBalancer":{"ingress":null}}}`
	if b := servicePatch(svc, nil, ""); string(b) != want {
		t.Errorf("release patch\n got %s\nwant %s", b, want)
	}
}
