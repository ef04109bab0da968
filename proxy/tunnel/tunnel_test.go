package tunnel

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/herald-lb/herald/internal/netnstest"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

type fakeKernel struct {
	dev    *Device
	routes map[string]Route
	calls  []string
	fail   map[string]bool // peer names whose EnsureRoute fails
}

func (k *fakeKernel) EnsureDevice(d Device) (bool, error) {
	if k.dev != nil && k.dev.Underlay == d.Underlay {
		return false, nil
	}
	k.dev = &d
	k.routes = map[string]Route{}
	k.calls = append(k.calls, "device "+d.MAC.String())
	return true, nil
}

func (k *fakeKernel) EnsureRoute(_ string, r Route) error {
	if k.fail[r.Peer] {
		return errors.New("refused")
	}
	k.routes[r.Peer] = r
	k.calls = append(k.calls, fmt.Sprintf("route %s %#x", r.Peer, r.Mark))
	return nil
}

func (k *fakeKernel) DeleteRoute(_ string, r Route) error {
	delete(k.routes, r.Peer)
	k.calls = append(k.calls, "delete "+r.Peer)
	return nil
}

func (k *fakeKernel) DeleteDevice(string) error { k.dev = nil; return nil }

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

// TestManagerMarks: peers get stable ids while they stay, in the mask's
// bits; a peer without an address of this node's family is not
// reachable; a peer gone loses its route and frees its id; a sync that
// changes nothing touches nothing.
func TestManagerMarks(t *testing.T) {
	k := &fakeKernel{}
	m := NewManager(Config{}, k)
	local := netip.MustParseAddr("192.0.2.11")
	marks, err := m.Sync(local, map[string][]netip.Addr{
		"node2": addrs("192.0.2.12", "2001:db8::12"), "node3": addrs("192.0.2.13"), "v6only": addrs("2001:db8::14"), "node1": addrs("192.0.2.11"),
	})
	if err != nil {
		t.Fatal(err)
	}
	// node1 holds this node's own address, and v6only none of its
	// family: neither is a peer. Ids go by name from 1.
	if fmt.Sprint(marks) != fmt.Sprint(map[string]uint32{"node2": 0x10000, "node3": 0x20000}) {
		t.Errorf("marks %v", marks)
	}
	if k.dev == nil || k.dev.MAC.String() != "0e:68:c0:00:02:0b" || k.dev.Port != DefaultPort || k.dev.Underlay != local {
		t.Fatalf("device %+v", k.dev)
	}
	r := k.routes["node2"]
	if r.MAC.String() != "0e:68:c0:00:02:0c" || r.Table != DefaultTableBase+r.ID || r.Hop4.String() != fmt.Sprintf("169.254.0.%d", r.ID) || !r.Hop6.Is6() || !r.Hop6.IsLinkLocalUnicast() {
		t.Errorf("route %+v", r)
	}
	k.calls = nil
	marks2, err := m.Sync(local, map[string][]netip.Addr{"node2": addrs("192.0.2.12"), "node3": addrs("192.0.2.13"), "node1": addrs("192.0.2.11")})
	if err != nil || len(k.calls) != 0 || fmt.Sprint(marks2) != fmt.Sprint(marks) {
		t.Errorf("an unchanged sync: %v, calls %v, marks %v", err, k.calls, marks2)
	}
	// node2 leaves; node4 comes and takes the freed id; node3 keeps its.
	marks3, err := m.Sync(local, map[string][]netip.Addr{"node3": addrs("192.0.2.13"), "node4": addrs("192.0.2.15")})
	if err != nil {
		t.Fatal(err)
	}
	if marks3["node3"] != marks["node3"] || marks3["node4"] != marks["node2"] || len(marks3) != 2 {
		t.Errorf("after node2 left and node4 came: %v (before %v)", marks3, marks)
	}
	if _, ok := k.routes["node2"]; ok {
		t.Error("node2's route stays")
	}
	// A node that moves to another address gets its route again.
	k.calls = nil
	if _, err := m.Sync(local, map[string][]netip.Addr{"node3": addrs("192.0.2.23"), "node4": addrs("192.0.2.15")}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(k.calls, "delete node3") || k.routes["node3"].Underlay.String() != "192.0.2.23" {
		t.Errorf("node3 moved: calls %v", k.calls)
	}
	// The device deleted behind herald's back: the next sync makes it
	// and every route again.
	k.dev = nil
	k.calls = nil
	if _, err := m.Sync(local, map[string][]netip.Addr{"node3": addrs("192.0.2.23"), "node4": addrs("192.0.2.15")}); err != nil {
		t.Fatal(err)
	}
	if len(k.routes) != 2 || len(k.calls) != 3 {
		t.Errorf("after the device went: routes %v, calls %v", k.routes, k.calls)
	}
}

// TestManagerLimits: more peers than the mask holds, a failing route,
// and no local address are errors naming what; the rest still works.
func TestManagerLimits(t *testing.T) {
	k := &fakeKernel{fail: map[string]bool{"b": true}}
	m := NewManager(Config{MarkMask: 0x3 << 20}, k) // 2 ids: 0x3<<20 is this node's own
	peers := map[string][]netip.Addr{}
	for i, n := range []string{"a", "b", "c", "d", "e"} {
		peers[n] = addrs(fmt.Sprintf("192.0.2.%d", 20+i))
	}
	marks, err := m.Sync(netip.MustParseAddr("192.0.2.1"), peers)
	if err == nil || !strings.Contains(err.Error(), "peer b: refused") || !strings.Contains(err.Error(), "more peers than the mark mask") {
		t.Errorf("error %v", err)
	}
	if len(marks) != 1 || marks["a"] != 1<<20 {
		t.Errorf("marks %v: want a alone (b failed, c..e out of ids)", marks)
	}
	for _, v := range marks {
		if v&^(0x3<<20) != 0 || v == 0 || v == 0x3<<20 {
			t.Errorf("mark %#x outside the mask", v)
		}
	}
	if _, err := m.Sync(netip.Addr{}, peers); err == nil {
		t.Error("no local address: want an error")
	}
}

func TestMAC(t *testing.T) {
	if got := MAC(netip.MustParseAddr("192.0.2.3")).String(); got != "0e:68:c0:00:02:03" {
		t.Errorf("IPv4: %s", got)
	}
	a, b := MAC(netip.MustParseAddr("2001:db8::3")), MAC(netip.MustParseAddr("2001:db8::4"))
	if a.String() == b.String() || a[0] != 0x0e || a[0]&1 != 0 {
		t.Errorf("IPv6: %s %s", a, b)
	}
}

// TestNetlinkInKernel makes the tunnel in a scratch network namespace
// (root): the device, and for each peer the FDB entry, next hops, tables
// and rules, so that a packet with a peer's mark is routed into the
// tunnel to it; a peer gone and Close leave nothing behind.
func TestNetlinkInKernel(t *testing.T) {
	netnstest.Enter(t, "a network namespace")
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "eth1"}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	eth0, _ := netlink.LinkByName("eth0")
	for _, a := range []string{"192.0.2.11/24", "2001:db8::11/64"} {
		addr, _ := netlink.ParseAddr(a)
		if err := netlink.AddrAdd(eth0, addr); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"eth0", "eth1"} {
		l, _ := netlink.LinkByName(n)
		_ = netlink.LinkSetUp(l)
	}
	m := NewManager(Config{}, Netlink{Sysctl: t.TempDir()}) // rp_filter must be set over netlink
	marks, err := m.Sync(netip.MustParseAddr("192.0.2.11"), map[string][]netip.Addr{
		"node2": addrs("192.0.2.12", "2001:db8::12"), "node3": addrs("192.0.2.13"),
	})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := netlink.LinkByName(DefaultDevice)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := dev.(*netlink.Vxlan); !ok || v.VxlanId != DefaultVNI || v.Port != DefaultPort || v.HardwareAddr.String() != "0e:68:c0:00:02:0b" || v.Attrs().MTU != 1450 {
		t.Errorf("device %+v", dev)
	}
	for peer, mark := range marks {
		for _, dst := range []string{"198.51.100.10", "2001:db8:1::10"} {
			routes, err := netlink.RouteGetWithOptions(netIP(dst), &netlink.RouteGetOptions{Mark: mark})
			if err != nil || len(routes) != 1 || routes[0].LinkIndex != dev.Attrs().Index {
				t.Errorf("%s with %s's mark %#x: %v %+v", dst, peer, mark, err, routes)
			}
		}
	}
	if routes, err := netlink.RouteGetWithOptions(netIP("198.51.100.10"), &netlink.RouteGetOptions{Mark: 0}); err == nil && len(routes) > 0 && routes[0].LinkIndex == dev.Attrs().Index {
		t.Error("unmarked packets are routed into the tunnel")
	}
	fdb, _ := netlink.NeighList(dev.Attrs().Index, unix.AF_BRIDGE)
	found := false
	for _, e := range fdb {
		found = found || (e.HardwareAddr.String() == "0e:68:c0:00:02:0c" && e.IP.String() == "192.0.2.12")
	}
	if !found {
		t.Errorf("no FDB entry for node2: %+v", fdb)
	}
	b, err := os.ReadFile("/proc/sys/net/ipv4/conf/" + DefaultDevice + "/rp_filter")
	if err != nil || strings.TrimSpace(string(b)) != "2" {
		t.Errorf("rp_filter %q %v", b, err)
	}
	// The device deleted by hand: the next sync repairs it and the routes.
	if err := netlink.LinkDel(dev); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Sync(netip.MustParseAddr("192.0.2.11"), map[string][]netip.Addr{
		"node2": addrs("192.0.2.12", "2001:db8::12"), "node3": addrs("192.0.2.13"),
	}); err != nil {
		t.Fatal(err)
	}
	dev, err = netlink.LinkByName(DefaultDevice)
	if err != nil {
		t.Fatal("not made again:", err)
	}
	if routes, err := netlink.RouteGetWithOptions(netIP("198.51.100.10"), &netlink.RouteGetOptions{Mark: marks["node3"]}); err != nil || len(routes) != 1 || routes[0].LinkIndex != dev.Attrs().Index {
		t.Errorf("after the repair, node3's mark: %v %+v", err, routes)
	}
	// node3 leaves.
	if _, err := m.Sync(netip.MustParseAddr("192.0.2.11"), map[string][]netip.Addr{"node2": addrs("192.0.2.12")}); err != nil {
		t.Fatal(err)
	}
	if n := rulesWithMark(t, marks["node3"]); n != 0 {
		t.Errorf("%d rules of node3 left", n)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName(DefaultDevice); err == nil {
		t.Error("the device stays after Close")
	}
	if n := rulesWithMark(t, marks["node2"]); n != 0 {
		t.Errorf("%d rules of node2 left after Close", n)
	}
	// An uninstall's cleanup knows no ids: Remove finds the rules by
	// their tables.
	m = NewManager(Config{}, Netlink{})
	if _, err := m.Sync(netip.MustParseAddr("192.0.2.11"), map[string][]netip.Addr{"node2": addrs("192.0.2.12")}); err != nil {
		t.Fatal(err)
	}
	if err := (Netlink{}).Remove(Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName(DefaultDevice); err == nil {
		t.Error("the device stays after Remove")
	}
	if n := rulesWithMark(t, marks["node2"]); n != 0 {
		t.Errorf("%d rules left after Remove", n)
	}
}

func netIP(s string) []byte { return netip.MustParseAddr(s).AsSlice() }

func rulesWithMark(t *testing.T, mark uint32) int {
	t.Helper()
	n := 0
	for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
		rs, err := netlink.RuleList(fam)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Mark == mark {
				n++
			}
		}
	}
	return n
}
