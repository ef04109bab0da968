// Package topology builds the lab's network: one network namespace per node
// on a shared LAN bridge, a client on the LAN, a router with a remote client
// behind it. Plan is a pure function from the lab's size to every name and
// address; Commands renders the plan as `ip`/`sysctl` invocations, so both
// are tested without root. Only documentation and benchmark ranges are used,
// and no namespace gets a route that leads off the machine: the LAN and the
// remote subnet are closed worlds whose only way out is the host's own
// LAN address, which has no route back into them except the LAN itself.
// The host routes only to the lab's members, and while a lab is up it has
// an unreachable route for each of the lab's ranges, so its traffic to any
// other lab address fails on the machine instead of following the
// machine's default route off it.
package topology

import (
	"fmt"
	"net/netip"
)

// MaxNodes is the largest lab: node addresses and pod CIDRs are laid out for
// it.
const MaxNodes = 10

// The address plan. The service and pod ranges match the control plane's
// --service-cluster-ip-range and --cluster-cidr: the cluster is dual-stack
// with IPv4 first, so a Service that asks for nothing stays IPv4-only.
// The IPv6 ranges sit in 2001:db8:1::/48 and 2001:db8:2::/48, apart
// from the LAN's and the remote's 2001:db8:0::/48. 192.0.2.0/24 is left
// unused on purpose: it is the range test machines (this one included) most
// often have on their real uplink, and a lab address equal to the uplink's
// gateway would capture the machine's own traffic.
var (
	LANv4       = netip.MustParsePrefix("198.51.100.0/24")
	LANv6       = netip.MustParsePrefix("2001:db8:0:1::/64")
	RemoteV4    = netip.MustParsePrefix("203.0.113.0/25")
	RemoteV6    = netip.MustParsePrefix("2001:db8:0:2::/64")
	ClusterCIDR = netip.MustParsePrefix("198.18.0.0/16")
	ServiceCIDR = netip.MustParsePrefix("198.19.0.0/16")
	// ClusterCIDRv6 holds a /64 per node; ServiceCIDRv6 is a /112, the
	// size kube-apiserver's allocator handles best.
	ClusterCIDRv6 = netip.MustParsePrefix("2001:db8:1::/48")
	ServiceCIDRv6 = netip.MustParsePrefix("2001:db8:2::/112")
	// L2PoolV4/V6 are the part of the LAN left free for LoadBalancer IPs
	// announced over layer 2; BGPPoolV4/V6 are reached through the router.
	L2PoolV4  = "198.51.100.200-198.51.100.249"
	L2PoolV6  = "2001:db8:0:1::200-2001:db8:0:1::249"
	BGPPoolV4 = netip.MustParsePrefix("203.0.113.128/25")
	BGPPoolV6 = netip.MustParsePrefix("2001:db8:0:100::/120")
)

// DocRanges are the documentation and benchmark ranges (RFC 5737, 2544,
// 3849): the only addresses the lab may use.
var DocRanges = []netip.Prefix{
	netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("2001:db8::/32"),
}

// Host-side and well-known addresses on the LAN.
var (
	HostLANv4   = netip.MustParseAddr("198.51.100.254") // the API server listens here too
	HostLANv6   = netip.MustParseAddr("2001:db8:0:1::fe")
	RouterLANv4 = netip.MustParseAddr("198.51.100.1")
	RouterLANv6 = netip.MustParseAddr("2001:db8:0:1::1")
	ClientV4    = netip.MustParseAddr("198.51.100.100")
	ClientV6    = netip.MustParseAddr("2001:db8:0:1::100")
	RouterRemV4 = netip.MustParseAddr("203.0.113.1")
	RouterRemV6 = netip.MustParseAddr("2001:db8:0:2::1")
	RemoteV4IP  = netip.MustParseAddr("203.0.113.10")
	RemoteV6IP  = netip.MustParseAddr("2001:db8:0:2::10")
)

