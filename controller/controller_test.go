package controller

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/config/informer"
	"github.com/herald-lb/herald/config/v1beta1"
	"github.com/herald-lb/herald/internal/lbapi"
)

const l2Range = "198.51.100.200-198.51.100.209"

func TestAssignWritesStatusAnnotationAndEvent(t *testing.T) {
	e := newEnv(t)
	e.addPool("lan", []string{l2Range, "2001:db8:0:1::200-2001:db8:0:1::209"})
	e.addService(lbService("shop", "web"))
	e.start()

	svc := e.svc("shop", "web")
	ing := svc.Status.LoadBalancer.Ingress
	if len(ing) != 1 || ing[0].IP != "198.51.100.200" || ing[0].IPMode == nil || *ing[0].IPMode != corev1.LoadBalancerIPModeVIP {
		t.Errorf("ingress = %+v, want 198.51.100.200 with ipMode VIP", ing)
	}
	if got := svc.Annotations[lbapi.AnnotationAllocatedFromPool]; got != "lan" {
		t.Errorf("annotation %s = %q, want lan", lbapi.AnnotationAllocatedFromPool, got)
	}
	e.expectEvents("shop/web Normal IPAllocated: Assigned 198.51.100.200 from pool lan")
	// One patch of the status subresource wrote status and annotation.
	w := e.writes()
	if n := strings.Count(strings.Join(w, "\n"), "patch services/status shop/web"); n != 1 {
		t.Errorf("want exactly one status patch of shop/web, got writes %q", w)
	}

	// Reconciling again writes nothing and reports nothing.
	e.settle()
	for _, w := range e.writes() {
		if strings.Contains(w, "services") {
			t.Errorf("unexpected write on a settled Service: %s", w)
		}
	}
	e.expectEvents()

	// Pool status: counts per family and Valid=True.
	p := e.pool("lan")
	if p.Status.AssignedIPv4 != 1 || p.Status.AvailableIPv4 != 9 || p.Status.AssignedIPv6 != 0 || p.Status.AvailableIPv6 != 10 {
		t.Errorf("pool status = %+v", p.Status)
	}
	if c := apimeta.FindStatusCondition(p.Status.Conditions, v1beta1.ConditionValid); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Valid condition = %+v", c)
	}
}

func TestDualStack(t *testing.T) {
	e := newEnv(t)
	e.addPool("lan", []string{l2Range, "2001:db8:0:1::200-2001:db8:0:1::209"})
	e.addPool("v4only", []string{"203.0.113.128/30"}, func(p *v1beta1.IPAddressPool) { p.Spec.AutoAssign = ptr(false) })
	dual := func(policy corev1.IPFamilyPolicy, fams ...corev1.IPFamily) func(*corev1.Service) {
		return func(s *corev1.Service) { s.Spec.IPFamilyPolicy = &policy; s.Spec.IPFamilies = fams }
	}
	e.addService(lbService("a", "prefer", dual(corev1.IPFamilyPolicyPreferDualStack, corev1.IPv6Protocol, corev1.IPv4Protocol)))
	e.addService(lbService("a", "require", dual(corev1.IPFamilyPolicyRequireDualStack, corev1.IPv4Protocol, corev1.IPv6Protocol)))
	e.addService(lbService("a", "v6", dual(corev1.IPFamilyPolicySingleStack, corev1.IPv6Protocol)))
	e.addService(lbService("a", "require-v4only", dual(corev1.IPFamilyPolicyRequireDualStack, corev1.IPv4Protocol, corev1.IPv6Protocol),
		annotate(lbapi.AnnotationAddressPool, "v4only")))
	e.start()
	for name, want := range map[string]string{
		"prefer":         "2001:db8:0:1::200,198.51.100.200",
		"require":        "198.51.100.201,2001:db8:0:1::201",
		"v6":             "2001:db8:0:1::202",
		"require-v4only": "",
	} {
		if got := e.ips("a", name); got != want {
			t.Errorf("%s: IPs %q, want %q", name, got, want)
		}
	}
	var failed []string
	for _, ev := range e.rec.take() {
		if ev.Reason == EventAllocationFailed {
			failed = append(failed, ev.String())
		}
	}
	if len(failed) != 1 || !strings.Contains(failed[0], "a/require-v4only") || !strings.Contains(failed[0], "pool v4only has no IPv6 addresses") {
		t.Errorf("AllocationFailed events: %q", failed)
	}
}

