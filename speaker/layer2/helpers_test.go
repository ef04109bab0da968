package layer2

import (
	"encoding/binary"
	"encoding/hex"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// The tests build their input frames independently of the code under
// test: ARP byte by byte, NDP with gopacket (and byte surgery), and they
// check ICMPv6 checksums with refChecksum, a second implementation.

var (
	ourMAC    = mustMAC("02:00:5e:00:00:01") // the interface answering
	clientMAC = mustMAC("02:00:5e:00:00:02") // the host asking
	otherMAC  = mustMAC("02:00:5e:00:00:03") // some third host

	vip4    = netip.MustParseAddr("198.51.100.10")
	client4 = netip.MustParseAddr("198.51.100.2")
	vip6    = netip.MustParseAddr("2001:db8::10")
	client6 = netip.MustParseAddr("2001:db8::2")
	ll6     = netip.MustParseAddr("fe80::2")

	ourIf = Interface{Name: "eth0", Index: 2, MAC: ourMAC}
)

func mustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		panic(err)
	}
	return b
}

// arpFields is an ARP packet over Ethernet, serialized by hand.
type arpFields struct {
	ethDst, ethSrc net.HardwareAddr
	etherType      uint16
	htype, ptype   uint16
	hlen, plen     uint8
	op             uint16
	sha, tha       net.HardwareAddr
	spa, tpa       netip.Addr
}

// arpRequest is "who has vip4? tell client4" from clientMAC, broadcast.
func arpReq() arpFields {
	return arpFields{
		ethDst: ethBroadcast, ethSrc: clientMAC, etherType: 0x0806,
		htype: 1, ptype: 0x0800, hlen: 6, plen: 4, op: 1,
		sha: clientMAC, spa: client4, tha: make(net.HardwareAddr, 6), tpa: vip4,
	}
}

func (f arpFields) bytes() []byte {
	b := slices.Concat([]byte(f.ethDst), []byte(f.ethSrc))
	b = binary.BigEndian.AppendUint16(b, f.etherType)
	b = binary.BigEndian.AppendUint16(b, f.htype)
	b = binary.BigEndian.AppendUint16(b, f.ptype)
	b = append(b, f.hlen, f.plen)
	b = binary.BigEndian.AppendUint16(b, f.op)
	s4, t4 := f.spa.As4(), f.tpa.As4()
	return slices.Concat(b, f.sha, s4[:], f.tha, t4[:])
}

// nsSpec is a neighbor solicitation, serialized with gopacket.
type nsSpec struct {
	ethDst, ethSrc net.HardwareAddr
	src, dst       netip.Addr
	hopLimit       uint8
	code           uint8
	target         netip.Addr
	opts           []byte // raw options, appended after the fixed part
}

// nsReq is a multicast solicitation for vip6 from client6 with its SLLA.
func nsReq() nsSpec {
	snm := SolicitedNodeMulticast(vip6)
	return nsSpec{
		ethDst: MulticastMAC(snm), ethSrc: clientMAC,
		src: client6, dst: snm, hopLimit: 255, target: vip6,
		opts: slices.Concat([]byte{1, 1}, clientMAC),
	}
}

func (s nsSpec) bytes() []byte {
	ip6 := &layers.IPv6{
		Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: s.hopLimit,
		SrcIP: s.src.AsSlice(), DstIP: s.dst.AsSlice(),
	}
	icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(135, s.code)}
	if err := icmp.SetNetworkLayerForChecksum(ip6); err != nil {
		panic(err)
	}
	buf := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		&layers.Ethernet{DstMAC: s.ethDst, SrcMAC: s.ethSrc, EthernetType: layers.EthernetTypeIPv6},
		ip6, icmp,
		&layers.ICMPv6NeighborSolicitation{TargetAddress: s.target.AsSlice()},
		gopacket.Payload(s.opts))
	if err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// withExtHeader inserts an 8-byte extension header of type typ right
// after the IPv6 header of frame.
// The ICMPv6 checksum stays valid: extension headers are not covered.
func withExtHeader(frame []byte, typ uint8) []byte {
	f := slices.Clone(frame)
	next := f[20]
	f[20] = typ
	binary.BigEndian.PutUint16(f[18:], binary.BigEndian.Uint16(f[18:])+8)
	ext := []byte{next, 0, 1, 4, 0, 0, 0, 0} // PadN option filling the header
	return slices.Concat(f[:54], ext, f[54:])
}

// refChecksum is the ICMPv6 checksum of msg (its checksum field taken as
// zero) computed as RFC 1071 describes but differently from checksum: an
// explicit pseudo-header buffer summed in 32-bit words.
func refChecksum(src, dst netip.Addr, msg []byte) uint16 {
	s16, d16 := src.As16(), dst.As16()
	b := slices.Concat(s16[:], d16[:])
	b = binary.BigEndian.AppendUint32(b, uint32(len(msg)))
	b = append(b, 0, 0, 0, 58)
	m := slices.Clone(msg)
	if len(m) >= 4 {
		m[2], m[3] = 0, 0
	}
	b = append(b, m...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	var sum uint64
	for i := 0; i < len(b); i += 4 {
		sum += uint64(binary.BigEndian.Uint32(b[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// fixChecksum rewrites the ICMPv6 checksum of a frame without extension
// headers.
func fixChecksum(frame []byte) []byte {
	f := slices.Clone(frame)
	src, dst := netip.AddrFrom16([16]byte(f[22:38])), netip.AddrFrom16([16]byte(f[38:54]))
	plen := int(binary.BigEndian.Uint16(f[18:]))
	msg := f[54 : 54+plen]
	binary.BigEndian.PutUint16(msg[2:], refChecksum(src, dst, msg))
	return f
}

// set returns a copy of b with b[off] = v.
func set(b []byte, off int, v byte) []byte {
	c := slices.Clone(b)
	c[off] = v
	return c
}

// Frames captured from the real tools in a throwaway namespace (see
// netns_test.go): what arping 2.23 (Thomas Habets') and ndisc6 1.0.5 sent, so
// checksums and layouts come from the kernel, not from us.
var (
	// arping -i veth 198.51.100.10, from 198.51.100.2 at 4e:dd:88:1b:70:f9
	// (padded to 60 bytes by arping).
	capturedARP = mustHex(`ffffffffffff 4edd881b70f9 0806
		0001 0800 06 04 0001 4edd881b70f9 c6336402 000000000000 c633640a
		000000000000000000000000000000000000`)
	// ndisc6 2001:db8::10 veth, from fe80::4cdd:88ff:fe1b:70f9 to the
	// solicited-node group, with a source link-layer address option.
	capturedNS = mustHex(`3333ff000010 4edd881b70f9 86dd
		600dbcd7 0020 3a ff fe800000000000004cdd88fffe1b70f9 ff0200000000000000000001ff000010
		87 00 c060 00000000 20010db8000000000000000000000010 0101 4edd881b70f9`)
	// The MLDv2 report the kernel sent as the interface came up: a
	// hop-by-hop header (router alert) before ICMPv6 type 143.
	capturedMLD = mustHex(`333300000016 4edd881b70f9 86dd
		60000000 0038 00 01 fe800000000000004cdd88fffe1b70f9 ff020000000000000000000000000016
		3a00 0502 0000 0100
		8f00 b8e6 0000 0002 04000000ff0200000000000000000001ff1b70f9 04000000ff0200000000000000000001ff000002`)
	capturedMAC = mustMAC("4e:dd:88:1b:70:f9")
)
