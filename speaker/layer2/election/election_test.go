package election

import (
	"fmt"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/herald-lb/herald/config"
)

func nodes(n int) []Node {
	var out []Node
	for i := 1; i <= n; i++ {
		out = append(out, Node{
			Name:          fmt.Sprintf("node%d", i),
			Labels:        map[string]string{"kubernetes.io/hostname": fmt.Sprintf("node%d", i), "rack": fmt.Sprint(i % 2)},
			Live:          true,
			Interfaces:    []string{"eth0"},
			HoldsTogether: true,
		})
	}
	return out
}

var anyNode = &config.L2Advertisement{Name: "all", Pools: []string{"lan"}}

func TestCandidatesFilters(t *testing.T) {
	addr := netip.MustParseAddr("198.51.100.200")
	base := func() IP { return IP{Addr: addr, Advertisements: []*config.L2Advertisement{anyNode}} }
	cases := []struct {
		name   string
		mutate func(ns []Node, ip *IP, o *Options)
		want   []string
		why    map[string]string
	}{
		{"all eligible", func([]Node, *IP, *Options) {}, []string{"node1", "node2", "node3"}, map[string]string{}},
		{"dead speaker", func(ns []Node, _ *IP, _ *Options) { ns[0].Live = false },
			[]string{"node2", "node3"}, map[string]string{"node1": ReasonNotLive}},
		{"network unavailable", func(ns []Node, _ *IP, _ *Options) { ns[1].NetworkUnavailable = true },
			[]string{"node1", "node3"}, map[string]string{"node2": ReasonNetworkUnavailable}},
		{"excluded", func(ns []Node, _ *IP, _ *Options) { ns[2].Labels[ExcludeLabel] = "" },
			[]string{"node1", "node2"}, map[string]string{"node3": ReasonExcluded}},
		{"excluded but flag", func(ns []Node, _ *IP, o *Options) { ns[2].Labels[ExcludeLabel] = ""; o.IgnoreExcludeLabel = true },
			[]string{"node1", "node2", "node3"}, map[string]string{}},
		{"node selector", func(_ []Node, ip *IP, _ *Options) {
			ip.Advertisements = []*config.L2Advertisement{{Name: "rack1", NodeSelectors: config.Selectors{config.SelectorFromLabels(map[string]string{"rack": "1"})}}}
		}, []string{"node1", "node3"}, map[string]string{"node2": ReasonNoAdvertisement}},
		{"two advertisements add up", func(_ []Node, ip *IP, _ *Options) {
			ip.Advertisements = []*config.L2Advertisement{
				{Name: "rack1", NodeSelectors: config.Selectors{config.SelectorFromLabels(map[string]string{"rack": "1"})}},
				{Name: "n2", NodeSelectors: config.Selectors{config.SelectorFromLabels(map[string]string{"kubernetes.io/hostname": "node2"})}},
			}
		}, []string{"node1", "node2", "node3"}, map[string]string{}},
		{"no advertisement", func(_ []Node, ip *IP, _ *Options) { ip.Advertisements = nil },
			nil, map[string]string{"node1": ReasonNoAdvertisement, "node2": ReasonNoAdvertisement, "node3": ReasonNoAdvertisement}},
		{"carrier lost on the only interface", func(ns []Node, _ *IP, _ *Options) { ns[0].DownInterfaces = []string{"eth0"} },
			[]string{"node2", "node3"}, map[string]string{"node1": ReasonInterfacesDown}},
		{"named interface missing on a node", func(ns []Node, ip *IP, _ *Options) {
			ip.Advertisements = []*config.L2Advertisement{{Name: "eth1", Interfaces: []string{"eth1"}}}
			ns[1].Interfaces = []string{"eth0", "eth1"}
		}, []string{"node2"}, map[string]string{"node1": ReasonInterfacesDown, "node3": ReasonInterfacesDown}},
		{"local: ready endpoints only", func(_ []Node, ip *IP, _ *Options) {
			ip.Services = []Service{{Local: true, ReadyNodes: map[string]bool{"node2": true}, ServingTerminatingNodes: map[string]bool{"node3": true}}}
		}, []string{"node2"}, map[string]string{"node1": ReasonNoLocalEndpoint, "node3": ReasonNoLocalEndpoint}},
		{"local: terminating fallback when none ready", func(_ []Node, ip *IP, _ *Options) {
			ip.Services = []Service{{Local: true, ServingTerminatingNodes: map[string]bool{"node3": true}}}
		}, []string{"node3"}, map[string]string{"node1": ReasonNoLocalEndpoint, "node2": ReasonNoLocalEndpoint}},
		{"local: no endpoints anywhere", func(_ []Node, ip *IP, _ *Options) { ip.Services = []Service{{Local: true}} },
			nil, map[string]string{"node1": ReasonNoLocalEndpoint, "node2": ReasonNoLocalEndpoint, "node3": ReasonNoLocalEndpoint}},
		{"cluster policy ignores endpoints", func(_ []Node, ip *IP, _ *Options) {
			ip.Services = []Service{{Local: false, ReadyNodes: map[string]bool{"node2": true}}}
		}, []string{"node1", "node2", "node3"}, map[string]string{}},
		{"recovering: ranked after every healthy candidate", func(ns []Node, _ *IP, _ *Options) { ns[0].Recovering = true },
			[]string{"node2", "node3"}, map[string]string{"node1": ReasonRecovering}},
		{"recovering: still a candidate where no healthy node is", func(ns []Node, ip *IP, _ *Options) {
			ns[0].Recovering, ns[1].Recovering = true, true
			ip.Services = []Service{{Local: true, ReadyNodes: map[string]bool{"node1": true, "node2": true}}}
		}, []string{"node1", "node2"}, map[string]string{"node3": ReasonNoLocalEndpoint}},
		{"recovering, counted out with the healthy one (one blip, holds ending apart): a peer", func(ns []Node, _ *IP, _ *Options) {
			ns[0].Recovering, ns[0].CountedOutAt = true, epoch.Add(-200*time.Millisecond)
			ns[1].CountedOutAt = epoch // its hold ended first
			ns[2].Live = false
		}, []string{"node1", "node2"}, map[string]string{"node3": ReasonNotLive}},
		{"recovering, counted out apart from a healthy one: ranked after it", func(ns []Node, _ *IP, _ *Options) {
			ns[0].Recovering, ns[0].CountedOutAt = true, epoch
			ns[1].CountedOutAt = epoch.Add(-TogetherWindow - time.Millisecond)
			ns[2].Live = false
		}, []string{"node2"}, map[string]string{"node1": ReasonRecovering, "node3": ReasonNotLive}},
		{"recovering, counted out with a node whose hold ended but not with another: both wait", func(ns []Node, _ *IP, _ *Options) {
			// A partition healed: node1 and node2 were counted out by
			// one event, node2's hold ended a moment before node1's.
			ns[0].Recovering, ns[0].CountedOutAt = true, epoch
			ns[1].CountedOutAt = epoch.Add(-63 * time.Millisecond)
		}, []string{"node3"}, map[string]string{"node1": ReasonRecovering, "node2": ReasonHeldTogether}},
		{"recovering with a node whose hold ended, a speaker of an older version live: the old rule", func(ns []Node, _ *IP, _ *Options) {
			ns[0].Recovering, ns[0].CountedOutAt = true, epoch
			ns[1].CountedOutAt = epoch.Add(-63 * time.Millisecond)
			ns[2].HoldsTogether = false
		}, []string{"node2", "node3"}, map[string]string{"node1": ReasonRecovering}},
		{"recovered, counted out apart from the one recovering: a candidate", func(ns []Node, _ *IP, _ *Options) {
			ns[0].Recovering, ns[0].CountedOutAt = true, epoch
			ns[1].CountedOutAt = epoch.Add(-TogetherWindow - time.Millisecond)
		}, []string{"node2", "node3"}, map[string]string{"node1": ReasonRecovering}},
		{"recovering, a healthy node never counted out: ranked after it", func(ns []Node, _ *IP, _ *Options) {
			ns[0].Recovering, ns[0].CountedOutAt = true, epoch
			ns[2].Live = false
		}, []string{"node2"}, map[string]string{"node1": ReasonRecovering, "node3": ReasonNotLive}},
		{"recovering and ineligible: the real reason", func(ns []Node, _ *IP, _ *Options) { ns[0].Recovering, ns[0].Live = true, false },
			[]string{"node2", "node3"}, map[string]string{"node1": ReasonNotLive}},
		{"drained: not a candidate while another node is", func(ns []Node, _ *IP, _ *Options) { ns[1].Drained = true },
			[]string{"node1", "node3"}, map[string]string{"node2": ReasonDrained}},
		{"drained: after recovering nodes too", func(ns []Node, _ *IP, _ *Options) {
			ns[0].Recovering, ns[1].Drained, ns[2].Drained = true, true, true
		}, []string{"node1"}, map[string]string{"node2": ReasonDrained, "node3": ReasonDrained}},
		{"drained: kept where no other node may announce (Local, its only endpoint)", func(ns []Node, ip *IP, _ *Options) {
			ns[1].Drained = true
			ip.Services = []Service{{Local: true, ReadyNodes: map[string]bool{"node2": true}}}
		}, []string{"node2"}, map[string]string{"node1": ReasonNoLocalEndpoint, "node3": ReasonNoLocalEndpoint}},
		{"drained everywhere: every node stays a candidate", func(ns []Node, _ *IP, _ *Options) {
			for i := range ns {
				ns[i].Drained = true
			}
		}, []string{"node1", "node2", "node3"}, map[string]string{}},
		{"drained and ineligible: the real reason", func(ns []Node, _ *IP, _ *Options) { ns[0].Drained, ns[0].Live = true, false },
			[]string{"node2", "node3"}, map[string]string{"node1": ReasonNotLive}},
		{"shared IP: every Local sharer needs the node", func(_ []Node, ip *IP, _ *Options) {
			ip.Services = []Service{
				{Local: true, ReadyNodes: map[string]bool{"node1": true, "node2": true}},
				{Local: true, ReadyNodes: map[string]bool{"node2": true, "node3": true}},
			}
		}, []string{"node2"}, map[string]string{"node1": ReasonNoLocalEndpoint, "node3": ReasonNoLocalEndpoint}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ns, ip, o := nodes(3), base(), Options{}
			c.mutate(ns, &ip, &o)
			got, why := Candidates(ip, ns, o)
			if !reflect.DeepEqual(got, c.want) || !reflect.DeepEqual(why, c.why) {
				t.Errorf("candidates %v %v, want %v %v", got, why, c.want, c.why)
			}
		})
	}
}

