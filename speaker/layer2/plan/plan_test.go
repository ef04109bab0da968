package plan

import (
	"fmt"
	"math/rand/v2"
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

// The configuration: pool "lan" (v4 and v6) announced everywhere by "all",
// pool "quiet" with no advertisement, pool "picky" announced only for
// Services labelled tier=web.
func testConfig() *config.Config {
	return &config.Config{
		Pools: map[string]*config.Pool{
			"lan":   {Name: "lan", Ranges: []config.Range{rng("192.0.2.0", "192.0.2.255"), rng("2001:db8::", "2001:db8::ff")}},
			"quiet": {Name: "quiet", Ranges: []config.Range{rng("198.51.100.0", "198.51.100.255")}},
			"picky": {Name: "picky", Ranges: []config.Range{rng("203.0.113.0", "203.0.113.255")}},
		},
		L2Advertisements: []*config.L2Advertisement{
			{Name: "all", Pools: []string{"lan"}},
			{Name: "web", Pools: []string{"picky"}, ServiceSelectors: sel("tier", "web")},
		},
	}
}

var nodeNames = []string{"node1", "node2", "node3"}

// testInput is three nodes (rack 1, 2, 1), all live with eth0 and eth1 up,
// seen from node1.
func testInput(svcs ...view.Service) Input {
	in := Input{Config: testConfig(), Services: svcs}
	for i, n := range nodeNames {
		in.Nodes = append(in.Nodes, view.Node{Name: n, Labels: map[string]string{"kubernetes.io/hostname": n, "rack": fmt.Sprint(i%2 + 1)}})
		in.Members = append(in.Members, Member{Name: n, Interfaces: []string{"eth0", "eth1"}})
	}
	return as(in, "node1")
}

// as is in seen from node: Local mirrors that node's member metadata.
func as(in Input, node string) Input {
	in.Local = Local{Name: node}
	for _, m := range in.Members {
		if m.Name == node {
			in.Local = Local{Name: node, Interfaces: m.Interfaces, DownInterfaces: m.DownInterfaces}
		}
	}
	return in
}

func svc(name string, pool string, ips ...string) view.Service {
	s := view.Service{Namespace: "shop", Name: name, Pool: pool}
	for _, ip := range ips {
		a, _ := netip.ParseAddr(ip) // "" gives the invalid zero Addr, on purpose
		s.IPs = append(s.IPs, a)
	}
	return s
}

func member(in *Input, name string) *Member {
	for i := range in.Members {
		if in.Members[i].Name == name {
			return &in.Members[i]
		}
	}
	panic(name)
}

func ref(name string) view.ServiceRef { return view.ServiceRef{Namespace: "shop", Name: name} }

// everywhere computes the state as every node sees it and checks that
// they agree on the winners and that exactly the winner announces.
func everywhere(t *testing.T, in Input) map[string]State {
	t.Helper()
	out := map[string]State{}
	for _, n := range nodeNames {
		out[n] = Compute(as(in, n))
	}
	ref := out["node1"]
	for _, n := range nodeNames {
		st := out[n]
		if len(st.IPs) != len(ref.IPs) {
			t.Fatalf("%s sees %d IPs, node1 %d", n, len(st.IPs), len(ref.IPs))
		}
		for i, ip := range st.IPs {
			if ip.Addr != ref.IPs[i].Addr || ip.Winner != ref.IPs[i].Winner {
				t.Errorf("%s: %s won by %q, node1 says %q", n, ip.Addr, ip.Winner, ref.IPs[i].Winner)
			}
			if ip.Announced() != (ip.Winner == n) && ip.Reason != ReasonLocalDown {
				t.Errorf("%s: %s announced=%v, winner %q", n, ip.Addr, ip.Announced(), ip.Winner)
			}
			for _, a := range st.Announcements {
				if a.Node != n {
					t.Errorf("%s publishes an announcement for %s", n, a.Node)
				}
			}
		}
	}
	return out
}

// v4 and v6 are the addresses computeCases announce.
const v4, v6 = "192.0.2.10", "2001:db8::10"

type computeCase struct {
	name  string
	svcs  []view.Service
	setup func(*Input)
	check func(t *testing.T, st map[string]State)
}

// computeCases are TestCompute's: Services, a change to the input, and
// what every node's plan must say.
var computeCases = []computeCase{
	{"cluster policy: the hash winner announces on every up interface", []view.Service{svc("web", "lan", v4)}, nil,
		func(t *testing.T, st map[string]State) {
			w := election.Winner(addr(v4), nodeNames)
			ip, _ := st[w].Lookup(addr(v4))
			if ip.Winner != w || !reflect.DeepEqual(ip.Interfaces, []string{"eth0", "eth1"}) || len(ip.Excluded.Map()) != 0 {
				t.Errorf("%+v, want won by %s on eth0, eth1", ip, w)
			}
			want := []view.Announcement{{Service: ref("web"), Node: w, Protocol: "layer2", Interfaces: []string{"eth0", "eth1"}, IPs: []netip.Addr{addr(v4)}}}
			if !reflect.DeepEqual(st[w].Announcements, want) {
				t.Errorf("announcements %+v, want %+v", st[w].Announcements, want)
			}
		}},
	{"local policy: only a node with a ready endpoint", []view.Service{{Namespace: "shop", Name: "web", Pool: "lan", IPs: []netip.Addr{addr(v4)},
		Local: true, ReadyNodes: map[string]bool{"node2": true}, ServingTerminatingNodes: map[string]bool{"node3": true}}}, nil,
		func(t *testing.T, st map[string]State) {
			ip, _ := st["node2"].Lookup(addr(v4))
			want := map[string]string{"node1": election.ReasonNoLocalEndpoint, "node3": election.ReasonNoLocalEndpoint}
			if ip.Winner != "node2" || !ip.Announced() || !reflect.DeepEqual(ip.Excluded.Map(), want) {
				t.Errorf("%+v", ip)
			}
		}},
	{"local policy: serving-terminating when nothing is ready", []view.Service{{Namespace: "shop", Name: "web", Pool: "lan", IPs: []netip.Addr{addr(v4)},
		Local: true, ServingTerminatingNodes: map[string]bool{"node3": true}}}, nil,
		func(t *testing.T, st map[string]State) {
			if ip, _ := st["node1"].Lookup(addr(v4)); ip.Winner != "node3" {
				t.Errorf("winner %q, want node3", ip.Winner)
			}
		}},
	{"local policy: no endpoint anywhere, nobody announces", []view.Service{{Namespace: "shop", Name: "web", Pool: "lan", IPs: []netip.Addr{addr(v4)}, Local: true}}, nil,
		func(t *testing.T, st map[string]State) {
			for n, s := range st {
				if ip, _ := s.Lookup(addr(v4)); ip.Winner != "" || ip.Reason != ReasonNoCandidate || len(s.Announced()) != 0 || len(s.Announcements) != 0 {
					t.Errorf("%s: %+v", n, ip)
				}
			}
		}},
	{"shared IP: sharers land together and both are announced", []view.Service{
		{Namespace: "shop", Name: "web-tcp", Pool: "lan", IPs: []netip.Addr{addr(v4)}, Local: true, ReadyNodes: map[string]bool{"node2": true, "node3": true}},
		{Namespace: "shop", Name: "web-udp", Pool: "lan", IPs: []netip.Addr{addr(v4)}, Local: true, ReadyNodes: map[string]bool{"node3": true, "node1": true}},
	}, nil,
		func(t *testing.T, st map[string]State) {
			ip, _ := st["node3"].Lookup(addr(v4))
			if ip.Winner != "node3" || !reflect.DeepEqual(ip.Services, []view.ServiceRef{ref("web-tcp"), ref("web-udp")}) {
				t.Errorf("%+v", ip)
			}
			var got []view.ServiceRef
			for _, a := range st["node3"].Announcements {
				got = append(got, a.Service)
			}
			if !reflect.DeepEqual(got, []view.ServiceRef{ref("web-tcp"), ref("web-udp")}) || len(st["node3"].IPs) != 1 {
				t.Errorf("announcements for %v", got)
			}
		}},
	{"node selector", []view.Service{svc("web", "lan", ips(40)...)}, func(in *Input) {
		in.Config.L2Advertisements[0].NodeSelectors = sel("rack", "1")
	}, func(t *testing.T, st map[string]State) {
		for _, ip := range st["node1"].IPs {
			if ip.Winner == "node2" || ip.Excluded.Reason("node2") != election.ReasonNoAdvertisement {
				t.Errorf("%s: %+v", ip.Addr, ip)
			}
		}
	}},
	{"interface selection: the named interface only", []view.Service{svc("web", "lan", ips(20)...)}, func(in *Input) {
		in.Config.L2Advertisements[0].Interfaces = []string{"eth1"}
	}, func(t *testing.T, st map[string]State) {
		for n, s := range st {
			for ip, ifs := range s.Announced() {
				if !reflect.DeepEqual(ifs, []string{"eth1"}) {
					t.Errorf("%s announces %s on %v", n, ip, ifs)
				}
			}
		}
	}},
	{"interface selection: advertisements add up per node", []view.Service{svc("web", "lan", ips(20)...)}, func(in *Input) {
		in.Config.L2Advertisements = append(in.Config.L2Advertisements,
			&config.L2Advertisement{Name: "rack2-eth1", Pools: []string{"lan"}, Interfaces: []string{"eth1"}, NodeSelectors: sel("rack", "2")})
		in.Config.L2Advertisements[0].Interfaces = []string{"eth0"}
		member(in, "node2").Interfaces = []string{"eth0", "eth1", "eth2"}
	}, func(t *testing.T, st map[string]State) {
		for n, s := range st {
			want := []string{"eth0"}
			if n == "node2" {
				want = []string{"eth0", "eth1"}
			}
			for ip, ifs := range s.Announced() {
				if !reflect.DeepEqual(ifs, want) {
					t.Errorf("%s announces %s on %v, want %v", n, ip, ifs, want)
				}
			}
		}
	}},
	{"interface selection: a named interface the node lacks", []view.Service{svc("web", "lan", ips(20)...)}, func(in *Input) {
		in.Config.L2Advertisements[0].Interfaces = []string{"eth2"}
		member(in, "node3").Interfaces = []string{"eth0", "eth2"}
	}, func(t *testing.T, st map[string]State) {
		for _, ip := range st["node1"].IPs {
			if ip.Winner != "node3" || ip.Excluded.Reason("node1") != election.ReasonInterfacesDown {
				t.Errorf("%+v", ip)
			}
		}
	}},
	{"excluded and network-unavailable nodes", []view.Service{svc("web", "lan", ips(20)...)}, func(in *Input) {
		in.Nodes[0].Labels[election.ExcludeLabel] = ""
		in.Nodes[1].NetworkUnavailable = true
	}, func(t *testing.T, st map[string]State) {
		for _, ip := range st["node3"].IPs {
			if ip.Winner != "node3" || ip.Excluded.Reason("node1") != election.ReasonExcluded || ip.Excluded.Reason("node2") != election.ReasonNetworkUnavailable {
				t.Errorf("%+v", ip)
			}
		}
	}},
	{"ignore the exclude label when told", []view.Service{svc("web", "lan", v4)}, func(in *Input) {
		for i := range in.Nodes {
			in.Nodes[i].Labels[election.ExcludeLabel] = ""
		}
		in.Options.IgnoreExcludeLabel = true
	}, func(t *testing.T, st map[string]State) {
		if ip, _ := st["node1"].Lookup(addr(v4)); ip.Winner == "" {
			t.Errorf("%+v", ip)
		}
	}},
	{"dual stack: both families elected, one announcement per node", []view.Service{svc("web", "lan", v4, v6)}, nil,
		func(t *testing.T, st map[string]State) {
			w4, w6 := election.Winner(addr(v4), nodeNames), election.Winner(addr(v6), nodeNames)
			want := map[string][]netip.Addr{}
			want[w4] = append(want[w4], addr(v4))
			want[w6] = append(want[w6], addr(v6))
			for _, n := range nodeNames {
				var got []netip.Addr
				if len(st[n].Announcements) == 1 {
					got = st[n].Announcements[0].IPs
				}
				if !reflect.DeepEqual(got, want[n]) || len(st[n].Announcements) > 1 {
					t.Errorf("%s announces %+v, want %v", n, st[n].Announcements, want[n])
				}
			}
		}},
	{"dual stack local: both on the endpoint's node", []view.Service{{Namespace: "shop", Name: "web", Pool: "lan",
		IPs: []netip.Addr{addr(v6), addr(v4)}, Local: true, ReadyNodes: map[string]bool{"node2": true}}}, nil,
		func(t *testing.T, st map[string]State) {
			want := []view.Announcement{{Service: ref("web"), Node: "node2", Protocol: Protocol, Interfaces: []string{"eth0", "eth1"}, IPs: []netip.Addr{addr(v4), addr(v6)}}}
			if !reflect.DeepEqual(st["node2"].Announcements, want) {
				t.Errorf("%+v", st["node2"].Announcements)
			}
		}},
	{"a live member without a Node and a Node without a member", []view.Service{svc("web", "lan", ips(20)...)}, func(in *Input) {
		in.Members = append(in.Members[:2], Member{Name: "stranger", Interfaces: []string{"eth0"}})
	}, func(t *testing.T, st map[string]State) {
		for _, ip := range st["node1"].IPs {
			if ip.Winner == "node3" || ip.Winner == "stranger" || ip.Excluded.Reason("node3") != election.ReasonNotLive {
				t.Errorf("%+v", ip)
			}
		}
	}},
}

func TestCompute(t *testing.T) {
	cases := computeCases
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := testInput(c.svcs...)
			if c.setup != nil {
				c.setup(&in)
			}
			c.check(t, everywhere(t, in))
		})
	}
}