func TestRequestedIPAndExhaustion(t *testing.T) {
	e := newEnv(t)
	e.addPool("small", []string{"198.51.100.200-198.51.100.201"})
	e.addService(lbService("a", "first", annotate(lbapi.AnnotationLoadBalancerIPs, "198.51.100.201")))
	e.addService(lbService("a", "second"))
	e.start()
	if e.ips("a", "first") != "198.51.100.201" || e.ips("a", "second") != "198.51.100.200" {
		t.Fatalf("IPs: first %q second %q", e.ips("a", "first"), e.ips("a", "second"))
	}
	e.rec.take()

	e.addService(lbService("b", "third", annotate(lbapi.AnnotationLoadBalancerIPs, "198.51.100.201")))
	e.addService(lbService("b", "fourth"))
	e.settle()
	e.expectEvents(
		"b/third Warning AllocationFailed: requested IP 198.51.100.201 is in use by a/first",
		"b/fourth Warning AllocationFailed: pool small has no free IPv4 address",
	)
	if e.ips("b", "third") != "" || e.ips("b", "fourth") != "" {
		t.Errorf("failed Services got IPs")
	}
	// Settling again repeats nothing.
	e.settle()
	e.expectEvents()

	// Freeing the requested IP serves the Service waiting for it; the
	// other keeps waiting.
	e.deleteService("a", "first")
	e.settle()
	if got := e.ips("b", "third"); got != "198.51.100.201" {
		t.Errorf("third: %q after first was deleted", got)
	}
	e.expectEvents(
		"a/first Normal IPReleased: Released 198.51.100.201 from pool small: the Service was deleted",
		"b/third Normal IPAllocated: Assigned 198.51.100.201 from pool small",
	)
	m := e.c.metrics
	if got := testCounter(t, m, "herald_controller_allocation_failures_total", "PoolExhausted"); got != 1 {
		t.Errorf("PoolExhausted failures = %v", got)
	}
	if got := testCounter(t, m, "herald_controller_allocation_failures_total", "IPInUse"); got != 1 {
		t.Errorf("IPInUse failures = %v", got)
	}
	if got := testCounter(t, m, "herald_controller_allocations_total", ""); got != 3 {
		t.Errorf("allocations = %v", got)
	}
}

// Bad input is reported on the Service, naming the annotation or field,
// and takes nothing away: not from other Services, not from the Service
// itself.
func TestBadInputKeepsWorkingIPs(t *testing.T) {
	e := newEnv(t)
	e.addPool("lan", []string{l2Range})
	e.addService(lbService("a", "working"))
	e.addService(lbService("a", "both", annotate(lbapi.AnnotationLoadBalancerIPs, "198.51.100.205"), func(s *corev1.Service) { s.Spec.LoadBalancerIP = "198.51.100.206" }))
	e.start()
	e.expectEvents(
		"a/working Normal IPAllocated: Assigned 198.51.100.200",
		"a/both Warning AllocationFailed: annotation herald.io/loadBalancerIPs: is set together with spec.loadBalancerIP",
	)
	if e.ips("a", "both") != "" {
		t.Errorf("a/both got IPs")
	}
	// The working Service gets a broken annotation: it keeps its IP.
	e.updateService("a", "working", annotate(lbapi.AnnotationLoadBalancerIPs, "198.51.100.300"))
	e.settle()
	e.expectEvents(`a/working Warning AllocationFailed: annotation herald.io/loadBalancerIPs: "198.51.100.300" is not an IP address; keeping 198.51.100.200 from pool lan`)
	if got := e.ips("a", "working"); got != "198.51.100.200" {
		t.Errorf("working: %q", got)
	}
	// A request that cannot be met does not take the working IP either.
	e.updateService("a", "working", annotate(lbapi.AnnotationLoadBalancerIPs, "203.0.113.9"))
	e.settle()
	e.expectEvents("a/working Warning AllocationFailed: 203.0.113.9 is not in any IPAddressPool; keeping 198.51.100.200")
	if got := e.ips("a", "working"); got != "198.51.100.200" {
		t.Errorf("working: %q", got)
	}
	// A request it can have moves it, and says from where.
	e.updateService("a", "working", annotate(lbapi.AnnotationLoadBalancerIPs, "198.51.100.207"))
	e.settle()
	e.expectEvents("a/working Normal IPAllocated: Assigned 198.51.100.207 from pool lan (was 198.51.100.200)")
}

