package layer2

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// announced is the Announcer of most tests: vip4 and vip6 on eth0, and
// 198.51.100.20 / 2001:db8::20 on eth1.
func announced() *Announcements {
	var a Announcements
	a.Set(map[netip.Addr][]string{
		vip4:                                 {"eth0"},
		vip6:                                 {"eth0"},
		netip.MustParseAddr("198.51.100.20"): {"eth1"},
		netip.MustParseAddr("2001:db8::20"):  {"eth1"},
	})
	return &a
}

func TestDecide(t *testing.T) {
	arp := func(f func(*arpFields)) []byte {
		a := arpReq()
		f(&a)
		return a.bytes()
	}
	ns := func(f func(*nsSpec)) []byte {
		s := nsReq()
		f(&s)
		return s.bytes()
	}
	none := func(*arpFields) {}
	onlyEth1 := AnnouncerFunc(func(ip netip.Addr, iface string) bool { return iface == "eth1" })
	tests := []struct {
		name   string
		frame  []byte
		a      Announcer
		reason Reason
		family Family
		target netip.Addr
		errIs  error
		// For replies: the Ethernet destination and the decoded reply's
		// fields are checked by the Family's checker.
		replyTo []byte
	}{
		{name: "ARP for an announced IP", frame: arp(none), reason: ReasonReplied, family: IPv4, target: vip4, replyTo: clientMAC},
		{name: "ARP unicast to us", frame: arp(func(a *arpFields) { a.ethDst = ourMAC }), reason: ReasonReplied, family: IPv4, target: vip4, replyTo: clientMAC},
		{name: "ARP probe from 0.0.0.0", frame: arp(func(a *arpFields) { a.spa = netip.IPv4Unspecified() }), reason: ReasonReplied, family: IPv4, target: vip4, replyTo: clientMAC},
		{name: "ARP for an IP not announced", frame: arp(func(a *arpFields) { a.tpa = netip.MustParseAddr("198.51.100.99") }),
			reason: ReasonNotAnnounced, family: IPv4, target: netip.MustParseAddr("198.51.100.99")},
		{name: "ARP for an IP announced on eth1", frame: arp(func(a *arpFields) { a.tpa = netip.MustParseAddr("198.51.100.20") }),
			reason: ReasonOtherInterface, family: IPv4, target: netip.MustParseAddr("198.51.100.20")},
		{name: "ARP with an Announcer that cannot tell other interfaces", frame: arp(none), a: onlyEth1,
			reason: ReasonNotAnnounced, family: IPv4, target: vip4},
		{name: "ARP for the node's own address (the kernel answers)", frame: arp(func(a *arpFields) { a.tpa = netip.MustParseAddr("198.51.100.1") }),
			reason: ReasonNotAnnounced, family: IPv4, target: netip.MustParseAddr("198.51.100.1")},
		{name: "gratuitous ARP from another host", frame: arp(func(a *arpFields) {
			a.spa, a.tpa = netip.MustParseAddr("198.51.100.99"), netip.MustParseAddr("198.51.100.99")
		}), reason: ReasonGratuitous, family: IPv4, target: netip.MustParseAddr("198.51.100.99")},
		{name: "gratuitous ARP claiming our IP", frame: arp(func(a *arpFields) { a.spa = vip4 }), reason: ReasonConflict, family: IPv4, target: vip4},
		{name: "ARP from our own MAC", frame: arp(func(a *arpFields) { a.ethSrc, a.sha = ourMAC, ourMAC }), reason: ReasonOwnFrame, family: IPv4, target: vip4},
		{name: "ARP with our MAC as sender only", frame: arp(func(a *arpFields) { a.sha = ourMAC }), reason: ReasonOwnFrame, family: IPv4, target: vip4},
		{name: "ARP unicast to another host", frame: arp(func(a *arpFields) { a.ethDst = otherMAC }), reason: ReasonOtherHost, family: IPv4, target: vip4},
		{name: "ARP reply", frame: arp(func(a *arpFields) { a.op = 2 }), reason: ReasonUnsupported, errIs: ErrUnsupported},
		{name: "malformed ARP", frame: arp(func(a *arpFields) { a.hlen = 5 }), reason: ReasonMalformed, errIs: ErrMalformed},
		{name: "garbage", frame: []byte{1, 2, 3}, reason: ReasonMalformed, errIs: ErrMalformed},

		{name: "NS for an announced IP", frame: ns(func(*nsSpec) {}), reason: ReasonReplied, family: IPv6, target: vip6, replyTo: clientMAC},
		{name: "NS DAD for an announced IP is defended", frame: ns(func(s *nsSpec) { s.src, s.opts = netip.IPv6Unspecified(), nil }),
			reason: ReasonReplied, family: IPv6, target: vip6, replyTo: MulticastMAC(allNodes)},
		{name: "NS unicast NUD", frame: ns(func(s *nsSpec) { s.ethDst, s.dst, s.opts = ourMAC, vip6, nil }), reason: ReasonReplied, family: IPv6, target: vip6, replyTo: clientMAC},
		{name: "NS for an IP not announced", frame: ns(func(s *nsSpec) { s.target = netip.MustParseAddr("2001:db8::99") }),
			reason: ReasonNotAnnounced, family: IPv6, target: netip.MustParseAddr("2001:db8::99")},
		{name: "NS for an IP announced on eth1", frame: ns(func(s *nsSpec) { s.target = netip.MustParseAddr("2001:db8::20") }),
			reason: ReasonOtherInterface, family: IPv6, target: netip.MustParseAddr("2001:db8::20")},
		{name: "NS from our own MAC", frame: ns(func(s *nsSpec) { s.ethSrc = ourMAC }), reason: ReasonOwnFrame, family: IPv6, target: vip6},
		{name: "NS with our MAC as SLLA", frame: ns(func(s *nsSpec) { s.opts[2], s.opts[7] = ourMAC[0], ourMAC[5] }), reason: ReasonOwnFrame, family: IPv6, target: vip6},
		{name: "NS unicast to another host", frame: ns(func(s *nsSpec) { s.ethDst, s.dst = otherMAC, vip6 }), reason: ReasonOtherHost, family: IPv6, target: vip6},
		{name: "NS with hop limit 1", frame: set(ns(func(*nsSpec) {}), 21, 1), reason: ReasonMalformed, errIs: ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := tt.a
			if a == nil {
				a = announced()
			}
			d := Decide(tt.frame, ourIf, a)
			if d.Reason != tt.reason || d.Family != tt.family || d.Target != tt.target {
				t.Fatalf("got reason %q family %v target %v (err %v), want %q %v %v", d.Reason, d.Family, d.Target, d.Err, tt.reason, tt.family, tt.target)
			}
			if tt.errIs != nil && !errors.Is(d.Err, tt.errIs) {
				t.Errorf("err %v, want %v", d.Err, tt.errIs)
			}
			if tt.errIs == nil && d.Err != nil {
				t.Errorf("err %v", d.Err)
			}
			if (d.Reply != nil) != (tt.reason == ReasonReplied) {
				t.Fatalf("reply %x with reason %q", d.Reply, d.Reason)
			}
			if d.Reply == nil {
				return
			}
			if !slices.Equal(d.Reply[:6], tt.replyTo) {
				t.Errorf("reply to %x, want %x", d.Reply[:6], tt.replyTo)
			}
			// The reply says "target is at ourMAC".
			if tt.family == IPv4 {
				r, err := decodeARP(d.Reply)
				if err != nil || r.op != arpReply || r.spa != tt.target || !slices.Equal(r.sha, ourMAC) {
					t.Errorf("ARP reply %+v, %v", r, err)
				}
			} else {
				m, err := decodeND(d.Reply, icmpv6NA)
				if err != nil || m.target != tt.target || !slices.Equal(m.lla, ourMAC) || m.flags&naOverride == 0 {
					t.Errorf("NA %+v, %v", m, err)
				}
			}
		})
	}
}

