package rules

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// hinted is a test endpoint: last octet of 10.244.0.x, node, readiness,
// and its zone and node hints.
type hinted struct {
	ip          byte
	node        string
	ready, term bool
	zones       []string
	nodes       []string
}

func (h hinted) endpoint() Endpoint {
	return Endpoint{
		IP: netip.AddrFrom4([4]byte{10, 244, 0, h.ip}), Port: 80, NodeName: h.node,
		Ready: h.ready, Serving: h.ready || h.term, Terminating: h.term,
		ZoneHints: h.zones, NodeHints: h.nodes,
	}
}

func z(names ...string) []string { return names }

// topoPolicy is a Service's traffic policies, for topologyCases.
type topoPolicy int

const (
	clusterIPOnly topoPolicy = iota // iTP Cluster, no external address
	iTPLocal                        // iTP Local, no external address
	eTPLocal                        // NodePort, eTP Local, iTP Cluster
)

type topologyCase struct {
	name       string
	node, zone string
	pol        topoPolicy
	eps        []hinted
	cluster    string // last octets, "-" = nil
	local      string
	reachable  string
	mode       topology
}

// topologyCases are TestTopologyCategorize's: a Service's policy and its
// endpoints with their hints, and the endpoints each category keeps.
var topologyCases = []topologyCase{
	{name: "no hints: every ready endpoint",
		eps:     []hinted{{ip: 1, node: "a", ready: true}, {ip: 2, node: "b", ready: true}},
		cluster: "1 2", local: "-", reachable: "1 2"},
	{name: "zone hints: only this zone's",
		eps: []hinted{
			{ip: 1, node: "a", ready: true, zones: z("z2")},
			{ip: 2, node: "b", ready: true, zones: z("z1")},
			{ip: 3, node: "c", ready: true, zones: z("z1", "z3")},
		},
		cluster: "2 3", local: "-", reachable: "2 3", mode: topoSameZone},
	{name: "a ready endpoint without zone hints: hints ignored",
		eps: []hinted{
			{ip: 1, node: "a", ready: true, zones: z("z1")},
			{ip: 2, node: "b", ready: true},
		},
		cluster: "1 2", local: "-", reachable: "1 2"},
	{name: "an unready endpoint without hints does not count",
		eps: []hinted{
			{ip: 1, node: "a", ready: true, zones: z("z1")},
			{ip: 2, node: "b", ready: true, zones: z("z2")},
			{ip: 3, node: "b", term: true},
			{ip: 4, node: "b"},
		},
		cluster: "1", local: "-", reachable: "1", mode: topoSameZone},
	{name: "no endpoint for this zone: all",
		eps: []hinted{
			{ip: 1, node: "a", ready: true, zones: z("z2")},
			{ip: 2, node: "b", ready: true, zones: z("z3")},
		},
		cluster: "1 2", local: "-", reachable: "1 2"},
	{name: "node without a zone label: hints ignored",
		zone: "-",
		eps: []hinted{
			{ip: 1, node: "a", ready: true, zones: z("z1")},
			{ip: 2, node: "b", ready: true, zones: z("z2")},
		},
		cluster: "1 2", local: "-", reachable: "1 2"},
	{name: "node without a zone label matches a hint spelled empty, as kube-proxy's set lookup does",
		zone: "-",
		eps: []hinted{
			{ip: 1, node: "a", ready: true, zones: z("")},
			{ip: 2, node: "b", ready: true, zones: z("z2")},
		},
		cluster: "1", local: "-", reachable: "1", mode: topoSameZone},
	{name: "node hints win over zone hints",
		eps: []hinted{
			{ip: 1, node: "a", ready: true, zones: z("z2"), nodes: z("a")},
			{ip: 2, node: "b", ready: true, zones: z("z1"), nodes: z("b")},
		},
		cluster: "1", local: "-", reachable: "1", mode: topoSameNode},
	{name: "node hints for other nodes only: zone hints",
		eps: []hinted{
			{ip: 1, node: "c", ready: true, zones: z("z2"), nodes: z("c")},
			{ip: 2, node: "b", ready: true, zones: z("z1"), nodes: z("b")},
		},
		cluster: "2", local: "-", reachable: "2", mode: topoSameZone},
	{name: "node hints missing on one ready endpoint: zone hints",
		eps: []hinted{
			{ip: 1, node: "a", ready: true, zones: z("z2"), nodes: z("a")},
			{ip: 2, node: "b", ready: true, zones: z("z1")},
		},
		cluster: "2", local: "-", reachable: "2", mode: topoSameZone},
	{name: "node hints for other nodes, no zone hints: all",
		eps: []hinted{
			{ip: 1, node: "c", ready: true, nodes: z("c")},
			{ip: 2, node: "b", ready: true, nodes: z("b")},
		},
		cluster: "1 2", local: "-", reachable: "1 2"},
	{name: "node hints only, one for this node",
		eps: []hinted{
			{ip: 1, node: "a", ready: true, nodes: z("a")},
			{ip: 2, node: "b", ready: true, nodes: z("b", "a")},
			{ip: 3, node: "b", ready: true, nodes: z("b")},
		},
		cluster: "1 2", local: "-", reachable: "1 2", mode: topoSameNode},
	{name: "a node without a name matches no node hint",
		node: "-",
		eps: []hinted{
			{ip: 1, node: "", ready: true, nodes: z("")},
			{ip: 2, node: "b", ready: true, nodes: z("b")},
		},
		cluster: "1 2", local: "-", reachable: "1 2"},
	{name: "nothing ready: serving terminating endpoints, hints ignored",
		eps: []hinted{
			{ip: 1, node: "a", term: true, zones: z("z1")},
			{ip: 2, node: "b", term: true, zones: z("z2")},
			{ip: 3, node: "b", zones: z("z1")},
		},
		cluster: "1 2", local: "-", reachable: "1 2"},
	{name: "ready hinted elsewhere, terminating hinted here: ready ones, all of them",
		eps: []hinted{
			{ip: 1, node: "a", term: true, zones: z("z1")},
			{ip: 2, node: "b", ready: true, zones: z("z2")},
		},
		cluster: "2", local: "-", reachable: "2"},
	{name: "internalTrafficPolicy Local: hints play no part",
		pol: iTPLocal,
		eps: []hinted{
			{ip: 1, node: "a", ready: true, zones: z("z2")},
			{ip: 2, node: "a", ready: true, zones: z("z1")},
			{ip: 3, node: "b", ready: true, zones: z("z1")},
		},
		cluster: "-", local: "1 2", reachable: "1 2"},
	{name: "externalTrafficPolicy Local: local chain unfiltered, cluster chain narrowed, both reachable",
		pol: eTPLocal,
		eps: []hinted{
			{ip: 1, node: "a", ready: true, zones: z("z2")},
			{ip: 2, node: "b", ready: true, zones: z("z1")},
			{ip: 3, node: "c", ready: true, zones: z("z2")},
		},
		cluster: "2", local: "1", reachable: "1 2", mode: topoSameZone},
	{name: "externalTrafficPolicy Local without hints: reachable is the cluster set",
		pol:     eTPLocal,
		eps:     []hinted{{ip: 1, node: "a", ready: true}, {ip: 2, node: "b", ready: true}},
		cluster: "1 2", local: "1", reachable: "1 2"},
	{name: "externalTrafficPolicy Local, local endpoint terminating, cluster narrowed",
		pol: eTPLocal,
		eps: []hinted{
			{ip: 1, node: "a", term: true, zones: z("z1")},
			{ip: 2, node: "b", ready: true, zones: z("z1")},
			{ip: 3, node: "c", ready: true, zones: z("z2")},
		},
		cluster: "2", local: "1", reachable: "1 2", mode: topoSameZone},
	{name: "odd hint spellings and duplicates only fail to match",
		eps: []hinted{
			{ip: 1, node: "a", ready: true, zones: z("z1", "z1", "Z1 ", "\x00"), nodes: z("A", "a ", strings.Repeat("x", 300))},
			{ip: 2, node: "b", ready: true, zones: z("z9"), nodes: z("b")},
		},
		cluster: "1", local: "-", reachable: "1", mode: topoSameZone},
}

