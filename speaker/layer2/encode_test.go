package layer2

import (
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// checkARP decodes frame both with decodeARP and with gopacket's decoder
// and checks every field.
func checkARP(t *testing.T, frame []byte, ethDst net.HardwareAddr, op uint16, sha net.HardwareAddr, spa netip.Addr, tha net.HardwareAddr, tpa netip.Addr) {
	t.Helper()
	if len(frame) != 60 {
		t.Errorf("frame of %d bytes, want 60 (padded to Ethernet's minimum)", len(frame))
	}
	a, err := decodeARP(frame)
	if err != nil {
		t.Fatalf("decodeARP: %v", err)
	}
	if !slices.Equal(a.eth.dst, ethDst) || !slices.Equal(a.eth.src, ourMAC) || a.op != op ||
		!slices.Equal(a.sha, sha) || a.spa != spa || !slices.Equal(a.tha, tha) || a.tpa != tpa {
		t.Errorf("decoded %+v", a)
	}
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	g, ok := p.Layer(layers.LayerTypeARP).(*layers.ARP)
	if !ok {
		t.Fatalf("gopacket finds no ARP layer: %v", p.ErrorLayer())
	}
	if g.AddrType != layers.LinkTypeEthernet || g.Protocol != layers.EthernetTypeIPv4 || g.Operation != op ||
		!slices.Equal(g.SourceHwAddress, sha) || !slices.Equal(g.SourceProtAddress, spa.AsSlice()) ||
		!slices.Equal(g.DstHwAddress, tha) || !slices.Equal(g.DstProtAddress, tpa.AsSlice()) {
		t.Errorf("gopacket decoded %+v", g)
	}
}

func TestARPReply(t *testing.T) {
	req, err := DecodeARP(arpReq().bytes())
	if err != nil {
		t.Fatal(err)
	}
	frame, err := ARPReply(req, ourMAC)
	if err != nil {
		t.Fatal(err)
	}
	// "vip4 is at ourMAC", to the asker.
	checkARP(t, frame, clientMAC, 2, ourMAC, vip4, clientMAC, client4)

	probe := arpReq()
	probe.spa = netip.IPv4Unspecified()
	req, _ = DecodeARP(probe.bytes())
	frame, err = ARPReply(req, ourMAC)
	if err != nil {
		t.Fatal(err)
	}
	checkARP(t, frame, clientMAC, 2, ourMAC, vip4, clientMAC, netip.IPv4Unspecified())
}

func TestGratuitousARP(t *testing.T) {
	frame, err := GratuitousARPRequest(vip4, ourMAC)
	if err != nil {
		t.Fatal(err)
	}
	checkARP(t, frame, ethBroadcast, 1, ourMAC, vip4, make(net.HardwareAddr, 6), vip4)
	// Others decode it as a gratuitous request.
	if r, err := DecodeARP(frame); err != nil || !r.Gratuitous() {
		t.Errorf("DecodeARP: %+v, %v", r, err)
	}

	frame, err = GratuitousARPReply(vip4, ourMAC)
	if err != nil {
		t.Fatal(err)
	}
	checkARP(t, frame, ethBroadcast, 2, ourMAC, vip4, ourMAC, vip4)
}

// checkNA decodes frame both with decodeND and gopacket, and checks it
// against want; the checksum is verified by both and by refChecksum.
func checkNA(t *testing.T, frame []byte, ethDst net.HardwareAddr, dst, target netip.Addr, flags uint8) {
	t.Helper()
	m, err := decodeND(frame, icmpv6NA)
	if err != nil {
		t.Fatalf("decodeND: %v", err)
	}
	if !slices.Equal(m.eth.dst, ethDst) || !slices.Equal(m.eth.src, ourMAC) || m.src != target || m.dst != dst ||
		m.target != target || m.flags != flags || !slices.Equal(m.lla, ourMAC) {
		t.Errorf("decoded %+v", m)
	}
	if frame[21] != 255 {
		t.Errorf("hop limit %d", frame[21])
	}
	icmpMsg := frame[54:]
	if got, want := binary.BigEndian.Uint16(icmpMsg[2:]), refChecksum(target, dst, icmpMsg); got != want {
		t.Errorf("checksum %#04x, refChecksum %#04x", got, want)
	}
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	ip6, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	icmp, _ := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
	na, _ := p.Layer(layers.LayerTypeICMPv6NeighborAdvertisement).(*layers.ICMPv6NeighborAdvertisement)
	if ip6 == nil || icmp == nil || na == nil {
		t.Fatalf("gopacket: %v", p.ErrorLayer())
	}
	if err := icmp.SetNetworkLayerForChecksum(ip6); err != nil {
		t.Fatal(err)
	}
	if err, v := icmp.VerifyChecksum(); err != nil || !v.Valid {
		t.Errorf("gopacket says the checksum is wrong: %+v, %v", v, err)
	}
	if na.Flags != flags || !na.TargetAddress.Equal(target.AsSlice()) || len(na.Options) != 1 ||
		na.Options[0].Type != layers.ICMPv6OptTargetAddress || !slices.Equal(na.Options[0].Data, ourMAC) {
		t.Errorf("gopacket decoded %+v", na)
	}
}

func TestNeighborAdvertisement(t *testing.T) {
	snm := SolicitedNodeMulticast(vip6)
	tests := []struct {
		name   string
		ns     nsSpec
		ethDst net.HardwareAddr
		dst    netip.Addr
		flags  uint8
	}{
		{name: "to the SLLA, solicited and override", ns: nsReq(), ethDst: clientMAC, dst: client6, flags: naSolicited | naOverride},
		{name: "SLLA wins over the Ethernet source",
			ns:     func() nsSpec { s := nsReq(); s.opts = slices.Concat([]byte{1, 1}, otherMAC); return s }(),
			ethDst: otherMAC, dst: client6, flags: naSolicited | naOverride},
		{name: "unicast NUD without SLLA goes to the Ethernet source",
			ns:     func() nsSpec { s := nsReq(); s.ethDst, s.dst, s.opts = ourMAC, vip6, nil; return s }(),
			ethDst: clientMAC, dst: client6, flags: naSolicited | naOverride},
		{name: "DAD goes to all-nodes, not solicited",
			ns:     func() nsSpec { s := nsReq(); s.src, s.dst, s.opts = netip.IPv6Unspecified(), snm, nil; return s }(),
			ethDst: mustMAC("33:33:00:00:00:01"), dst: allNodes, flags: naOverride},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns, err := DecodeNDP(tt.ns.bytes())
			if err != nil {
				t.Fatal(err)
			}
			frame, err := NeighborAdvertisement(ns, ourMAC)
			if err != nil {
				t.Fatal(err)
			}
			checkNA(t, frame, tt.ethDst, tt.dst, vip6, tt.flags)
		})
	}
}

