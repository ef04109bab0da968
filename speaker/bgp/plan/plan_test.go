package plan

import (
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/speaker/layer2/election"
	"github.com/herald-lb/herald/speaker/view"
)

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func rng(first, last string) config.Range { return config.Range{First: addr(first), Last: addr(last)} }

func sel(kv ...string) config.Selectors {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return config.Selectors{config.SelectorFromLabels(m)}
}

func u32(v uint32) *uint32 { return &v }

func std(asn, v uint32) config.Community { return config.Community{Standard: asn<<16 | v} }

// testConfig: pool "bgp" (v4 and v6) advertised by "all" (community
// 64512:100, localPref 200) to every peer and by "edge" (large community
// and no-export) only to peer "ebgp"; pool "agg" advertised as /24s; pool
// "l2" only over layer 2. Peers: "ibgp" (AS 64512 both sides), "ebgp"
// (64512 -> 64513), "v6" (IPv6), "rack2" only on rack=2 nodes.
func testConfig() *config.Config {
	return &config.Config{
		Pools: map[string]*config.Pool{
			"bgp": {Name: "bgp", Ranges: []config.Range{rng("203.0.113.128", "203.0.113.191"), rng("2001:db8:0:100::", "2001:db8:0:100::ff")}},
			"agg": {Name: "agg", Ranges: []config.Range{rng("203.0.113.192", "203.0.113.255")}},
			"l2":  {Name: "l2", Ranges: []config.Range{rng("198.51.100.200", "198.51.100.249")}},
		},
		L2Advertisements: []*config.L2Advertisement{{Name: "l2", Pools: []string{"l2"}}},
		BGPAdvertisements: []*config.BGPAdvertisement{
			{Name: "all", Pools: []string{"bgp"}, Communities: []config.Community{std(64512, 100)}, LocalPref: u32(200)},
			{Name: "edge", Pools: []string{"bgp"}, Peers: []string{"ebgp"},
				Communities: []config.Community{{Large: true, LargeValue: [3]uint32{64512, 1, 2}}, std(0xffff, 0xff01), std(64512, 100)}},
			{Name: "agg", Pools: []string{"agg"}, AggregationLength: 24, AggregationLengthV6: 64, LocalPref: u32(50)},
		},
		Peers: map[string]*config.Peer{
			"ibgp":  {Name: "ibgp", MyASN: 64512, PeerASN: 64512, Address: addr("198.51.100.1"), Port: 179},
			"ebgp":  {Name: "ebgp", MyASN: 64512, PeerASN: 64513, Address: addr("198.51.100.2"), Port: 179},
			"v6":    {Name: "v6", MyASN: 64512, PeerASN: 64512, Address: addr("2001:db8:0:1::1"), Port: 179},
			"rack2": {Name: "rack2", MyASN: 64512, PeerASN: 64512, Address: addr("198.51.100.3"), Port: 179, NodeSelectors: sel("rack", "2")},
		},
	}
}

func nodes() []view.Node {
	var out []view.Node
	for i, n := range []string{"node1", "node2", "node3"} {
		out = append(out, view.Node{Name: n, Labels: map[string]string{"kubernetes.io/hostname": n, "rack": fmt.Sprint(i%2 + 1)}})
	}
	return out
}

func svc(name, pool string, ips ...string) view.Service {
	s := view.Service{Namespace: "shop", Name: name, Pool: pool, ReadyNodes: map[string]bool{"node2": true}}
	for _, ip := range ips {
		s.IPs = append(s.IPs, addr(ip))
	}
	return s
}

func input(node string, svcs ...view.Service) Input {
	return Input{Config: testConfig(), Services: svcs, Nodes: nodes(), Node: node, NodeIPs: []netip.Addr{addr("2001:db8:0:1::11"), addr("198.51.100.11")}}
}

func routePrefixes(rs []Route) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Prefix.String())
	}
	return out
}

func TestSessionsFollowPeerNodeSelectors(t *testing.T) {
	p := Compute(input("node1"))
	var names []string
	for _, s := range p.Sessions {
		names = append(names, s.Name())
	}
	if want := []string{"ebgp", "ibgp", "v6"}; !slices.Equal(names, want) {
		t.Errorf("node1 (rack 1) sessions %v, want %v", names, want)
	}
	p = Compute(input("node2"))
	if _, ok := p.Session("rack2"); !ok {
		t.Errorf("node2 (rack 2) has no session rack2: %+v", p.Sessions)
	}
	if p.ASN != 64512 || p.RouterID != addr("198.51.100.11") {
		t.Errorf("ASN %d router ID %s, want 64512 and the node's IPv4 198.51.100.11", p.ASN, p.RouterID)
	}
	// A node unknown to the API opens nothing.
	if p := Compute(input("node9")); len(p.Sessions) != 0 {
		t.Errorf("unknown node: sessions %+v", p.Sessions)
	}
}