func TestSharing(t *testing.T) {
	e := newEnv(t)
	e.addPool("lan", []string{l2Range})
	port := func(p int32) func(*corev1.Service) {
		return func(s *corev1.Service) { s.Spec.Ports = []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: p}} }
	}
	share := annotate(lbapi.AnnotationAllowSharedIP, "web")
	e.addService(lbService("a", "http", share, port(80)))
	e.addService(lbService("b", "https", share, port(443)))
	e.addService(lbService("c", "clash", share, port(80), annotate(lbapi.AnnotationLoadBalancerIPs, "198.51.100.200")))
	e.addService(lbService("c", "local", share, port(8080), annotate(lbapi.AnnotationLoadBalancerIPs, "198.51.100.200"),
		func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal }))
	e.start()
	if e.ips("a", "http") != "198.51.100.200" || e.ips("b", "https") != "198.51.100.200" {
		t.Errorf("sharers: %q %q", e.ips("a", "http"), e.ips("b", "https"))
	}
	if e.ips("c", "clash") != "" || e.ips("c", "local") != "" {
		t.Errorf("refused sharers got IPs")
	}
	var failed []string
	for _, ev := range e.rec.take() {
		if ev.Reason == EventAllocationFailed {
			failed = append(failed, ev.String())
		}
	}
	want := []string{
		"c/clash Warning AllocationFailed: requested IP sharing conflict with a/http on 198.51.100.200: port TCP/80 is used by both",
		"c/local Warning AllocationFailed: requested IP sharing conflict with a/http on 198.51.100.200: Services sharing an IP must all use externalTrafficPolicy Cluster, or all Local and select the same pods",
	}
	if strings.Join(failed, "\n") != strings.Join(want, "\n") {
		t.Errorf("failures:\n%s\nwant:\n%s", strings.Join(failed, "\n"), strings.Join(want, "\n"))
	}
}

func TestNamespaceSelectorPool(t *testing.T) {
	e := newEnv(t)
	e.addPool("general", []string{l2Range})
	e.addPool("team-a", []string{"203.0.113.128/29"}, func(p *v1beta1.IPAddressPool) {
		p.Spec.ServiceAllocation = &v1beta1.ServiceAllocation{Priority: ptr(int32(1)),
			NamespaceSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"team": "a"}}}}
	})
	e.addNamespace("alpha", map[string]string{"team": "a"})
	e.addNamespace("beta", nil)
	e.addService(lbService("alpha", "web"))
	e.addService(lbService("beta", "web"))
	e.start()
	if got := e.ips("alpha", "web"); got != "203.0.113.128" {
		t.Errorf("alpha/web: %q, want the team-a pool", got)
	}
	if got := e.svc("alpha", "web").Annotations[lbapi.AnnotationAllocatedFromPool]; got != "team-a" {
		t.Errorf("alpha/web annotation %q", got)
	}
	if got := e.ips("beta", "web"); got != "198.51.100.200" {
		t.Errorf("beta/web: %q, want the general pool", got)
	}
}

// A restart adopts every Service's status IPs, oldest first, before it
// assigns anything: a Service without IPs that comes first in the queue
// must not take an IP another Service already shows.
func TestAdoptBeforeAssign(t *testing.T) {
	e := newEnv(t)
	e.addPool("lan", []string{l2Range})
	withStatus := func(ip, pool string) func(*corev1.Service) {
		return func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = Ingress(mustAddrs(ip))
			annotate(lbapi.AnnotationAllocatedFromPool, pool)(s)
		}
	}
	// "aaa-new" sorts first by name and has no IP yet.
	e.addService(lbService("a", "holder", withStatus("198.51.100.200", "lan")))
	e.addService(lbService("a", "aaa-new"))
	// Two Services claiming one IP: the older keeps it.
	e.addService(lbService("b", "older", withStatus("198.51.100.205", "lan")))
	e.addService(lbService("a", "newer", withStatus("198.51.100.205", "lan")))
	e.start()
	if got := e.ips("a", "holder"); got != "198.51.100.200" {
		t.Errorf("holder moved to %q", got)
	}
	if got := e.ips("b", "older"); got != "198.51.100.205" {
		t.Errorf("older moved to %q", got)
	}
	if got := e.ips("a", "aaa-new"); got != "198.51.100.201" {
		t.Errorf("aaa-new: %q, want 198.51.100.201", got)
	}
	for _, k := range []string{"a/holder", "a/aaa-new", "b/older", "a/newer"} {
		n, s, _ := strings.Cut(k, "/")
		t.Logf("%s %s", k, e.ips(n, s))
	}
	if got := e.ips("a", "newer"); got != "198.51.100.202" {
		t.Errorf("newer: %q, want 198.51.100.202", got)
	}
	e.expectEvents(
		"a/newer Warning AllocationFailed: On start, could not keep 198.51.100.205 from the Service's status: 198.51.100.205 is in use by b/older",
		"a/aaa-new Normal IPAllocated: Assigned 198.51.100.201",
		"a/newer Normal IPAllocated: Assigned 198.51.100.202 from pool lan (was 198.51.100.205)",
	)
	if got := testGauge(t, e.c.metrics, "herald_controller_adopted_services"); got != 2 {
		t.Errorf("adopted = %v, want 2", got)
	}
}

