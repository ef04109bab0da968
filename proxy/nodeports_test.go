package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/herald-lb/herald/proxy/healthcheck"
	"github.com/herald-lb/herald/proxy/nft"
	"github.com/herald-lb/herald/proxy/rules"
)

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

func TestParseNodePortAddresses(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{" 192.0.2.10/24 , 2001:db8::/64", "192.0.2.0/24,2001:db8::/64"},
		{"primary", "primary"},
		{"0.0.0.0/0", "0.0.0.0/0"},
	} {
		got, err := ParseNodePortAddresses(c.in)
		if err != nil || got.String() != c.want || got.IsSet() != (c.want != "") {
			t.Errorf("%q: %v (set %v), %v; want %s", c.in, got, got.IsSet(), err, c.want)
		}
	}
	o, err := ParseFlags([]string{"--hostname-override=n1", "--nodeport-addresses=primary"}, io.Discard)
	if err != nil || !o.NodePortAddresses.Primary {
		t.Errorf("--nodeport-addresses=primary: %+v, %v", o.NodePortAddresses, err)
	}
}

// allowed follows kube-proxy: the local addresses inside the family's
// CIDRs; a family without a CIDR, or with a zero-length one, is not
// restricted; "primary" is the node's primary IPs when they are local.
func TestNodePortAddressesAllowed(t *testing.T) {
	local := addrs("127.0.0.1", "192.0.2.10", "192.0.2.99", "198.51.100.1", "::1", "2001:db8::10", "2001:db8:1::10")
	primary := addrs("192.0.2.10", "2001:db8::10")
	v4 := func(s ...string) map[rules.Family][]netip.Addr {
		return map[rules.Family][]netip.Addr{rules.IPv4: addrs(s...)}
	}
	for _, c := range []struct {
		flag    string
		primary []netip.Addr
		want    map[rules.Family][]netip.Addr
	}{
		{"192.0.2.0/24", nil, v4("192.0.2.10", "192.0.2.99")},
		{"192.0.2.10/32,192.0.2.0/24", nil, v4("192.0.2.10", "192.0.2.99")},
		{"203.0.113.0/24", nil, v4()}, // no local address inside: NodePorts nowhere in IPv4
		{"192.0.2.0/24,0.0.0.0/0", nil, nil},
		{"::/0", nil, nil},
		{"2001:db8::/64", nil, map[rules.Family][]netip.Addr{rules.IPv6: addrs("2001:db8::10")}},
		{"192.0.2.99/32,2001:db8:1::/48", nil, map[rules.Family][]netip.Addr{rules.IPv4: addrs("192.0.2.99"), rules.IPv6: addrs("2001:db8:1::10")}},
		{"127.0.0.0/8", nil, v4("127.0.0.1")}, // the renderer refuses it, and says so
		{"primary", primary, map[rules.Family][]netip.Addr{rules.IPv4: addrs("192.0.2.10"), rules.IPv6: addrs("2001:db8::10")}},
		{"primary", addrs("192.0.2.10"), v4("192.0.2.10")},
		{"primary", addrs("203.0.113.7"), v4()}, // the node's IP is not on this host
		{"primary", addrs("127.0.0.1"), nil},
		{"primary", nil, nil}, // no Node object read: unrestricted, as kube-proxy
	} {
		n, err := ParseNodePortAddresses(c.flag)
		if err != nil {
			t.Fatal(err)
		}
		if got := n.allowed(c.primary, local); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s (primary %v): %v, want %v", c.flag, c.primary, got, c.want)
		}
	}
}

// fakeAddrs is LocalAddrs on a list the test changes.
type fakeAddrs struct {
	addrs []netip.Addr
	err   error
	reads int
}

func (f *fakeAddrs) LocalAddrs() ([]netip.Addr, error) {
	f.reads++
	return f.addrs, f.err
}

