package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/herald-lb/herald/e2e/harness"
)

// The controller tests' objects: namespaces ctl-*, pools ctl-* in herald's
// namespace, addresses of the lab's L2 range (198.51.100.200-249) and BGP
// range (203.0.113.128/25) only.
const (
	nsA    = "ctl-a"
	nsB    = "ctl-b"
	nsBlue = "ctl-blue"
)

var ctlPools = []string{"ctl-l2", "ctl-bgp", "ctl-team", "ctl-tiny", "ctl-shrink"}

// ctlSuite is what TestController's steps share.
type ctlSuite struct {
	h *harness.T
	c ctl
	// kept is every IP a test Service got, to check nothing moves on a
	// restart.
	kept map[string]string
}

// keep records the IP Service ns/name has now.
func (cs *ctlSuite) keep(ns, name string) {
	cs.kept[ns+"/"+name] = cs.c.ips(ns, name)
}

// TestController exercises `herald controller` as installed by
// config/deploy, through kubectl, the way a user would: requested IPs and
// pools, selector-based pools, sharing, exhaustion, LoadBalancerClass,
// pool shrink, a kill -9 of the controller and two replicas.
func TestController(t *testing.T) {
	h := harness.Start(t)
	c := ctl{h}
	t.Cleanup(func() {
		c.deleteNamespaces(nsA, nsB, nsBlue)
		c.Kubectl(append([]string{"-n", heraldNS, "delete", "ipaddresspool", "--ignore-not-found"}, ctlPools...)...)
		c.Kubectl("-n", heraldNS, "scale", "deployment/"+controllerName, "--replicas=1")
	})
	c.readyControllers(1)
	h.Apply(nsYAML(nsA, nil) + nsYAML(nsB, nil) + nsYAML(nsBlue, map[string]string{"team": "blue"}) +
		poolYAML("ctl-l2", []string{"198.51.100.200-198.51.100.209", "2001:db8:0:1::200-2001:db8:0:1::209"}) +
		poolYAML("ctl-bgp", []string{"203.0.113.128/25"}, "autoAssign: false") +
		poolYAML("ctl-team", []string{"198.51.100.240-198.51.100.249"}, "serviceAllocation:", "  priority: 10",
			"  namespaceSelectors:", "    - matchLabels:", "        team: blue"))
	cs := &ctlSuite{h: h, c: c, kept: map[string]string{}}

	t.Run("requested IP", cs.checkRequestedIP)
	t.Run("requested pool", cs.checkRequestedPool)
	t.Run("namespace selector pool", cs.checkNamespaceSelectorPool)
	t.Run("sharing", cs.checkSharing)
	t.Run("exhaustion then freeing", cs.checkExhaustionThenFreeing)
	t.Run("LoadBalancerClass", cs.checkLoadBalancerClass)
	t.Run("pool shrink", cs.checkPoolShrink)
	t.Run("pool status", cs.checkPoolStatus)
	t.Run("kill -9 and restart", cs.checkKillAndRestart)
	t.Run("two replicas", cs.checkTwoReplicas)
}

// checkRequestedIP checks an IP requested by annotation, and that a bad or
// double request is refused without disturbing anything.
func (cs *ctlSuite) checkRequestedIP(t *testing.T) {
	h, c := cs.h, cs.c
	h.Apply(svcYAML(nsA, "req", 80, map[string]string{"herald.io/loadBalancerIPs": "198.51.100.205"}))
	d := c.waitIPs(nsA, "req", "198.51.100.205")
	t.Logf("TIMING requested IP assigned %s after apply", d.Round(time.Millisecond))
	s := c.service(nsA, "req")
	if got := s.Annotations["herald.io/ip-allocated-from-pool"]; got != "ctl-l2" {
		t.Errorf("annotation herald.io/ip-allocated-from-pool = %q, want ctl-l2", got)
	}
	if m := s.Status.LoadBalancer.Ingress[0].IPMode; m == nil || *m != "VIP" {
		t.Errorf("ipMode = %v, want VIP", m)
	}
	c.waitEvent(nsA, "req", "IPAllocated: Assigned 198.51.100.205 from pool ctl-l2")
	cs.keep(nsA, "req")

	// Both ways of asking at once: refused, naming both, and nothing else disturbed.
	h.Apply(svcYAML(nsA, "both", 80, map[string]string{"herald.io/loadBalancerIPs": "198.51.100.206"}, "loadBalancerIP: 198.51.100.207"))
	c.waitEvent(nsA, "both", "AllocationFailed", "annotation herald.io/loadBalancerIPs", "spec.loadBalancerIP")
	// A broken annotation on a working Service keeps its IP.
	h.Apply(svcYAML(nsA, "req", 80, map[string]string{"herald.io/loadBalancerIPs": "198.51.100.999"}))
	c.waitEvent(nsA, "req", "AllocationFailed", `"198.51.100.999" is not an IP address`, "keeping 198.51.100.205")
	if got := c.ips(nsA, "req"); got != "198.51.100.205" {
		t.Errorf("a/req moved to %q after a bad annotation", got)
	}
	if got := c.ips(nsA, "both"); got != "" {
		t.Errorf("a/both got %q", got)
	}
}