func ips(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("192.0.2.%d", 100+i))
	}
	return out
}

func TestIgnored(t *testing.T) {
	tagged := svc("tagged", "picky", "203.0.113.1")
	tagged.Labels = map[string]string{"tier": "web"}
	in := testInput(
		svc("pending", "lan"),
		svc("outside", "lan", "100.64.0.1"),
		svc("foreign", "", "192.0.2.1"),
		svc("mismatch", "quiet", "192.0.2.2"),
		svc("quiet", "quiet", "198.51.100.1"),
		svc("untagged", "picky", "203.0.113.2"),
		tagged,
		svc("invalid", "lan", ""),
		svc("pending", "lan", "192.0.2.3"),
	)
	st := Compute(in)
	want := []view.Ignored{
		{Service: ref("foreign"), Addr: addr("192.0.2.1"), Reason: view.ReasonNotAllocated, Detail: "the IP is in pool lan"},
		{Service: ref("invalid"), Addr: netip.Addr{}, Reason: view.ReasonInvalidIP, Detail: ""},
		{Service: ref("mismatch"), Addr: addr("192.0.2.2"), Reason: view.ReasonPoolMismatch, Detail: "the IP is in pool lan, the annotation says quiet"},
		{Service: ref("outside"), Addr: addr("100.64.0.1"), Reason: view.ReasonOutsidePools, Detail: ""},
		{Service: ref("pending"), Addr: netip.Addr{}, Reason: view.ReasonNoIP, Detail: ""},
		{Service: ref("pending"), Addr: netip.Addr{}, Reason: view.ReasonDuplicateService, Detail: ""},
		{Service: ref("quiet"), Addr: addr("198.51.100.1"), Reason: ReasonNoAdvertisement, Detail: "pool quiet"},
		{Service: ref("untagged"), Addr: addr("203.0.113.2"), Reason: ReasonServiceNotSelected, Detail: "pool picky"},
	}
	if !reflect.DeepEqual(st.Ignored, want) {
		t.Errorf("ignored:\n%+v\nwant\n%+v", st.Ignored, want)
	}
	if len(st.IPs) != 1 || st.IPs[0].Addr != addr("203.0.113.1") || !reflect.DeepEqual(st.IPs[0].Advertisements, []string{"web"}) {
		t.Errorf("elected %+v, want only the tagged Service's IP", st.IPs)
	}
}