func TestPoolShrinkRefusedWhileInUse(t *testing.T) {
	e := newEnv(t)
	e.addPool("lan", []string{l2Range})
	e.addService(lbService("a", "s1"))
	e.addService(lbService("a", "s2"))
	e.addService(lbService("a", "s3"))
	e.start()
	before := map[string]string{"s1": e.ips("a", "s1"), "s2": e.ips("a", "s2"), "s3": e.ips("a", "s3")}
	if before["s1"] != "198.51.100.200" || before["s2"] != "198.51.100.201" || before["s3"] != "198.51.100.202" {
		t.Fatalf("IPs before: %v", before)
	}
	if f := e.pool("lan").Status.InForce; f == nil || f.Generation != 1 {
		t.Fatalf("status.inForce after the first sync = %+v, want generation 1", f)
	}
	e.rec.take()
	// Dropping 198.51.100.200, which s1 holds: refused, nothing moves, and
	// the pool says why.
	e.setPoolAddresses("lan", "198.51.100.201-198.51.100.209")
	e.settle()
	for n, ip := range before {
		if got := e.ips("a", n); got != ip {
			t.Errorf("%s moved from %s to %q", n, ip, got)
		}
	}
	e.expectEvents("IPAddressPool herald-system/lan Warning EditRefused: in force: generation 1, refused: generation 2: spec.addresses: no longer includes 198.51.100.200 (Service a/s1), in use: move those Services to other addresses (or delete them) before removing their addresses from the pool")
	cond := validOf(t, e.pool("lan").Status.Conditions)
	if cond.Reason != lbapi.ReasonEditRefused || !strings.Contains(cond.Message, "spec.addresses") {
		t.Errorf("Valid condition = %+v, want EditRefused naming spec.addresses", cond)
	}
	if f := e.pool("lan").Status.InForce; f == nil || f.Generation != 1 {
		t.Errorf("status.inForce = %+v, want generation 1 kept", f)
	}
	if got := metricValue(t, e.c.metrics, "herald_config_stale_objects", map[string]string{"kind": "IPAddressPool"}); got != 1 {
		t.Errorf("herald_config_stale_objects{kind=IPAddressPool} = %v, want 1", got)
	}
	// Once s1 is gone the same edit is accepted, and the others stay.
	e.deleteService("a", "s1")
	e.settle()
	if e.ips("a", "s2") != before["s2"] || e.ips("a", "s3") != before["s3"] {
		t.Errorf("unaffected Services moved: s2 %q s3 %q", e.ips("a", "s2"), e.ips("a", "s3"))
	}
	if f := e.pool("lan").Status.InForce; f == nil || f.Generation != 2 {
		t.Errorf("status.inForce = %+v, want generation 2 once nothing uses the dropped address", f)
	}
	if cond := validOf(t, e.pool("lan").Status.Conditions); cond.Status != metav1.ConditionTrue {
		t.Errorf("Valid condition = %+v, want True", cond)
	}
	if got := metricValue(t, e.c.metrics, "herald_config_stale_objects", map[string]string{"kind": "IPAddressPool"}); got != 0 {
		t.Errorf("herald_config_stale_objects{kind=IPAddressPool} = %v, want 0", got)
	}
	e.rec.take()
	e.addService(lbService("a", "s1"))
	e.settle()
	e.rec.take()

	// The pool disappears: every Service is released and reported.
	if err := e.dyn.Resource(informer.GVR("ipaddresspools")).Namespace(ns).Delete(e.ctx, "lan", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.settle()
	for _, n := range []string{"s1", "s2", "s3"} {
		if got := e.ips("a", n); got != "" {
			t.Errorf("%s keeps %q with no pool", n, got)
		}
		if _, has := e.svc("a", n).Annotations[lbapi.AnnotationAllocatedFromPool]; has {
			t.Errorf("%s keeps the pool annotation", n)
		}
	}
	got := e.rec.take()
	if len(got) != 6 {
		t.Errorf("want a release and a failure per Service, got %v", got)
	}
}

func validOf(t *testing.T, conds []metav1.Condition) metav1.Condition {
	t.Helper()
	for _, c := range conds {
		if c.Type == v1beta1.ConditionValid {
			return c
		}
	}
	t.Fatalf("no Valid condition in %+v", conds)
	return metav1.Condition{}
}

func TestTypeChangeAndClassChangeRelease(t *testing.T) {
	e := newEnv(t)
	e.addPool("lan", []string{"198.51.100.200-198.51.100.201"})
	e.addService(lbService("a", "one"))
	e.addService(lbService("a", "two"))
	e.start()
	e.rec.take()

	// As the API server does on a type change, status goes with it.
	e.updateService("a", "one", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeClusterIP
		s.Status = corev1.ServiceStatus{}
	})
	e.writes()
	e.settle()
	// Only the annotation is left to remove: metadata only, no status write.
	if w := strings.Join(e.writes(), "\n"); !strings.Contains(w, "patch services a/one") || strings.Contains(w, "services/status a/one") {
		t.Errorf("writes after the type change:\n%s", w)
	}
	if _, has := e.svc("a", "one").Annotations[lbapi.AnnotationAllocatedFromPool]; has {
		t.Error("the annotation stays after the type change")
	}
	e.expectEvents("a/one Normal IPReleased: Released 198.51.100.200 from pool lan: the Service is no longer of type LoadBalancer")

	// Becoming a Service of another class releases too, and the status
	// herald wrote goes away.
	e.updateService("a", "two", func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr("example.com/other") })
	e.settle()
	two := e.svc("a", "two")
	if len(two.Status.LoadBalancer.Ingress) != 0 || two.Annotations[lbapi.AnnotationAllocatedFromPool] != "" {
		t.Errorf("a/two after class change: %+v %v", two.Status, two.Annotations)
	}
	e.expectEvents(`a/two Normal IPReleased: Released 198.51.100.201 from pool lan: the Service has loadBalancerClass "example.com/other"; this controller handles Services without a class`)

	// Both addresses are free again.
	e.addService(lbService("b", "x"))
	e.addService(lbService("b", "y"))
	e.settle()
	if e.ips("b", "x") == "" || e.ips("b", "y") == "" {
		t.Errorf("freed addresses were not reused: %q %q", e.ips("b", "x"), e.ips("b", "y"))
	}
}

