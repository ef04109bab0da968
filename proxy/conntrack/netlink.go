package conntrack

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/herald-lb/herald/proxy/rules"
)

// Netlink deletes entries through the kernel's netfilter netlink socket
// (what `conntrack -D` does), in the network namespace of the process.
type Netlink struct{}

// filter adapts a predicate to netlink's filter interface, so the
// library dumps the table once and deletes what the predicate picks.
type filter struct{ stale func(Flow) bool }

func (f filter) MatchConntrackFlow(fl *netlink.ConntrackFlow) bool {
	if fl.Forward.Protocol != unix.IPPROTO_UDP {
		return false
	}
	return f.stale(flowFrom(fl))
}

func addrPort(ip net.IP, port uint16) netip.AddrPort {
	a, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(a.Unmap(), port)
}

func flowFrom(fl *netlink.ConntrackFlow) Flow {
	return Flow{
		Proto:    fl.Forward.Protocol,
		OrigSrc:  addrPort(fl.Forward.SrcIP, fl.Forward.SrcPort),
		OrigDst:  addrPort(fl.Forward.DstIP, fl.Forward.DstPort),
		ReplySrc: addrPort(fl.Reverse.SrcIP, fl.Reverse.SrcPort),
		ReplyDst: addrPort(fl.Reverse.DstIP, fl.Reverse.DstPort),
	}
}

// DeleteUDP implements Interface.
func (Netlink) DeleteUDP(family rules.Family, stale func(Flow) bool) (int, error) {
	fam := netlink.InetFamily(unix.AF_INET)
	if family == rules.IPv6 {
		fam = netlink.InetFamily(unix.AF_INET6)
	}
	n, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, fam, filter{stale})
	if err != nil {
		return int(n), fmt.Errorf("conntrack (%s): %w", family, err)
	}
	return int(n), nil
}