func TestClusterPolicyAdvertisesWithAttributes(t *testing.T) {
	p := Compute(input("node1", svc("web", "bgp", "203.0.113.130", "2001:db8:0:100::5")))
	ib, _ := p.Session("ibgp")
	eb, _ := p.Session("ebgp")
	v6, _ := p.Session("v6")
	want := []Route{{Prefix: netip.MustParsePrefix("203.0.113.130/32"), Communities: []uint32{64512<<16 | 100}, LocalPref: 200, Advertisements: []string{"all"}}}
	if !reflect.DeepEqual(ib.Routes, want) {
		t.Errorf("ibgp routes %+v, want %+v", ib.Routes, want)
	}
	// eBGP: no LOCAL_PREF; "edge" adds its communities, the shared
	// 64512:100 once.
	want = []Route{{Prefix: netip.MustParsePrefix("203.0.113.130/32"), Communities: []uint32{64512<<16 | 100, 0xffffff01},
		LargeCommunities: [][3]uint32{{64512, 1, 2}}, Advertisements: []string{"all", "edge"}}}
	if !reflect.DeepEqual(eb.Routes, want) {
		t.Errorf("ebgp routes %+v, want %+v", eb.Routes, want)
	}
	if got := routePrefixes(v6.Routes); !slices.Equal(got, []string{"2001:db8:0:100::5/128"}) {
		t.Errorf("v6 routes %v: IPv6 prefixes go to the IPv6 peer only", got)
	}
	ip, _ := p.Lookup(addr("203.0.113.130"))
	if !slices.Equal(ip.Peers, []string{"ebgp", "ibgp"}) || ip.Reason != "" {
		t.Errorf("IP decision %+v", ip)
	}
	// A Cluster Service's addresses are published by the node's summary,
	// not by a ServiceAnnouncement; the events still name them.
	if len(p.Announcements) != 0 {
		t.Errorf("ServiceAnnouncements %+v for a Cluster Service", p.Announcements)
	}
	if len(p.Advertising) != 1 || !slices.Equal(p.Advertising[0].Peers, []string{"ebgp", "ibgp", "v6"}) ||
		p.Advertising[0].Protocol != Protocol || len(p.Advertising[0].IPs) != 2 {
		t.Errorf("advertising %+v", p.Advertising)
	}
	// node1 (rack 1) has no rack2 session.
	want2 := &view.NodeSummary{Node: "node1", Protocol: Protocol, Advertisements: []view.NodeAdvertisement{
		{Name: "agg", IPv4Peers: []string{"ebgp", "ibgp"}, IPv6Peers: []string{"v6"}},
		{Name: "all", IPv4Peers: []string{"ebgp", "ibgp"}, IPv6Peers: []string{"v6"}},
		{Name: "edge", IPv4Peers: []string{"ebgp"}},
	}}
	if !reflect.DeepEqual(p.Summary, want2) {
		t.Errorf("summary %+v, want %+v", p.Summary, want2)
	}
}

// TestLocalPolicyKeepsServiceAnnouncements: a Local Service's addresses
// are published per Service by the nodes with an endpoint, as before.
func TestLocalPolicyKeepsServiceAnnouncements(t *testing.T) {
	local := svc("web", "bgp", "203.0.113.130")
	local.Local = true
	p := Compute(input("node2", local))
	if len(p.Announcements) != 1 || !slices.Equal(p.Announcements[0].IPs, []netip.Addr{addr("203.0.113.130")}) ||
		!slices.Equal(p.Announcements[0].Peers, []string{"ebgp", "ibgp", "rack2"}) {
		t.Errorf("announcements %+v", p.Announcements)
	}
	if ip, _ := p.Lookup(addr("203.0.113.130")); ip.Cluster {
		t.Errorf("IP of a Local Service marked Cluster: %+v", ip)
	}
}

