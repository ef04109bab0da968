package topology

import (
	"fmt"
	"net/netip"
)

// Cmd is one command to run in the root namespace (Netns empty) or inside
// a lab namespace.
type Cmd struct {
	Netns string
	Args  []string
}

func (c Cmd) String() string {
	s := ""
	if c.Netns != "" {
		s = "[" + c.Netns + "] "
	}
	return s + fmt.Sprint(c.Args)
}

type builder struct{ cmds []Cmd }

func (b *builder) root(args ...string)          { b.cmds = append(b.cmds, Cmd{Args: args}) }
func (b *builder) in(ns string, args ...string) { b.cmds = append(b.cmds, Cmd{Netns: ns, Args: args}) }
func (b *builder) sysctl(ns, key, value string) { b.in(ns, "sysctl", "-q", "-w", key+"="+value) }
func pfx(a netip.Addr, p netip.Prefix) string   { return netip.PrefixFrom(a, p.Bits()).String() }

// Commands renders the layout as the commands that build it, in order.
func Commands(l Layout) []Cmd {
	var b builder
	// The LAN bridge, with the host's address on it: node namespaces reach
	// the API server there. The address comes without its prefix route
	// (noprefixroute): the machine may have the same documentation range
	// on its own network (test environments use them), and the kernel
	// would then answer the lab through the machine's real interface, off
	// the machine. Instead hostRoutes sends the host's traffic to each lab
	// member through the bridge. Any other lab address (a LoadBalancer or
	// Service IP, the remote subnet) would follow the machine's default
	// route off the machine, so before the bridge is used the host gets
	// an unreachable route (proto 72) for each of the lab's ranges: that
	// traffic fails on the host with EHOSTUNREACH, and the member routes,
	// more specific, still win. Up refuses a machine that already routes
	// these ranges; Teardown removes exactly these routes.
	b.root("ip", "link", "add", l.Bridge, "type", "bridge")
	b.cmds = append(b.cmds, unreachableRoutes("add")...)
	b.root("ip", "addr", "add", pfx(HostLANv4, LANv4), "dev", l.Bridge, "noprefixroute")
	b.root("ip", "addr", "add", pfx(HostLANv6, LANv6), "dev", l.Bridge, "nodad", "noprefixroute")
	b.root("ip", "link", "set", l.Bridge, "up")
	hostRoutes := func(v4, v6 netip.Addr) {
		b.root("ip", "route", "add", v4.String()+"/32", "dev", l.Bridge, "src", HostLANv4.String())
		b.root("ip", "-6", "route", "add", v6.String()+"/128", "dev", l.Bridge, "src", HostLANv6.String())
	}

	// lanLeg gives a namespace one leg on the LAN, named eth0 inside.
	lanLeg := func(ns, hostIf string, v4, v6 netip.Addr) {
		b.root("ip", "netns", "add", ns)
		b.in(ns, "ip", "link", "set", "lo", "up")
		b.sysctl(ns, "net.ipv6.conf.all.accept_dad", "0")
		b.sysctl(ns, "net.ipv6.conf.default.accept_dad", "0")
		// The kernel flushes IPv6 addresses (not IPv4 ones) when a link
		// goes down; tests that take eth0 down and up again need both back.
		b.sysctl(ns, "net.ipv6.conf.all.keep_addr_on_down", "1")
		b.root("ip", "link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", ns)
		b.root("ip", "link", "set", hostIf, "master", l.Bridge, "up")
		b.in(ns, "ip", "addr", "add", pfx(v4, LANv4), "dev", "eth0")
		b.in(ns, "ip", "addr", "add", pfx(v6, LANv6), "dev", "eth0", "nodad")
		b.in(ns, "ip", "link", "set", "eth0", "up")
	}

	lanLeg(l.Router, l.RouterHostIf, RouterLANv4, RouterLANv6)
	b.sysctl(l.Router, "net.ipv4.ip_forward", "1")
	b.sysctl(l.Router, "net.ipv6.conf.all.forwarding", "1")
	// The remote client hangs off the router on its own subnet.
	b.root("ip", "netns", "add", l.Remote)
	b.in(l.Remote, "ip", "link", "set", "lo", "up")
	b.sysctl(l.Remote, "net.ipv6.conf.all.accept_dad", "0")
	b.sysctl(l.Remote, "net.ipv6.conf.default.accept_dad", "0")
	b.in(l.Router, "ip", "link", "add", "eth1", "type", "veth", "peer", "name", "eth0", "netns", l.Remote)
	b.in(l.Router, "ip", "addr", "add", pfx(RouterRemV4, RemoteV4), "dev", "eth1")
	b.in(l.Router, "ip", "addr", "add", pfx(RouterRemV6, RemoteV6), "dev", "eth1", "nodad")
	b.in(l.Router, "ip", "link", "set", "eth1", "up")
	b.in(l.Remote, "ip", "addr", "add", pfx(RemoteV4IP, RemoteV4), "dev", "eth0")
	b.in(l.Remote, "ip", "addr", "add", pfx(RemoteV6IP, RemoteV6), "dev", "eth0", "nodad")
	b.in(l.Remote, "ip", "link", "set", "eth0", "up")
	// The router is the remote client's only way anywhere, and the router
	// itself has no default route, so nothing leaves the lab.
	b.in(l.Remote, "ip", "route", "add", "default", "via", RouterRemV4.String())
	b.in(l.Remote, "ip", "-6", "route", "add", "default", "via", RouterRemV6.String())

	lanLeg(l.Client, l.ClientHostIf, ClientV4, ClientV6)
	hostRoutes(ClientV4, ClientV6)
	// The router, and the remote client behind it, are members too: the
	// remote client reaches the API server on the host (a client outside
	// the nodes' network, as the upstream e2e suite's runner expects), and
	// the host's replies go back through the router. Only the client's own
	// address: the rest of the remote subnet may be real on the machine's
	// network (test environments put their package mirrors in
	// documentation ranges, 203.0.113.80 here).
	hostRoutes(RouterLANv4, RouterLANv6)
	b.root("ip", "route", "add", RemoteV4IP.String()+"/32", "via", RouterLANv4.String(), "dev", l.Bridge, "src", HostLANv4.String())
	b.root("ip", "-6", "route", "add", RemoteV6IP.String()+"/128", "via", RouterLANv6.String(), "dev", l.Bridge, "src", HostLANv6.String())

	for _, n := range l.Nodes {
		lanLeg(n.Netns, n.HostIf, n.IPv4, n.IPv6)
		hostRoutes(n.IPv4, n.IPv6)
		// Pods that are not on the host network (herald's controller)
		// reach the API server on the host; its replies go back to the
		// pod through the pod's node, as on a routed pod network.
		b.root("ip", "route", "add", n.PodCIDR.String(), "via", n.IPv4.String(), "dev", l.Bridge, "src", HostLANv4.String())
		b.root("ip", "-6", "route", "add", n.PodCIDRv6.String(), "via", n.IPv6.String(), "dev", l.Bridge, "src", HostLANv6.String())
		b.sysctl(n.Netns, "net.ipv4.ip_forward", "1")
		b.sysctl(n.Netns, "net.ipv6.conf.all.forwarding", "1")
		// The pod bridge; the lab kubelet plugs pod veths into it. Its
		// MAC is set, as the CNI bridge plugin does: a bridge without one
		// takes the lowest of its ports' MACs, which changes when that
		// pod goes. IPv4 pods learn the new one from the node's next ARP
		// request, but an IPv6 pod's entry for the gateway's global
		// address stays on the old MAC (the node solicits from its
		// link-local address) until it expires: its replies were lost
		// for up to 30 s (TestChurnSoak).
		b.in(n.Netns, "ip", "link", "add", "cbr0", "address", PodBridgeMAC(n), "type", "bridge")
		b.in(n.Netns, "ip", "addr", "add", pfx(n.PodGateway, n.PodCIDR), "dev", "cbr0")
		b.in(n.Netns, "ip", "addr", "add", pfx(n.PodGatewayV6, n.PodCIDRv6), "dev", "cbr0", "nodad")
		b.in(n.Netns, "ip", "link", "set", "cbr0", "up")
		for _, o := range l.Nodes {
			if o.Name != n.Name {
				b.in(n.Netns, "ip", "route", "add", o.PodCIDR.String(), "via", o.IPv4.String())
				b.in(n.Netns, "ip", "-6", "route", "add", o.PodCIDRv6.String(), "via", o.IPv6.String())
			}
		}
		// Service IPs are never routed anywhere: the proxy DNATs them
		// before they leave. The on-link route only lets a socket connect
		// so that the DNAT can happen.
		b.in(n.Netns, "ip", "route", "add", ServiceCIDR.String(), "dev", "eth0")
		b.in(n.Netns, "ip", "-6", "route", "add", ServiceCIDRv6.String(), "dev", "eth0")
		b.in(n.Netns, "ip", "route", "add", RemoteV4.String(), "via", RouterLANv4.String())
		b.in(n.Netns, "ip", "-6", "route", "add", RemoteV6.String(), "via", RouterLANv6.String())
	}
	return b.cmds
}

// PodBridgeMAC is the fixed, locally administered MAC of a node's pod
// bridge: 02:00 and the bytes of its IPv4 gateway address.
func PodBridgeMAC(n Node) string {
	a := n.PodGateway.As4()
	return fmt.Sprintf("02:00:%02x:%02x:%02x:%02x", a[0], a[1], a[2], a[3])
}
