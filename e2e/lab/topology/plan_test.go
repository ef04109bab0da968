package topology

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func isAllowed(a netip.Addr) bool {
	for _, p := range DocRanges {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func TestPlanAddressesAndNames(t *testing.T) {
	l, err := Plan("hlab", MaxNodes)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, n := range l.Nodes {
		for _, a := range []netip.Addr{n.IPv4, n.IPv6, n.PodGateway, n.PodCIDR.Addr(), n.PodGatewayV6, n.PodCIDRv6.Addr()} {
			if !isAllowed(a) {
				t.Errorf("%s: %s is outside the documentation ranges", n.Name, a)
			}
			if seen[a.String()] {
				t.Errorf("%s: %s used twice", n.Name, a)
			}
			seen[a.String()] = true
		}
		if !LANv4.Contains(n.IPv4) || !LANv6.Contains(n.IPv6) || !ClusterCIDR.Contains(n.PodGateway) || !n.PodCIDR.Contains(n.PodGateway) ||
			!ClusterCIDRv6.Contains(n.PodGatewayV6) || !n.PodCIDRv6.Contains(n.PodGatewayV6) || n.PodCIDRv6.Bits() != 64 {
			t.Errorf("%s: addresses outside their subnets: %+v", n.Name, n)
		}
		for _, r := range []netip.Prefix{LANv6, RemoteV6, ServiceCIDRv6, BGPPoolV6} {
			if n.PodCIDRv6.Overlaps(r) {
				t.Errorf("%s: pod CIDR %s overlaps %s", n.Name, n.PodCIDRv6, r)
			}
		}
		if l2, _ := netip.ParseAddr(strings.Split(L2PoolV4, "-")[0]); n.IPv4.Compare(l2) >= 0 {
			t.Errorf("%s: node address %s inside the L2 pool", n.Name, n.IPv4)
		}
	}
	for _, name := range append(l.Namespaces(), l.Bridge, l.ClientHostIf, l.RouterHostIf) {
		if len(name) > 15 {
			t.Errorf("name %q is longer than an interface name may be", name)
		}
	}
	for _, bad := range []struct {
		prefix string
		n      int
	}{{"hlab", 0}, {"hlab", MaxNodes + 1}, {"h", 3}, {"toolong", 3}, {"HL", 3}, {"h-l", 3}} {
		if _, err := Plan(bad.prefix, bad.n); err == nil {
			t.Errorf("Plan(%q, %d) accepted", bad.prefix, bad.n)
		}
	}
}

// TestCommandsNeverRouteOffMachine: no namespace gets a default route except
// the remote client (towards the router, which has none), and every address
// and route destination is in a documentation range.
func TestCommandsNeverRouteOffMachine(t *testing.T) {
	l, _ := Plan("hlab", 3)
	for _, c := range Commands(l) {
		args := strings.Join(c.Args, " ")
		if strings.Contains(args, "route add default") && c.Netns != l.Remote {
			t.Errorf("default route outside the remote client: %s", c)
		}
		for _, f := range c.Args {
			if p, err := netip.ParsePrefix(f); err == nil && !isAllowed(p.Addr()) {
				t.Errorf("%s: %s is outside the documentation ranges", c, f)
			}
			if a, err := netip.ParseAddr(f); err == nil && !isAllowed(a) {
				t.Errorf("%s: %s is outside the documentation ranges", c, f)
			}
		}
		// The root namespace only gets host routes to lab members,
		// through the lab's own bridge, and unreachable ones.
		if c.Netns == "" && isRoute(c.Args) && !hostRouteToLab(l, c.Args) && !isUnreachableRoute(c.Args) {
			t.Errorf("route added in the root namespace: %s", c)
		}
	}
}

// isUnreachableRoute: `ip [-6] route add unreachable <lab range> proto 72`.
func isUnreachableRoute(args []string) bool {
	for _, r := range labRanges {
		want := "ip route add unreachable " + r.String() + " proto " + RouteProto
		if r.Addr().Is6() {
			want = "ip -6 route add unreachable " + r.String() + " proto " + RouteProto
		}
		if strings.Join(args, " ") == want {
			return true
		}
	}
	return false
}

func isRoute(args []string) bool {
	return len(args) > 2 && args[0] == "ip" && (args[1] == "route" || args[1] == "-6" && args[2] == "route")
}

// hostRouteToLab: `ip [-6] route add <member>/32|128 dev <bridge> src <host>`,
// or `ip route add <pod CIDR> via <its node> dev <bridge> src <host>`.
func hostRouteToLab(l Layout, args []string) bool {
	// The remote client, through the router.
	switch strings.Join(args, " ") {
	case "ip route add " + RemoteV4IP.String() + "/32 via " + RouterLANv4.String() + " dev " + l.Bridge + " src " + HostLANv4.String(),
		"ip -6 route add " + RemoteV6IP.String() + "/128 via " + RouterLANv6.String() + " dev " + l.Bridge + " src " + HostLANv6.String():
		return true
	}
	for _, n := range l.Nodes {
		switch strings.Join(args, " ") {
		case "ip route add " + n.PodCIDR.String() + " via " + n.IPv4.String() + " dev " + l.Bridge + " src " + HostLANv4.String(),
			"ip -6 route add " + n.PodCIDRv6.String() + " via " + n.IPv6.String() + " dev " + l.Bridge + " src " + HostLANv6.String():
			return true
		}
	}
	if len(args) > 1 && args[1] == "-6" {
		args = append([]string{args[0]}, args[2:]...)
	}
	if len(args) != 8 || strings.Join(args[:3], " ") != "ip route add" || args[4] != "dev" || args[5] != l.Bridge || args[6] != "src" {
		return false
	}
	p, err := netip.ParsePrefix(args[3])
	if err != nil || !p.IsSingleIP() {
		return false
	}
	members := []netip.Addr{ClientV4, ClientV6, RouterLANv4, RouterLANv6}
	for _, n := range l.Nodes {
		members = append(members, n.IPv4, n.IPv6)
	}
	for _, m := range members {
		if m == p.Addr() {
			return args[7] == HostLANv4.String() || args[7] == HostLANv6.String()
		}
	}
	return false
}

func TestHostRoutesOnlyToLabMembers(t *testing.T) {
	l, _ := Plan("hlab", 2)
	var got []string
	bridgeUsed := false
	for _, c := range Commands(l) {
		if c.Netns == "" && isRoute(c.Args) {
			got = append(got, strings.Join(c.Args, " "))
			if isUnreachableRoute(c.Args) && bridgeUsed {
				t.Errorf("%s comes after the bridge is in use", c)
			}
		}
		if c.Netns == "" && (c.Args[1] == "addr" || strings.Join(c.Args[1:3], " ") == "link set") {
			bridgeUsed = true
		}
		if c.Netns == "" && c.Args[1] == "addr" && !strings.Contains(strings.Join(c.Args, " "), "noprefixroute") {
			t.Errorf("host address with a prefix route (would compete with the machine's own network): %s", c)
		}
	}
	want := []string{
		// Every lab range fails on the host...
		"ip route add unreachable 198.51.100.0/24 proto 72",
		"ip -6 route add unreachable 2001:db8:0:1::/64 proto 72",
		"ip route add unreachable 198.18.0.0/16 proto 72",
		"ip route add unreachable 198.19.0.0/16 proto 72",
		"ip -6 route add unreachable 2001:db8:1::/48 proto 72",
		"ip -6 route add unreachable 2001:db8:2::/112 proto 72",
		// ...but for the members, more specific.
		"ip route add 198.51.100.100/32 dev hlab-lan src 198.51.100.254",
		"ip -6 route add 2001:db8:0:1::100/128 dev hlab-lan src 2001:db8:0:1::fe",
		"ip route add 198.51.100.1/32 dev hlab-lan src 198.51.100.254",
		"ip -6 route add 2001:db8:0:1::1/128 dev hlab-lan src 2001:db8:0:1::fe",
		"ip route add 203.0.113.10/32 via 198.51.100.1 dev hlab-lan src 198.51.100.254",
		"ip -6 route add 2001:db8:0:2::10/128 via 2001:db8:0:1::1 dev hlab-lan src 2001:db8:0:1::fe",
		"ip route add 198.51.100.11/32 dev hlab-lan src 198.51.100.254",
		"ip -6 route add 2001:db8:0:1::11/128 dev hlab-lan src 2001:db8:0:1::fe",
		"ip route add 198.18.1.0/24 via 198.51.100.11 dev hlab-lan src 198.51.100.254",
		"ip -6 route add 2001:db8:1:1::/64 via 2001:db8:0:1::11 dev hlab-lan src 2001:db8:0:1::fe",
		"ip route add 198.51.100.12/32 dev hlab-lan src 198.51.100.254",
		"ip -6 route add 2001:db8:0:1::12/128 dev hlab-lan src 2001:db8:0:1::fe",
		"ip route add 198.18.2.0/24 via 198.51.100.12 dev hlab-lan src 198.51.100.254",
		"ip -6 route add 2001:db8:1:2::/64 via 2001:db8:0:1::12 dev hlab-lan src 2001:db8:0:1::fe",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("host routes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestPodRoutesBetweenNodes(t *testing.T) {
	l, _ := Plan("hlab", 3)
	routes := map[string][]string{}
	for _, c := range Commands(l) {
		args := c.Args
		if len(args) > 1 && args[1] == "-6" {
			args = append([]string{args[0]}, args[2:]...)
		}
		if len(args) > 5 && args[1] == "route" && args[2] == "add" && args[4] == "via" {
			if a := netip.MustParsePrefix(ifPrefix(args[3])).Addr(); ClusterCIDR.Contains(a) || ClusterCIDRv6.Contains(a) {
				routes[c.Netns] = append(routes[c.Netns], args[3]+" via "+args[5])
			}
		}
	}
	want := map[string]string{
		"hlab-node1": "198.18.2.0/24 via 198.51.100.12,2001:db8:1:2::/64 via 2001:db8:0:1::12,198.18.3.0/24 via 198.51.100.13,2001:db8:1:3::/64 via 2001:db8:0:1::13",
		"hlab-node2": "198.18.1.0/24 via 198.51.100.11,2001:db8:1:1::/64 via 2001:db8:0:1::11,198.18.3.0/24 via 198.51.100.13,2001:db8:1:3::/64 via 2001:db8:0:1::13",
		"hlab-node3": "198.18.1.0/24 via 198.51.100.11,2001:db8:1:1::/64 via 2001:db8:0:1::11,198.18.2.0/24 via 198.51.100.12,2001:db8:1:2::/64 via 2001:db8:0:1::12",
	}
	for ns, w := range want {
		if got := strings.Join(routes[ns], ","); got != w {
			t.Errorf("%s pod routes %q, want %q", ns, got, w)
		}
	}
}

func ifPrefix(s string) string {
	if _, err := netip.ParsePrefix(s); err == nil {
		return s
	}
	return "0.0.0.0/32"
}

type fakeRunner struct{ ran []Cmd }

func (f *fakeRunner) Run(_ context.Context, c Cmd) error { f.ran = append(f.ran, c); return nil }

func TestUpRefusesExistingLab(t *testing.T) {
	l, _ := Plan("hlab", 2)
	var f fakeRunner
	err := Up(context.Background(), &f, l, Existing{Netns: map[string]bool{"hlab-node2": true}})
	if err == nil || !strings.Contains(err.Error(), "hlab-node2 already exists") || len(f.ran) != 0 {
		t.Fatalf("Up over an existing lab: err=%v ran=%d", err, len(f.ran))
	}
}

// hostRoutesUp is what `ip -o route show` and `ip -o -6 route show` print
// with a lab up, plus routes that look like the lab's but are not.
const hostRoutesUp4 = `default via 192.0.2.1 dev eth0 
192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2 
unreachable 198.18.0.0/16 proto 72 
unreachable 198.19.0.0/16 proto 72 
198.18.1.0/24 via 198.51.100.11 dev hlab-lan src 198.51.100.254 
198.51.100.11 dev hlab-lan scope link src 198.51.100.254 
unreachable 198.51.100.0/24 proto 72 
unreachable 198.51.100.0/24 proto static metric 100 
unreachable 203.0.113.0/25 proto 72 
unreachable 203.0.113.128/25 proto 72 
unreachable 192.0.2.128/25 proto 72 
`

const hostRoutesUp6 = `2001:db8:0:1::11 dev hlab-lan src 2001:db8:0:1::fe metric 1024 pref medium
unreachable 2001:db8:0:1::/64 dev lo proto 72 metric 1024 pref medium
unreachable 2001:db8:1::/48 dev lo proto 72 metric 1024 pref medium
blackhole 2001:db8:2::/112 dev lo proto 72 metric 1024 pref medium
default via fd00::1 dev eth0 metric 1024 pref medium
`

func teardownArgs(t *testing.T, prefix string, e Existing) string {
	t.Helper()
	cmds, err := Teardown(prefix, e)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cmds {
		if c.Netns != "" {
			t.Errorf("teardown runs %s inside a namespace", c)
		}
		got = append(got, strings.Join(c.Args, " "))
	}
	return strings.Join(got, "\n")
}

// TestTeardownNamesOnlyLabObjects: the lab's namespaces and links by
// name, and of the host's routes only the unreachable ones the lab adds
// (type, range and proto 72), after the veths and before the bridge; none
// while another lab is up (the routes are the same for every lab).
func TestTeardownNamesOnlyLabObjects(t *testing.T) {
	existing := Existing{
		Netns:  map[string]bool{"hlab-node1": true, "hlab-router": true, "other": true, "hlab-node11": true},
		Links:  map[string]bool{"hlab-lan": true, "eth0": true, "hlab-n1": true, "docker0": true},
		Routes: append(parseRoutes(hostRoutesUp4, false), parseRoutes(hostRoutesUp6, true)...),
	}
	want := `ip netns delete hlab-router
ip netns delete hlab-node1
ip link delete hlab-n1
ip route del unreachable 198.51.100.0/24 proto 72
ip -6 route del unreachable 2001:db8:0:1::/64 proto 72
ip route del unreachable 203.0.113.0/25 proto 72
ip route del unreachable 198.18.0.0/16 proto 72
ip route del unreachable 198.19.0.0/16 proto 72
ip -6 route del unreachable 2001:db8:1::/48 proto 72
ip route del unreachable 203.0.113.128/25 proto 72
ip link delete hlab-lan`
	if got := teardownArgs(t, "hlab", existing); got != want {
		t.Errorf("teardown:\n%s\nwant:\n%s", got, want)
	}

	// Another lab is up: its bridge has the host's LAN address.
	existing.AddrsByLink = map[string][]netip.Prefix{"hle-lan": {netip.PrefixFrom(HostLANv4, 24)}}
	want = `ip netns delete hlab-router
ip netns delete hlab-node1
ip link delete hlab-n1
ip link delete hlab-lan`
	if got := teardownArgs(t, "hlab", existing); got != want {
		t.Errorf("teardown while hle is up:\n%s\nwant:\n%s", got, want)
	}
	// This lab's own bridge holding it is no other lab.
	existing.AddrsByLink = map[string][]netip.Prefix{"hlab-lan": {netip.PrefixFrom(HostLANv4, 24)}}
	if got := teardownArgs(t, "hlab", existing); !strings.Contains(got, "ip route del unreachable 198.51.100.0/24 proto 72") {
		t.Errorf("teardown with its own bridge up keeps the routes:\n%s", got)
	}
}

func TestParseRoutes(t *testing.T) {
	var got []string
	for _, r := range append(parseRoutes(hostRoutesUp4, false), parseRoutes(hostRoutesUp6, true)...) {
		got = append(got, r.String())
	}
	want := `unicast 0.0.0.0/0 dev eth0
unicast 192.0.2.0/24 dev eth0 proto kernel
unreachable 198.18.0.0/16 proto 72
unreachable 198.19.0.0/16 proto 72
unicast 198.18.1.0/24 dev hlab-lan
unicast 198.51.100.11/32 dev hlab-lan
unreachable 198.51.100.0/24 proto 72
unreachable 198.51.100.0/24 proto static
unreachable 203.0.113.0/25 proto 72
unreachable 203.0.113.128/25 proto 72
unreachable 192.0.2.128/25 proto 72
unicast 2001:db8:0:1::11/128 dev hlab-lan
unreachable 2001:db8:0:1::/64 dev lo proto 72
unreachable 2001:db8:1::/48 dev lo proto 72
blackhole 2001:db8:2::/112 dev lo proto 72
unicast ::/0 dev eth0`
	if strings.Join(got, "\n") != want {
		t.Errorf("parsed:\n%s\nwant:\n%s", strings.Join(got, "\n"), want)
	}
}

// TestLabRoutes: what ObserveMachine records of the host's routes.
func TestLabRoutes(t *testing.T) {
	e := Existing{
		Links:  map[string]bool{"hlab-lan": true, "eth0": true},
		Routes: append(parseRoutes(hostRoutesUp4, false), parseRoutes(hostRoutesUp6, true)...),
	}
	// All but the default routes and those outside the lab's ranges.
	var want []string
	for _, r := range e.Routes {
		switch r.Dst.String() {
		case "0.0.0.0/0", "::/0", "192.0.2.0/24", "192.0.2.128/25":
		default:
			want = append(want, r.String())
		}
	}
	if got := LabRoutes(e, "hlab"); strings.Join(got, "\n") != strings.Join(want, "\n") || len(got) != 12 {
		t.Errorf("LabRoutes(hlab):\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// For another lab, hlab's member routes and the shared unreachable
	// ones are hlab's; routes of the machine's own are everybody's.
	others := "unreachable 198.51.100.0/24 proto static\nblackhole 2001:db8:2::/112 dev lo proto 72"
	if got := strings.Join(LabRoutes(e, "hle"), "\n"); got != others {
		t.Errorf("LabRoutes(hle) with hlab up:\n%s\nwant:\n%s", got, others)
	}
}

// TestUpRefusesHostRoutes: a route of the machine's own into the lab's
// ranges, or the lab's unreachable routes left behind, stop Up before it
// runs anything; the machine's general routes (default, a VPN's halves,
// its own documentation subnet outside the lab's) do not.
func TestUpRefusesHostRoutes(t *testing.T) {
	machine := parseRoutes(`default via 192.0.2.1 dev eth0 
0.0.0.0/1 via 10.8.0.1 dev tun0 
10.88.0.0/16 dev cni-podman0 proto kernel scope link src 10.88.0.1 linkdown 
192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2 
198.0.0.0/8 via 192.0.2.1 dev eth0 
`, false)
	machine = append(machine, parseRoutes(`fd00::/64 dev eth0 proto kernel metric 256 pref medium
fe80::/64 dev eth0 proto kernel metric 256 pref medium
2000::/3 via fd00::1 dev eth0 metric 1024 pref medium
default via fd00::1 dev eth0 metric 1024 pref medium
`, true)...)
	if err := CheckHostRoutes(machine); err != nil {
		t.Fatalf("the machine's general routes: %v", err)
	}
	l, _ := Plan("hlab", 2)
	for _, c := range []struct{ line, want string }{
		{"198.18.0.0/15 via 192.0.2.1 dev eth0", `route "unicast 198.18.0.0/15 dev eth0" into the lab's address ranges`},
		{"203.0.113.7 via 192.0.2.1 dev eth0", `route "unicast 203.0.113.7/32 dev eth0" into the lab's address ranges`},
		{"2001:db8::/32 via fd00::1 dev eth0 metric 1024 pref medium", `route "unicast 2001:db8::/32 dev eth0" into`},
		{"blackhole 198.19.0.0/16", `route "blackhole 198.19.0.0/16" into`},
		{"unreachable 198.51.100.0/24 proto 72", `already has the lab's route "unreachable 198.51.100.0/24 proto 72": a lab is up or a killed one left it`},
	} {
		routes := append(machine[:len(machine):len(machine)], parseRoutes(c.line, strings.Contains(c.line, ":"))...)
		var f fakeRunner
		err := Up(context.Background(), &f, l, Existing{Routes: routes})
		if err == nil || !strings.Contains(err.Error(), c.want) || len(f.ran) != 0 {
			t.Errorf("Up with %q: err=%v ran=%d, want %q", c.line, err, len(f.ran), c.want)
		}
	}
}

// TestLabRangesHoldTheLab: the host's unreachable routes cover every
// address of the plan and both pools, and only documentation ranges.
func TestLabRangesHoldTheLab(t *testing.T) {
	l, _ := Plan("hlab", MaxNodes)
	addrs := []netip.Addr{HostLANv4, HostLANv6, RouterLANv4, RouterLANv6, ClientV4, ClientV6, RouterRemV4, RouterRemV6, RemoteV4IP, RemoteV6IP}
	var prefixes []netip.Prefix
	for _, n := range l.Nodes {
		addrs = append(addrs, n.IPv4, n.IPv6, n.PodGateway, n.PodGatewayV6)
		prefixes = append(prefixes, n.PodCIDR, n.PodCIDRv6)
	}
	for _, pool := range []string{L2PoolV4, L2PoolV6} {
		from, to, _ := strings.Cut(pool, "-")
		addrs = append(addrs, netip.MustParseAddr(from), netip.MustParseAddr(to))
	}
	for _, p := range prefixes {
		addrs = append(addrs, p.Addr(), lastAddr(p))
	}
	for _, p := range []netip.Prefix{BGPPoolV4, BGPPoolV6, ServiceCIDR, ServiceCIDRv6, ClusterCIDR, ClusterCIDRv6, LANv4, LANv6, RemoteV4, RemoteV6} {
		addrs = append(addrs, p.Addr(), lastAddr(p))
	}
	for _, a := range addrs {
		covered := false
		for _, r := range labRanges {
			covered = covered || r.Contains(a)
		}
		if !covered {
			t.Errorf("%s is in none of the lab's ranges: the host would route it off the machine", a)
		}
	}
	for _, r := range labRanges {
		if !intoLab(r) || !isAllowed(r.Addr()) || !isAllowed(lastAddr(r)) {
			t.Errorf("lab range %s is not inside the documentation ranges", r)
		}
	}
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func TestUpRefusesOverlappingHostNetwork(t *testing.T) {
	out := "1: lo    inet 127.0.0.1/8 scope host lo\n" +
		"2: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\n" +
		"2: eth0    inet6 fd00::2/64 scope global\n" +
		"2: eth0    inet6 fe80::fc:ff:fe00:1/64 scope link\n" +
		"5: hlab-lan    inet 198.51.100.254/24 scope global hlab-lan\n"
	byLink := parseAddrs(out)
	if len(byLink) != 2 || len(byLink["hlab-lan"]) != 1 || byLink["hlab-lan"][0].Addr() != HostLANv4 {
		t.Fatalf("parsed %v, want eth0's two global addresses and the lab bridge's", byLink)
	}
	addrs := byLink["eth0"]
	if len(addrs) != 2 {
		t.Fatalf("parsed %v, want the two global addresses", addrs)
	}
	if err := CheckHostAddresses(addrs); err != nil {
		t.Fatalf("192.0.2.0/24 and fd00::/64 are outside the lab: %v", err)
	}
	l, _ := Plan("hlab", 2)
	var f fakeRunner
	clash := append(addrs, netip.MustParsePrefix("198.51.100.7/24"))
	err := Up(context.Background(), &f, l, Existing{Addrs: clash})
	if err == nil || !strings.Contains(err.Error(), "198.51.100.7/24") || len(f.ran) != 0 {
		t.Fatalf("Up on a machine with the LAN range: err=%v ran=%d", err, len(f.ran))
	}
}

// TestPlanZones: nodes are spread over the zones in turn, so 3 nodes are
// in 3 zones (upstream's Traffic Distribution tests need 3) and 2 in 2.
func TestPlanZones(t *testing.T) {
	for n, want := range map[int][]string{
		1: {"zone-a"},
		2: {"zone-a", "zone-b"},
		3: {"zone-a", "zone-b", "zone-c"},
		5: {"zone-a", "zone-b", "zone-c", "zone-a", "zone-b"},
	} {
		l, err := Plan("hlab", n)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, node := range l.Nodes {
			got = append(got, node.Zone)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%d nodes: zones %q, want %q", n, got, want)
		}
	}
}