// TestHoldTogetherKeepsThePeerRule: when every healthy node was counted
// out with a node still in its hold, they stay the healthy ones, that
// node is their peer, and a node in a hold of another event stays after
// them all.
func TestHoldTogetherKeepsThePeerRule(t *testing.T) {
	ns := nodes(4)
	ns[0].Recovering, ns[0].CountedOutAt = true, epoch
	ns[1].CountedOutAt, ns[2].CountedOutAt = epoch, epoch.Add(time.Second)
	ns[3].Recovering, ns[3].CountedOutAt = true, epoch.Add(-20*time.Second)
	ip := IP{Addr: netip.MustParseAddr("198.51.100.200"), Advertisements: []*config.L2Advertisement{anyNode}}
	got, why := Candidates(ip, ns, Options{})
	if want := []string{"node1", "node2", "node3"}; !reflect.DeepEqual(got, want) || why["node4"] != ReasonRecovering || len(why) != 1 {
		t.Errorf("candidates %v %v, want %v with node4 recovering", got, why, want)
	}
}

func ips(n int) []netip.Addr {
	var out []netip.Addr
	a := netip.MustParseAddr("198.51.100.0")
	for i := 0; i < n; i++ {
		a = a.Next()
		out = append(out, a)
	}
	return out
}

func winners(addrs []netip.Addr, cand []string) map[netip.Addr]string {
	m := map[netip.Addr]string{}
	for _, a := range addrs {
		m[a] = Winner(a, cand)
	}
	return m
}