// The node's addresses are read on every sync: one added later serves
// NodePorts from the next periodic sync on, which is partial; a failed
// read keeps the last addresses; an unchanged list leaves syncs idle.
func TestSyncNodePortAddressesFollowTheNode(t *testing.T) {
	for _, mode := range []string{"iptables", "nftables"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			rendered := func() string { return e.save("nat") }
			served := func(ip string) bool { return strings.Contains(rendered(), "-d "+ip+" -j HERALD-NODEPORTS") }
			if mode == "nftables" {
				var k *fakeNFT
				e, k = newNFTEnv(t)
				rendered = func() string { return k.table.Text() }
				served = func(ip string) bool {
					s := k.table.Set(rules.NFTSetNodePortIPs)
					return s != nil && slices.Contains(s.Elements, nft.Element{Key: nft.Key{Addr: netip.MustParseAddr(ip)}})
				}
			}
			fa := &fakeAddrs{addrs: addrs("127.0.0.1", testNodeIP.String())}
			e.s.cfg.NodePortAddresses, _ = ParseNodePortAddresses("192.0.2.0/24")
			e.s.addrs = fa
			svc := clusterIPService("default", "web", "10.96.0.10")
			svc.Spec.Type = corev1.ServiceTypeNodePort
			svc.Spec.Ports[0].NodePort = 30080
			e.tracker.UpdateService(svc)
			e.tracker.UpdateSlice(slice("default", "web", "web-1", 8080, "http", corev1.ProtocolTCP, ep{"10.244.1.5", testNode, true}))

			if res := e.sync(false); res.Retry || !served(testNodeIP.String()) || served("192.0.2.99") {
				t.Fatalf("first sync: %+v\n%s", res, rendered())
			}
			// The healthCheckNodePort servers listen where NodePorts are
			// served: the allowed IPv4 address, and no IPv6 one (the node
			// has none).
			if want := []healthcheck.Bind{{Network: "tcp4", Host: testNodeIP.String()}}; !slices.Equal(e.hc.binds, want) {
				t.Errorf("health check binds %v, want %v", e.hc.binds, want)
			}
			if res := e.sync(true); !res.Idle {
				t.Fatalf("periodic sync with the same addresses: %+v", res)
			}
			fa.addrs = append(fa.addrs, netip.MustParseAddr("192.0.2.99"), netip.MustParseAddr("203.0.113.1"))
			res := e.sync(true)
			if res.Idle || res.Families[0].Full || !served("192.0.2.99") || served("203.0.113.1") {
				t.Fatalf("after an address was added: %+v\n%s", res, rendered())
			}
			fa.err = errors.New("netlink: no buffer space")
			if res := e.sync(true); !res.Idle || !served("192.0.2.99") {
				t.Fatalf("a failed read changed the rules: %+v\n%s", res, rendered())
			}
			if fa.reads != 4 {
				t.Errorf("addresses read %d times in 4 syncs", fa.reads)
			}
		})
	}
}

// Unset, the proxy never lists the node's addresses.
func TestSyncWithoutNodePortAddressesReadsNoAddresses(t *testing.T) {
	e := newEnv(t)
	fa := &fakeAddrs{}
	e.s.addrs = fa
	e.addWebAndDB()
	e.sync(false)
	e.sync(true)
	if fa.reads != 0 || !strings.Contains(e.save("nat"), "-m addrtype --dst-type LOCAL ! -d 127.0.0.0/8 -j HERALD-NODEPORTS") {
		t.Errorf("reads %d\n%s", fa.reads, e.save("nat"))
	}
}

func TestPrimaryIPs(t *testing.T) {
	n := node(testNode)
	n.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeExternalIP, Address: "203.0.113.7"},
		{Type: corev1.NodeInternalIP, Address: "192.0.2.10"},
		{Type: corev1.NodeInternalIP, Address: "192.0.2.11"},
		{Type: corev1.NodeExternalIP, Address: "2001:db8::7"},
		{Type: corev1.NodeHostName, Address: testNode},
	}
	if got, want := fmt.Sprint(nodeInfoFrom(n).PrimaryIPs), "[192.0.2.10 2001:db8::7]"; got != want {
		t.Errorf("primary IPs %s, want %s (the first InternalIP per family, else the first ExternalIP)", got, want)
	}
}

func TestHealthBinds(t *testing.T) {
	v4, v6 := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")
	local := []netip.Addr{v4, v6}
	for _, c := range []struct {
		name    string
		allowed map[rules.Family][]netip.Addr
		local   []netip.Addr
		want    []healthcheck.Bind
	}{
		{"unrestricted", nil, local, healthcheck.AllAddresses},
		{"IPv4 restricted, IPv6 not", map[rules.Family][]netip.Addr{rules.IPv4: {v4}}, local,
			[]healthcheck.Bind{{Network: "tcp4", Host: "192.0.2.10"}, {Network: "tcp6", Host: "::"}}},
		{"IPv4 restricted on a node without IPv6", map[rules.Family][]netip.Addr{rules.IPv4: {v4}}, []netip.Addr{v4}, []healthcheck.Bind{{Network: "tcp4", Host: "192.0.2.10"}}},
		{"both restricted", map[rules.Family][]netip.Addr{rules.IPv4: {v4}, rules.IPv6: {v6}}, local,
			[]healthcheck.Bind{{Network: "tcp4", Host: "192.0.2.10"}, {Network: "tcp6", Host: "2001:db8::10"}}},
		{"restricted to no local address", map[rules.Family][]netip.Addr{rules.IPv4: {}, rules.IPv6: {}}, local, nil},
	} {
		if got := healthBinds(c.allowed, c.local); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
