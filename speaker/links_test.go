package speaker

import (
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestSelectInterfaces(t *testing.T) {
	p := netip.MustParsePrefix
	links := []Link{
		{Name: "lo", Index: 1, Up: true, Carrier: true, Loopback: true, Addrs: []netip.Prefix{p("127.0.0.1/8")}},
		// The lab's LAN leg is itself a veth: being a veth is no reason.
		{Name: "eth0", Index: 2, MAC: mac(2), Up: true, Carrier: true, Kind: "veth", Addrs: []netip.Prefix{p("198.51.100.11/24")}},
		{Name: "cbr0", Index: 3, MAC: mac(3), Up: true, Carrier: true, Kind: "bridge", Addrs: []netip.Prefix{p("198.18.1.1/24")}},
		{Name: "veth1", Index: 4, MAC: mac(4), Up: true, Carrier: true, Kind: "veth", Master: "cbr0"},
		{Name: "eno1", Index: 5, MAC: mac(5), Up: true, Carrier: true, Kind: "device", Master: "bond0"},
		{Name: "bond0", Index: 6, MAC: mac(6), Up: true, Carrier: false, Kind: "bond", Addrs: []netip.Prefix{p("192.0.2.5/24")}},
		{Name: "tun0", Index: 7, Up: true, Carrier: true, NoARP: true, Kind: "tun", Addrs: []netip.Prefix{p("10.8.0.1/24")}},
		{Name: "wg0", Index: 8, Up: true, Carrier: true, Kind: "wireguard", Addrs: []netip.Prefix{p("10.9.0.1/24")}},
		{Name: "eth1", Index: 9, MAC: mac(9), Up: false, Carrier: false, Kind: "device", Addrs: []netip.Prefix{p("203.0.113.5/24")}},
		{Name: "eth2", Index: 10, MAC: mac(10), Up: true, Carrier: true, Kind: "device", Addrs: []netip.Prefix{p("fe80::2/64")}},
		{Name: "cali1234", Index: 11, MAC: mac(11), Up: true, Carrier: true, Kind: "veth", Addrs: []netip.Prefix{p("169.254.1.1/32")}},
		{Name: "docker0", Index: 12, MAC: mac(12), Up: true, Carrier: false, Kind: "bridge", Addrs: []netip.Prefix{p("172.17.0.1/16")}},
		{Name: "br-lan", Index: 13, MAC: mac(13), Up: true, Carrier: true, Kind: "bridge", Addrs: []netip.Prefix{p("2001:db8::5/64")}},
		// A pod bridge by its address alone, whatever its name.
		{Name: "podbr", Index: 15, MAC: mac(15), Up: true, Carrier: true, Kind: "bridge", Addrs: []netip.Prefix{p("198.18.1.129/25")}},
		{Name: "mcast", Index: 14, MAC: net.HardwareAddr{0x01, 0, 0x5e, 0, 0, 1}, Up: true, Carrier: true, Addrs: []netip.Prefix{p("192.0.2.9/24")}},
	}
	pods := []netip.Prefix{p("198.18.1.0/24")}
	got := SelectInterfaces(links, pods, nil)
	if want := []string{"bond0", "br-lan", "eth0", "eth1"}; !reflect.DeepEqual(got.Names, want) {
		t.Errorf("names = %v, want %v", got.Names, want)
	}
	if want := []string{"bond0", "eth1"}; !reflect.DeepEqual(got.Down, want) {
		t.Errorf("down = %v, want %v (no carrier, admin down)", got.Down, want)
	}
	reasons := map[string]string{
		"lo": "loopback", "cbr0": "pod network interface", "veth1": "enslaved to cbr0", "eno1": "enslaved to bond0",
		"tun0": "NOARP", "wg0": "not an Ethernet", "eth2": "no address outside link-local",
		"cali1234": "pod network interface (name cali*)", "docker0": "name docker*", "mcast": "unicast MAC", "podbr": "is in the node's pod CIDRs",
	}
	for name, want := range reasons {
		if !strings.Contains(got.Skipped[name], want) {
			t.Errorf("%s skipped for %q, want it to say %q", name, got.Skipped[name], want)
		}
	}
	if len(got.Skipped) != len(reasons) {
		t.Errorf("skipped %v", got.Skipped)
	}

	// Named by an advertisement: the pod bridge and the address-less
	// link are used; a bridge port or loopback never.
	named := SelectInterfaces(links, pods, map[string]bool{"cbr0": true, "eth2": true, "veth1": true, "lo": true})
	if want := []string{"bond0", "br-lan", "cbr0", "eth0", "eth1", "eth2"}; !reflect.DeepEqual(named.Names, want) {
		t.Errorf("with names: %v, want %v", named.Names, want)
	}
	if named.Links["cbr0"].Index != 3 {
		t.Error("the link of cbr0 is not kept for its responder")
	}
	meta := named.Meta()
	if !reflect.DeepEqual(meta.Interfaces, named.Names) || !reflect.DeepEqual(meta.DownInterfaces, named.Down) {
		t.Errorf("meta %+v", meta)
	}
}
