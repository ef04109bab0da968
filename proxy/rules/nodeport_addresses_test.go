package rules_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/herald-lb/herald/proxy/internal/tracer"
	"github.com/herald-lb/herald/proxy/nft"
	"github.com/herald-lb/herald/proxy/rules"
)

// restricted is the lab node with NodePorts allowed only on the given
// addresses of the lab's family.
func (l lab) restricted(addrs ...netip.Addr) rules.NodeConfig {
	n := l.node()
	n.NodePortAddresses = map[rules.Family][]netip.Addr{l.family: addrs}
	return n
}

// toNodePortAt is a NodePort flow from src to one of the node's addresses.
func (l lab) toNodePortAt(src source, dst netip.Addr) tracer.Flow {
	f := l.flow(src, toNodePort)
	f.Dst = dst
	return f
}

// untouched: the packet is delivered to the node itself as it came, as
// to any port nothing listens on; no DNAT, no SNAT, no reject.
var untouched = want{verdict: tracer.Accept}

// TestNodePortAddresses: with --nodeport-addresses, a NodePort is served
// (and, without endpoints, refused) only on the allowed addresses; on
// any other local address the packet falls through untouched, whatever
// the policy and endpoints. Unrestricted, both addresses serve it.
func TestNodePortAddresses(t *testing.T) {
	policies := []rules.TrafficPolicy{rules.PolicyCluster, rules.PolicyLocal}
	for _, m := range modes {
		for _, l := range []lab{lab4, lab6} {
			for _, eTP := range policies {
				for _, set := range []epSet{epsBoth, epsLocal, epsRemote, epsNone} {
					svc := l.web()
					svc.ExternalTrafficPolicy = eTP
					_, _, list := l.endpoints(set)
					eps := epMap(svc, list...)
					only := l.loadModeNode(t, m, l.restricted(l.nodeIP), []rules.Service{svc}, eps, l.nodeIP2)
					none := l.loadModeNode(t, m, l.restricted(), []rules.Service{svc}, eps, l.nodeIP2)
					any := l.loadModeNode(t, m, l.node(), []rules.Service{svc}, eps, l.nodeIP2)
					for _, src := range []source{fromPod, fromNode, fromExternal} {
						served := l.expected(eTP, rules.PolicyCluster, src, toNodePort, set)
						name := fmt.Sprintf("%s/%s/eTP=%v/%s/%s", m, l.family, eTP, set, src)
						t.Run(name, func(t *testing.T) {
							check(t, trace(t, only, l.toNodePortAt(src, l.nodeIP)), served)
							check(t, trace(t, only, l.toNodePortAt(src, l.nodeIP2)), untouched)
							check(t, trace(t, none, l.toNodePortAt(src, l.nodeIP)), untouched)
							check(t, trace(t, none, l.toNodePortAt(src, l.nodeIP2)), untouched)
							check(t, trace(t, any, l.toNodePortAt(src, l.nodeIP)), served)
							check(t, trace(t, any, l.toNodePortAt(src, l.nodeIP2)), served)
						})
					}
				}
			}
		}
	}
}

// The other family keeps NodePorts on every local address (kube-proxy:
// a family without a --nodeport-addresses CIDR is not restricted), and
// its rules are exactly the unrestricted ones.
func TestNodePortAddressesOfTheOtherFamily(t *testing.T) {
	l := lab4
	svc := l.web()
	eps := epMap(svc, ready(l.epLocal, nodeA))
	node := l.node()
	node.NodePortAddresses = map[rules.Family][]netip.Addr{rules.IPv6: {lab6.nodeIP}}
	if got, want := rules.Render(l.family, []rules.Service{svc}, eps, node).Bytes(), render(l, []rules.Service{svc}, eps).Bytes(); string(got) != string(want) {
		t.Errorf("an IPv6 restriction changed the IPv4 rules:\n%s\nwant:\n%s", got, want)
	}
	if got, want := rules.RenderNFT(l.family, []rules.Service{svc}, eps, node).Table.Text(), renderNFT(l, []rules.Service{svc}, eps).Table.Text(); got != want {
		t.Errorf("an IPv6 restriction changed the IPv4 table:\n%s\nwant:\n%s", got, want)
	}
}

