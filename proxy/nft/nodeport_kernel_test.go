package nft_test

import (
	"net/netip"
	"testing"

	"github.com/herald-lb/herald/internal/ipfamily"
	"github.com/herald-lb/herald/proxy/nft"
	"github.com/herald-lb/herald/proxy/rules"
)

// TestKernelNodePortIPs: the nodeport-ips set of --nodeport-addresses
// goes into the kernel and out again by partial syncs, as the node's
// addresses come and go: appearing with the restriction, refilled when
// an address is added, emptied, and deleted once NodePorts are
// unrestricted again (after the rules using it are rewritten).
func TestKernelNodePortIPs(t *testing.T) {
	ns := scratchNetNS(t)
	k := &nft.Kernel{NetNS: ns}
	svcs, eps := services(5, 2)
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	withIPs := func(ips ...netip.Addr) rules.NodeConfig {
		n := node()
		n.NodePortAddresses = map[rules.Family][]netip.Addr{rules.IPv4: ips}
		return n
	}
	var prev *nft.Table
	for _, step := range []struct {
		what string
		node rules.NodeConfig
	}{
		{"unrestricted", node()},
		{"restricted to one address", withIPs(a)},
		{"an address added", withIPs(a, b)},
		{"no address allowed", withIPs()},
		{"unrestricted again", node()},
	} {
		rs := rules.RenderNFT(rules.IPv4, svcs, eps, step.node)
		if len(rs.Problems) > 0 {
			t.Fatal(rs.Problems)
		}
		mode := nft.Partial
		if prev == nil {
			mode = nft.Recreate
		}
		if err := k.Apply(ipfamily.IPv4, rs.Table, nft.Diff(prev, rs.Table, mode)); err != nil {
			t.Fatalf("%s: %v", step.what, err)
		}
		sameState(t, step.what, ns, rs.Table)
		_, sets := kernelState(t, ns)
		n, ok := sets[rules.NFTSetNodePortIPs]
		if want := len(step.node.NodePortAddresses[rules.IPv4]); ok != (step.node.NodePortAddresses != nil) || n != want {
			t.Errorf("%s: kernel has %s: %v with %d elements, want %d", step.what, rules.NFTSetNodePortIPs, ok, n, want)
		}
		prev = rs.Table
	}
}
