package kubelet

import (
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// Addresses are handed out in turn, not lowest-free: a replacement pod
// does not get the address its predecessor just released.
func TestAllocateIPInTurn(t *testing.T) {
	k := &Kubelet{ips: map[netip.Addr]types.UID{}}
	k.cfg.PodCIDR = netip.MustParsePrefix("198.18.1.0/29") // .1 gateway, .2-.6 usable, .7 broadcast
	k.cfg.PodGateway = netip.MustParseAddr("198.18.1.1")
	got := func(uid string) string {
		t.Helper()
		a, err := k.allocateIP(types.UID(uid))
		if err != nil {
			return err.Error()
		}
		return a.String()
	}
	if a := got("a"); a != "198.18.1.2" {
		t.Fatalf("first %s", a)
	}
	k.releaseIP("a")
	if b := got("b"); b != "198.18.1.3" {
		t.Errorf("after a release: %s, want the next address", b)
	}
	for _, u := range []string{"c", "d", "e"} {
		got(u)
	}
	// .2 was released; the turn wraps past the broadcast address to it.
	if f := got("f"); f != "198.18.1.2" {
		t.Errorf("wrapped: %s", f)
	}
	if g := got("g"); g != "pod CIDR 198.18.1.0/29 is full" {
		t.Errorf("full CIDR: %s", g)
	}
	if again := got("c"); again != "198.18.1.4" {
		t.Errorf("a pod asking again keeps its address: %s", again)
	}
}

// A pod's IPv6 address has its IPv4 address's host number, so the one
// allocator serves both families; a v6 gateway that breaks the pattern
// is refused, since a pod could then get it.
func TestPodIPv6FollowsIPv4(t *testing.T) {
	c := Config{
		NodeName: "node1", NodeNetns: "n1", NetnsPrefix: "x", Kubeconfig: "k", StateDir: "s",
		NodeIP:       netip.MustParseAddr("198.51.100.11"),
		PodCIDR:      netip.MustParsePrefix("198.18.1.0/24"),
		PodGateway:   netip.MustParseAddr("198.18.1.1"),
		NodeIPv6:     netip.MustParseAddr("2001:db8:0:1::11"),
		PodCIDRv6:    netip.MustParsePrefix("2001:db8:1:1::/64"),
		PodGatewayV6: netip.MustParseAddr("2001:db8:1:1::1"),
	}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	for v4, v6 := range map[string]string{"198.18.1.2": "2001:db8:1:1::2", "198.18.1.254": "2001:db8:1:1::fe"} {
		if got := c.podIPv6(netip.MustParseAddr(v4)).String(); got != v6 {
			t.Errorf("podIPv6(%s) = %s, want %s", v4, got, v6)
		}
	}
	bad := c
	bad.PodGatewayV6 = netip.MustParseAddr("2001:db8:1:1::2")
	if err := bad.validate(); err == nil {
		t.Error("a v6 gateway other than the v4 gateway's host number was accepted")
	}
	bad = c
	bad.NodeIPv6 = netip.Addr{}
	if err := bad.validate(); err == nil {
		t.Error("half a dual-stack config was accepted")
	}
	bad = c
	bad.Kubeconfig = ""
	if err := bad.validate(); err == nil || !strings.Contains(err.Error(), "kubeconfig") {
		t.Errorf("a dual-stack config without a kubeconfig: %v", err)
	}
	single := c
	single.NodeIPv6, single.PodCIDRv6, single.PodGatewayV6 = netip.Addr{}, netip.Prefix{}, netip.Addr{}
	if err := single.validate(); err != nil || single.dualStack() {
		t.Errorf("IPv4-only config: %v, dual-stack %v", err, single.dualStack())
	}
}
