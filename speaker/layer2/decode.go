package layer2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/herald-lb/herald/internal/ipfamily"
)

// Family is an address family (internal/ipfamily).
type Family = ipfamily.Family

// The families.
const (
	IPv4 = ipfamily.IPv4
	IPv6 = ipfamily.IPv6
)

// Wire constants (RFC 826, RFC 8200, RFC 4861).
const (
	etherTypeARP  = 0x0806
	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86dd
	etherTypeVLAN = 0x8100
	etherTypeQinQ = 0x88a8

	ethLen  = 14
	arpLen  = 28 // IPv4 over Ethernet
	ipv6Len = 40
	ndLen   = 24 // NS or NA without options

	arpRequest = 1
	arpReply   = 2

	protoHopByHop = 0
	protoICMPv6   = 58
	protoFragment = 44
	protoDestOpts = 60

	icmpv6NS = 135
	icmpv6NA = 136

	optSourceLLA = 1
	optTargetLLA = 2

	naRouter    = 0x80
	naSolicited = 0x40
	naOverride  = 0x20
)

// ErrMalformed matches (errors.Is) a DecodeError for a frame that breaks
// the protocol's rules: it must be dropped and is worth counting.
// ErrUnsupported matches one that is valid but not a request this package
// answers (an ARP reply, an echo request, a VLAN-tagged frame).
var (
	ErrMalformed   = errors.New("malformed frame")
	ErrUnsupported = errors.New("not an ARP request or neighbor solicitation")
)

// DecodeError says which layer of a frame is wrong and how.
type DecodeError struct {
	Layer     string // Ethernet, ARP, IPv6, ICMPv6 or NDP
	Msg       string
	Malformed bool
}

func (e *DecodeError) Error() string {
	if e.Malformed {
		return "malformed " + e.Layer + ": " + e.Msg
	}
	return "ignored " + e.Layer + ": " + e.Msg
}

// Is makes errors.Is(err, ErrMalformed) and errors.Is(err, ErrUnsupported)
// work.
func (e *DecodeError) Is(target error) bool {
	return (target == ErrMalformed && e.Malformed) || (target == ErrUnsupported && !e.Malformed)
}

func malformed(layer, format string, args ...any) error {
	return &DecodeError{Layer: layer, Msg: fmt.Sprintf(format, args...), Malformed: true}
}

func unsupported(layer, format string, args ...any) error {
	return &DecodeError{Layer: layer, Msg: fmt.Sprintf(format, args...)}
}

// Request is a decoded frame that may need an answer: exactly one of ARP
// and NS is set.
type Request struct {
	ARP *ARPRequest
	NS  *NeighborSolicitation
}

// Family is the family of the address asked for.
func (r Request) Family() Family {
	if r.NS != nil {
		return IPv6
	}
	return IPv4
}

// Target is the address asked for.
func (r Request) Target() netip.Addr {
	if r.NS != nil {
		return r.NS.Target
	}
	if r.ARP != nil {
		return r.ARP.TargetIP
	}
	return netip.Addr{}
}

// Decode decodes an ARP request or a neighbor solicitation, choosing by
// EtherType.
func Decode(frame []byte) (Request, error) {
	if len(frame) >= ethLen && binary.BigEndian.Uint16(frame[12:]) == etherTypeIPv6 {
		ns, err := DecodeNDP(frame)
		if err != nil {
			return Request{}, err
		}
		return Request{NS: &ns}, nil
	}
	a, err := DecodeARP(frame)
	if err != nil {
		return Request{}, err
	}
	return Request{ARP: &a}, nil
}

type ethHeader struct {
	dst, src  net.HardwareAddr
	etherType uint16
}

