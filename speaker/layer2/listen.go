package layer2

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/mdlayher/packet"
	"golang.org/x/net/bpf"
	"golang.org/x/net/ipv6"
)

// Why AF_PACKET with one socket per EtherType: a socket bound to ARP or
// to IPv6 is handed only frames of that EtherType on receive, whereas an
// ETH_P_ALL socket would also get a clone of every frame the node sends.
// A BPF filter, attached before bind by packet.Listen, keeps all but the
// requests in the kernel.
//
// Why the solicited-node groups are joined at the IPv6 level, on a UDP
// socket (ListenGroups), rather than with PACKET_ADD_MEMBERSHIP
// (packet.Conn.JoinGroup) or promiscuous mode: all three make the NIC
// accept the group's MAC, but only the IPv6 join makes the kernel send MLD
// reports, and switches (and Linux bridges with a querier) doing MLD
// snooping forward a solicited-node group only to ports that reported it;
// a MAC-level join would leave us deaf there. Promiscuous mode would make
// the NIC deliver everything. Like a packet membership, an IPv6 socket
// membership ends when the socket closes, however the process ends. The
// kernel's own stack then also sees the solicitations and ignores them, as
// the address is not one of its own.

// snapLen is the BPF return value for an accepted frame: keep all of it.
const snapLen = 1 << 18

// ListenARP opens an AF_PACKET socket on ifi that receives ARP requests.
func ListenARP(ifi *net.Interface) (*packet.Conn, error) {
	return listen(ifi, etherTypeARP, arpFilter())
}

// ListenNDP opens an AF_PACKET socket on ifi that receives ICMPv6 neighbor
// solicitations, and IPv6 packets starting with hop-by-hop or destination
// options, whose ICMPv6 type the filter cannot find cheaply (DecodeNDP
// sorts them out). Solicitations sent to a solicited-node group reach it
// only once the group is joined (Responder.SyncGroups).
func ListenNDP(ifi *net.Interface) (*packet.Conn, error) {
	return listen(ifi, etherTypeIPv6, ndpFilter(icmpv6NS))
}

func listen(ifi *net.Interface, etherType int, prog []bpf.Instruction) (*packet.Conn, error) {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("assembling the BPF filter: %w", err)
	}
	c, err := packet.Listen(ifi, packet.Raw, etherType, &packet.Config{Filter: raw})
	if err != nil {
		return nil, fmt.Errorf("interface %s: opening an AF_PACKET socket for EtherType %#04x: %w", ifi.Name, etherType, err)
	}
	return c, nil
}

// arpFilter accepts ARP requests: operation (bytes 20-21) 1.
func arpFilter() []bpf.Instruction {
	return []bpf.Instruction{
		bpf.LoadAbsolute{Off: ethLen + 6, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: arpRequest, SkipFalse: 1},
		bpf.RetConstant{Val: snapLen},
		bpf.RetConstant{Val: 0},
	}
}

// ndpFilter accepts IPv6 packets whose next header (byte 20) is ICMPv6
// with type (byte 54) typ (135 for solicitations, 136 for
// advertisements), or is hop-by-hop or destination options. Loads past
// the frame's end reject it.
func ndpFilter(typ uint8) []bpf.Instruction {
	return []bpf.Instruction{
		bpf.LoadAbsolute{Off: ethLen + 6, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: protoICMPv6, SkipFalse: 2},
		bpf.LoadAbsolute{Off: ethLen + ipv6Len, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(typ), SkipTrue: 2, SkipFalse: 3},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: protoHopByHop, SkipTrue: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: protoDestOpts, SkipFalse: 1},
		bpf.RetConstant{Val: snapLen},
		bpf.RetConstant{Val: 0},
	}
}

// GroupSocket joins IPv6 multicast groups on one interface through a UDP
// socket that is never read (its ephemeral port receives nothing).
type GroupSocket struct {
	ifi *net.Interface
	c   net.PacketConn
	p   *ipv6.PacketConn
}

// ListenGroups opens a GroupSocket for ifi.
func ListenGroups(ifi *net.Interface) (*GroupSocket, error) {
	c, err := net.ListenPacket("udp6", "[::]:0")
	if err != nil {
		return nil, fmt.Errorf("interface %s: opening a UDP socket for multicast groups: %w", ifi.Name, err)
	}
	return &GroupSocket{ifi: ifi, c: c, p: ipv6.NewPacketConn(c)}, nil
}

// JoinGroup joins group on the interface (IPV6_JOIN_GROUP).
func (g *GroupSocket) JoinGroup(group netip.Addr) error {
	if err := g.p.JoinGroup(g.ifi, &net.UDPAddr{IP: group.AsSlice()}); err != nil {
		return fmt.Errorf("joining %s on %s (is IPv6 disabled there?): %w", group, g.ifi.Name, err)
	}
	return nil
}

// LeaveGroup leaves group on the interface.
func (g *GroupSocket) LeaveGroup(group netip.Addr) error {
	if err := g.p.LeaveGroup(g.ifi, &net.UDPAddr{IP: group.AsSlice()}); err != nil {
		return fmt.Errorf("leaving %s on %s: %w", group, g.ifi.Name, err)
	}
	return nil
}

// Close closes the socket, which leaves every group it joined.
func (g *GroupSocket) Close() error { return g.c.Close() }

// Listen opens the sockets a Responder on ifi needs for the families
// given: ListenARP for IPv4, ListenNDP and ListenGroups for IPv6. On error
// it closes what it opened.
func Listen(ifi *net.Interface, families ...Family) (Sockets, error) {
	var s Sockets
	for _, f := range families {
		var err error
		switch f {
		case IPv4:
			if s.ARP == nil {
				var c *packet.Conn
				if c, err = ListenARP(ifi); err == nil {
					s.ARP = c
				}
			}
		case IPv6:
			if s.NDP == nil {
				var c *packet.Conn
				if c, err = ListenNDP(ifi); err == nil {
					s.NDP = c
				}
			}
			if err == nil && s.Groups == nil {
				var g *GroupSocket
				if g, err = ListenGroups(ifi); err == nil {
					s.Groups = g
				}
			}
		default:
			err = fmt.Errorf("unknown address family %v", f)
		}
		if err != nil {
			return Sockets{}, errors.Join(err, s.close())
		}
	}
	return s, nil
}
