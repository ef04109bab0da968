package rules_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/herald-lb/herald/proxy/rules"
)

// TestChainsDeclaredInOrder: iptables-nft restores large rulesets several
// times faster when chains are declared in name order.
func TestChainsDeclaredInOrder(t *testing.T) {
	var svcs []rules.Service
	eps := map[rules.ServicePortName][]rules.Endpoint{}
	for i := range 50 {
		s := rules.Service{Namespace: "default", Name: "svc-" + string(rune('a'+i%26)) + string(rune('a'+i/26)), PortName: "http",
			Protocol: rules.TCP, Port: 80, NodePort: 30000 + i, ClusterIPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 96, 0, byte(i + 1)})}}
		svcs = append(svcs, s)
		for j := range 3 {
			eps[s.ID()] = append(eps[s.ID()], rules.Endpoint{IP: netip.AddrFrom4([4]byte{10, 244, byte(i), byte(j + 1)}), Port: 8080, Ready: true, Serving: true, NodeName: "n"})
		}
	}
	rs := rules.Render(rules.IPv4, svcs, eps, rules.NodeConfig{Name: "n"})
	var decl []string
	for _, l := range strings.Split(string(rs.NAT), "\n") {
		if strings.HasPrefix(l, ":") {
			decl = append(decl, l)
		}
	}
	if len(decl) < 50*5 || !slices.IsSorted(decl) {
		t.Errorf("%d declarations, sorted %v", len(decl), slices.IsSorted(decl))
	}
}