func decodeEthernet(frame []byte) (ethHeader, []byte, error) {
	if len(frame) < ethLen {
		return ethHeader{}, nil, malformed("Ethernet", "frame of %d bytes is shorter than the 14-byte header", len(frame))
	}
	h := ethHeader{
		dst:       slices.Clone(net.HardwareAddr(frame[0:6])),
		src:       slices.Clone(net.HardwareAddr(frame[6:12])),
		etherType: binary.BigEndian.Uint16(frame[12:]),
	}
	switch h.etherType {
	case etherTypeVLAN, etherTypeQinQ:
		// A tagged frame belongs to the VLAN's interface, whose own
		// responder sees it untagged.
		return h, nil, unsupported("Ethernet", "802.1Q-tagged frame (EtherType %#04x) belongs to a VLAN interface", h.etherType)
	}
	if !unicastMAC(h.src) {
		return h, nil, malformed("Ethernet", "source %s is not a unicast MAC", h.src)
	}
	return h, frame[ethLen:], nil
}

// unicastMAC: not all-zero and the group bit clear.
func unicastMAC(m net.HardwareAddr) bool {
	return len(m) == 6 && m[0]&1 == 0 && !slices.Equal(m, net.HardwareAddr{0, 0, 0, 0, 0, 0})
}

// ARPRequest is an ARP request for an IPv4 address over Ethernet.
type ARPRequest struct {
	EthernetSource, EthernetDestination net.HardwareAddr
	SenderMAC                           net.HardwareAddr
	// SenderIP is 0.0.0.0 in an RFC 5227 probe.
	SenderIP netip.Addr
	TargetIP netip.Addr
}

// Gratuitous reports whether the request announces the sender's own
// address (RFC 5227 announcement, sender IP == target IP) rather than
// asking for someone else's.
func (r ARPRequest) Gratuitous() bool { return r.SenderIP == r.TargetIP }

// arpPacket is any ARP packet over Ethernet for IPv4; decodeARP is shared
// by DecodeARP and the tests, which decode the replies we send.
type arpPacket struct {
	eth      ethHeader
	op       uint16
	sha, tha net.HardwareAddr
	spa, tpa netip.Addr
}

var ipv4Broadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})

func decodeARP(frame []byte) (arpPacket, error) {
	eth, p, err := decodeEthernet(frame)
	if err != nil {
		return arpPacket{}, err
	}
	if eth.etherType != etherTypeARP {
		return arpPacket{}, unsupported("Ethernet", "EtherType %#04x is not ARP", eth.etherType)
	}
	if len(p) < 8 {
		return arpPacket{}, malformed("ARP", "%d bytes are shorter than the 8-byte fixed header", len(p))
	}
	htype, ptype := binary.BigEndian.Uint16(p[0:]), binary.BigEndian.Uint16(p[2:])
	hlen, plen, op := p[4], p[5], binary.BigEndian.Uint16(p[6:])
	switch {
	case htype != 1:
		return arpPacket{}, unsupported("ARP", "hardware type %d: only 1 (Ethernet) is answered", htype)
	case ptype != etherTypeIPv4:
		return arpPacket{}, unsupported("ARP", "protocol type %#04x: only 0x0800 (IPv4) is answered", ptype)
	case hlen != 6:
		return arpPacket{}, malformed("ARP", "hardware address length %d, want 6 for Ethernet", hlen)
	case plen != 4:
		return arpPacket{}, malformed("ARP", "protocol address length %d, want 4 for IPv4", plen)
	case len(p) < arpLen:
		// Longer is fine: Ethernet pads short frames to 60 bytes.
		return arpPacket{}, malformed("ARP", "%d bytes are shorter than the 28 of IPv4 over Ethernet", len(p))
	case op != arpRequest && op != arpReply:
		return arpPacket{}, unsupported("ARP", "operation %d is neither request (1) nor reply (2)", op)
	}
	a := arpPacket{
		eth: eth,
		op:  op,
		sha: slices.Clone(net.HardwareAddr(p[8:14])),
		spa: netip.AddrFrom4([4]byte(p[14:18])),
		tha: slices.Clone(net.HardwareAddr(p[18:24])),
		tpa: netip.AddrFrom4([4]byte(p[24:28])),
	}
	if !unicastMAC(a.sha) {
		return arpPacket{}, malformed("ARP", "sender hardware address %s is not a unicast MAC", a.sha)
	}
	// 0.0.0.0 is allowed: it is an RFC 5227 probe, which must be answered
	// so that the prober sees the address is taken.
	if a.spa.IsMulticast() || a.spa == ipv4Broadcast {
		return arpPacket{}, malformed("ARP", "sender protocol address %s is not unicast", a.spa)
	}
	return a, nil
}