func TestUnsolicitedNA(t *testing.T) {
	frame, err := UnsolicitedNA(vip6, ourMAC)
	if err != nil {
		t.Fatal(err)
	}
	checkNA(t, frame, mustMAC("33:33:00:00:00:01"), allNodes, vip6, naOverride)
}

func TestEncodeErrors(t *testing.T) {
	req, _ := DecodeARP(arpReq().bytes())
	ns, _ := DecodeNDP(nsReq().bytes())
	nsBadSrc := ns
	nsBadSrc.Source = client4
	nsNoMAC := ns
	nsNoMAC.SourceLinkLayer, nsNoMAC.EthernetSource = nil, nil
	reqBadSender := req
	reqBadSender.SenderMAC = ethBroadcast
	for _, tt := range []struct {
		name string
		f    func() ([]byte, error)
		want string
	}{
		{"ARP reply from a multicast MAC", func() ([]byte, error) { return ARPReply(req, ethBroadcast) }, "interface MAC"},
		{"ARP reply from a short MAC", func() ([]byte, error) { return ARPReply(req, ourMAC[:4]) }, "interface MAC"},
		{"ARP reply to a broadcast sender", func() ([]byte, error) { return ARPReply(reqBadSender, ourMAC) }, "not a unicast MAC"},
		{"gratuitous ARP for IPv6", func() ([]byte, error) { return GratuitousARPRequest(vip6, ourMAC) }, "ARP needs IPv4"},
		{"gratuitous ARP reply for nothing", func() ([]byte, error) { return GratuitousARPReply(netip.Addr{}, ourMAC) }, "ARP needs IPv4"},
		{"NA for IPv4", func() ([]byte, error) { return UnsolicitedNA(vip4, ourMAC) }, "not a unicast IPv6"},
		{"NA for 4in6", func() ([]byte, error) { return UnsolicitedNA(netip.MustParseAddr("::ffff:198.51.100.10"), ourMAC) }, "not a unicast IPv6"},
		{"NA for multicast", func() ([]byte, error) { return UnsolicitedNA(allNodes, ourMAC) }, "not a unicast IPv6"},
		{"NA from zero MAC", func() ([]byte, error) { return UnsolicitedNA(vip6, make(net.HardwareAddr, 6)) }, "interface MAC"},
		{"NA to IPv4 source", func() ([]byte, error) { return NeighborAdvertisement(nsBadSrc, ourMAC) }, "not a unicast IPv6"},
		{"NA to nowhere", func() ([]byte, error) { return NeighborAdvertisement(nsNoMAC, ourMAC) }, "not a unicast MAC"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.f()
			if err == nil || !strings.Contains(err.Error(), tt.want) || b != nil {
				t.Errorf("got %x, %v; want an error containing %q", b, err, tt.want)
			}
		})
	}
}