// Whatever the request, Decide never replies for an IP the Announcer does
// not announce on the interface: random requests over a small address
// space, half of it announced, some on another interface.
func TestDecideNeverAnswersForOthers(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var a Announcements
	m := map[netip.Addr][]string{}
	for i := range 16 {
		ifaces := []string{"eth0"}
		if i%4 == 0 {
			ifaces = []string{"eth1"}
		}
		if i%2 == 0 {
			m[netip.AddrFrom4([4]byte{198, 51, 100, byte(i)})] = ifaces
			m[netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(i)})] = ifaces
		}
	}
	a.Set(m)
	replies := 0
	for range 5000 {
		i := byte(rng.UintN(16))
		var frame []byte
		if rng.UintN(2) == 0 {
			f := arpReq()
			f.tpa = netip.AddrFrom4([4]byte{198, 51, 100, i})
			if rng.UintN(4) == 0 {
				f.spa = f.tpa
			}
			frame = f.bytes()
		} else {
			s := nsReq()
			s.target = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: i})
			s.dst = SolicitedNodeMulticast(s.target)
			s.ethDst = MulticastMAC(s.dst)
			frame = s.bytes()
		}
		d := Decide(frame, ourIf, &a)
		if d.Reply != nil {
			replies++
			if !a.Announcing(d.Target, "eth0") {
				t.Fatalf("replied for %v, which eth0 does not announce", d.Target)
			}
		} else if a.Announcing(d.Target, "eth0") && d.Reason != ReasonConflict {
			t.Fatalf("no reply for announced %v: %q", d.Target, d.Reason)
		}
	}
	if replies == 0 {
		t.Fatal("never replied: the test proves nothing")
	}
}

