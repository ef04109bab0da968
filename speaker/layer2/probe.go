package layer2

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/mdlayher/packet"
	"golang.org/x/net/bpf"
)

// Probing asks the LAN who answers for an address without claiming it.
// A speaker that wins an address from a node memberlist declared dead
// uses it before answering: a node cut off from memberlist while the LAN
// works is declared dead, yet answers until it finds itself a minority,
// and two answers make clients flip between MACs. Only what the clients
// themselves see settles that, so the check asks as they do.

// ProbeConn is a Conn with a read deadline; *packet.Conn implements it.
type ProbeConn interface {
	Conn
	SetReadDeadline(t time.Time) error
}

// ProbeFrame is the frame that asks who answers for addr without
// claiming it: an RFC 5227 ARP probe (sender IP 0.0.0.0) for IPv4, an
// RFC 4862 duplicate address detection solicitation (source ::, no
// link-layer option) for IPv6, sent from mac. Whoever answers for addr
// answers both (herald's responder does), and neither makes a listener
// take this node for addr's holder.
func ProbeFrame(addr netip.Addr, mac net.HardwareAddr) ([]byte, error) {
	addr = addr.Unmap()
	if addr.Is4() {
		return arpFrame(arpRequest, ethBroadcast, mac, netip.IPv4Unspecified(), make(net.HardwareAddr, 6), addr)
	}
	if err := checkMAC(mac); err != nil {
		return nil, err
	}
	if !addr.Is6() || addr.IsMulticast() || addr.IsUnspecified() {
		return nil, fmt.Errorf("probe target %s is not a unicast IP address", addr)
	}
	group := SolicitedNodeMulticast(addr)
	ip6 := &layers.IPv6{
		Version:    6,
		NextHeader: layers.IPProtocolICMPv6,
		HopLimit:   255,
		SrcIP:      net.IPv6unspecified,
		DstIP:      group.AsSlice(),
	}
	icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(icmpv6NS, 0)}
	if err := icmp.SetNetworkLayerForChecksum(ip6); err != nil {
		return nil, err
	}
	return serialize(
		&layers.Ethernet{SrcMAC: mac, DstMAC: MulticastMAC(group), EthernetType: layers.EthernetTypeIPv6},
		ip6, icmp,
		&layers.ICMPv6NeighborSolicitation{TargetAddress: addr.AsSlice()})
}

// AnswerFor tells whether frame shows a node other than own (this
// interface's MAC) answering for addr, and with which MAC: an ARP packet
// whose sender address is addr (a reply, or a gratuitous announcement),
// or a neighbor advertisement for addr. Anything else, malformed frames
// included, is not an answer.
func AnswerFor(frame []byte, addr netip.Addr, own net.HardwareAddr) (net.HardwareAddr, bool) {
	addr = addr.Unmap()
	var mac net.HardwareAddr
	if addr.Is4() {
		a, err := decodeARP(frame)
		if err != nil || a.spa != addr {
			return nil, false
		}
		mac = a.sha
	} else {
		m, err := decodeND(frame, icmpv6NA)
		if err != nil || m.target != addr {
			return nil, false
		}
		mac = m.lla
		if mac == nil {
			mac = m.eth.src
		}
	}
	if mac.String() == own.String() {
		return nil, false
	}
	return mac, true
}

// Probe sends ProbeFrame on c at once and again halfway through wait (one
// lost frame must not pass for silence), and reads c until wait has
// passed: it returns the MAC of the first answer for addr from a MAC
// other than mac, nil when none came.
func Probe(ctx context.Context, c ProbeConn, mac net.HardwareAddr, addr netip.Addr, wait time.Duration) (net.HardwareAddr, error) {
	frame, err := ProbeFrame(addr, mac)
	if err != nil {
		return nil, err
	}
	send := func() error {
		_, err := c.WriteTo(frame, &packet.Addr{HardwareAddr: net.HardwareAddr(frame[:6])})
		return err
	}
	if err := send(); err != nil {
		return nil, fmt.Errorf("sending a probe for %s: %w", addr, err)
	}
	start := time.Now()
	end, again := start.Add(wait), start.Add(wait/2)
	buf := make([]byte, 1<<16)
	for {
		now := time.Now()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !again.IsZero() && !now.Before(again) {
			again = time.Time{}
			if err := send(); err != nil {
				return nil, fmt.Errorf("sending a probe for %s: %w", addr, err)
			}
			if !now.Before(end) {
				// A stall (a loaded node) outlasted the whole wait
				// before the second probe went out: it still gets
				// its half of the wait, or one lost frame would
				// decide that nobody answers.
				end = now.Add(wait / 2)
			}
		}
		if !now.Before(end) {
			return nil, nil
		}
		// Read in slices short enough to send the second probe on time
		// and to notice ctx.
		until := now.Add(50 * time.Millisecond)
		for _, t := range []time.Time{end, again} {
			if !t.IsZero() && t.Before(until) {
				until = t
			}
		}
		if err := c.SetReadDeadline(until); err != nil {
			return nil, err
		}
		n, _, err := c.ReadFrom(buf)
		switch {
		case err == nil:
			if m, ok := AnswerFor(buf[:n], addr, mac); ok {
				return m, nil
			}
		case errors.Is(err, os.ErrDeadlineExceeded):
		default:
			return nil, fmt.Errorf("reading answers to a probe for %s: %w", addr, err)
		}
	}
}

// ListenProbe opens the socket Probe reads on ifi for addr's family: ARP
// frames, or IPv6 frames carrying neighbor advertisements.
func ListenProbe(ifi *net.Interface, addr netip.Addr) (*packet.Conn, error) {
	if addr.Unmap().Is4() {
		return listen(ifi, etherTypeARP, allARPFilter())
	}
	return listen(ifi, etherTypeIPv6, ndpFilter(icmpv6NA))
}

// allARPFilter accepts every ARP frame: replies and announcements both
// answer a probe, and Probe runs briefly.
func allARPFilter() []bpf.Instruction {
	return []bpf.Instruction{bpf.RetConstant{Val: snapLen}}
}
