package topology

import (
	"context"
	"net/netip"
	"strings"
	"testing"
)

// documentation and benchmark ranges: the only addresses the lab may use.
var allowed = []netip.Prefix{
	netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("2001:db8::/32"),
}

func isAllowed(a netip.Addr) bool {
	for _, p := range allowed {
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
		// through the lab's own bridge.
		if c.Netns == "" && isRoute(c.Args) && !hostRouteToLab(l, c.Args) {
			t.Errorf("route added in the root namespace: %s", c)
		}
	}
}

func isRoute(args []string) bool {
	return len(args) > 2 && args[0] == "ip" && (args[1] == "route" || args[1] == "-6" && args[2] == "route")
}

// hostRouteToLab: `ip [-6] route add <member>/32|128 dev <bridge> src <host>`,
// or `ip route add <pod CIDR> via <its node> dev <bridge> src <host>`.
func hostRouteToLab(l Layout, args []string) bool {
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
	members := []netip.Addr{ClientV4, ClientV6}
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
	for _, c := range Commands(l) {
		if c.Netns == "" && isRoute(c.Args) {
			got = append(got, strings.Join(c.Args, " "))
		}
		if c.Netns == "" && c.Args[1] == "addr" && !strings.Contains(strings.Join(c.Args, " "), "noprefixroute") {
			t.Errorf("host address with a prefix route (would compete with the machine's own network): %s", c)
		}
	}
	want := []string{
		"ip route add 198.51.100.100/32 dev hlab-lan src 198.51.100.254",
		"ip -6 route add 2001:db8:0:1::100/128 dev hlab-lan src 2001:db8:0:1::fe",
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

func TestTeardownNamesOnlyLabObjects(t *testing.T) {
	existing := Existing{
		Netns: map[string]bool{"hlab-node1": true, "hlab-router": true, "other": true, "hlab-node11": true},
		Links: map[string]bool{"hlab-lan": true, "eth0": true, "hlab-n1": true, "docker0": true},
	}
	cmds, err := Teardown("hlab", existing)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cmds {
		got = append(got, strings.Join(c.Args, " "))
	}
	want := "ip netns delete hlab-router|ip netns delete hlab-node1|ip link delete hlab-lan|ip link delete hlab-n1"
	if strings.Join(got, "|") != want {
		t.Fatalf("teardown:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.ReplaceAll(want, "|", "\n"))
	}
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