func TestLoadBalancerClass(t *testing.T) {
	other := func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr("example.com/other") }
	mine := func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr("herald.io/lab") }

	e := newEnv(t)
	e.addPool("lan", []string{l2Range})
	e.addService(lbService("a", "other", other))
	e.addService(lbService("a", "plain"))
	e.start()
	if e.ips("a", "other") != "" || e.ips("a", "plain") == "" {
		t.Errorf("without --lb-class: other %q plain %q", e.ips("a", "other"), e.ips("a", "plain"))
	}
	for _, w := range e.writes() {
		if strings.Contains(w, "a/other") {
			t.Errorf("a Service of another class was written: %s", w)
		}
	}

	e = newEnv(t, func(o *Options) { o.LBClass = "herald.io/lab" })
	e.addPool("lan", []string{l2Range})
	e.addService(lbService("a", "mine", mine))
	e.addService(lbService("a", "plain"))
	e.start()
	if e.ips("a", "mine") == "" || e.ips("a", "plain") != "" {
		t.Errorf("with --lb-class: mine %q plain %q", e.ips("a", "mine"), e.ips("a", "plain"))
	}
}

func TestPoolValidity(t *testing.T) {
	e := newEnv(t)
	e.addPool("old", []string{l2Range})
	e.addPool("new", []string{"198.51.100.205-198.51.100.220"})
	e.start()
	p := e.pool("new")
	c := apimeta.FindStatusCondition(p.Status.Conditions, v1beta1.ConditionValid)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != lbapi.ReasonInvalid || !strings.Contains(c.Message, "spec.addresses[0]: ") || !strings.Contains(c.Message, "overlaps IPAddressPool old") {
		t.Errorf("new pool's Valid condition: %+v", c)
	}
	if p.Status.AvailableIPv4 != 0 {
		t.Errorf("an invalid pool shows %d available addresses", p.Status.AvailableIPv4)
	}
	if c := apimeta.FindStatusCondition(e.pool("old").Status.Conditions, v1beta1.ConditionValid); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("old pool's Valid condition: %+v", c)
	}
	e.expectEvents("IPAddressPool herald-system/new Warning InvalidConfiguration: spec.addresses[0]: ")
	if got := metricValue(t, e.c.metrics, "herald_config_invalid_objects", map[string]string{"kind": "IPAddressPool"}); got != 1 {
		t.Errorf("herald_config_invalid_objects{kind=IPAddressPool} = %v, want 1", got)
	}
	// Status is not written again when nothing changed, nor the event sent.
	e.writes()
	e.settle()
	for _, w := range e.writes() {
		if strings.Contains(w, "ipaddresspools") {
			t.Errorf("unchanged status written again: %s", w)
		}
	}
	e.expectEvents()

	// Fixing the pool makes it valid; the transition is recorded.
	e.setPoolAddresses("new", "198.51.100.230-198.51.100.239")
	e.settle()
	p = e.pool("new")
	if c := apimeta.FindStatusCondition(p.Status.Conditions, v1beta1.ConditionValid); c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != 2 {
		t.Errorf("fixed pool's Valid condition: %+v", c)
	}
	if p.Status.AvailableIPv4 != 10 {
		t.Errorf("fixed pool available = %d", p.Status.AvailableIPv4)
	}
	if got := metricValue(t, e.c.metrics, "herald_config_invalid_objects", map[string]string{"kind": "IPAddressPool"}); got != 0 {
		t.Errorf("herald_config_invalid_objects{kind=IPAddressPool} = %v after the fix, want 0", got)
	}
}