// checkRequestedPool checks a pool requested by annotation, a missing one,
// and that autoAssign: false keeps a pool out of automatic assignment.
func (cs *ctlSuite) checkRequestedPool(t *testing.T) {
	h, c := cs.h, cs.c
	h.Apply(svcYAML(nsA, "bgp", 80, map[string]string{"herald.io/address-pool": "ctl-bgp"}) + svcYAML(nsA, "auto", 8080, nil))
	c.waitIPs(nsA, "bgp", "203.0.113.128")
	// autoAssign: false keeps ctl-bgp out of automatic assignment.
	auto := c.waitAnyIP(nsA, "auto")
	if !strings.HasPrefix(auto, "198.51.100.20") {
		t.Errorf("a/auto got %q, want an address of ctl-l2", auto)
	}
	h.Apply(svcYAML(nsA, "nopool", 80, map[string]string{"herald.io/address-pool": "ctl-missing"}))
	c.waitEvent(nsA, "nopool", "AllocationFailed", "requested pool ctl-missing does not exist")
	cs.keep(nsA, "bgp")
	cs.keep(nsA, "auto")
}

// checkNamespaceSelectorPool checks that a pool selecting namespaces serves
// those alone.
func (cs *ctlSuite) checkNamespaceSelectorPool(t *testing.T) {
	h, c := cs.h, cs.c
	h.Apply(svcYAML(nsBlue, "web", 80, nil) + svcYAML(nsB, "web", 80, nil))
	c.waitIPs(nsBlue, "web", "198.51.100.240")
	if got := c.service(nsBlue, "web").Annotations["herald.io/ip-allocated-from-pool"]; got != "ctl-team" {
		t.Errorf("ctl-blue/web pool annotation %q", got)
	}
	if got := c.waitAnyIP(nsB, "web"); !strings.HasPrefix(got, "198.51.100.20") {
		t.Errorf("ctl-b/web got %q, want an address of ctl-l2 (its namespace is not team=blue)", got)
	}
	cs.keep(nsBlue, "web")
	cs.keep(nsB, "web")
}

// checkSharing checks IP sharing by key, and the refusals on a port clash
// or without the key.
func (cs *ctlSuite) checkSharing(t *testing.T) {
	h, c := cs.h, cs.c
	share := map[string]string{"herald.io/allow-shared-ip": "ctl-web", "herald.io/address-pool": "ctl-bgp"}
	h.Apply(svcYAML(nsA, "http", 80, share))
	ip := c.waitAnyIP(nsA, "http")
	h.Apply(svcYAML(nsB, "https", 443, share))
	c.waitIPs(nsB, "https", ip)
	// Same key, same port: refused, naming the Service in the way.
	clash := map[string]string{"herald.io/allow-shared-ip": "ctl-web", "herald.io/loadBalancerIPs": ip}
	h.Apply(svcYAML(nsB, "clash", 80, clash))
	c.waitEvent(nsB, "clash", "AllocationFailed", "sharing conflict with ctl-a/http", "port TCP/80 is used by both")
	// No key: the IP is in use.
	h.Apply(svcYAML(nsB, "nokey", 8443, map[string]string{"herald.io/loadBalancerIPs": ip}))
	c.waitEvent(nsB, "nokey", "AllocationFailed", ip+" is in use by ctl-a/http")
	if c.ips(nsB, "clash") != "" || c.ips(nsB, "nokey") != "" {
		t.Errorf("refused Services got IPs: %q %q", c.ips(nsB, "clash"), c.ips(nsB, "nokey"))
	}
	cs.keep(nsA, "http")
	cs.keep(nsB, "https")
}