// TestSummaryWithoutBGP: no session and no advertisement, no summary;
// an ineligible node publishes why, and no advertisement.
func TestSummaryWithoutBGP(t *testing.T) {
	in := input("node1")
	in.Config = &config.Config{Pools: testConfig().Pools}
	if p := Compute(in); p.Summary != nil {
		t.Errorf("summary %+v without BGP configuration", p.Summary)
	}
	in = input("node1")
	in.Nodes = nodes()
	in.Nodes[0].NetworkUnavailable = true
	want := &view.NodeSummary{Node: "node1", Protocol: Protocol, Reason: ReasonNetworkUnavailable}
	if p := Compute(in); !reflect.DeepEqual(p.Summary, want) {
		t.Errorf("summary %+v, want %+v", p.Summary, want)
	}
}

func TestWhoAdvertises(t *testing.T) {
	cluster := svc("web", "bgp", "203.0.113.130")
	noEndpoints := cluster
	noEndpoints.ReadyNodes = nil
	terminatingOnly := noEndpoints
	terminatingOnly.ServingTerminatingNodes = map[string]bool{"node3": true}
	local := cluster
	local.Local = true
	localTerminating := terminatingOnly
	localTerminating.Local = true

	excluded := nodes()
	excluded[0].Labels[election.ExcludeLabel] = ""
	unavailable := nodes()
	unavailable[0].NetworkUnavailable = true

	cases := []struct {
		name   string
		node   string
		svc    view.Service
		nodes  []view.Node
		ignore bool
		reason string
	}{
		{"Cluster, endpoint elsewhere", "node1", cluster, nil, false, ""},
		{"Cluster, no endpoint anywhere", "node1", noEndpoints, nil, false, ReasonNoEndpoints},
		{"Cluster, only a terminating serving endpoint", "node1", terminatingOnly, nil, false, ""},
		{"Local, endpoint here", "node2", local, nil, false, ""},
		{"Local, endpoint elsewhere", "node1", local, nil, false, ReasonNoLocalEndpoint},
		{"Local, terminating endpoint here, none ready", "node3", localTerminating, nil, false, ""},
		{"Local, terminating endpoint elsewhere", "node1", localTerminating, nil, false, ReasonNoLocalEndpoint},
		{"excluded node", "node1", cluster, excluded, false, ReasonExcluded},
		{"NetworkUnavailable", "node1", cluster, unavailable, false, ReasonNetworkUnavailable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := input(c.node, c.svc)
			if c.nodes != nil {
				in.Nodes = c.nodes
			}
			p := Compute(in)
			ip, ok := p.Lookup(addr("203.0.113.130"))
			if !ok {
				t.Fatalf("IP not decided; ignored %+v", p.Ignored)
			}
			if ip.Reason != c.reason {
				t.Errorf("reason %q, want %q", ip.Reason, c.reason)
			}
			if ip.Advertised() != (c.reason == "") {
				t.Errorf("advertised to %v with reason %q", ip.Peers, ip.Reason)
			}
			for _, s := range p.Sessions {
				if s.Name() == "v6" {
					continue // an IPv4 IP never goes to it
				}
				if (len(s.Routes) > 0) != (c.reason == "") {
					t.Errorf("session %s routes %v with reason %q", s.Name(), routePrefixes(s.Routes), c.reason)
				}
			}
		})
	}
}

func TestExcludeLabelIgnoredOnRequest(t *testing.T) {
	in := input("node1", svc("web", "bgp", "203.0.113.130"))
	in.Nodes[0].Labels[election.ExcludeLabel] = ""
	in.Options.IgnoreExcludeLabel = true
	if ip, _ := Compute(in).Lookup(addr("203.0.113.130")); !ip.Advertised() {
		t.Errorf("not advertised with IgnoreExcludeLabel: %+v", ip)
	}
}

func TestAdvertisementSelectors(t *testing.T) {
	cfg := testConfig()
	cfg.BGPAdvertisements = []*config.BGPAdvertisement{
		{Name: "rack2-only", Pools: []string{"bgp"}, NodeSelectors: sel("rack", "2")},
		{Name: "web-only", Pools: []string{"agg"}, ServiceSelectors: sel("tier", "web")},
	}
	in := input("node1", svc("a", "bgp", "203.0.113.130"), svc("b", "agg", "203.0.113.200"), svc("c", "l2", "198.51.100.200"))
	in.Config = cfg
	p := Compute(in)
	if ip, _ := p.Lookup(addr("203.0.113.130")); ip.Reason != ReasonNodeNotSelected {
		t.Errorf("node1 outside the advertisement's nodeSelectors: %+v", ip)
	}
	var reasons []string
	for _, ig := range p.Ignored {
		reasons = append(reasons, ig.Service.Name+": "+ig.Reason)
	}
	want := []string{"b: " + ReasonServiceNotSelected, "c: " + ReasonNoAdvertisement}
	if !slices.Equal(reasons, want) {
		t.Errorf("ignored %v, want %v", reasons, want)
	}
	in.Node = "node2"
	if ip, _ := Compute(in).Lookup(addr("203.0.113.130")); !ip.Advertised() {
		t.Errorf("node2 selected: %+v", ip)
	}
}

