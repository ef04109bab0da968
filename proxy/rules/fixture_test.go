package rules_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/herald-lb/herald/proxy/internal/tracer"
	"github.com/herald-lb/herald/proxy/rules"
)

// lab is one address plan per family: node-a is the node being rendered,
// node-b another node. Addresses are from documentation ranges.
type lab struct {
	family    rules.Family
	nodeIP    netip.Addr // node-a
	nodeIP2   netip.Addr // another local address of node-a (only some tests declare it)
	podCIDR   netip.Prefix
	podA      netip.Addr // a client pod on node-a
	epLocal   netip.Addr // endpoint pod on node-a
	epRemote  netip.Addr // endpoint pod on node-b
	epRemote2 netip.Addr // another endpoint pod on node-b
	clusterIP netip.Addr
	lbIP      netip.Addr
	lbIP2     netip.Addr
	extIP     netip.Addr // a spec.externalIPs address
	client    netip.Addr // off-cluster client
	client2   netip.Addr // another off-cluster client, outside source ranges
	clientNet netip.Prefix
}

var lab4 = lab{
	family:    rules.IPv4,
	nodeIP:    netip.MustParseAddr("192.0.2.10"),
	nodeIP2:   netip.MustParseAddr("192.0.2.99"),
	podCIDR:   netip.MustParsePrefix("10.244.0.0/16"),
	podA:      netip.MustParseAddr("10.244.1.5"),
	epLocal:   netip.MustParseAddr("10.244.1.20"),
	epRemote:  netip.MustParseAddr("10.244.2.20"),
	epRemote2: netip.MustParseAddr("10.244.2.21"),
	clusterIP: netip.MustParseAddr("10.96.0.10"),
	lbIP:      netip.MustParseAddr("198.51.100.10"),
	lbIP2:     netip.MustParseAddr("198.51.100.11"),
	extIP:     netip.MustParseAddr("198.51.100.50"),
	client:    netip.MustParseAddr("203.0.113.50"),
	client2:   netip.MustParseAddr("198.18.0.1"),
	clientNet: netip.MustParsePrefix("203.0.113.0/24"),
}

var lab6 = lab{
	family:    rules.IPv6,
	nodeIP:    netip.MustParseAddr("2001:db8::10"),
	nodeIP2:   netip.MustParseAddr("2001:db8::99"),
	podCIDR:   netip.MustParsePrefix("fd00:10:244::/48"),
	podA:      netip.MustParseAddr("fd00:10:244:1::5"),
	epLocal:   netip.MustParseAddr("fd00:10:244:1::20"),
	epRemote:  netip.MustParseAddr("fd00:10:244:2::20"),
	epRemote2: netip.MustParseAddr("fd00:10:244:2::21"),
	clusterIP: netip.MustParseAddr("fd00:10:96::10"),
	lbIP:      netip.MustParseAddr("2001:db8:100::10"),
	lbIP2:     netip.MustParseAddr("2001:db8:100::11"),
	extIP:     netip.MustParseAddr("2001:db8:100::50"),
	client:    netip.MustParseAddr("2001:db8:ffff::50"),
	client2:   netip.MustParseAddr("2001:db8:eeee::1"),
	clientNet: netip.MustParsePrefix("2001:db8:ffff::/48"),
}

const (
	nodeA    = "node-a"
	nodeB    = "node-b"
	svcPort  = 80
	nodePort = 30080
	hcPort   = 31000
	tgtPort  = 8080
)

func (l lab) node() rules.NodeConfig {
	return rules.NodeConfig{Name: nodeA, IPs: []netip.Addr{l.nodeIP}, ClusterCIDRs: []netip.Prefix{l.podCIDR}}
}

// web is an ordinary LoadBalancer Service on port 80 with a NodePort.
func (l lab) web() rules.Service {
	return rules.Service{
		Namespace: "default", Name: "web", PortName: "http", Protocol: rules.TCP, Port: svcPort,
		ClusterIPs:          []netip.Addr{l.clusterIP},
		NodePort:            nodePort,
		LoadBalancerIngress: []rules.Ingress{{IP: l.lbIP}},
	}
}