// The rules say it the way kube-proxy's do: one jump per address in the
// iptables mode, the nodeport-ips set in the nftables mode.
func TestNodePortAddressesSpelling(t *testing.T) {
	l := lab4
	svc := l.web()
	empty := l.web()
	empty.Name, empty.NodePort, empty.LoadBalancerIngress = "empty", nodePort+1, nil
	svcs := []rules.Service{svc, empty}
	eps := epMap(svc, ready(l.epLocal, nodeA))
	node := l.restricted(l.nodeIP2, l.nodeIP, l.nodeIP)

	rs := rules.Render(l.family, svcs, eps, node)
	mustContain(t, rs.NAT,
		`-A HERALD-SERVICES -m comment --comment "herald service nodeports; NOTE: this must be the last rule in this chain" -d 192.0.2.10 -j HERALD-NODEPORTS`+"\n"+
			`-A HERALD-SERVICES -m comment --comment "herald service nodeports; NOTE: this must be the last rule in this chain" -d 192.0.2.99 -j HERALD-NODEPORTS`+"\n")
	mustContain(t, rs.Filter,
		`-A HERALD-EXTERNAL-SERVICES -m comment --comment "default/empty:http has no endpoints" -d 192.0.2.10 -m tcp -p tcp --dport 30081 -j REJECT`,
		`-A HERALD-EXTERNAL-SERVICES -m comment --comment "default/empty:http has no endpoints" -d 192.0.2.99 -m tcp -p tcp --dport 30081 -j REJECT`)
	mustNotContain(t, rs.Bytes(), "--dst-type LOCAL ! -d", "-m addrtype --dst-type LOCAL -m tcp")

	nrs := rules.RenderNFT(l.family, svcs, eps, node)
	text := []byte(nrs.Table.Text())
	mustContain(t, text,
		"ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports",
		"ip daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports")
	mustNotContain(t, text, "fib daddr type local")
	set := nrs.Table.Set(rules.NFTSetNodePortIPs)
	if set == nil || !slices.Equal(set.Elements, []nft.Element{{Key: nft.Key{Addr: l.nodeIP}}, {Key: nft.Key{Addr: l.nodeIP2}}}) {
		t.Errorf("%s: %+v, want %s and %s", rules.NFTSetNodePortIPs, set, l.nodeIP, l.nodeIP2)
	}

	// Unrestricted, there is no such set.
	if s := renderNFT(l, svcs, eps).Table.Set(rules.NFTSetNodePortIPs); s != nil {
		t.Errorf("unrestricted render has %s", rules.NFTSetNodePortIPs)
	}
}

// Loopback never serves NodePorts: an address of it in the list is
// reported and left out; so are addresses of the wrong family.
func TestNodePortAddressesRefusesLoopback(t *testing.T) {
	for _, l := range []lab{lab4, lab6} {
		loop := netip.MustParseAddr("127.0.0.1")
		other := lab6.nodeIP
		if l.family == rules.IPv6 {
			loop, other = netip.IPv6Loopback(), lab4.nodeIP
		}
		svc := l.web()
		eps := epMap(svc, ready(l.epLocal, nodeA))
		node := l.restricted(loop, other, l.nodeIP)
		for _, m := range modes {
			tr, probs := l.renderMode(t, m, node, []rules.Service{svc}, eps)
			if len(probs) != 2 {
				t.Errorf("%s/%s: problems %v, want the loopback and the other family's address", m, l.family, probs)
			}
			check(t, trace(t, tr, l.toNodePortAt(fromNode, loop)), untouched)
			check(t, trace(t, tr, l.toNodePortAt(fromExternal, l.nodeIP)), want{verdict: tracer.Accept, endpoints: []string{ep(l.epLocal)}, masq: true})
		}
	}
}