func TestAnnouncements(t *testing.T) {
	var a Announcements
	if a.Announcing(vip4, "eth0") || a.AnnouncingAnywhere(vip4) || len(a.On("eth0")) != 0 {
		t.Fatal("the zero Announcements announces something")
	}
	in := map[netip.Addr][]string{
		vip4: {"eth0", "eth1"},
		vip6: {"eth0"},
		netip.MustParseAddr("::ffff:198.51.100.30"): {"eth1"}, // stored unmapped
	}
	a.Set(in)
	in[vip6][0] = "changed" // Set copies
	for _, tt := range []struct {
		ip    string
		iface string
		want  bool
	}{
		{"198.51.100.10", "eth0", true},
		{"198.51.100.10", "eth1", true},
		{"2001:db8::10", "eth0", true},
		{"2001:db8::10", "eth1", false},
		{"198.51.100.30", "eth1", true},
		{"::ffff:198.51.100.10", "eth0", true},
		{"198.51.100.11", "eth0", false},
	} {
		if got := a.Announcing(netip.MustParseAddr(tt.ip), tt.iface); got != tt.want {
			t.Errorf("Announcing(%s, %s) = %v", tt.ip, tt.iface, got)
		}
	}
	if !a.AnnouncingAnywhere(netip.MustParseAddr("198.51.100.30")) || a.AnnouncingAnywhere(netip.MustParseAddr("198.51.100.31")) {
		t.Error("AnnouncingAnywhere")
	}
	if got := a.On("eth0"); !slices.Equal(got, []netip.Addr{vip4, vip6}) {
		t.Errorf("On(eth0) = %v", got)
	}
	if got := a.On("eth1"); !slices.Equal(got, []netip.Addr{vip4, netip.MustParseAddr("198.51.100.30")}) {
		t.Errorf("On(eth1) = %v", got)
	}
	add := map[netip.Addr][]string{netip.MustParseAddr("::ffff:198.51.100.40"): {"eth1"}}
	a.Add(add)
	add[netip.MustParseAddr("::ffff:198.51.100.40")][0] = "changed" // Add copies
	if !a.Announcing(netip.MustParseAddr("198.51.100.40"), "eth1") || !a.Announcing(vip4, "eth0") {
		t.Error("Add: the added IP (unmapped) and the others are announced")
	}
	a.Set(nil)
	if a.Announcing(vip4, "eth0") {
		t.Error("Set(nil) kept an IP")
	}
}