// checkExhaustionThenFreeing checks that a full pool refuses, and that a
// freed IP goes to the waiting Service.
func (cs *ctlSuite) checkExhaustionThenFreeing(t *testing.T) {
	h, c := cs.h, cs.c
	h.Apply(poolYAML("ctl-tiny", []string{"198.51.100.230-198.51.100.231"}, "autoAssign: false"))
	tiny := map[string]string{"herald.io/address-pool": "ctl-tiny"}
	h.Apply(svcYAML(nsA, "t1", 80, tiny) + svcYAML(nsA, "t2", 80, tiny))
	c.waitIPs(nsA, "t1", "198.51.100.230")
	c.waitIPs(nsA, "t2", "198.51.100.231")
	h.Apply(svcYAML(nsA, "t3", 80, tiny))
	c.waitEvent(nsA, "t3", "AllocationFailed", "pool ctl-tiny has no free IPv4 address")
	c.Kubectl("-n", nsA, "delete", "service", "t1")
	d := c.waitIPs(nsA, "t3", "198.51.100.230")
	t.Logf("TIMING freed IP reassigned %s after the delete", d.Round(time.Millisecond))
	c.waitEvent(nsA, "t3", "IPAllocated: Assigned 198.51.100.230 from pool ctl-tiny")
	cs.keep(nsA, "t2")
	cs.keep(nsA, "t3")
}

// checkLoadBalancerClass checks that a Service of another class is left alone.
func (cs *ctlSuite) checkLoadBalancerClass(t *testing.T) {
	h, c := cs.h, cs.c
	h.Apply(svcYAML(nsB, "other-class", 80, nil, "loadBalancerClass: example.com/other"))
	// A Service applied afterwards getting its IP shows the
	// controller has seen the first.
	h.Apply(svcYAML(nsB, "after-class", 80, nil))
	c.waitAnyIP(nsB, "after-class")
	s := c.service(nsB, "other-class")
	if len(s.Status.LoadBalancer.Ingress) != 0 || s.Annotations["herald.io/ip-allocated-from-pool"] != "" {
		t.Errorf("a Service of another class was touched: status %+v annotations %v", s.Status, s.Annotations)
	}
	if evs := c.events(nsB, "other-class"); len(evs) != 0 {
		t.Errorf("events on a Service of another class: %q", evs)
	}
	cs.keep(nsB, "after-class")
}