func TestSharedIPWithOneSharerNotSelected(t *testing.T) {
	a := svc("a", "picky", "203.0.113.5")
	a.Labels = map[string]string{"tier": "web"}
	b := svc("b", "picky", "203.0.113.5")
	b.Local = true // no endpoints, but it is not announced, so it does not constrain
	st := everywhere(t, testInput(a, b))
	ip, _ := st["node1"].Lookup(addr("203.0.113.5"))
	if ip.Winner == "" || !reflect.DeepEqual(ip.Services, []view.ServiceRef{ref("a")}) {
		t.Errorf("%+v", ip)
	}
	if ig := st["node1"].Ignored; len(ig) != 1 || ig[0].Service != ref("b") || ig[0].Reason != ReasonServiceNotSelected {
		t.Errorf("ignored %+v", ig)
	}
}

// TestLinkDownMovesIP: the winner reports its only announce interface down
// in its metadata; the IP moves, and Diff says who stops and who starts.
func TestLinkDownMovesIP(t *testing.T) {
	v4 := "192.0.2.77"
	in := testInput(svc("web", "lan", v4))
	in.Config.L2Advertisements[0].Interfaces = []string{"eth0"}
	before := everywhere(t, in)
	ip, _ := before["node1"].Lookup(addr(v4))
	old := ip.Winner

	member(&in, old).DownInterfaces = []string{"eth0"}
	after := everywhere(t, in)
	ip, _ = after["node1"].Lookup(addr(v4))
	if ip.Winner == old || ip.Winner == "" || ip.Excluded.Reason(old) != election.ReasonInterfacesDown {
		t.Fatalf("after eth0 down on %s: %+v", old, ip)
	}
	lost := Diff(before[old], after[old])
	if !reflect.DeepEqual(lost.Lost, []IPChange{{addr(v4), []string{"eth0"}}}) || len(lost.Delete) != 1 || len(lost.Gained) != 0 {
		t.Errorf("old winner's changes %+v", lost)
	}
	gained := Diff(before[ip.Winner], after[ip.Winner])
	if !reflect.DeepEqual(gained.Gained, []IPChange{{addr(v4), []string{"eth0"}}}) || len(gained.Create) != 1 {
		t.Errorf("new winner's changes %+v", gained)
	}
	if !reflect.DeepEqual(gained.Moved, []Move{{addr(v4), old, ip.Winner}}) {
		t.Errorf("moved %+v", gained.Moved)
	}

	// With a second interface named, the node keeps the IP on eth1 and
	// the gained/lost interfaces show up when eth0 comes back.
	in.Config.L2Advertisements[0].Interfaces = []string{"eth0", "eth1"}
	one := everywhere(t, in)
	ip1, _ := one["node1"].Lookup(addr(v4))
	if ip1.Winner != old {
		t.Fatalf("with eth1 still up %s should keep it: %+v", old, ip1)
	}
	if got, _ := one[old].Lookup(addr(v4)); !reflect.DeepEqual(got.Interfaces, []string{"eth1"}) {
		t.Errorf("announced on %v, want eth1", got.Interfaces)
	}
	member(&in, old).DownInterfaces = nil
	back := everywhere(t, in)
	d := Diff(one[old], back[old])
	if !reflect.DeepEqual(d.Gained, []IPChange{{addr(v4), []string{"eth0"}}}) || len(d.Update) != 1 || len(d.Moved) != 0 {
		t.Errorf("link back: %+v", d)
	}
}