// TestDecideForOther: an address answered for another node gets that
// node's MAC in the ARP sender and NDP target link-layer fields, from
// this interface's own Ethernet source, and only on its interface; a
// gratuitous ARP from that node is no conflict.
func TestDecideForOther(t *testing.T) {
	holder := mustMAC("02:00:5e:00:00:09")
	var a Announcements
	a.SetOthers(map[netip.Addr]map[string]net.HardwareAddr{vip4: {"eth0": holder}, vip6: {"eth0": holder}})
	if a.Announcing(vip4, "eth0") || a.AnsweringFor(vip4, "eth1") != nil {
		t.Fatal("an address answered for another node counts as announced, or on another interface")
	}
	if got := a.Listening("eth0"); !slices.Equal(got, []netip.Addr{vip4, vip6}) {
		t.Errorf("Listening(eth0) = %v", got)
	}
	d := Decide(arpReq().bytes(), ourIf, &a)
	if d.Reason != ReasonReplied {
		t.Fatalf("ARP: %s (%v)", d.Reason, d.Err)
	}
	p := gopacket.NewPacket(d.Reply, layers.LayerTypeEthernet, gopacket.Default)
	eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	arp, _ := p.Layer(layers.LayerTypeARP).(*layers.ARP)
	if eth == nil || arp == nil || !bytes.Equal(eth.SrcMAC, ourMAC) || !bytes.Equal(arp.SourceHwAddress, holder) {
		t.Fatalf("ARP reply: Ethernet %v, ARP %v; want from %s saying %s", eth, arp, ourMAC, holder)
	}
	d = Decide(nsReq().bytes(), ourIf, &a)
	if d.Reason != ReasonReplied {
		t.Fatalf("NS: %s (%v)", d.Reason, d.Err)
	}
	p = gopacket.NewPacket(d.Reply, layers.LayerTypeEthernet, gopacket.Default)
	eth, _ = p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	na, _ := p.Layer(layers.LayerTypeICMPv6NeighborAdvertisement).(*layers.ICMPv6NeighborAdvertisement)
	if eth == nil || na == nil || !bytes.Equal(eth.SrcMAC, ourMAC) || len(na.Options) != 1 || !bytes.Equal(na.Options[0].Data, holder) {
		t.Fatalf("NA: Ethernet %v, NA %v; want from %s saying %s", eth, na, ourMAC, holder)
	}
	g := arpReq()
	g.sha, g.spa, g.tpa, g.ethSrc = holder, vip4, vip4, holder
	if d := Decide(g.bytes(), ourIf, &a); d.Reason != ReasonGratuitous {
		t.Errorf("the holder's gratuitous ARP: %s, want %s", d.Reason, ReasonGratuitous)
	}
	// Announced as its own again: its own MAC, whatever is left.
	a.SetBoth(map[netip.Addr][]string{vip4: {"eth0"}}, map[netip.Addr]map[string]net.HardwareAddr{vip4: {"eth0": holder}})
	d = Decide(arpReq().bytes(), ourIf, &a)
	p = gopacket.NewPacket(d.Reply, layers.LayerTypeEthernet, gopacket.Default)
	if arp, _ := p.Layer(layers.LayerTypeARP).(*layers.ARP); arp == nil || !bytes.Equal(arp.SourceHwAddress, ourMAC) {
		t.Errorf("own and answered for another: %v, want this node's MAC", arp)
	}
	a.SetOthers(nil)
	a.Set(nil)
	if d := Decide(arpReq().bytes(), ourIf, &a); d.Reason != ReasonNotAnnounced {
		t.Errorf("after SetOthers(nil): %s", d.Reason)
	}
}