func ready(ip netip.Addr, node string) rules.Endpoint {
	return rules.Endpoint{IP: ip, Port: tgtPort, Ready: true, Serving: true, NodeName: node}
}

func terminating(ip netip.Addr, node string, serving bool) rules.Endpoint {
	return rules.Endpoint{IP: ip, Port: tgtPort, Serving: serving, Terminating: true, NodeName: node}
}

func ep(ip netip.Addr) string { return netip.AddrPortFrom(ip, tgtPort).String() }

func epMap(s rules.Service, eps ...rules.Endpoint) map[rules.ServicePortName][]rules.Endpoint {
	return map[rules.ServicePortName][]rules.Endpoint{s.ID(): eps}
}

// load parses a ruleset together with the hook jumps the syncer installs.
func (l lab) load(t testing.TB, rs rules.Ruleset, extra ...string) *tracer.Tracer {
	t.Helper()
	if len(rs.Problems) > 0 {
		t.Logf("render problems: %v", rs.Problems)
	}
	tr, err := tracer.Parse(append([]string{string(rs.Bytes()), rules.JumpsText()}, extra...)...)
	if err != nil {
		t.Fatalf("rendered rules do not parse: %v\n%s", err, rs.Bytes())
	}
	tr.SetLocalAddrs(l.nodeIP)
	return tr
}

type source int

const (
	fromPod source = iota
	fromNode
	fromExternal
)

func (s source) String() string { return [...]string{"pod", "node", "external"}[s] }

type dest int

const (
	toClusterIP dest = iota
	toNodePort
	toLBIP
)

func (d dest) String() string { return [...]string{"clusterIP", "nodePort", "lbIP"}[d] }

func (l lab) flow(s source, d dest) tracer.Flow {
	f := tracer.Flow{Proto: "tcp"}
	switch s {
	case fromPod:
		f.Origin, f.Src = tracer.Pod, l.podA
	case fromNode:
		f.Origin, f.Src = tracer.Node, l.nodeIP
	case fromExternal:
		f.Origin, f.Src = tracer.External, l.client
	}
	switch d {
	case toClusterIP:
		f.Dst, f.Port = l.clusterIP, svcPort
	case toNodePort:
		f.Dst, f.Port, f.DstLocal = l.nodeIP, nodePort, true
	case toLBIP:
		f.Dst, f.Port = l.lbIP, svcPort
	}
	return f
}

// want is the expected fate of a flow.
type want struct {
	verdict   tracer.Verdict
	endpoints []string // for Accept; nil = not DNATed
	masq      bool
}

// flowTracer is either simulator: iptables text or the nft model.
type flowTracer interface {
	Trace(tracer.Flow) (tracer.Result, error)
}

// loadNFT is load for the nftables mode.
func (l lab) loadNFT(t testing.TB, rs rules.NFTRuleset) *tracer.NFT {
	t.Helper()
	if len(rs.Problems) > 0 {
		t.Logf("render problems: %v", rs.Problems)
	}
	tr := tracer.NewNFT(rs.Table)
	tr.SetLocalAddrs(l.nodeIP)
	return tr
}

// mode is a proxy mode the semantic tests run against.
type mode string

const (
	modeIPTables mode = "iptables"
	modeNFT      mode = "nftables"
)

var modes = []mode{modeIPTables, modeNFT}

// loadMode renders services for a mode and returns its tracer; local
// extra addresses of the node are declared on it. Render problems fail
// the test.
func (l lab) loadMode(t testing.TB, m mode, svcs []rules.Service, eps map[rules.ServicePortName][]rules.Endpoint, local ...netip.Addr) flowTracer {
	t.Helper()
	return l.loadModeNode(t, m, l.node(), svcs, eps, local...)
}