// TestLocalViewStale: memberlist still says the interface is up but this
// node sees it down: it wins and answers nowhere until its metadata
// spreads and the election moves the IP.
func TestLocalViewStale(t *testing.T) {
	in := testInput(svc("web", "lan", "192.0.2.9"))
	w := election.Winner(addr("192.0.2.9"), nodeNames)
	in = as(in, w)
	in.Local.DownInterfaces = []string{"eth0", "eth1"}
	st := Compute(in)
	if ip := st.IPs[0]; ip.Winner != w || ip.Announced() || ip.Reason != ReasonLocalDown {
		t.Errorf("%+v", st)
	}
	// It publishes why, in its own ServiceAnnouncement without IPs.
	want := []view.Announcement{{
		Service: view.ServiceRef{Namespace: "shop", Name: "web"}, Node: w, Protocol: Protocol,
		Unannounced: []view.Unannounced{{Addr: addr("192.0.2.9"), Reason: ReasonLocalDown}},
	}}
	if !slices.EqualFunc(st.Announcements, want, view.Announcement.Equal) {
		t.Errorf("announcements %+v, want %+v", st.Announcements, want)
	}
}

// TestDeadMemberMovesOnlyItsIPs: a member disappears; only the IPs it won
// get a new winner.
func TestDeadMemberMovesOnlyItsIPs(t *testing.T) {
	in := testInput(svc("web", "lan", ips(60)...))
	before := Compute(in)
	held := map[netip.Addr]bool{}
	for _, ip := range before.IPs {
		if ip.Winner == "node2" {
			held[ip.Addr] = true
		}
	}
	if len(held) == 0 || len(held) == 60 {
		t.Fatalf("node2 holds %d of 60 IPs; the spread is off", len(held))
	}
	in.Members = slices.DeleteFunc(in.Members, func(m Member) bool { return m.Name == "node2" })
	after := Compute(in)
	d := Diff(before, after)
	if len(d.Moved) != len(held) {
		t.Errorf("%d IPs moved, node2 held %d", len(d.Moved), len(held))
	}
	for _, m := range d.Moved {
		if !held[m.Addr] || m.From != "node2" || m.To == "" || m.To == "node2" {
			t.Errorf("moved %+v", m)
		}
	}
	// Seen from node1, it gains exactly the moved IPs it now wins.
	for _, g := range d.Gained {
		ip, _ := after.Lookup(g.Addr)
		if !held[g.Addr] || ip.Winner != "node1" {
			t.Errorf("gained %+v", g)
		}
	}
}