// checkPoolShrink checks that a shrink dropping an address in use is
// refused until the Service has moved.
func (cs *ctlSuite) checkPoolShrink(t *testing.T) {
	h, c := cs.h, cs.c
	h.Apply(poolYAML("ctl-shrink", []string{"198.51.100.220-198.51.100.224"}, "autoAssign: false"))
	sp := map[string]string{"herald.io/address-pool": "ctl-shrink"}
	h.Apply(svcYAML(nsA, "s1", 80, sp))
	c.waitIPs(nsA, "s1", "198.51.100.220")
	h.Apply(svcYAML(nsA, "s2", 80, sp))
	c.waitIPs(nsA, "s2", "198.51.100.221")
	c.Poll(30*time.Second, "ctl-shrink's version in force recorded", func() (bool, string) {
		got := c.Kubectl("-n", heraldNS, "get", "ipaddresspool", "ctl-shrink", "-o", "jsonpath={.status.inForce.generation}")
		return got == "1", "status.inForce.generation " + strconv.Quote(got)
	})
	before := len(c.events(nsA, "s2"))
	// Dropping the address s1 holds is refused: nothing moves, and
	// the pool says why.
	h.Apply(poolYAML("ctl-shrink", []string{"198.51.100.221-198.51.100.224"}, "autoAssign: false"))
	c.Poll(30*time.Second, "the shrink refused on ctl-shrink", func() (bool, string) {
		got := c.Kubectl("-n", heraldNS, "get", "ipaddresspool", "ctl-shrink", "-o", `jsonpath={.status.conditions[?(@.type=="Valid")].reason} {.status.conditions[?(@.type=="Valid")].message}`)
		return strings.HasPrefix(got, "EditRefused in force: generation 1, refused: generation 2; spec.addresses: no longer includes 198.51.100.220 (Service "+nsA+"/s1)"), got
	})
	time.Sleep(2 * time.Second) // a move would have happened by now
	if got := c.ips(nsA, "s1"); got != "198.51.100.220" {
		t.Errorf("s1 moved to %q by a refused edit", got)
	}
	// The user moves s1 first; then the shrink takes effect.
	sp["herald.io/loadBalancerIPs"] = "198.51.100.222"
	h.Apply(svcYAML(nsA, "s1", 80, sp))
	c.waitIPs(nsA, "s1", "198.51.100.222")
	c.Poll(30*time.Second, "the shrink in force once s1 moved", func() (bool, string) {
		got := c.Kubectl("-n", heraldNS, "get", "ipaddresspool", "ctl-shrink", "-o", `jsonpath={.status.inForce.generation} {.status.conditions[?(@.type=="Valid")].status}`)
		return got == "2 True", got
	})
	if got := c.ips(nsA, "s2"); got != "198.51.100.221" {
		t.Errorf("s2 moved to %q", got)
	}
	if evs := c.events(nsA, "s2"); len(evs) != before {
		t.Errorf("events on the unaffected s2: %q", evs[before:])
	}
	cs.keep(nsA, "s1")
	cs.keep(nsA, "s2")
}

// checkPoolStatus checks the pools' status: counts, and an overlap refused.
func (cs *ctlSuite) checkPoolStatus(t *testing.T) {
	h, c := cs.h, cs.c
	// ctl-tiny is full; a pool overlapping ctl-l2 is refused with a
	// condition naming the field, and ctl-l2 keeps working.
	h.Apply(poolYAML("ctl-overlap", []string{"198.51.100.209-198.51.100.212"}))
	defer c.Kubectl("-n", heraldNS, "delete", "ipaddresspool", "ctl-overlap")
	c.Poll(30*time.Second, "pool status", func() (bool, string) {
		tiny := c.Kubectl("-n", heraldNS, "get", "ipaddresspool", "ctl-tiny", "-o", `jsonpath={.status.assignedIPv4}/{.status.availableIPv4} {.status.conditions[?(@.type=="Valid")].status}`)
		bad := c.Kubectl("-n", heraldNS, "get", "ipaddresspool", "ctl-overlap", "-o", `jsonpath={.status.conditions[?(@.type=="Valid")].status} {.status.conditions[?(@.type=="Valid")].message}`)
		return tiny == "2/0 True" && strings.HasPrefix(bad, "False spec.addresses[0]: ") && strings.Contains(bad, "overlaps IPAddressPool ctl-l2"),
			fmt.Sprintf("ctl-tiny %q, ctl-overlap %q", tiny, bad)
	})
	t.Logf("kubectl get ipaddresspools:\n%s", c.Kubectl("-n", heraldNS, "get", "ipaddresspools"))
}