// loadModeNode is loadMode with a custom node config.
func (l lab) loadModeNode(t testing.TB, m mode, node rules.NodeConfig, svcs []rules.Service, eps map[rules.ServicePortName][]rules.Endpoint, local ...netip.Addr) flowTracer {
	t.Helper()
	tr, probs := l.renderMode(t, m, node, svcs, eps, local...)
	if len(probs) != 0 {
		t.Fatalf("problems: %v", probs)
	}
	return tr
}

// renderMode is loadModeNode that returns the render problems instead of
// failing, for input that is invalid on purpose.
func (l lab) renderMode(t testing.TB, m mode, node rules.NodeConfig, svcs []rules.Service, eps map[rules.ServicePortName][]rules.Endpoint, local ...netip.Addr) (flowTracer, []rules.Problem) {
	t.Helper()
	if m == modeNFT {
		rs := rules.RenderNFT(l.family, svcs, eps, node)
		tr := l.loadNFT(t, rs)
		tr.SetLocalAddrs(local...)
		return tr, rs.Problems
	}
	rs := rules.Render(l.family, svcs, eps, node)
	tr := l.load(t, rs)
	tr.SetLocalAddrs(local...)
	return tr, rs.Problems
}

func trace(t testing.TB, tr flowTracer, f tracer.Flow) tracer.Result {
	t.Helper()
	res, err := tr.Trace(f)
	if err != nil {
		t.Fatalf("trace %v: %v", f, err)
	}
	if len(res.Outcomes) == 0 {
		t.Fatalf("trace %v: no outcome", f)
	}
	return res
}

// check compares every outcome of a flow with w. Beyond the endpoint set
// it verifies that new connections are spread uniformly.
func check(t testing.TB, res tracer.Result, w want) {
	t.Helper()
	if v := res.Verdicts(); !slices.Equal(v, []tracer.Verdict{w.verdict}) {
		t.Errorf("%v\nverdicts %v, want %v\n%s", res.Flow, v, w.verdict, res.Explain())
		return
	}
	if w.verdict != tracer.Accept {
		return
	}
	got := res.Endpoints()
	exp := slices.Clone(w.endpoints)
	slices.Sort(exp)
	if !slices.Equal(got, exp) {
		t.Errorf("%v\nendpoints %v, want %v\n%s", res.Flow, got, exp, res.Explain())
	}
	if w.endpoints == nil {
		for _, o := range res.Outcomes {
			if o.DNAT {
				t.Errorf("%v: unexpected DNAT %v", res.Flow, o)
			}
		}
	}
	if m, ok := res.Masquerade(); !ok || m != w.masq {
		t.Errorf("%v\nmasquerade %v (consistent %v), want %v\n%s", res.Flow, m, ok, w.masq, res.Explain())
	}
	uniform(t, res)
}

// uniform checks that fresh (non-affinity) connections reach each endpoint
// with equal probability, i.e. the 1/(n-i) statistic chain is right.
func uniform(t testing.TB, res tracer.Result) {
	t.Helper()
	per := map[string]float64{}
	total := 0.0
	for _, o := range res.Outcomes {
		if o.Affinity || !o.DNAT {
			continue
		}
		per[o.Dst.String()] += o.Probability
		total += o.Probability
	}
	if len(per) == 0 {
		return
	}
	if total < 0.999999 || total > 1.000001 {
		t.Errorf("%v: fresh probabilities sum to %.6f\n%s", res.Flow, total, res.Explain())
	}
	for e, p := range per {
		if d := p - 1/float64(len(per)); d > 1e-6 || d < -1e-6 {
			t.Errorf("%v: endpoint %s gets %.6f of new connections, want %.6f", res.Flow, e, p, 1/float64(len(per)))
		}
	}
}

func mustContain(t testing.TB, text []byte, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(string(text), p) {
			t.Errorf("rules lack %q", p)
		}
	}
}

func mustNotContain(t testing.TB, text []byte, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if strings.Contains(string(text), p) {
			t.Errorf("rules unexpectedly contain %q", p)
		}
	}
}