// TestContestedHoldsTakeover: the addresses a dead member held are
// contested; the node that wins one keeps the win (nobody else takes it)
// but answers only once the contest ends, and then gains it.
func TestContestedHoldsTakeover(t *testing.T) {
	in := testInput(svc("web", "lan", ips(60)...))
	before := Compute(in)
	contested := map[netip.Addr]bool{}
	for _, ip := range before.IPs {
		if ip.Winner == "node2" {
			contested[ip.Addr] = true
		}
	}
	in.Members = slices.DeleteFunc(in.Members, func(m Member) bool { return m.Name == "node2" })
	in.Contested = contested
	held := Compute(in)
	in.Contested = nil
	free := Compute(in)
	mine := 0
	for i, ip := range held.IPs {
		f := free.IPs[i]
		if ip.Winner != f.Winner {
			t.Errorf("%s: contested, won by %q; free, by %q: a contest must not change the election", ip.Addr, ip.Winner, f.Winner)
		}
		switch {
		case contested[ip.Addr] && ip.Winner == "node1":
			mine++
			if ip.Announced() || ip.Reason != ReasonContested || !reflect.DeepEqual(ip.Checking, []string{"eth0", "eth1"}) {
				t.Errorf("%s contested and won here: %+v", ip.Addr, ip)
			}
			if !f.Announced() {
				t.Errorf("%s uncontested is not announced: %+v", ip.Addr, f)
			}
		case !reflect.DeepEqual(ip, f):
			t.Errorf("%s is not contested here, yet it differs: %+v, free %+v", ip.Addr, ip, f)
		}
	}
	if mine == 0 {
		t.Fatal("node1 won none of node2's addresses; the test shows nothing")
	}
	// Nothing contested is published as this node's: the others see no
	// announcement of an address nobody answers yet.
	for _, an := range held.Announcements {
		for _, a := range an.IPs {
			if contested[a] {
				t.Errorf("announcement %+v lists contested %s", an, a)
			}
		}
	}
	if d := Diff(before, held); len(d.Gained) != 0 {
		t.Errorf("gained while contested: %+v", d.Gained)
	}
	d := Diff(held, free)
	if len(d.Gained) != mine || len(d.Moved) != 0 {
		t.Errorf("contest over: gained %d (want %d), moved %+v", len(d.Gained), mine, d.Moved)
	}
}

