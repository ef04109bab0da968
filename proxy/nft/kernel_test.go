package nft_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/nftables"

	"github.com/herald-lb/herald/internal/ipfamily"
	"github.com/herald-lb/herald/proxy/nft"
	"github.com/herald-lb/herald/proxy/rules"
)

var netnsCount int

// scratchNetNS makes a network namespace for the test and returns its fd.
func scratchNetNS(t *testing.T) int {
	t.Helper()
	_, fd := toolNetNS(t)
	return fd
}

// services is n ClusterIP+NodePort+LB Services with eps endpoints each,
// half of them with session affinity.
func services(n, eps int) ([]rules.Service, map[rules.ServicePortName][]rules.Endpoint) {
	var svcs []rules.Service
	m := map[rules.ServicePortName][]rules.Endpoint{}
	for i := range n {
		s := rules.Service{Namespace: "ns", Name: fmt.Sprintf("svc-%d", i), PortName: "http", Protocol: rules.TCP, Port: 80,
			ClusterIPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)})}, NodePort: 30000 + i,
			LoadBalancerIngress: []rules.Ingress{{IP: netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), Mode: rules.IPModeVIP}}}
		if i%2 == 1 {
			s.SessionAffinity, s.AffinityTimeout = rules.AffinityClientIP, 600
		}
		svcs = append(svcs, s)
		for e := range eps {
			m[s.ID()] = append(m[s.ID()], rules.Endpoint{IP: netip.AddrFrom4([4]byte{10, 244, byte(i), byte(e + 1)}), Port: 8080,
				NodeName: "node-a", Ready: true, Serving: true})
		}
	}
	return svcs, m
}

func node() rules.NodeConfig {
	return rules.NodeConfig{Name: "node-a", IPs: []netip.Addr{netip.MustParseAddr("192.0.2.1")},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}
}

// kernelState reads back, over netlink, the chains with their rule counts
// and each set's element count.
func kernelState(t *testing.T, ns int) (chains map[string]int, sets map[string]int) {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(ns))
	if err != nil {
		t.Fatal(err)
	}
	tb := &nftables.Table{Name: nft.TableName, Family: nftables.TableFamilyIPv4}
	chains, sets = map[string]int{}, map[string]int{}
	all, err := c.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range all {
		if ch.Table.Name != nft.TableName {
			continue
		}
		rs, err := c.GetRules(tb, ch)
		if err != nil {
			t.Fatalf("rules of %s: %v", ch.Name, err)
		}
		chains[ch.Name] = len(rs)
	}
	ss, err := c.GetSets(tb)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		if s.Anonymous {
			continue
		}
		els, err := c.GetSetElements(s)
		if err != nil {
			t.Fatalf("elements of %s: %v", s.Name, err)
		}
		sets[s.Name] = len(els)
	}
	return chains, sets
}

func wantState(tb *nft.Table) (chains map[string]int, sets map[string]int) {
	chains, sets = map[string]int{}, map[string]int{}
	for _, c := range tb.Chains {
		chains[c.Name] = len(c.Rules)
	}
	for _, s := range tb.Sets {
		sets[s.Name] = len(s.Elements)
	}
	return chains, sets
}

func sameState(t *testing.T, what string, ns int, want *nft.Table) {
	t.Helper()
	gc, gs := kernelState(t, ns)
	wc, ws := wantState(want)
	if fmt.Sprint(gc) != fmt.Sprint(wc) {
		var diff []string
		for n, r := range wc {
			if gc[n] != r {
				diff = append(diff, fmt.Sprintf("%s: kernel %d rules, want %d", n, gc[n], r))
			}
		}
		for n := range gc {
			if _, ok := wc[n]; !ok {
				diff = append(diff, n+": left in the kernel")
			}
		}
		slices.Sort(diff)
		t.Errorf("%s: chains differ: %v", what, diff)
	}
	if fmt.Sprint(gs) != fmt.Sprint(ws) {
		t.Errorf("%s: sets (elements) kernel %v, want %v", what, gs, ws)
	}
}

// TestKernelApply programs rendered tables into a scratch namespace's
// kernel: a recreate, a partial sync that adds, changes and removes
// Services (chains, map elements, affinity sets), a full resync and a
// table of 2,000 Services (element chunking, buffer sizes), and reads
// back every chain's rules and every set's elements over netlink.
func TestKernelApply(t *testing.T) {
	ns := scratchNetNS(t)
	k := &nft.Kernel{NetNS: ns}
	svcs, eps := services(20, 3)
	first := rules.RenderNFT(rules.IPv4, svcs, eps, node())
	if len(first.Problems) > 0 {
		t.Fatal(first.Problems)
	}
	apply := func(what string, prev, want *nft.Table, mode nft.Mode) {
		t.Helper()
		ch := nft.Diff(prev, want, mode)
		if err := k.Apply(ipfamily.IPv4, want, ch); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		sameState(t, what, ns, want)
	}
	apply("recreate", nil, first.Table, nft.Recreate)
	if ok, err := k.Exists(ipfamily.IPv4); !ok || err != nil {
		t.Fatalf("Exists = %v, %v after a recreate", ok, err)
	}

	// Partial: service 0 loses an endpoint, 1 loses affinity, 2 goes, a
	// new one comes, 3 gets no endpoints (reject), 4 moves its LB IP.
	svcs2 := slices.Clone(svcs)
	eps2 := map[rules.ServicePortName][]rules.Endpoint{}
	for k, v := range eps {
		eps2[k] = slices.Clone(v)
	}
	eps2[svcs[0].ID()] = eps2[svcs[0].ID()][:2]
	svcs2[1].SessionAffinity = rules.AffinityNone
	delete(eps2, svcs[2].ID())
	svcs2 = slices.Delete(svcs2, 2, 3)
	more, moreEps := services(25, 2)
	svcs2 = append(svcs2, more[21])
	eps2[more[21].ID()] = moreEps[more[21].ID()]
	delete(eps2, svcs[3].ID())
	svcs2[2].LoadBalancerIngress = []rules.Ingress{{IP: netip.MustParseAddr("198.51.100.200"), Mode: rules.IPModeVIP}}
	second := rules.RenderNFT(rules.IPv4, svcs2, eps2, node())
	ch := nft.Diff(first.Table, second.Table, nft.Partial)
	if len(ch.DelChains) == 0 || len(ch.DelSets) == 0 || len(ch.AddChains) == 0 || len(ch.DelElements) == 0 {
		t.Errorf("the partial diff lacks deletions or additions: %+v", ch)
	}
	apply("partial", first.Table, second.Table, nft.Partial)
	apply("no change", second.Table, second.Table, nft.Partial)
	apply("full", second.Table, second.Table, nft.Full)

	big, bigEps := services(2000, 2)
	third := rules.RenderNFT(rules.IPv4, big, bigEps, node())
	apply("2,000 Services", second.Table, third.Table, nft.Partial)
	if err := k.Delete(ipfamily.IPv4); err != nil {
		t.Fatal(err)
	}
	if ok, err := k.Exists(ipfamily.IPv4); ok || err != nil {
		t.Fatalf("Exists = %v, %v after Delete", ok, err)
	}
}