// TestRankingStability: when a node leaves, only the IPs it held move;
// when it comes back, exactly those IPs return; nothing else moves.
func TestRankingStability(t *testing.T) {
	addrs := ips(240)
	all := []string{"node1", "node2", "node3", "node4", "node5"}
	before := winners(addrs, all)
	count := map[string]int{}
	for _, w := range before {
		count[w]++
	}
	for _, n := range all {
		// 240 IPs over 5 nodes: 48 each on average; a fair hash stays
		// well within [24, 72].
		if count[n] < 24 || count[n] > 72 {
			t.Errorf("%s wins %d of 240 IPs: the spread is uneven (%v)", n, count[n], count)
		}
	}
	without3 := winners(addrs, []string{"node1", "node2", "node4", "node5"})
	for _, a := range addrs {
		if before[a] != "node3" && without3[a] != before[a] {
			t.Errorf("%s moved from %s to %s although %s is still there", a, before[a], without3[a], before[a])
		}
		if before[a] == "node3" && without3[a] == "node3" {
			t.Errorf("%s still on the departed node3", a)
		}
	}
	if again := winners(addrs, all); !reflect.DeepEqual(again, before) {
		t.Errorf("node3 rejoining does not restore the original placement")
	}
	// Order of the candidate list does not matter.
	if shuffled := winners(addrs, []string{"node5", "node3", "node1", "node4", "node2"}); !reflect.DeepEqual(shuffled, before) {
		t.Errorf("the winner depends on the order of candidates")
	}
}

func TestElect(t *testing.T) {
	addr := netip.MustParseAddr("198.51.100.201")
	ip := IP{Addr: addr, Advertisements: []*config.L2Advertisement{anyNode}}
	ns := nodes(3)
	w, _ := Elect(ip, ns, Options{})
	if w == "" || w != Rank(addr, []string{"node1", "node2", "node3"})[0] {
		t.Fatalf("winner %q", w)
	}
	// Kill the winner: the runner-up takes over.
	second := Rank(addr, []string{"node1", "node2", "node3"})[1]
	for i := range ns {
		if ns[i].Name == w {
			ns[i].Live = false
		}
	}
	if w2, why := Elect(ip, ns, Options{}); w2 != second || why[w] != ReasonNotLive {
		t.Errorf("after %s died: winner %q (want %s), %v", w, w2, second, why)
	}
	if w, _ := Elect(IP{Addr: addr}, ns, Options{}); w != "" {
		t.Errorf("no advertisement: winner %q", w)
	}
}