func TestPeersFilterAndFamily(t *testing.T) {
	cfg := testConfig()
	cfg.BGPAdvertisements = []*config.BGPAdvertisement{{Name: "to-v6", Pools: []string{"bgp"}, Peers: []string{"v6"}}}
	in := input("node1", svc("web", "bgp", "203.0.113.130", "2001:db8:0:100::5"))
	in.Config = cfg
	p := Compute(in)
	if ip, _ := p.Lookup(addr("203.0.113.130")); ip.Reason != ReasonNoSessionOfFamily {
		t.Errorf("an IPv4 IP advertised only to an IPv6 peer: %+v", ip)
	}
	if ip, _ := p.Lookup(addr("2001:db8:0:100::5")); !slices.Equal(ip.Peers, []string{"v6"}) {
		t.Errorf("IPv6 IP: %+v", ip)
	}
	cfg.BGPAdvertisements[0].Peers = []string{"rack2"} // not on node1
	if ip, _ := Compute(in).Lookup(addr("203.0.113.130")); ip.Reason != ReasonNoSession {
		t.Errorf("advertisement to a peer node1 does not have: %+v", ip)
	}
}

func TestAggregation(t *testing.T) {
	a := svc("a", "agg", "203.0.113.200")
	b := svc("b", "agg", "203.0.113.201")
	p := Compute(input("node1", a, b))
	ib, _ := p.Session("ibgp")
	if got := routePrefixes(ib.Routes); !slices.Equal(got, []string{"203.0.113.0/24"}) {
		t.Errorf("aggregated routes %v, want one /24", got)
	}
	if ib.Routes[0].LocalPref != 50 {
		t.Errorf("localPref %d, want 50", ib.Routes[0].LocalPref)
	}
	// The aggregate stays while any IP in it is served.
	b.ReadyNodes = nil
	ib, _ = Compute(input("node1", a, b)).Session("ibgp")
	if got := routePrefixes(ib.Routes); !slices.Equal(got, []string{"203.0.113.0/24"}) {
		t.Errorf("routes %v after one Service lost its endpoints", got)
	}
}

func TestIgnoredIPs(t *testing.T) {
	notOurs := svc("a", "", "203.0.113.130")
	wrongPool := svc("b", "agg", "203.0.113.131")
	outside := svc("c", "bgp", "192.0.2.1")
	p := Compute(input("node1", notOurs, wrongPool, outside, svc("d", "bgp")))
	var reasons []string
	for _, ig := range p.Ignored {
		reasons = append(reasons, ig.Service.Name+": "+ig.Reason)
	}
	want := []string{"a: " + view.ReasonNotAllocated, "b: " + view.ReasonPoolMismatch, "c: " + view.ReasonOutsidePools, "d: " + view.ReasonNoIP}
	if !slices.Equal(reasons, want) {
		t.Errorf("ignored %v, want %v", reasons, want)
	}
	for _, s := range p.Sessions {
		if len(s.Routes) > 0 {
			t.Errorf("session %s advertises %v", s.Name(), routePrefixes(s.Routes))
		}
	}
}

func TestSharedIP(t *testing.T) {
	a := svc("a", "bgp", "203.0.113.130")
	b := svc("b", "bgp", "203.0.113.130")
	p := Compute(input("node1", a, b))
	ip, _ := p.Lookup(addr("203.0.113.130"))
	if len(ip.Services) != 2 || !ip.Advertised() {
		t.Errorf("shared IP %+v", ip)
	}
	if len(p.Advertising) != 2 || len(p.Announcements) != 0 {
		t.Errorf("one advertising per Service and no ServiceAnnouncement expected: %+v, %+v", p.Advertising, p.Announcements)
	}
	// Under Local every Local Service sharing it needs an endpoint here.
	b.Local = true
	b.ReadyNodes = map[string]bool{"node3": true}
	if ip, _ := Compute(input("node1", a, b)).Lookup(addr("203.0.113.130")); ip.Reason != ReasonNoLocalEndpoint {
		t.Errorf("shared with a Local Service without a local endpoint: %+v", ip)
	}
}

