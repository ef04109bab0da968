package conntrack

import (
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/herald-lb/herald/internal/netnstest"
	"github.com/herald-lb/herald/proxy/rules"
)

func TestFilterAdapter(t *testing.T) {
	fl := &netlink.ConntrackFlow{
		FamilyType: unix.AF_INET,
		Forward:    netlink.IPTuple{Protocol: unix.IPPROTO_UDP, SrcIP: net.ParseIP("10.244.1.5"), SrcPort: 40000, DstIP: net.ParseIP("10.96.0.53"), DstPort: 53},
		Reverse:    netlink.IPTuple{Protocol: unix.IPPROTO_UDP, SrcIP: net.ParseIP("10.244.2.20"), SrcPort: 5353, DstIP: net.ParseIP("10.244.1.5"), DstPort: 40000},
	}
	var seen Flow
	f := filter{stale: func(f Flow) bool { seen = f; return true }}
	if !f.MatchConntrackFlow(fl) {
		t.Fatal("not matched")
	}
	want := Flow{Proto: ProtoUDP,
		OrigSrc: netip.MustParseAddrPort("10.244.1.5:40000"), OrigDst: netip.MustParseAddrPort("10.96.0.53:53"),
		ReplySrc: netip.MustParseAddrPort("10.244.2.20:5353"), ReplyDst: netip.MustParseAddrPort("10.244.1.5:40000")}
	if seen != want {
		t.Errorf("got %+v\nwant %+v", seen, want)
	}
	fl.Forward.Protocol = unix.IPPROTO_TCP
	if f.MatchConntrackFlow(fl) {
		t.Error("a TCP flow reached the predicate")
	}
}

func TestFakeFamilies(t *testing.T) {
	var f Fake
	v4 := Flow{Proto: ProtoUDP, OrigDst: netip.MustParseAddrPort("10.96.0.53:53")}
	v6 := Flow{Proto: ProtoUDP, OrigDst: netip.MustParseAddrPort("[fd00::53]:53")}
	f.Add(v4, v6)
	n, _ := f.DeleteUDP(rules.IPv6, func(Flow) bool { return true })
	if n != 1 || len(f.Flows()) != 1 || f.Flows()[0] != v4 {
		t.Errorf("deleted %d, left %v", n, f.Flows())
	}
}

// TestNetlinkDeletesInKernel creates UDP entries in a throwaway network
// namespace and checks that exactly the stale one goes.
func TestNetlinkDeletesInKernel(t *testing.T) {
	netnstest.Enter(t, "a network namespace and conntrack")
	mk := func(sport uint16, replySrc string) *netlink.ConntrackFlow {
		return &netlink.ConntrackFlow{
			FamilyType: unix.AF_INET,
			Forward:    netlink.IPTuple{Protocol: unix.IPPROTO_UDP, SrcIP: net.ParseIP("10.244.1.5").To4(), SrcPort: sport, DstIP: net.ParseIP("10.96.0.53").To4(), DstPort: 53},
			Reverse:    netlink.IPTuple{Protocol: unix.IPPROTO_UDP, SrcIP: net.ParseIP(replySrc).To4(), SrcPort: 5353, DstIP: net.ParseIP("10.244.1.5").To4(), DstPort: sport},
			TimeOut:    100,
		}
	}
	for _, fl := range []*netlink.ConntrackFlow{mk(40000, "10.244.2.20"), mk(40001, "10.244.3.99")} {
		if err := netlink.ConntrackCreate(netlink.ConntrackTable, unix.AF_INET, fl); err != nil {
			t.Skipf("cannot create conntrack entries here: %v", err)
		}
	}
	gone := netip.MustParseAddrPort("10.244.3.99:5353")
	n, err := Netlink{}.DeleteUDP(rules.IPv4, func(f Flow) bool { return f.ReplySrc == gone })
	if err != nil || n != 1 {
		t.Fatalf("deleted %d: %v", n, err)
	}
	left, err := netlink.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].Forward.SrcPort != 40000 {
		t.Errorf("left %v", left)
	}
}