func TestPoolMetrics(t *testing.T) {
	e := newEnv(t)
	e.addPool("lan", []string{l2Range, "2001:db8:0:1::/64"})
	e.addService(lbService("a", "one"))
	e.start()
	for _, tc := range []struct {
		name, family string
		want         float64
	}{
		{"herald_controller_pool_addresses", "IPv4", 10},
		{"herald_controller_pool_addresses", "IPv6", 1 << 64},
		{"herald_controller_pool_addresses_in_use", "IPv4", 1},
		{"herald_controller_pool_addresses_in_use", "IPv6", 0},
	} {
		if got := testPoolGauge(t, e.c.metrics, tc.name, "lan", tc.family); got != tc.want {
			t.Errorf("%s{pool=lan,family=%s} = %v, want %v", tc.name, tc.family, got, tc.want)
		}
	}
	// A /64 saturates the status count.
	if p := e.pool("lan"); p.Status.AvailableIPv6 != 1<<63-1 {
		t.Errorf("availableIPv6 = %d, want the int64 maximum", p.Status.AvailableIPv6)
	}
}

func TestPoolMetricsForgetDeletedPools(t *testing.T) {
	e := newEnv(t)
	e.addPool("lan", []string{l2Range})
	e.addPool("gone", []string{"203.0.113.128/30"})
	e.start()
	if got := testPoolGauge(t, e.c.metrics, "herald_controller_pool_addresses", "gone", "IPv4"); got != 4 {
		t.Fatalf("gone: %v addresses", got)
	}
	if err := e.dyn.Resource(informer.GVR("ipaddresspools")).Namespace(ns).Delete(e.ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.settle()
	mfs, err := e.c.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "pool" && l.GetValue() == "gone" {
					t.Errorf("%s still has pool=gone", mf.GetName())
				}
			}
		}
	}
	if got := testPoolGauge(t, e.c.metrics, "herald_controller_pool_addresses", "lan", "IPv4"); got != 10 {
		t.Errorf("lan: %v addresses", got)
	}
}

// Every configuration kind gets its Valid condition, errors and warnings
// alike, and an event per problem.
func TestAdvertisementValidity(t *testing.T) {
	e := newEnv(t)
	e.addPool("lan", []string{l2Range})
	for name, pools := range map[string][]any{"none-exist": {"nope"}, "some-exist": {"lan", "nope"}, "fine": {"lan"}} {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": v1beta1.GroupVersion.String(), "kind": "L2Advertisement",
			"metadata": map[string]any{"name": name, "namespace": ns, "generation": int64(3), "creationTimestamp": e.tick().UTC().Format(time.RFC3339)},
			"spec":     map[string]any{"ipAddressPools": pools},
		}}
		if _, err := e.dyn.Resource(informer.GVR("l2advertisements")).Namespace(ns).Create(e.ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.start()
	cond := func(name string) *metav1.Condition {
		u, err := e.dyn.Resource(informer.GVR("l2advertisements")).Namespace(ns).Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var a v1beta1.L2Advertisement
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &a); err != nil {
			t.Fatal(err)
		}
		return apimeta.FindStatusCondition(a.Status.Conditions, v1beta1.ConditionValid)
	}
	if c := cond("none-exist"); c == nil || c.Status != metav1.ConditionFalse || c.Reason != lbapi.ReasonInvalid || !strings.Contains(c.Message, "spec.ipAddressPools") || c.ObservedGeneration != 3 {
		t.Errorf("none-exist: %+v", c)
	}
	if c := cond("some-exist"); c == nil || c.Status != metav1.ConditionFalse || c.Reason != lbapi.ReasonPartlyIgnored || !strings.Contains(c.Message, "(warning)") {
		t.Errorf("some-exist: %+v", c)
	}
	if c := cond("fine"); c == nil || c.Status != metav1.ConditionTrue || c.Reason != lbapi.ReasonValid {
		t.Errorf("fine: %+v", c)
	}
	var got []string
	for _, ev := range e.rec.take() {
		got = append(got, ev.String())
	}
	joined := strings.Join(got, "\n")
	if !strings.Contains(joined, "L2Advertisement herald-system/none-exist Warning InvalidConfiguration: spec.ipAddressPools") ||
		!strings.Contains(joined, "L2Advertisement herald-system/some-exist Warning ConfigurationWarning: spec.ipAddressPools") ||
		strings.Contains(joined, "/fine ") {
		t.Errorf("events:\n%s", joined)
	}
}

