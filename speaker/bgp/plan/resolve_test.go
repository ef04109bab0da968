package plan

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/speaker/layer2/election"
	"github.com/herald-lb/herald/speaker/view"
)

// randomWorld is a cluster with random pools, peers, advertisements,
// node labels and Services: everything Compute and ResolveCluster read.
func randomWorld(r *rand.Rand) (*config.Config, []view.Node, []view.Service) {
	cfg := &config.Config{
		Pools: map[string]*config.Pool{
			"p1": {Name: "p1", Ranges: []config.Range{rng("203.0.113.0", "203.0.113.15"), rng("2001:db8:1::", "2001:db8:1::f")}},
			"p2": {Name: "p2", Ranges: []config.Range{rng("198.51.100.0", "198.51.100.15")}},
			"p3": {Name: "p3", Ranges: []config.Range{rng("2001:db8:3::", "2001:db8:3::f")}},
		},
		Peers: map[string]*config.Peer{},
	}
	pick := func(vals ...string) string { return vals[r.IntN(len(vals))] }
	maybeSel := func(key string) config.Selectors {
		if r.IntN(3) == 0 {
			return sel(key, pick("a", "b"))
		}
		return nil
	}
	var peerNames []string
	for i := range 1 + r.IntN(4) {
		name := fmt.Sprintf("peer%d", i)
		a := netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)})
		if r.IntN(3) == 0 {
			a = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(i + 1)})
		}
		cfg.Peers[name] = &config.Peer{Name: name, MyASN: 64512, PeerASN: 64512, Address: a, Port: 179, NodeSelectors: maybeSel("rack")}
		peerNames = append(peerNames, name)
	}
	for i := range r.IntN(5) {
		ad := &config.BGPAdvertisement{Name: fmt.Sprintf("ad%d", i), Pools: []string{pick("p1", "p2", "p3")},
			NodeSelectors: maybeSel("rack"), ServiceSelectors: maybeSel("tier")}
		if r.IntN(2) == 0 {
			ad.Pools = append(ad.Pools, pick("p1", "p2", "p3"))
		}
		if r.IntN(3) == 0 {
			ad.Peers = []string{peerNames[r.IntN(len(peerNames))]}
		}
		cfg.BGPAdvertisements = append(cfg.BGPAdvertisements, ad)
	}
	var nodes []view.Node
	for i := range 2 + r.IntN(5) {
		n := view.Node{Name: fmt.Sprintf("node%d", i), Labels: map[string]string{"rack": pick("a", "b")}}
		switch r.IntN(8) {
		case 0:
			n.NetworkUnavailable = true
		case 1:
			n.Labels[election.ExcludeLabel] = ""
		}
		nodes = append(nodes, n)
	}
	ips := map[string][]string{
		"p1": {"203.0.113.1", "203.0.113.2", "203.0.113.3", "2001:db8:1::1"},
		"p2": {"198.51.100.1", "198.51.100.2"},
		"p3": {"2001:db8:3::1", "2001:db8:3::2"},
	}
	var svcs []view.Service
	for i := range 1 + r.IntN(8) {
		pool := pick("p1", "p2", "p3")
		s := view.Service{Namespace: "ns", Name: fmt.Sprintf("svc%d", i), Pool: pool,
			Labels: map[string]string{"tier": pick("a", "b")}, Local: r.IntN(3) == 0,
			ReadyNodes: map[string]bool{}, ServingTerminatingNodes: map[string]bool{}}
		for range 1 + r.IntN(2) {
			s.IPs = append(s.IPs, addr(ips[pool][r.IntN(len(ips[pool]))]))
		}
		for _, n := range nodes {
			switch r.IntN(5) {
			case 0:
				s.ReadyNodes[n.Name] = true
			case 1:
				s.ServingTerminatingNodes[n.Name] = true
			}
		}
		svcs = append(svcs, s)
	}
	return cfg, nodes, svcs
}

// TestResolveClusterMatchesEveryNode: in random worlds, what
// ResolveCluster derives from the nodes' summaries is exactly what each
// node's Compute decided for every address no Local Service shares:
// which nodes advertise it, and to which peers.
func TestResolveClusterMatchesEveryNode(t *testing.T) {
	for seed := range uint64(2000) {
		r := rand.New(rand.NewPCG(seed, 19))
		cfg, nodes, svcs := randomWorld(r)
		want := map[netip.Addr][]Advertiser{}
		decided := map[netip.Addr]bool{}
		var sums []view.NodeSummary
		for _, n := range nodes {
			p := Compute(Input{Config: cfg, Services: svcs, Nodes: nodes, Node: n.Name, NodeIPs: []netip.Addr{addr("198.51.100.250")}})
			if p.Summary != nil {
				sums = append(sums, *p.Summary)
			}
			for _, ip := range p.IPs {
				if !ip.Cluster {
					continue
				}
				decided[ip.Addr] = true
				if ip.Advertised() {
					want[ip.Addr] = append(want[ip.Addr], Advertiser{Node: n.Name, Peers: ip.Peers})
				}
			}
		}
		r.Shuffle(len(sums), func(i, j int) { sums[i], sums[j] = sums[j], sums[i] })
		got := ResolveCluster(cfg, svcs, sums)
		for a := range decided {
			w := want[a]
			if w == nil {
				w = []Advertiser{}
			}
			if !reflect.DeepEqual(got[a], w) {
				t.Fatalf("seed %d, %s: resolved %+v, the nodes decided %+v\nsummaries %+v", seed, a, got[a], w, sums)
			}
		}
		for a := range got {
			if !decided[a] {
				t.Fatalf("seed %d: resolved %s, which no node decided as Cluster", seed, a)
			}
		}
	}
}

// TestResolveCluster: the worked example of docs/api.md's NodeAnnouncement.
func TestResolveCluster(t *testing.T) {
	web := svc("web", "bgp", "203.0.113.130", "2001:db8:0:100::5")
	idle := svc("idle", "bgp", "203.0.113.131")
	idle.ReadyNodes = nil
	local := svc("local", "bgp", "203.0.113.132")
	local.Local = true
	var sums []view.NodeSummary
	for _, n := range []string{"node1", "node2", "node3"} {
		in := input(n, web, idle, local)
		sums = append(sums, *Compute(in).Summary)
	}
	got := ResolveCluster(testConfig(), []view.Service{web, idle, local}, sums)
	want := map[netip.Addr][]Advertiser{
		addr("203.0.113.130"):     {{"node1", []string{"ebgp", "ibgp"}}, {"node2", []string{"ebgp", "ibgp", "rack2"}}, {"node3", []string{"ebgp", "ibgp"}}},
		addr("2001:db8:0:100::5"): {{"node1", []string{"v6"}}, {"node2", []string{"v6"}}, {"node3", []string{"v6"}}},
		addr("203.0.113.131"):     {},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("resolved %+v\nwant %+v", got, want)
	}
	if slices.ContainsFunc(sums, func(s view.NodeSummary) bool { return s.Reason != "" }) {
		t.Errorf("summaries %+v", sums)
	}
}