// Node is one node's share of the plan.
type Node struct {
	Name   string // Kubernetes node name, e.g. node1
	Netns  string
	HostIf string // the host end of its LAN veth
	IPv4   netip.Addr
	IPv6   netip.Addr
	// PodCIDR is routed to the node by every other node; PodGateway is the
	// node's address on its pod bridge. The V6 ones are the same for IPv6.
	PodCIDR      netip.Prefix
	PodGateway   netip.Addr
	PodCIDRv6    netip.Prefix
	PodGatewayV6 netip.Addr
	// Zone is its topology.kubernetes.io/zone label (NodeZone), so the
	// EndpointSlice controller writes zone hints and upstream's Traffic
	// Distribution and Topology Hints tests find zones to tell apart.
	Zone string
}

// Zones are the zones the lab's nodes are spread over, node i in
// Zones[(i-1) % len(Zones)]: three, the fewest upstream's Traffic
// Distribution tests run with.
var Zones = []string{"zone-a", "zone-b", "zone-c"}

// ZoneLabel is the well-known label that puts a Node in a zone.
const ZoneLabel = "topology.kubernetes.io/zone"

// Layout is the whole plan.
type Layout struct {
	Prefix string
	Bridge string // LAN bridge in the root namespace
	Nodes  []Node
	Client string // netns names
	Router string
	Remote string
	// HostIfs are the host ends of the veths of client and router.
	ClientHostIf, RouterHostIf string
}

// Plan lays out a lab of n nodes. prefix (2–5 lower-case letters) starts
// every name the lab creates, so its objects are easy to tell apart from
// the machine's own and `down` finds them all.
func Plan(prefix string, n int) (Layout, error) {
	if n < 1 || n > MaxNodes {
		return Layout{}, fmt.Errorf("nodes: %d is out of range 1-%d", n, MaxNodes)
	}
	if err := checkPrefix(prefix); err != nil {
		return Layout{}, err
	}
	l := Layout{
		Prefix: prefix, Bridge: prefix + "-lan",
		Client: prefix + "-client", Router: prefix + "-router", Remote: prefix + "-remote",
		ClientHostIf: prefix + "-c", RouterHostIf: prefix + "-r",
	}
	for i := 1; i <= n; i++ {
		l.Nodes = append(l.Nodes, Node{
			Name:       fmt.Sprintf("node%d", i),
			Netns:      fmt.Sprintf("%s-node%d", prefix, i),
			HostIf:     fmt.Sprintf("%s-n%d", prefix, i),
			IPv4:       offset4(LANv4.Addr(), 10+i),
			IPv6:       offset6(LANv6.Addr(), 0x10+i),
			PodCIDR:    netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i), 0}), 24),
			PodGateway: netip.AddrFrom4([4]byte{198, 18, byte(i), 1}),
			// 2001:db8:1:<i>::/64, gateway ::1, like 198.18.<i>.1.
			PodCIDRv6:    netip.PrefixFrom(offset6At(ClusterCIDRv6.Addr(), 6, i), 64),
			PodGatewayV6: offset6(offset6At(ClusterCIDRv6.Addr(), 6, i), 1),
			Zone:         Zones[(i-1)%len(Zones)],
		})
	}
	return l, nil
}

func checkPrefix(prefix string) error {
	if len(prefix) < 2 || len(prefix) > 5 {
		return fmt.Errorf("prefix %q: must be 2-5 characters so interface names stay under 16 bytes", prefix)
	}
	for _, r := range prefix {
		if r < 'a' || r > 'z' {
			return fmt.Errorf("prefix %q: only lower-case letters", prefix)
		}
	}
	return nil
}

func offset4(base netip.Addr, n int) netip.Addr {
	b := base.As4()
	b[3] = byte(n)
	return netip.AddrFrom4(b)
}

func offset6(base netip.Addr, n int) netip.Addr { return offset6At(base, 14, n) }

// offset6At sets the 16-bit group starting at byte at to n.
func offset6At(base netip.Addr, at, n int) netip.Addr {
	b := base.As16()
	b[at], b[at+1] = byte(n>>8), byte(n)
	return netip.AddrFrom16(b)
}

// Namespaces lists every namespace of the layout.
func (l Layout) Namespaces() []string {
	out := []string{l.Client, l.Router, l.Remote}
	for _, n := range l.Nodes {
		out = append(out, n.Netns)
	}
	return out
}

// Node returns the node with the Kubernetes name.
func (l Layout) Node(name string) (Node, bool) {
	for _, n := range l.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}