func TestBadInputNeverPanics(t *testing.T) {
	inputs := []Input{
		{},
		{Services: []view.Service{svc("web", "lan", "192.0.2.1")}},
		{Config: &config.Config{}, Services: []view.Service{svc("web", "lan", "192.0.2.1")}},
		{Config: &config.Config{Pools: map[string]*config.Pool{"lan": nil}, L2Advertisements: []*config.L2Advertisement{nil}},
			Services: []view.Service{svc("web", "lan", "192.0.2.1")}},
		func() Input {
			in := testInput(svc("web", "lan", "192.0.2.1", "::ffff:192.0.2.1"), view.Service{})
			in.Config.L2Advertisements = append(in.Config.L2Advertisements, nil)
			in.Nodes = append(in.Nodes, view.Node{}, in.Nodes[0])
			in.Members = append(in.Members, Member{}, in.Members[0])
			in.Local = Local{}
			return in
		}(),
	}
	for i, in := range inputs {
		st := Compute(in)
		for _, ip := range st.IPs {
			if ip.Announced() {
				t.Errorf("input %d: announces %s with no usable local node", i, ip.Addr)
			}
		}
		_ = Diff(st, State{})
	}
	// An IPv4-mapped address is the IPv4 address.
	st := Compute(testInput(svc("web", "lan", "::ffff:192.0.2.1", "192.0.2.1"), svc("api", "lan", "::ffff:192.0.2.2")))
	if len(st.IPs) != 2 || st.IPs[0].Addr != addr("192.0.2.1") || st.IPs[1].Addr != addr("192.0.2.2") || len(st.Ignored) != 0 {
		t.Errorf("mapped addresses: %+v %+v", st.IPs, st.Ignored)
	}
}