// DecodeARP decodes an Ethernet frame carrying an ARP request for an IPv4
// address. Trailing bytes (Ethernet padding) are ignored.
func DecodeARP(frame []byte) (ARPRequest, error) {
	a, err := decodeARP(frame)
	if err != nil {
		return ARPRequest{}, err
	}
	if a.op != arpRequest {
		return ARPRequest{}, unsupported("ARP", "operation %d (reply) needs no answer", a.op)
	}
	if a.tpa.IsUnspecified() || a.tpa.IsMulticast() || a.tpa == ipv4Broadcast {
		return ARPRequest{}, malformed("ARP", "target protocol address %s is not unicast", a.tpa)
	}
	return ARPRequest{
		EthernetSource:      a.eth.src,
		EthernetDestination: a.eth.dst,
		SenderMAC:           a.sha,
		SenderIP:            a.spa,
		TargetIP:            a.tpa,
	}, nil
}

// NeighborSolicitation is an ICMPv6 neighbor solicitation (RFC 4861 §4.3).
type NeighborSolicitation struct {
	EthernetSource, EthernetDestination net.HardwareAddr
	// Source and Destination are the IPv6 header's; Source is :: in
	// duplicate address detection.
	Source, Destination netip.Addr
	Target              netip.Addr
	// SourceLinkLayer is the source link-layer address option; nil when
	// absent.
	SourceLinkLayer net.HardwareAddr
}

// DAD reports whether this is a duplicate address detection probe, sent
// from the unspecified address.
func (s NeighborSolicitation) DAD() bool { return s.Source.IsUnspecified() }

// ndMessage is a neighbor solicitation or advertisement; decodeND is
// shared by DecodeNDP and the tests, which decode the advertisements we
// send.
type ndMessage struct {
	eth      ethHeader
	src, dst netip.Addr
	typ      uint8
	flags    uint8 // NA only: router, solicited, override
	target   netip.Addr
	lla      net.HardwareAddr // SLLA in an NS, TLLA in an NA; nil when absent
}

