package status

import (
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/herald-lb/herald/config/v1beta1"
	"github.com/herald-lb/herald/internal/lbapi"
)

func lb(ns, name, pool string, local bool, ips ...string) corev1.Service {
	s := corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
	if pool != "" {
		s.Annotations = map[string]string{"herald.io/ip-allocated-from-pool": pool}
	}
	if local {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	for _, ip := range ips {
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	return s
}

func sa(ns, name, node string, ifaces []string, ips ...string) v1beta1.ServiceAnnouncement {
	return v1beta1.ServiceAnnouncement{Status: v1beta1.ServiceAnnouncementStatus{
		Service: v1beta1.ServiceReference{Namespace: ns, Name: name}, Node: node, Protocol: v1beta1.ProtocolLayer2,
		Interfaces: ifaces, IPs: ips,
	}}
}

func TestRender(t *testing.T) {
	class := "other"
	classed := lb("shop", "classed", "", false)
	classed.Spec.LoadBalancerClass = &class
	svcs := []corev1.Service{
		lb("shop", "web", "lan", true, "198.51.100.200", "2001:db8:0:1::200"),
		lb("default", "dns", "lan", false, "198.51.100.201"),
		lb("shop", "pending", "", false),
		classed,
		lb("shop", "orphan", "lan", false, "198.51.100.202"),
		{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "internal"}},
	}
	anns := []v1beta1.ServiceAnnouncement{
		sa("shop", "web", "node2", []string{"eth0"}, "198.51.100.200"),
		sa("shop", "web", "node3", []string{"eth0", "eth1"}, "2001:db8:0:1:0:0:0:200"),
		sa("default", "dns", "node1", []string{"eth0"}, "198.51.100.201"),
		sa("default", "dns", "node3", []string{"eth0"}, "198.51.100.201"),
	}
	var b strings.Builder
	if err := Render(&b, svcs, anns); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	want := `NAMESPACE  SERVICE  IP                 POOL  POLICY   ANNOUNCED BY
default    dns      198.51.100.201     lan   Cluster  node1 (layer2 on eth0), node3 (layer2 on eth0)  <- more than one node over layer 2
shop       classed  <pending> (loadBalancerClass other)  -     Cluster  -
shop       orphan   198.51.100.202     lan   Cluster  nobody (no speaker published a reason: see the speakers' logs)
shop       pending  <pending>          -     Cluster  -
shop       web      198.51.100.200     lan   Local    node2 (layer2 on eth0)
shop       web      2001:db8:0:1::200  lan   Local    node3 (layer2 on eth0,eth1)
`
	// tabwriter pads the long <pending> cell; compare cells, not spaces.
	if norm(got) != norm(want) {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	b.Reset()
	_ = Render(&b, svcs[5:], nil)
	if !strings.Contains(b.String(), "no LoadBalancer Services") {
		t.Errorf("empty: %q", b.String())
	}
}

func norm(s string) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return strings.Join(lines, "\n")
}

func TestParseFlags(t *testing.T) {
	for _, c := range []struct {
		args    []string
		ns, svc string
		err     string
	}{
		{nil, "", "", ""},
		{[]string{"shop/web"}, "shop", "web", ""},
		{[]string{"web"}, "default", "web", ""},
		{[]string{"-n", "shop", "web"}, "shop", "web", ""},
		{[]string{"-n", "shop"}, "shop", "", ""},
		{[]string{"-n", "x", "shop/web"}, "", "", "namespace"},
		{[]string{"shop/"}, "", "", "NAMESPACE/NAME"},
		{[]string{"a", "b"}, "", "", "at most one"},
		// Flags after the Service, as kubectl takes them.
		{[]string{"shop/web", "-o", "json"}, "shop", "web", ""},
		{[]string{"web", "-n", "shop"}, "shop", "web", ""},
		{[]string{"shop/web", "-o", "xml"}, "", "", "-o"},
	} {
		o, err := ParseFlags(c.args, io.Discard)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: err %v, want %q", c.args, err, c.err)
			}
			continue
		}
		if err != nil || o.Namespace != c.ns || o.Name != c.svc {
			t.Errorf("%v: %+v %v", c.args, o, err)
		}
	}
}