func TestDiff(t *testing.T) {
	in := testInput(svc("web", "lan", ips(10)...), svc("api", "lan", "2001:db8::1"))
	in.Services[1].Local, in.Services[1].ReadyNodes = true, map[string]bool{"node1": true}
	st := Compute(in)
	if d := Diff(st, Compute(in)); !d.Empty() {
		t.Errorf("same input, changes %+v", d)
	}
	start := Diff(State{}, st)
	if len(start.Gained) != len(st.Announced()) || len(start.Create) != len(st.Announcements) || len(start.Lost)+len(start.Delete)+len(start.Update) != 0 {
		t.Errorf("from nothing: %+v", start)
	}
	if len(start.Moved) != len(st.IPs) {
		t.Errorf("from nothing every elected IP moves from \"\": %+v", start.Moved)
	}
	for _, g := range start.Gained {
		if !reflect.DeepEqual(g.Interfaces, []string{"eth0", "eth1"}) {
			t.Errorf("gained %+v", g)
		}
	}
	stop := Diff(st, State{Node: "node1"})
	if len(stop.Lost) != len(st.Announced()) || !reflect.DeepEqual(stop.Delete, st.Announcements) {
		t.Errorf("to nothing: %+v", stop)
	}
	// api gets a second IP: its announcement is updated, not recreated.
	in.Services[1].IPs = append(in.Services[1].IPs, addr("192.0.2.200"))
	d := Diff(st, Compute(in))
	if len(d.Update) != 1 || d.Update[0].Service != ref("api") || len(d.Create)+len(d.Delete) != 0 ||
		!reflect.DeepEqual(d.Gained, []IPChange{{addr("192.0.2.200"), []string{"eth0", "eth1"}}}) {
		t.Errorf("added IP: %+v", d)
	}
}

// TestRandomWorlds checks the invariants the speaker relies on over many
// random inputs: all nodes agree on every winner, only the winner answers,
// only on interfaces it has up, and its announcements list exactly what
// it answers for.
func TestRandomWorlds(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ifaces := []string{"eth0", "eth1", "eth2"}
	pick := func() []string {
		var out []string
		for _, i := range ifaces {
			if r.IntN(2) == 0 {
				out = append(out, i)
			}
		}
		return out
	}
	for world := range 300 {
		in := testInput()
		for i := range in.Members {
			in.Members[i].Interfaces = pick()
			in.Members[i].DownInterfaces = pick()
		}
		if r.IntN(4) == 0 {
			in.Members = in.Members[:r.IntN(len(in.Members))]
		}
		for i := range in.Nodes {
			in.Nodes[i].NetworkUnavailable = r.IntN(8) == 0
		}
		ad := in.Config.L2Advertisements[0]
		ad.Interfaces = pick()
		if r.IntN(3) == 0 {
			ad.NodeSelectors = sel("rack", fmt.Sprint(1+r.IntN(2)))
		}
		for s := range 1 + r.IntN(6) {
			sv := svc(fmt.Sprintf("s%d", s), "lan", fmt.Sprintf("192.0.2.%d", r.IntN(8)))
			if r.IntN(3) == 0 {
				sv.IPs = append(sv.IPs, addr(fmt.Sprintf("2001:db8::%d", r.IntN(8))))
			}
			if r.IntN(2) == 0 {
				sv.Local = true
				sv.ReadyNodes = map[string]bool{nodeNames[r.IntN(3)]: true}
				sv.ServingTerminatingNodes = map[string]bool{nodeNames[r.IntN(3)]: true}
			}
			in.Services = append(in.Services, sv)
		}
		st := everywhere(t, in)
		for n, s := range st {
			local := as(in, n).Local
			answered := map[netip.Addr][]string{}
			for _, ip := range s.IPs {
				if ip.Announced() {
					answered[ip.Addr] = ip.Interfaces
				}
				for _, i := range ip.Interfaces {
					if !slices.Contains(local.Interfaces, i) || slices.Contains(local.DownInterfaces, i) {
						t.Fatalf("world %d: %s answers for %s on %s, which is not up", world, n, ip.Addr, i)
					}
				}
			}
			listed := map[netip.Addr]bool{}
			for _, a := range s.Announcements {
				for _, ip := range a.IPs {
					listed[ip] = true
					if _, ok := answered[ip]; !ok {
						t.Fatalf("world %d: %s lists %s for %s without answering for it", world, n, ip, a.Service)
					}
				}
			}
			if len(listed) != len(answered) {
				t.Fatalf("world %d: %s answers for %d IPs, lists %d", world, n, len(answered), len(listed))
			}
		}
	}
}