// decodeND decodes and validates (RFC 4861 §7.1) an NS or NA, as want says.
func decodeND(frame []byte, want uint8) (ndMessage, error) {
	eth, p, err := decodeEthernet(frame)
	if err != nil {
		return ndMessage{}, err
	}
	if eth.etherType != etherTypeIPv6 {
		return ndMessage{}, unsupported("Ethernet", "EtherType %#04x is not IPv6", eth.etherType)
	}
	if len(p) < ipv6Len {
		return ndMessage{}, malformed("IPv6", "%d bytes are shorter than the 40-byte header", len(p))
	}
	if v := p[0] >> 4; v != 6 {
		return ndMessage{}, malformed("IPv6", "version %d, want 6", v)
	}
	plen, next, hopLimit := int(binary.BigEndian.Uint16(p[4:])), p[6], p[7]
	m := ndMessage{
		eth: eth,
		src: netip.AddrFrom16([16]byte(p[8:24])),
		dst: netip.AddrFrom16([16]byte(p[24:40])),
	}
	if plen > len(p)-ipv6Len {
		return ndMessage{}, malformed("IPv6", "payload length %d, but only %d bytes follow the header", plen, len(p)-ipv6Len)
	}
	payload := p[ipv6Len : ipv6Len+plen] // drops Ethernet padding
	if m.src.IsMulticast() {
		return ndMessage{}, malformed("IPv6", "source %s is multicast", m.src)
	}
	// Skip the extension headers a neighbor solicitation may plausibly
	// carry; anything else is not something we answer.
	for first := true; next != protoICMPv6; first = false {
		switch next {
		case protoHopByHop, protoDestOpts:
			if next == protoHopByHop && !first {
				return ndMessage{}, malformed("IPv6", "hop-by-hop options header is not the first header (RFC 8200 §4.1)")
			}
			if len(payload) < 8 {
				return ndMessage{}, malformed("IPv6", "extension header %d truncated to %d bytes", next, len(payload))
			}
			l := (int(payload[1]) + 1) * 8
			if l > len(payload) {
				return ndMessage{}, malformed("IPv6", "extension header %d of %d bytes, but only %d remain", next, l, len(payload))
			}
			next, payload = payload[0], payload[l:]
		case protoFragment:
			return ndMessage{}, unsupported("IPv6", "fragmented packet: neighbor discovery is never fragmented (RFC 6980)")
		default:
			return ndMessage{}, unsupported("IPv6", "next header %d is not ICMPv6", next)
		}
	}
	icmp := payload
	if len(icmp) < 4 {
		return ndMessage{}, malformed("ICMPv6", "%d bytes are shorter than the 4-byte header", len(icmp))
	}
	m.typ = icmp[0]
	if m.typ != want {
		return ndMessage{}, unsupported("ICMPv6", "type %d is not a %s (%d)", m.typ, ndName(want), want)
	}
	// The validity checks of RFC 4861 §7.1.1 (NS) and §7.1.2 (NA).
	if hopLimit != 255 {
		return ndMessage{}, malformed("NDP", "hop limit %d, want 255: the %s may come from off-link (RFC 4861 §7.1)", hopLimit, ndName(want))
	}
	if sum := checksum(m.src, m.dst, icmp); sum != 0xffff {
		got := binary.BigEndian.Uint16(icmp[2:])
		return ndMessage{}, malformed("ICMPv6", "checksum %#04x, want %#04x", got, expectedChecksum(m.src, m.dst, icmp))
	}
	if code := icmp[1]; code != 0 {
		return ndMessage{}, malformed("NDP", "%s code %d, want 0", ndName(want), code)
	}
	if len(icmp) < ndLen {
		return ndMessage{}, malformed("NDP", "%s of %d bytes is shorter than 24", ndName(want), len(icmp))
	}
	m.flags = icmp[4] & (naRouter | naSolicited | naOverride)
	if want == icmpv6NS {
		m.flags = 0
	}
	m.target = netip.AddrFrom16([16]byte(icmp[8:24]))
	switch {
	case m.target.IsMulticast():
		return ndMessage{}, malformed("NDP", "target %s is multicast", m.target)
	case m.target.IsUnspecified() || m.target.IsLoopback() || m.target.Is4In6():
		// Never a neighbor's address on a link (RFC 4291 §2.5).
		return ndMessage{}, malformed("NDP", "target %s is not a unicast address on a link", m.target)
	}
	llaType, llaName := uint8(optSourceLLA), "source link-layer address"
	if want == icmpv6NA {
		llaType, llaName = optTargetLLA, "target link-layer address"
	}
	if m.lla, err = linkLayerOption(icmp[ndLen:], llaType, llaName); err != nil {
		return ndMessage{}, err
	}
	switch {
	case want == icmpv6NS && m.src.IsUnspecified() && !isSolicitedNode(m.dst):
		return ndMessage{}, malformed("NDP", "solicitation from :: (DAD) sent to %s, not to a solicited-node multicast address", m.dst)
	case want == icmpv6NS && m.src.IsUnspecified() && m.lla != nil:
		return ndMessage{}, malformed("NDP", "solicitation from :: (DAD) carries a source link-layer address option")
	case want == icmpv6NA && m.dst.IsMulticast() && m.flags&naSolicited != 0:
		return ndMessage{}, malformed("NDP", "advertisement to multicast %s has the solicited flag set", m.dst)
	}
	return m, nil
}

func ndName(typ uint8) string {
	if typ == icmpv6NA {
		return "neighbor advertisement"
	}
	return "neighbor solicitation"
}