func TestRenderConfig(t *testing.T) {
	cond := func(status metav1.ConditionStatus, reason, msg string) *metav1.Condition {
		return &metav1.Condition{Type: v1beta1.ConditionValid, Status: status, Reason: reason, Message: msg}
	}
	objs := []ConfigObject{
		{Kind: "IPAddressPool", Name: "good", Generation: 4, InForce: &v1beta1.InForce{Generation: 4}, Valid: cond(metav1.ConditionTrue, "Valid", "herald uses this object")},
		{Kind: "IPAddressPool", Name: "lan", Generation: 3, InForce: &v1beta1.InForce{Generation: 2},
			Valid: cond(metav1.ConditionFalse, lbapi.ReasonEditRefused, "in force: generation 2, refused: generation 3; spec.addresses[0]: reversed")},
		{Kind: "BGPPeer", Name: "router", Generation: 1, InForce: &v1beta1.InForce{Generation: 1},
			Valid: cond(metav1.ConditionFalse, lbapi.ReasonEditRefused, "spec.passwordSecret.name: Secret md5 does not exist in this namespace")},
		{Kind: "L2Advertisement", Name: "new", Generation: 1, Valid: cond(metav1.ConditionFalse, lbapi.ReasonInvalid, "spec.interfaces[0]: too long")},
		{Kind: "BGPAdvertisement", Name: "warned", Generation: 1, Valid: cond(metav1.ConditionFalse, lbapi.ReasonPartlyIgnored, "spec.localPref: no effect (warning)")},
	}
	var b strings.Builder
	if err := RenderConfig(&b, objs); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		"IPAddressPool lan: in force: generation 2, refused: generation 3",
		"BGPPeer router: in force: generation 1 with the password last read, refused: the Secret it names",
		"L2Advertisement new: refused: generation 1, no version in force",
		"spec.interfaces[0]: too long",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"good", "warned"} {
		if strings.Contains(got, not) {
			t.Errorf("output lists %s, which herald uses:\n%s", not, got)
		}
	}
	b.Reset()
	_ = RenderConfig(&b, objs[:1])
	if b.Len() != 0 {
		t.Errorf("all valid, yet printed %q", b.String())
	}
}