// An isolated speaker (alone in memberlist while the API shows the other
// speakers alive) keeps only the addresses no other node may announce: a
// Local Service whose only ready endpoint is here, or a pool whose
// advertisement selects this node alone. Everything else it would win
// alone is left to the others, who elect without it: one answer per IP.
func TestIsolatedAnnouncesOnlyWhatNoOtherNodeMay(t *testing.T) {
	cfg := testConfig()
	cfg.Pools["mine"] = &config.Pool{Name: "mine", Ranges: []config.Range{rng("198.18.0.0", "198.18.0.255")}}
	cfg.L2Advertisements = append(cfg.L2Advertisements, &config.L2Advertisement{Name: "mine", Pools: []string{"mine"},
		NodeSelectors: sel("kubernetes.io/hostname", "node1")})
	local := func(name, ip string, nodes ...string) view.Service {
		s := svc(name, "lan", ip)
		s.Local, s.ReadyNodes = true, map[string]bool{}
		for _, n := range nodes {
			s.ReadyNodes[n] = true
		}
		return s
	}
	svcs := []view.Service{
		svc("cluster", "lan", "192.0.2.1"),           // any node may announce
		local("here", "192.0.2.2", "node1"),          // only node1 has an endpoint
		local("both", "192.0.2.3", "node1", "node2"), // node2 too
		svc("pinned", "mine", "198.18.0.1"),          // only node1 is selected
		local("elsewhere", "192.0.2.4", "node3"),     // node1 is no candidate at all
		svc("v6", "lan", "2001:db8::1"),              // as cluster, IPv6
	}
	in := testInput(svcs...)
	in.Config = cfg
	// Alone: memberlist lists only node1.
	in.Members = in.Members[:1]
	in = as(in, "node1")
	alone := Compute(in)
	for _, ip := range alone.IPs {
		if ip.Winner != "node1" && ip.Addr != addr("192.0.2.4") {
			t.Fatalf("alone, node1 should win everything it may announce: %+v", ip)
		}
	}
	in.Isolated = true
	got := Compute(in)
	want := map[string]bool{"192.0.2.2": true, "198.18.0.1": true}
	for _, ip := range got.IPs {
		switch {
		case want[ip.Addr.String()] && !ip.Announced():
			t.Errorf("%s: not announced although no other node may (%+v)", ip.Addr, ip)
		case !want[ip.Addr.String()] && ip.Announced():
			t.Errorf("%s: announced while isolated, although other nodes may win it (%+v)", ip.Addr, ip)
		case !want[ip.Addr.String()] && ip.Addr != addr("192.0.2.4") && ip.Reason != ReasonIsolated:
			t.Errorf("%s: reason %q, want %q", ip.Addr, ip.Reason, ReasonIsolated)
		}
	}
	if n := len(got.Announcements); n != 2 {
		t.Errorf("announcements %+v, want the two Services no other node may announce", got.Announcements)
	}
}

// TestReporterPublishesWhy: a reason every node computes alike (no
// eligible node, the Service selected by no L2Advertisement) is published
// once, by the reporter, with why each node is not eligible; the other
// speakers publish nothing for it.
func TestReporterPublishesWhy(t *testing.T) {
	local := view.Service{Namespace: "shop", Name: "web", Pool: "lan", IPs: []netip.Addr{addr("192.0.2.20")},
		Local: true, ReadyNodes: map[string]bool{"node2": true}}
	in := testInput(local, svc("api", "picky", "203.0.113.5"))
	in.Nodes[1].Labels[election.ExcludeLabel] = ""
	in.Reporter = true
	st := Compute(in)
	want := []view.Announcement{
		{Service: ref("api"), Node: "node1", Protocol: Protocol, Unannounced: []view.Unannounced{{
			Addr: addr("203.0.113.5"), Reason: ReasonServiceNotSelected, Detail: st.Ignored[0].Detail,
		}}},
		{Service: ref("web"), Node: "node1", Protocol: Protocol, Unannounced: []view.Unannounced{{
			Addr: addr("192.0.2.20"), Reason: ReasonNoCandidate,
			Detail: election.ReasonNoLocalEndpoint + ": node1, node3; " + election.ReasonExcluded + ": node2",
		}}},
	}
	if !slices.EqualFunc(st.Announcements, want, view.Announcement.Equal) {
		t.Errorf("reporter's announcements\n %+v\nwant\n %+v", st.Announcements, want)
	}
	for _, n := range []string{"node2", "node3"} {
		other := as(in, n)
		other.Reporter = false
		if st := Compute(other); len(st.Announcements) != 0 {
			t.Errorf("%s (not the reporter) publishes %+v", n, st.Announcements)
		}
	}
}

func TestNodesDetail(t *testing.T) {
	why := map[string]string{}
	for i := range 300 {
		why[fmt.Sprintf("node%03d", i)] = "no ready local endpoint"
	}
	why["edge1"] = "excluded"
	d := view.NodesDetail(why)
	if !strings.HasPrefix(d, "no ready local endpoint: node000, node001, ") || !strings.HasSuffix(d, " more)") || len(d) > 1024 {
		t.Errorf("%d characters: %s", len(d), d)
	}
	if got := view.NodesDetail(map[string]string{"b": "x", "a": "x", "c": "y"}); got != "x: a, b; y: c" {
		t.Errorf("got %q", got)
	}
}
