package proxy

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/proxy/conntrack"
	"github.com/herald-lb/herald/proxy/healthcheck"
	"github.com/herald-lb/herald/proxy/iptables"
	"github.com/herald-lb/herald/proxy/rules"
)

const (
	testNode  = "node-a"
	otherNode = "node-b"
)

var (
	testNodeIP  = netip.MustParseAddr("192.0.2.10")
	testPodCIDR = netip.MustParsePrefix("10.244.0.0/16")
)

func clusterIPService(ns, name, ip string, ports ...corev1.ServicePort) *corev1.Service {
	if len(ports) == 0 {
		ports = []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip}, Ports: ports,
		},
	}
}

type ep struct {
	ip    string
	node  string
	ready bool
}

func slice(ns, svc, name string, port int32, portName string, proto corev1.Protocol, eps ...ep) *discoveryv1.EndpointSlice {
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr(portName), Port: ptr(port), Protocol: ptr(proto)}},
	}
	if strings.Contains(eps0(eps), ":") {
		sl.AddressType = discoveryv1.AddressTypeIPv6
	}
	for _, e := range eps {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{e.ip},
			NodeName:   ptr(e.node),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(e.ready), Serving: ptr(e.ready), Terminating: ptr(false)},
		})
	}
	return sl
}

func eps0(eps []ep) string {
	if len(eps) == 0 {
		return ""
	}
	return eps[0].ip
}

func node(name string, ips ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, ip := range ips {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: name})
	return n
}

// fakeHC records what the syncer feeds the health-check servers.
type fakeHC struct {
	mu     sync.Mutex
	ports  map[healthcheck.ServiceKey]int
	counts map[healthcheck.ServiceKey]int
	binds  []healthcheck.Bind
	calls  int
}

func (f *fakeHC) SyncServices(p map[healthcheck.ServiceKey]int, binds []healthcheck.Bind) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ports, f.binds, f.calls = p, binds, f.calls+1
	return nil
}

func (f *fakeHC) SyncEndpoints(c map[healthcheck.ServiceKey]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts = c
}

// env is a syncer on fakes, for one family unless fams are given.
type env struct {
	t       *testing.T
	tracker *Tracker
	ipt     *iptables.Fake
	ct      *conntrack.Fake
	hc      *fakeHC
	health  *healthcheck.ProxyHealth
	m       *Metrics
	s       *Syncer
	kicks   int
}

func newEnv(t *testing.T) *env {
	e := &env{t: t, ipt: iptables.NewFake(), ct: &conntrack.Fake{}, hc: &fakeHC{}, m: NewMetrics()}
	e.health = healthcheck.NewProxyHealth(0)
	e.tracker = NewTracker(testNode, func() { e.kicks++ })
	cfg := Config{NodeName: testNode, ClusterCIDRs: []netip.Prefix{testPodCIDR}, MasqueradeBit: 14}
	e.s = NewSyncer(cfg, e.tracker, []Backend{IPTablesBackend(rules.IPv4, e.ipt, 0)}, e.hc, e.health, e.ct, e.m, nil)
	e.tracker.UpdateNode(node(testNode, testNodeIP.String()))
	return e
}

func (e *env) sync(periodic bool) SyncResult {
	e.t.Helper()
	return e.s.Sync(context.Background(), periodic)
}

func (e *env) lastRestore() string {
	e.t.Helper()
	if len(e.ipt.Restores) == 0 {
		e.t.Fatal("no restore yet")
	}
	return string(e.ipt.Restores[len(e.ipt.Restores)-1])
}

func (e *env) save(table string) string {
	e.t.Helper()
	b, err := e.ipt.Save(context.Background(), table)
	if err != nil {
		e.t.Fatal(err)
	}
	return string(b)
}

// declared lists the chains a restore input declares.
func declared(restore string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(restore, "\n") {
		if strings.HasPrefix(line, ":") {
			name, _, _ := strings.Cut(line[1:], " ")
			out[name] = true
		}
	}
	return out
}

func svcChain(ns, name, port string, p rules.Protocol) string {
	return rules.PrefixService + rules.ChainSuffix(rules.ServicePortName{Namespace: ns, Name: name, Port: port}, p)
}
