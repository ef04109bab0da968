package proxy

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/proxy/rules"
)

func ptr[T any](v T) *T { return &v }

func lbService() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{
			Type:                     corev1.ServiceTypeLoadBalancer,
			ClusterIP:                "198.19.0.10",
			ClusterIPs:               []string{"198.19.0.10"},
			ExternalIPs:              []string{"198.51.100.30", "not-an-ip"},
			LoadBalancerSourceRanges: []string{" 203.0.113.0/25", "203.0.113.300/32"},
			ExternalTrafficPolicy:    corev1.ServiceExternalTrafficPolicyLocal,
			InternalTrafficPolicy:    ptr(corev1.ServiceInternalTrafficPolicyLocal),
			HealthCheckNodePort:      31999,
			SessionAffinity:          corev1.ServiceAffinityClientIP,
			SessionAffinityConfig:    &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(600))}},
			Ports: []corev1.ServicePort{
				{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080},
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, NodePort: 30053},
			},
		},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{
			{IP: "198.51.100.200"},
			{IP: "198.51.100.201", IPMode: ptr(corev1.LoadBalancerIPModeProxy)},
			{Hostname: "lb.example"},
		}}},
	}
}

func TestServicePorts(t *testing.T) {
	got, problems := ServicePorts(lbService())
	if len(got) != 2 {
		t.Fatalf("%d ports, want 2", len(got))
	}
	s := got[0]
	want := rules.Service{
		Namespace: "default", Name: "web", PortName: "http", Protocol: rules.TCP, Port: 80, NodePort: 30080,
		ClusterIPs:               []netip.Addr{netip.MustParseAddr("198.19.0.10")},
		ExternalIPs:              []netip.Addr{netip.MustParseAddr("198.51.100.30")},
		LoadBalancerIngress:      []rules.Ingress{{IP: netip.MustParseAddr("198.51.100.200")}, {IP: netip.MustParseAddr("198.51.100.201"), Mode: rules.IPModeProxy}},
		LoadBalancerSourceRanges: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/25")},
		SourceRangesInvalid:      true,
		ExternalTrafficPolicy:    rules.PolicyLocal,
		InternalTrafficPolicy:    rules.PolicyLocal,
		HealthCheckNodePort:      31999,
		SessionAffinity:          rules.AffinityClientIP,
		AffinityTimeout:          600,
	}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("port http:\n got %+v\nwant %+v", s, want)
	}
	if got[1].Protocol != rules.UDP || got[1].Port != 53 || got[1].PortName != "dns" {
		t.Errorf("port dns: %+v", got[1])
	}
	text := ""
	for _, p := range problems {
		text += p.Error() + "\n"
	}
	for _, w := range []string{"service default/web: spec.externalIPs[1]", "service default/web: spec.loadBalancerSourceRanges[1]"} {
		if !strings.Contains(text, w) {
			t.Errorf("problems lack %q:\n%s", w, text)
		}
	}

	// externalTrafficPolicy means nothing for a plain ClusterIP Service.
	c := lbService()
	c.Spec.Type, c.Spec.ExternalIPs = corev1.ServiceTypeClusterIP, nil
	got, _ = ServicePorts(c)
	if got[0].ExternalTrafficPolicy != rules.PolicyCluster || got[0].HealthCheckNodePort != 0 || len(got[0].LoadBalancerIngress) != 0 {
		t.Errorf("ClusterIP Service took LB fields: %+v", got[0])
	}

	for name, mutate := range map[string]func(*corev1.Service){
		"headless":     func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "None", []string{"None"} },
		"externalname": func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName },
		"other proxy":  func(s *corev1.Service) { s.Labels = map[string]string{LabelServiceProxyName: "cilium"} },
	} {
		s := lbService()
		mutate(s)
		if got, _ := ServicePorts(s); len(got) != 0 || Skipped(s) == "" {
			t.Errorf("%s: not skipped (%d ports)", name, len(got))
		}
	}
}

func TestEndpoints(t *testing.T) {
	slice := func(name string, typ discoveryv1.AddressType, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: name},
			AddressType: typ,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}},
			Endpoints:   eps,
		}
	}
	ep := func(ip, node string, ready, serving, terminating *bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{ip}, NodeName: ptr(node),
			Conditions: discoveryv1.EndpointConditions{Ready: ready, Serving: serving, Terminating: terminating}}
	}
	got := Endpoints("default", "web", []*discoveryv1.EndpointSlice{
		slice("a", discoveryv1.AddressTypeIPv4,
			ep("198.18.2.5", "node2", nil, nil, nil),
			ep("198.18.1.5", "node1", ptr(false), ptr(true), ptr(true)),
			ep("198.18.3.5", "node3", ptr(true), nil, nil)),
		// The same endpoint in a second slice, not ready there: the ready
		// copy wins.
		slice("b", discoveryv1.AddressTypeIPv4, ep("198.18.3.5", "node3", ptr(false), ptr(false), nil)),
		slice("c", discoveryv1.AddressTypeFQDN, ep("example.org", "node1", nil, nil, nil)),
	})
	eps := got[rules.ServicePortName{Namespace: "default", Name: "web", Port: "http"}]
	if len(eps) != 3 {
		t.Fatalf("endpoints %+v", eps)
	}
	if e := eps[0]; e.IP.String() != "198.18.1.5" || e.Ready || !e.Serving || !e.Terminating || e.NodeName != "node1" {
		t.Errorf("terminating endpoint %+v", e)
	}
	if e := eps[1]; e.IP.String() != "198.18.2.5" || !e.Ready || !e.Serving || e.Terminating || e.Port != 8080 {
		t.Errorf("nil conditions must mean ready and serving: %+v", e)
	}
	if e := eps[2]; !e.Ready {
		t.Errorf("duplicate endpoint: the ready copy must win: %+v", e)
	}
}

// TestForwardingAnnotation: herald.io/forwarding picks DSR or SNAT; any
// other value is reported, naming the Service and the annotation, and
// the Service keeps SNAT and its rules.
func TestForwardingAnnotation(t *testing.T) {
	for _, tc := range []struct {
		value string
		set   bool
		want  rules.Forwarding
		bad   bool
	}{
		{set: false, want: rules.ForwardingSNAT},
		{value: "dsr", set: true, want: rules.ForwardingDSR},
		{value: " DSR ", set: true, want: rules.ForwardingDSR},
		{value: "snat", set: true, want: rules.ForwardingSNAT},
		{value: "direct", set: true, want: rules.ForwardingSNAT, bad: true},
	} {
		svc := lbService()
		svc.Spec.ExternalIPs = nil
		svc.Spec.LoadBalancerSourceRanges = nil
		if tc.set {
			svc.Annotations = map[string]string{AnnotationForwarding: tc.value}
		}
		ports, probs := ServicePorts(svc)
		if len(ports) != 2 {
			t.Fatalf("%q: %d ports", tc.value, len(ports))
		}
		for _, p := range ports {
			if p.Forwarding != tc.want {
				t.Errorf("%q: forwarding %d, want %d", tc.value, p.Forwarding, tc.want)
			}
		}
		msg := ""
		for _, p := range probs {
			msg += p.Error()
		}
		if got := strings.Contains(msg, "service default/web: metadata.annotations[herald.io/forwarding]: \"direct\""); got != tc.bad {
			t.Errorf("%q: problems %q", tc.value, msg)
		}
	}
}
