package rules_test

import (
	"fmt"
	"maps"
	"net/netip"
	"testing"

	"github.com/herald-lb/herald/proxy/nft"
	"github.com/herald-lb/herald/proxy/rules"
)

// benchState makes n Services with m endpoints each: mostly ClusterIP,
// every tenth a LoadBalancer with eTP=Local and a NodePort.
func benchState(n, m int) ([]rules.Service, map[rules.ServicePortName][]rules.Endpoint) {
	svcs := make([]rules.Service, 0, n)
	eps := make(map[rules.ServicePortName][]rules.Endpoint, n)
	for i := range n {
		s := rules.Service{
			Namespace: fmt.Sprintf("ns%d", i%50), Name: fmt.Sprintf("svc%d", i), PortName: "http", Protocol: rules.TCP, Port: 80,
			ClusterIPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)})},
		}
		if i%10 == 0 {
			s.NodePort = 30000 + i%2768
			s.ExternalTrafficPolicy = rules.PolicyLocal
			s.HealthCheckNodePort = 32000 + i%700
			s.LoadBalancerIngress = []rules.Ingress{{IP: netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})}}
		}
		svcs = append(svcs, s)
		for j := range m {
			node := "node-b"
			if j == 0 {
				node = nodeA
			}
			k := i*m + j
			eps[s.ID()] = append(eps[s.ID()], rules.Endpoint{IP: netip.AddrFrom4([4]byte{10, byte(128 + k>>16), byte(k >> 8), byte(k)}), Port: 8080, Ready: true, Serving: true, NodeName: node})
		}
	}
	return svcs, eps
}

func BenchmarkRender(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		svcs, eps := benchState(n, 2)
		node := lab4.node()
		b.Run(fmt.Sprintf("full/services=%d/endpoints=2", n), func(b *testing.B) {
			var rs rules.Ruleset
			for b.Loop() {
				rs = rules.Render(rules.IPv4, svcs, eps, node)
			}
			b.ReportMetric(float64(rs.Stats.NATRules+rs.Stats.FilterRules), "rules")
			b.ReportMetric(float64(len(rs.Bytes()))/1e6, "MB")
		})
		full := rules.Render(rules.IPv4, svcs, eps, node)
		changed := map[rules.ServiceKey]bool{svcs[n/2].ID().Key(): true}
		b.Run(fmt.Sprintf("partial-1-changed/services=%d/endpoints=2", n), func(b *testing.B) {
			var rs rules.Ruleset
			for b.Loop() {
				rs = rules.RenderWith(rules.IPv4, svcs, eps, node, rules.Options{Changed: changed, Existing: full.NATChains})
			}
			b.ReportMetric(float64(rs.Stats.NATRules+rs.Stats.FilterRules), "rules")
			b.ReportMetric(float64(len(rs.Bytes()))/1e6, "MB")
		})
	}
}

// BenchmarkPrune measures what a sync adds to the render: a full sync
// (nothing known, every chain hashed and kept) and a partial one after
// one Service changed (the dispatch chains, a rule per Service, dropped).
func BenchmarkPrune(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		svcs, eps := benchState(n, 2)
		node := lab4.node()
		rendered := rules.Render(rules.IPv4, svcs, eps, node)
		full := rendered.Bytes()
		_, last, _ := rules.Prune(full, nil)
		b.Run(fmt.Sprintf("full/services=%d/endpoints=2", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(full)))
			for b.Loop() {
				rules.Prune(full, nil)
			}
		})
		changed := map[rules.ServiceKey]bool{svcs[n/2].ID().Key(): true}
		eps2 := maps.Clone(eps)
		id := svcs[n/2].ID()
		eps2[id] = eps2[id][:1]
		partial := rules.RenderWith(rules.IPv4, svcs, eps2, node, rules.Options{Changed: changed, Existing: rendered.NATChains}).Bytes()
		b.Run(fmt.Sprintf("partial-1-changed/services=%d/endpoints=2", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(partial)))
			var out []byte
			for b.Loop() {
				out, _, _ = rules.Prune(partial, last)
			}
			b.ReportMetric(float64(len(out)), "out-bytes")
		})
	}
}

// BenchmarkRenderNFT is the nftables mode's render plus the diff a sync
// computes against the previous table, at 10 endpoints per Service: the
// CPU a partial sync spends before it talks to the kernel.
func BenchmarkRenderNFT(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		svcs, eps := benchState(n, 10)
		node := lab4.node()
		b.Run(fmt.Sprintf("render/services=%d/endpoints=10", n), func(b *testing.B) {
			for b.Loop() {
				rules.RenderNFT(rules.IPv4, svcs, eps, node)
			}
		})
		prev := rules.RenderNFT(rules.IPv4, svcs, eps, node)
		eps2 := maps.Clone(eps)
		id := svcs[n/2].ID()
		eps2[id] = eps2[id][1:]
		b.Run(fmt.Sprintf("render+diff-1-endpoint/services=%d/endpoints=10", n), func(b *testing.B) {
			var ch nft.Changes
			changed := map[rules.ServiceKey]bool{id.Key(): true}
			for b.Loop() {
				cur := rules.RenderNFTWith(rules.IPv4, svcs, eps2, node, rules.NFTOptions{Prev: &prev, Changed: changed})
				touched := map[string]bool{}
				for _, c := range cur.ServiceChains[id] {
					touched[c] = true
				}
				ch = nft.DiffWith(prev.Table, cur.Table, nft.Partial, func(c string) bool {
					return rules.IsNFTServiceChain(c) && !touched[c]
				})
			}
			b.ReportMetric(float64(ch.Rules()), "rules-written")
		})
	}
}