// A BFDProfile asking for what herald's BFD does not do (echo, passive
// mode, a minimum TTL) stays in use, and its Valid condition names each
// field with no effect.
func TestBFDProfileUnsupportedFields(t *testing.T) {
	e := newEnv(t)
	for name, spec := range map[string]map[string]any{
		"metallb-style": {"receiveInterval": int64(200), "echoMode": true, "echoInterval": int64(50), "passiveMode": true, "minimumTtl": int64(254)},
		"plain":         {"receiveInterval": int64(200), "echoMode": false, "passiveMode": false},
	} {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": v1beta1.GroupVersion.String(), "kind": "BFDProfile",
			"metadata": map[string]any{"name": name, "namespace": ns, "generation": int64(1), "creationTimestamp": e.tick().UTC().Format(time.RFC3339)},
			"spec":     spec,
		}}
		if _, err := e.dyn.Resource(informer.GVR("bfdprofiles")).Namespace(ns).Create(e.ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.start()
	cond := func(name string) *metav1.Condition {
		t.Helper()
		var c *metav1.Condition
		deadline := time.Now().Add(10 * time.Second)
		for c == nil && time.Now().Before(deadline) {
			u, err := e.dyn.Resource(informer.GVR("bfdprofiles")).Namespace(ns).Get(e.ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var p v1beta1.BFDProfile
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
				t.Fatal(err)
			}
			if c = apimeta.FindStatusCondition(p.Status.Conditions, v1beta1.ConditionValid); c == nil {
				time.Sleep(20 * time.Millisecond)
			}
		}
		return c
	}
	c := cond("metallb-style")
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != lbapi.ReasonPartlyIgnored {
		t.Fatalf("metallb-style: %+v", c)
	}
	for _, want := range []string{"spec.echoMode: true has no effect", "spec.echoInterval: has no effect", "spec.passiveMode: true has no effect", "spec.minimumTtl: has no effect"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("metallb-style's Valid condition lacks %q: %s", want, c.Message)
		}
	}
	if c := cond("plain"); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("plain (echo and passive mode false): %+v", c)
	}
}