// linkLayerOption walks the options (RFC 4861 §4.6) and returns the
// link-layer address option of type typ, nil if there is none. Other
// options are skipped, as the RFC asks of unknown ones.
func linkLayerOption(opts []byte, typ uint8, name string) (net.HardwareAddr, error) {
	var lla net.HardwareAddr
	for len(opts) > 0 {
		if len(opts) < 2 {
			return nil, malformed("NDP", "option truncated to %d byte", len(opts))
		}
		t, l := opts[0], int(opts[1])*8
		switch {
		case l == 0:
			return nil, malformed("NDP", "option type %d has length 0 (RFC 4861 §4.6: drop the packet)", t)
		case l > len(opts):
			return nil, malformed("NDP", "option type %d of %d bytes, but only %d remain", t, l, len(opts))
		}
		if t == typ {
			if l != 8 {
				return nil, malformed("NDP", "%s option of %d bytes, want 8 for Ethernet", name, l)
			}
			mac := net.HardwareAddr(opts[2:8])
			if !unicastMAC(mac) {
				return nil, malformed("NDP", "%s %s is not a unicast MAC", name, mac)
			}
			// Later duplicates are ignored, as Linux does.
			if lla == nil {
				lla = slices.Clone(mac)
			}
		}
		opts = opts[l:]
	}
	return lla, nil
}

// DecodeNDP decodes an Ethernet frame carrying an ICMPv6 neighbor
// solicitation, after hop-by-hop or destination options headers if any,
// and validates it as RFC 4861 §7.1.1 requires (hop limit 255, checksum,
// code 0, target not multicast, no zero-length option, DAD rules).
// Trailing bytes beyond the IPv6 payload length are ignored.
func DecodeNDP(frame []byte) (NeighborSolicitation, error) {
	m, err := decodeND(frame, icmpv6NS)
	if err != nil {
		return NeighborSolicitation{}, err
	}
	return NeighborSolicitation{
		EthernetSource:      m.eth.src,
		EthernetDestination: m.eth.dst,
		Source:              m.src,
		Destination:         m.dst,
		Target:              m.target,
		SourceLinkLayer:     m.lla,
	}, nil
}

// checksum is the folded one's-complement sum over the IPv6 pseudo-header
// (RFC 8200 §8.1) and msg; 0xffff when msg carries a correct ICMPv6
// checksum.
func checksum(src, dst netip.Addr, msg []byte) uint16 {
	var s uint32
	add := func(b []byte) {
		for ; len(b) >= 2; b = b[2:] {
			s += uint32(b[0])<<8 | uint32(b[1])
		}
		if len(b) == 1 {
			s += uint32(b[0]) << 8
		}
	}
	s16, d16 := src.As16(), dst.As16()
	add(s16[:])
	add(d16[:])
	n := uint32(len(msg))
	s += n>>16 + n&0xffff + protoICMPv6
	add(msg)
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

// expectedChecksum is the checksum field msg should carry.
func expectedChecksum(src, dst netip.Addr, msg []byte) uint16 {
	c := slices.Clone(msg)
	c[2], c[3] = 0, 0
	return ^checksum(src, dst, c)
}

// SolicitedNodeMulticast is the solicited-node multicast address of ip
// (RFC 4291 §2.7.1): ff02::1:ff00:0/104 plus ip's low 24 bits; neighbor
// solicitations for ip are sent there.
func SolicitedNodeMulticast(ip netip.Addr) netip.Addr {
	a := ip.As16()
	return netip.AddrFrom16([16]byte{0xff, 0x02, 10: 0, 11: 1, 12: 0xff, 13: a[13], 14: a[14], 15: a[15]})
}

func isSolicitedNode(ip netip.Addr) bool {
	return ip.Is6() && SolicitedNodeMulticast(ip) == ip
}

// MulticastMAC is the Ethernet address an IPv6 multicast group is sent to
// (RFC 2464 §7): 33:33 and the group's low 32 bits.
func MulticastMAC(group netip.Addr) net.HardwareAddr {
	a := group.As16()
	return net.HardwareAddr{0x33, 0x33, a[12], a[13], a[14], a[15]}
}