func TestRouterIDAndDuplicatePeers(t *testing.T) {
	cfg := testConfig()
	cfg.Peers["ebgp"].RouterID = addr("192.0.2.7")
	cfg.Peers["v6"].RouterID = addr("192.0.2.8")
	cfg.Peers["copy"] = &config.Peer{Name: "copy", MyASN: 64512, PeerASN: 64512, Address: addr("198.51.100.1"), Port: 1179}
	in := input("node1")
	in.Config = cfg
	p := Compute(in)
	if p.RouterID != addr("192.0.2.7") {
		t.Errorf("router ID %s, want the first peer's by name (ebgp: 192.0.2.7)", p.RouterID)
	}
	if _, ok := p.Session("ibgp"); ok {
		t.Errorf("ibgp has copy's address and comes after it by name: it must not be opened")
	}
	text := strings.Join(p.Problems, "\n")
	for _, want := range []string{"BGPPeer ibgp: spec.peerAddress 198.51.100.1 is also BGPPeer copy's", "BGPPeer v6: spec.routerID 192.0.2.8"} {
		if !strings.Contains(text, want) {
			t.Errorf("problems %q lack %q", text, want)
		}
	}
	// No IPv4 on the node and no routerID: reported.
	in = input("node1")
	in.NodeIPs = []netip.Addr{addr("2001:db8:0:1::11")}
	if p := Compute(in); p.RouterID.IsValid() || !strings.Contains(strings.Join(p.Problems, "\n"), "no BGP router ID") {
		t.Errorf("router ID %s, problems %q", p.RouterID, p.Problems)
	}
}

func TestDeterministic(t *testing.T) {
	in := input("node1", svc("a", "bgp", "203.0.113.130"), svc("b", "bgp", "203.0.113.131", "2001:db8:0:100::1"), svc("c", "agg", "203.0.113.250"))
	first := Compute(in)
	for range 20 {
		if got := Compute(in); !reflect.DeepEqual(got, first) {
			t.Fatalf("Compute is not deterministic:\n%+v\n%+v", got, first)
		}
	}
}

// TestReporterPublishesWhy: the reporter publishes, once for the cluster,
// the IPs of Services with no serving endpoint anywhere (Local or not)
// and of Services no BGPAdvertisement selects; nothing for an IP that is
// advertised or only not advertised from this node; a speaker that is not
// the reporter publishes no reasons.
func TestReporterPublishesWhy(t *testing.T) {
	cfg := testConfig()
	cfg.BGPAdvertisements = append(cfg.BGPAdvertisements,
		&config.BGPAdvertisement{Name: "web-only", Pools: []string{"agg"}, ServiceSelectors: sel("tier", "web")})
	cfg.BGPAdvertisements = slices.DeleteFunc(cfg.BGPAdvertisements, func(a *config.BGPAdvertisement) bool { return a.Name == "agg" })
	idle := svc("idle", "bgp", "203.0.113.131")
	idle.ReadyNodes = nil
	idle.Local = true
	local := svc("local", "bgp", "203.0.113.132") // its endpoint is on node2
	local.Local = true
	in := input("node1", svc("web", "bgp", "203.0.113.130"), idle, local, svc("api", "agg", "203.0.113.200"))
	in.Config = cfg
	in.Reporter = true
	p := Compute(in)
	var got []string
	for _, a := range p.Announcements {
		for _, u := range a.Unannounced {
			got = append(got, a.Service.Name+" "+u.Addr.String()+": "+u.Reason)
		}
		if a.Node != "node1" || a.Protocol != Protocol {
			t.Errorf("announcement %+v", a)
		}
	}
	want := []string{"api 203.0.113.200: " + ReasonServiceNotSelected, "idle 203.0.113.131: " + ReasonNoEndpoints}
	if !slices.Equal(got, want) {
		t.Errorf("reasons %q, want %q", got, want)
	}
	in.Reporter = false
	q := Compute(in)
	for _, a := range q.Announcements {
		if len(a.Unannounced) > 0 {
			t.Errorf("not the reporter, publishes %+v", a)
		}
	}
	// Every speaker counts them, for the metric.
	wantCounts := map[string]int{ReasonNoEndpoints: 1, ReasonServiceNotSelected: 1}
	if !maps.Equal(p.Unadvertised, wantCounts) || !maps.Equal(q.Unadvertised, wantCounts) {
		t.Errorf("unadvertised %v (reporter) %v (other), want %v", p.Unadvertised, q.Unadvertised, wantCounts)
	}
}