// A namespace losing the label a pool's namespaceSelector wants moves its
// Services out of that pool; other Services stay.
func TestNamespaceLabelChange(t *testing.T) {
	e := newEnv(t)
	e.addPool("general", []string{l2Range})
	e.addPool("team-a", []string{"203.0.113.128/29"}, func(p *v1beta1.IPAddressPool) {
		p.Spec.ServiceAllocation = &v1beta1.ServiceAllocation{NamespaceSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"team": "a"}}}}
	})
	e.addNamespace("alpha", map[string]string{"team": "a"})
	e.addService(lbService("alpha", "web"))
	e.addService(lbService("other", "web"))
	e.start()
	if e.ips("alpha", "web") != "203.0.113.128" || e.ips("other", "web") != "198.51.100.200" {
		t.Fatalf("before: %q %q", e.ips("alpha", "web"), e.ips("other", "web"))
	}
	e.rec.take()
	n, err := e.kube.CoreV1().Namespaces().Get(e.ctx, "alpha", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels = nil
	if _, err := e.kube.CoreV1().Namespaces().Update(e.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.settle()
	if got := e.ips("alpha", "web"); got != "198.51.100.201" {
		t.Errorf("alpha/web: %q", got)
	}
	if got := e.ips("other", "web"); got != "198.51.100.200" {
		t.Errorf("other/web moved: %q", got)
	}
	e.expectEvents("alpha/web Normal IPAllocated: Assigned 198.51.100.201 from pool general (was 203.0.113.128)")
}

// Services written for MetalLB keep working: its annotation names are
// read as herald's (with an event naming the herald.io name), herald's
// name wins when both are set and differ (a warning names both), and the
// IPs MetalLB assigned (status, plus MetalLB's pool annotation) are kept
// when herald takes over.
func TestMetalLBServices(t *testing.T) {
	e := newEnv(t)
	e.addPool("lan", []string{l2Range})
	e.addPool("other", []string{"198.51.100.220-198.51.100.229"})
	// As MetalLB left it: an IP in the status, MetalLB's pool annotation,
	// its request annotations under both of MetalLB's names.
	e.addService(lbService("shop", "web", annotate("metallb.io/ip-allocated-from-pool", "lan"),
		annotate("metallb.universe.tf/loadBalancerIPs", "198.51.100.207"),
		annotate("metallb.io/allow-shared-ip", "shop"),
		func(s *corev1.Service) { s.Status.LoadBalancer.Ingress = Ingress(mustAddrs("198.51.100.207")) }))
	// Shares web's IP through MetalLB's sharing key.
	e.addService(lbService("shop", "dns", annotate("metallb.io/loadBalancerIPs", "198.51.100.207"),
		annotate("metallb.io/allow-shared-ip", "shop"), func(s *corev1.Service) {
			s.Spec.Ports[0].Port, s.Spec.Ports[0].Protocol = 53, corev1.ProtocolUDP
		}))
	// herald's name and MetalLB's disagree: herald's wins.
	e.addService(lbService("shop", "api", annotate(lbapi.AnnotationAddressPool, "other"), annotate("metallb.io/address-pool", "lan")))
	e.start()

	if got := e.ips("shop", "web"); got != "198.51.100.207" {
		t.Errorf("web: %q, want MetalLB's 198.51.100.207 kept", got)
	}
	if got := e.svc("shop", "web").Annotations[lbapi.AnnotationAllocatedFromPool]; got != "lan" {
		t.Errorf("web's %s = %q, want lan", lbapi.AnnotationAllocatedFromPool, got)
	}
	if got := e.ips("shop", "dns"); got != "198.51.100.207" {
		t.Errorf("dns: %q, want the shared 198.51.100.207", got)
	}
	if got := e.ips("shop", "api"); got != "198.51.100.220" {
		t.Errorf("api: %q, want 198.51.100.220 from herald.io/address-pool's pool", got)
	}
	e.expectEvents(
		`shop/web Normal AnnotationAlias: herald reads metallb.io/allow-shared-ip ("shop") as herald.io/allow-shared-ip`,
		`shop/web Normal AnnotationAlias: herald reads metallb.universe.tf/loadBalancerIPs ("198.51.100.207") as herald.io/loadBalancerIPs; rename the annotation to herald.io/loadBalancerIPs`,
		`shop/dns Normal AnnotationAlias: herald reads metallb.io/allow-shared-ip ("shop") as herald.io/allow-shared-ip`,
		`shop/dns Normal AnnotationAlias: herald reads metallb.io/loadBalancerIPs ("198.51.100.207") as herald.io/loadBalancerIPs`,
		"shop/dns Normal IPAllocated: Assigned 198.51.100.207 from pool lan",
		`shop/api Warning AnnotationAlias: herald.io/address-pool ("other") and metallb.io/address-pool ("lan") disagree: herald uses herald.io/address-pool`,
		"shop/api Normal IPAllocated: Assigned 198.51.100.220 from pool other",
	)
	// Said once: settling again says nothing.
	e.settle()
	e.expectEvents()
}

func TestRequestMetalLBAliasProblemNamesIt(t *testing.T) {
	_, err := Request(lbService("shop", "web", annotate("metallb.universe.tf/loadBalancerIPs", "nope")), nil)
	var re *RequestError
	if !errors.As(err, &re) || re.Field != "annotation metallb.universe.tf/loadBalancerIPs" {
		t.Errorf("got %v, want a problem with annotation metallb.universe.tf/loadBalancerIPs", err)
	}
}

// A pool no advertisement selects: it stays Valid, its Advertised
// condition says why nothing answers, and each Service that gets an IP
// from it is told; an advertisement fixes both.
func TestUnadvertisedPool(t *testing.T) {
	e := newEnv(t)
	e.removeEverythingAdvertisement()
	e.addPool("lan", []string{l2Range})
	e.addService(lbService("shop", "web"))
	e.start()
	e.expectEvents(
		"IPAddressPool herald-system/lan Warning ConfigurationWarning: no L2Advertisement or BGPAdvertisement selects this pool",
		"shop/web Normal IPAllocated: Assigned 198.51.100.200 from pool lan",
		"shop/web Warning PoolNotAdvertised: no L2Advertisement or BGPAdvertisement selects pool lan, so no node announces 198.51.100.200: add one that names the pool",
	)
	p := e.pool("lan")
	if c := apimeta.FindStatusCondition(p.Status.Conditions, v1beta1.ConditionValid); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Valid = %+v, want True: the pool itself is fine", c)
	}
	if c := apimeta.FindStatusCondition(p.Status.Conditions, ConditionAdvertised); c == nil || c.Status != metav1.ConditionFalse || c.Reason != config.CodeNotAdvertised {
		t.Errorf("Advertised = %+v, want False/NotAdvertised", c)
	}
	if got := metricValue(t, e.c.metrics, "herald_controller_pool_advertised", map[string]string{"pool": "lan"}); got != 0 {
		t.Errorf("herald_controller_pool_advertised{pool=lan} = %v, want 0", got)
	}

	adv := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1beta1.GroupVersion.String(), "kind": "L2Advertisement",
		"metadata": map[string]any{"name": "lan", "namespace": ns, "uid": "uid-l2-lan", "generation": int64(1)},
		"spec":     map[string]any{"ipAddressPools": []any{"lan"}},
	}}
	if _, err := e.dyn.Resource(informer.GVR("l2advertisements")).Namespace(ns).Create(e.ctx, adv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.settle()
	e.expectEvents()
	if c := apimeta.FindStatusCondition(e.pool("lan").Status.Conditions, ConditionAdvertised); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Advertised after adding an L2Advertisement = %+v, want True", c)
	}
	if got := metricValue(t, e.c.metrics, "herald_controller_pool_advertised", map[string]string{"pool": "lan"}); got != 1 {
		t.Errorf("herald_controller_pool_advertised{pool=lan} = %v, want 1", got)
	}
}
