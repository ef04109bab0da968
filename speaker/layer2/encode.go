package layer2

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

var (
	ethBroadcast = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	allNodes     = netip.MustParseAddr("ff02::1")
)

func serialize(ls ...gopacket.SerializableLayer) ([]byte, error) {
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, ls...); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func checkMAC(mac net.HardwareAddr) error {
	if !unicastMAC(mac) {
		return fmt.Errorf("interface MAC %q is not a unicast Ethernet address", mac)
	}
	return nil
}

func arpFrame(op uint16, ethDst, sha net.HardwareAddr, spa netip.Addr, tha net.HardwareAddr, tpa netip.Addr) ([]byte, error) {
	return arpFrameFrom(sha, op, ethDst, sha, spa, tha, tpa)
}

// arpFrameFrom is arpFrame sent from ethSrc, which differs from the
// sender hardware address when this node answers for another.
func arpFrameFrom(ethSrc net.HardwareAddr, op uint16, ethDst, sha net.HardwareAddr, spa netip.Addr, tha net.HardwareAddr, tpa netip.Addr) ([]byte, error) {
	if err := checkMAC(sha); err != nil {
		return nil, err
	}
	if err := checkMAC(ethSrc); err != nil {
		return nil, err
	}
	if !spa.Is4() || !tpa.Is4() {
		return nil, fmt.Errorf("ARP needs IPv4 addresses, got %s and %s", spa, tpa)
	}
	s4, t4 := spa.As4(), tpa.As4()
	return serialize(
		&layers.Ethernet{SrcMAC: ethSrc, DstMAC: ethDst, EthernetType: layers.EthernetTypeARP},
		&layers.ARP{
			AddrType:          layers.LinkTypeEthernet,
			Protocol:          layers.EthernetTypeIPv4,
			Operation:         op,
			SourceHwAddress:   sha,
			SourceProtAddress: s4[:],
			DstHwAddress:      tha,
			DstProtAddress:    t4[:],
		})
}

// ARPReply is the answer from mac to req: "req.TargetIP is at mac", sent
// to the requester's hardware address. The target fields echo the sender
// (RFC 826), so an RFC 5227 probe from 0.0.0.0 is answered to 0.0.0.0 as
// that RFC expects.
func ARPReply(req ARPRequest, mac net.HardwareAddr) ([]byte, error) {
	return ARPReplyFor(req, mac, mac)
}

// ARPReplyFor is ARPReply saying "req.TargetIP is at mac" for another
// node, sent from this interface's own MAC (ethSrc): switches keep
// learning the other node's MAC on its own port.
func ARPReplyFor(req ARPRequest, ethSrc, mac net.HardwareAddr) ([]byte, error) {
	if !unicastMAC(req.SenderMAC) {
		return nil, fmt.Errorf("ARP request sender %q is not a unicast MAC", req.SenderMAC)
	}
	return arpFrameFrom(ethSrc, arpReply, req.SenderMAC, mac, req.TargetIP, req.SenderMAC, req.SenderIP)
}

// GratuitousARPRequest announces "ip is at mac" to everyone in the request
// form (RFC 5227 ARP announcement: sender and target IP both ip, target
// hardware address zero).
func GratuitousARPRequest(ip netip.Addr, mac net.HardwareAddr) ([]byte, error) {
	return arpFrame(arpRequest, ethBroadcast, mac, ip, make(net.HardwareAddr, 6), ip)
}

// GratuitousARPReply announces "ip is at mac" in the reply form (RFC 5944
// §4.6: target hardware address also mac). Both forms are sent because
// some hosts and switches update their tables from only one of them.
func GratuitousARPReply(ip netip.Addr, mac net.HardwareAddr) ([]byte, error) {
	return arpFrame(arpReply, ethBroadcast, mac, ip, mac, ip)
}

func naFrame(ethDst net.HardwareAddr, mac net.HardwareAddr, dst, target netip.Addr, flags uint8) ([]byte, error) {
	return naFrameFrom(mac, ethDst, mac, dst, target, flags)
}

// naFrameFrom is naFrame sent from ethSrc, which differs from the target
// link-layer address when this node answers for another.
func naFrameFrom(ethSrc, ethDst net.HardwareAddr, mac net.HardwareAddr, dst, target netip.Addr, flags uint8) ([]byte, error) {
	if err := checkMAC(mac); err != nil {
		return nil, err
	}
	if err := checkMAC(ethSrc); err != nil {
		return nil, err
	}
	if !target.Is6() || target.Is4In6() || target.IsMulticast() || target.IsUnspecified() {
		return nil, fmt.Errorf("neighbor advertisement target %s is not a unicast IPv6 address", target)
	}
	ip6 := &layers.IPv6{
		Version:    6,
		NextHeader: layers.IPProtocolICMPv6,
		HopLimit:   255,
		// The target is this node's (announced) address on the link,
		// which RFC 4861 §7.2.4 asks the source to be.
		SrcIP: target.AsSlice(),
		DstIP: dst.AsSlice(),
	}
	icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(icmpv6NA, 0)}
	if err := icmp.SetNetworkLayerForChecksum(ip6); err != nil {
		return nil, err
	}
	return serialize(
		&layers.Ethernet{SrcMAC: ethSrc, DstMAC: ethDst, EthernetType: layers.EthernetTypeIPv6},
		ip6, icmp,
		&layers.ICMPv6NeighborAdvertisement{
			Flags:         flags,
			TargetAddress: target.AsSlice(),
			Options:       layers.ICMPv6Options{{Type: layers.ICMPv6OptTargetAddress, Data: mac}},
		})
}

// NeighborAdvertisement is the answer from mac to ns (RFC 4861 §7.2.4),
// with the override flag and a target link-layer address option. It goes
// to the solicitor's unicast address with the solicited flag, at the
// solicitor's source link-layer address or, without that option (a
// unicast NUD probe), at the frame's Ethernet source. A DAD probe from ::
// is answered to all-nodes with the solicited flag clear, as the RFC
// requires.
func NeighborAdvertisement(ns NeighborSolicitation, mac net.HardwareAddr) ([]byte, error) {
	return NeighborAdvertisementFor(ns, mac, mac)
}

// NeighborAdvertisementFor is NeighborAdvertisement saying "ns.Target is
// at mac" for another node, sent from this interface's own MAC (ethSrc).
func NeighborAdvertisementFor(ns NeighborSolicitation, ethSrc, mac net.HardwareAddr) ([]byte, error) {
	if ns.DAD() {
		return naFrameFrom(ethSrc, MulticastMAC(allNodes), mac, allNodes, ns.Target, naOverride)
	}
	if !ns.Source.Is6() || ns.Source.IsMulticast() {
		return nil, fmt.Errorf("neighbor solicitation source %s is not a unicast IPv6 address", ns.Source)
	}
	ethDst := ns.SourceLinkLayer
	if ethDst == nil {
		ethDst = ns.EthernetSource
	}
	if !unicastMAC(ethDst) {
		return nil, fmt.Errorf("neighbor solicitation sender %q is not a unicast MAC", ethDst)
	}
	return naFrameFrom(ethSrc, ethDst, mac, ns.Source, ns.Target, naSolicited|naOverride)
}

// UnsolicitedNA announces "ip is at mac" to all nodes (RFC 4861 §7.2.6):
// override set so that caches holding the previous node's MAC update,
// solicited clear.
func UnsolicitedNA(ip netip.Addr, mac net.HardwareAddr) ([]byte, error) {
	return naFrame(MulticastMAC(allNodes), mac, allNodes, ip, naOverride)
}