// TestTopologyCategorize is kube-proxy v1.34's CategorizeEndpoints
// (pkg/proxy/topology.go) as a table: which endpoints the cluster-wide
// and local chains get, and which are reachable, for every hint fallback.
// The node is "a" in zone "z1" unless a row says otherwise.
func TestTopologyCategorize(t *testing.T) {
	cases := topologyCases
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			node, zone := "a", "z1"
			if c.node == "-" {
				node = ""
			}
			if c.zone == "-" {
				zone = ""
			}
			s := &svcPort{name: "ns/svc:p", proto: "tcp"}
			switch c.pol {
			case iTPLocal:
				s.iTPLocal = true
			case eTPLocal:
				s.eTPLocal, s.nodePort = true, 30080
			}
			var in []Endpoint
			for _, h := range c.eps {
				in = append(in, h.endpoint())
			}
			// The input order must not matter.
			for _, order := range [][]Endpoint{in, reversed(in)} {
				eps, probs := normalizeEndpoints(IPv4, s, node, zone, order)
				if len(probs) != 0 {
					t.Fatalf("problems: %v", probs)
				}
				cluster, local, reachable, _ := categorize(s, eps)
				for _, got := range []struct {
					what string
					eps  []epInfo
					want string
				}{{"cluster", cluster, c.cluster}, {"local", local, c.local}, {"reachable", reachable, c.reachable}} {
					if g := octets(got.eps); g != got.want {
						t.Errorf("%s: %q, want %q", got.what, g, got.want)
					}
				}
				if s.usesClusterEndpoints() {
					if m := topologyOf(eps); m != c.mode {
						t.Errorf("topology %d, want %d", m, c.mode)
					}
				}
			}
		})
	}
}

func reversed(in []Endpoint) []Endpoint {
	out := slices.Clone(in)
	slices.Reverse(out)
	return out
}

// octets spells endpoints by their last octet, in order; "-" for nil.
func octets(eps []epInfo) string {
	if eps == nil {
		return "-"
	}
	var parts []string
	for _, e := range eps {
		parts = append(parts, strings.TrimPrefix(e.addr.Addr().String(), "10.244.0."))
	}
	return strings.Join(parts, " ")
}