// -o json carries what the table shows, for scripts: addresses, who
// announces them, problems, and the configuration herald does not use.
func TestReportJSON(t *testing.T) {
	svc := corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Annotations: map[string]string{"herald.io/ip-allocated-from-pool": "lan"}},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
		Status:     corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "198.51.100.200"}, {IP: "198.51.100.201"}}}},
	}
	ann := v1beta1.ServiceAnnouncement{Status: v1beta1.ServiceAnnouncementStatus{
		Service: v1beta1.ServiceReference{Namespace: "shop", Name: "web"}, Node: "node1", Protocol: v1beta1.ProtocolLayer2,
		IPs: []string{"198.51.100.200"}, Interfaces: []string{"eth0"}}}
	r := Report{Services: Build([]corev1.Service{svc}, []v1beta1.ServiceAnnouncement{ann})}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"services":[{"namespace":"shop","name":"web","pool":"lan","externalTrafficPolicy":"Cluster","forwarding":"snat","addresses":[` +
		`{"ip":"198.51.100.200","announcedBy":[{"node":"node1","protocol":"layer2","interfaces":["eth0"]}]},` +
		`{"ip":"198.51.100.201","announcedBy":[],"problem":"nobody announces it (no speaker published a reason: see the speakers' logs)"}]}]}`
	if string(data) != want {
		t.Errorf("got  %s\nwant %s", data, want)
	}
	// herald.io/forwarding: dsr shows in both forms.
	svc.Annotations["herald.io/forwarding"] = "dsr"
	sts := Build([]corev1.Service{svc}, []v1beta1.ServiceAnnouncement{ann})
	var text strings.Builder
	if err := renderText(&text, sts); err != nil || sts[0].Forwarding != "dsr" || !strings.Contains(text.String(), "Cluster+dsr") {
		t.Errorf("dsr: %+v\n%s", sts[0], text.String())
	}
	if _, err := ParseFlags([]string{"-o", "xml"}, io.Discard); err == nil || !strings.Contains(err.Error(), `-o "xml"`) {
		t.Errorf("-o xml: %v", err)
	}
}

// An address nobody announces says why when the API tells: its pool has
// no advertisement (the pool's Advertised condition), or the Service is
// Local and no node has a ready endpoint.
func TestNobodyBecause(t *testing.T) {
	mk := func(name, pool string, local bool) corev1.Service {
		s := corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Annotations: map[string]string{"herald.io/ip-allocated-from-pool": pool}},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
			Status:     corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "198.51.100." + map[string]string{"dark": "1", "local": "2", "other": "3"}[name]}}}},
		}
		if local {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}
		return s
	}
	svcs := []corev1.Service{mk("dark", "unannounced", false), mk("local", "lan", true), mk("other", "lan", false)}
	ready := true
	slices := []discoveryv1.EndpointSlice{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "local-x", Labels: map[string]string{discoveryv1.LabelServiceName: "local"}},
		Endpoints:  []discoveryv1.Endpoint{{Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(false)}}},
	}, {
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "other-x", Labels: map[string]string{discoveryv1.LabelServiceName: "other"}},
		Endpoints:  []discoveryv1.Endpoint{{Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}}
	facts := Facts{Unadvertised: map[string]string{"unannounced": "no L2Advertisement or BGPAdvertisement selects this pool"}, ReadyEndpoints: readyEndpoints(slices)}
	var b strings.Builder
	if err := renderText(&b, BuildWith(svcs, nil, facts)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"nobody: pool unannounced: no L2Advertisement or BGPAdvertisement selects this pool",
		"nobody: externalTrafficPolicy is Local and no node has a ready endpoint",
		"nobody (no speaker published a reason", // other: the API does not tell why
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
}

// An address nobody announces shows the reasons the speakers published
// in their ServiceAnnouncements, in text and in -o json; an address that
// is announced does not carry the reasons of a speaker that lags.
func TestSpeakersReasons(t *testing.T) {
	svc := corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Annotations: map[string]string{"herald.io/ip-allocated-from-pool": "lan"}},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{
			{IP: "198.51.100.9"}, {IP: "2001:db8::9"},
		}}},
	}
	ann := func(node, proto string, ips []string, un ...v1beta1.UnannouncedIP) v1beta1.ServiceAnnouncement {
		return v1beta1.ServiceAnnouncement{Status: v1beta1.ServiceAnnouncementStatus{
			Service: v1beta1.ServiceReference{Namespace: "shop", Name: "web"}, Node: node,
			Protocol: v1beta1.AnnouncementProtocol(proto), IPs: ips, Unannounced: un,
		}}
	}
	anns := []v1beta1.ServiceAnnouncement{
		ann("node1", "layer2", nil, v1beta1.UnannouncedIP{IP: "198.51.100.9", Reason: "no node is eligible to announce the IP",
			Detail: "node labelled node.kubernetes.io/exclude-from-external-load-balancers: node1, node2"}),
		ann("node1", "bgp", nil, v1beta1.UnannouncedIP{IP: "198.51.100.9", Reason: "the Service has no serving endpoint"}),
		ann("node3", "layer2", []string{"2001:db8::9"}),
		ann("node2", "layer2", nil, v1beta1.UnannouncedIP{IP: "2001:db8::9", Reason: "this node won the IP but none of its interfaces for it is up"}),
	}
	sts := BuildWith([]corev1.Service{svc}, anns, Facts{})
	a := sts[0].Addresses
	want := "nobody announces it: bgp: the Service has no serving endpoint; layer2: no node is eligible to announce the IP " +
		"(node labelled node.kubernetes.io/exclude-from-external-load-balancers: node1, node2)"
	if a[0].Problem != want || len(a[0].Reasons) != 2 || a[0].Reasons[0].Node != "node1" {
		t.Errorf("198.51.100.9: %+v\nwant problem %q", a[0], want)
	}
	if a[1].Problem != "" || len(a[1].Reasons) != 0 || len(a[1].AnnouncedBy) != 1 {
		t.Errorf("2001:db8::9 is announced by node3: %+v", a[1])
	}
	var b strings.Builder
	if err := renderText(&b, sts); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "nobody: bgp: the Service has no serving endpoint; layer2: no node is eligible") {
		t.Errorf("text:\n%s", b.String())
	}
}

func ptrTo[T any](v T) *T { return &v }

func TestParseFlagsBGP(t *testing.T) {
	o, err := ParseFlags([]string{"bgp", "-o", "json", "--herald-namespace", "lb"}, io.Discard)
	if err != nil || !o.BGP || o.Output != "json" || o.HeraldNamespace != "lb" {
		t.Errorf("bgp flags: %+v, %v", o, err)
	}
	if o, _ := ParseFlags([]string{"shop/web"}, io.Discard); o.BGP {
		t.Error("a Service name read as bgp")
	}
	if o, err := ParseFlags([]string{"--kubeconfig", "k", "bgp"}, io.Discard); err != nil || !o.BGP {
		t.Errorf("bgp after the flags: %+v, %v", o, err)
	}
	if o, err := ParseFlags([]string{"default/bgp"}, io.Discard); err != nil || o.BGP || o.Name != "bgp" {
		t.Errorf("the Service default/bgp: %+v, %v", o, err)
	}
	if _, err := ParseFlags([]string{"bgp", "shop/web"}, io.Discard); err == nil {
		t.Error("bgp with a Service: no error")
	}
}

// TestDSRProblems: the proxies' Events about a DSR Service that a node
// keeps on SNAT show, newest per node, with their age; other Events and
// Services without the annotation are left out.
func TestDSRProblems(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	ev := func(name, node, msg string, ago time.Duration) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			InvolvedObject: corev1.ObjectReference{Kind: "Service", Namespace: "shop", Name: "web"},
			Reason:         "ProxyInvalidService", Message: msg, Source: corev1.EventSource{Host: node},
			LastTimestamp: metav1.NewTime(now.Add(-ago))}
	}
	msg := "service shop/web:http: forwarding: dsr: no working tunnel to node node3 (endpoint 10.244.3.5:8080): herald's proxy must run there with --dsr; forwarding stays SNAT"
	kube := fake.NewSimpleClientset(
		ev("a", "node1", msg, 2*time.Minute), ev("b", "node1", msg, 30*time.Minute),
		ev("c", "node2", "service shop/web: spec.externalIPs[0]: \"x\" is not an IP address", time.Minute))
	web := corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Annotations: map[string]string{"herald.io/forwarding": "dsr"}}}
	plain := corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"}}
	got, err := DSRProblems(context.Background(), kube, []corev1.Service{web, plain}, now)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"node1: no working tunnel to node node3 (endpoint 10.244.3.5:8080): herald's proxy must run there with --dsr; forwarding stays SNAT (2m0s ago)"}
	if !slices.Equal(got["shop/web"], want) || len(got) != 1 {
		t.Errorf("got %q\nwant %q", got, want)
	}
}