// checkKillAndRestart checks that a controller restarted after kill -9
// assigns again and keeps every IP.
func (cs *ctlSuite) checkKillAndRestart(t *testing.T) {
	h, c := cs.h, cs.c
	pod := c.readyControllers(1)[0]
	old := containerID(&pod)
	killed := time.Now()
	c.signalController(&pod, syscall.SIGKILL)
	c.waitRestarted(pod.Name, old, time.Minute)
	ready := time.Since(killed)
	// A Service created after the restart gets an IP: it assigns again.
	h.Apply(svcYAML(nsB, "after-restart", 80, nil))
	c.waitAnyIP(nsB, "after-restart")
	t.Logf("TIMING controller kill -9 to ready %s, to a new Service's IP %s", ready.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
	for k, want := range cs.kept {
		ns, name, _ := strings.Cut(k, "/")
		if got := c.ips(ns, name); got != want {
			t.Errorf("%s: IP changed across the restart: %q -> %q", k, want, got)
		}
	}
	cs.keep(nsB, "after-restart")
}

// checkTwoReplicas checks leader election between two replicas: one
// leader, a takeover from a frozen leader, no IP moved.
func (cs *ctlSuite) checkTwoReplicas(t *testing.T) {
	h, c := cs.h, cs.c
	c.Kubectl("-n", heraldNS, "scale", "deployment/"+controllerName, "--replicas=2")
	pods := c.readyControllers(2)
	leader := c.leaseHolder()
	var lead, standby int
	switch leader {
	case pods[0].Name:
		lead, standby = 0, 1
	case pods[1].Name:
		lead, standby = 1, 0
	default:
		t.Fatalf("the Lease is held by %q, not by a controller pod (%s, %s)", leader, pods[0].Name, pods[1].Name)
	}
	t.Logf("leader %s on %s, standby %s on %s", pods[lead].Name, pods[lead].Spec.NodeName, pods[standby].Name, pods[standby].Spec.NodeName)
	c.Poll(20*time.Second, "exactly one replica reporting herald_controller_leader 1", func() (bool, string) {
		l, err1 := c.metric(&pods[lead], "herald_controller_leader")
		s, err2 := c.metric(&pods[standby], "herald_controller_leader")
		return err1 == nil && err2 == nil && l == 1 && s == 0, fmt.Sprintf("leader %v (%v), standby %v (%v)", l, err1, s, err2)
	})
	h.Apply(svcYAML(nsB, "two-replicas", 80, nil))
	c.waitAnyIP(nsB, "two-replicas")
	cs.keep(nsB, "two-replicas")

	// The leader hangs (SIGSTOP, as a frozen node would): the standby
	// takes over once the Lease expires, then the hung leader is
	// killed, and coming back it stays a standby.
	stopped := time.Now()
	c.signalController(&pods[lead], syscall.SIGSTOP)
	d := c.Poll(60*time.Second, "the standby to take the Lease", func() (bool, string) {
		h := c.leaseHolder()
		return h == pods[standby].Name, "held by " + h
	})
	t.Logf("TIMING leader frozen to standby holding the Lease: %s", d.Round(time.Millisecond))
	h.Apply(svcYAML(nsB, "after-takeover", 80, nil))
	c.waitAnyIP(nsB, "after-takeover")
	t.Logf("TIMING leader frozen to a new Service's IP: %s", time.Since(stopped).Round(time.Millisecond))
	cs.keep(nsB, "after-takeover")
	old := containerID(&pods[lead])
	c.signalController(&pods[lead], syscall.SIGKILL)
	back := c.waitRestarted(pods[lead].Name, old, time.Minute)
	if h := c.leaseHolder(); h != pods[standby].Name {
		t.Errorf("after the old leader restarted, the Lease is held by %q", h)
	}
	c.Poll(20*time.Second, "the restarted replica to stand by", func() (bool, string) {
		v, err := c.metric(back, "herald_controller_leader")
		return err == nil && v == 0, fmt.Sprintf("%v %v", v, err)
	})
	h.Apply(svcYAML(nsA, "after-comeback", 80, nil))
	c.waitAnyIP(nsA, "after-comeback")
	cs.keep(nsA, "after-comeback")
	for k, want := range cs.kept {
		ns, name, _ := strings.Cut(k, "/")
		if got := c.ips(ns, name); got != want {
			t.Errorf("%s: IP changed across the takeover: %q -> %q", k, want, got)
		}
	}
	t.Logf("Lease: holder %s, transitions %d", c.leaseHolder(), ptrOr(c.lease().Spec.LeaseTransitions))

	c.Kubectl("-n", heraldNS, "scale", "deployment/"+controllerName, "--replicas=1")
	c.readyControllers(1)
	h.Apply(svcYAML(nsA, "after-scale-down", 80, nil))
	c.waitAnyIP(nsA, "after-scale-down")
}

func ptrOr(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}
