package layer2

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// wantErr checks err: "" means success; otherwise err must be a
// DecodeError of the given kind whose message contains the text.
type wantErr struct {
	malformed bool
	text      string
}

func checkErr(t *testing.T, err error, want wantErr) {
	t.Helper()
	if want.text == "" {
		if err != nil {
			t.Fatalf("error %v, want none", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("no error, want one containing %q", want.text)
	}
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("error %v (%T) is not a *DecodeError", err, err)
	}
	kind, other := ErrUnsupported, ErrMalformed
	if want.malformed {
		kind, other = ErrMalformed, ErrUnsupported
	}
	if !errors.Is(err, kind) || errors.Is(err, other) {
		t.Errorf("error %q: want errors.Is %v only", err, kind)
	}
	if !strings.Contains(err.Error(), want.text) {
		t.Errorf("error %q does not contain %q", err, want.text)
	}
}

func TestDecodeARP(t *testing.T) {
	mod := func(f func(*arpFields)) []byte {
		a := arpReq()
		f(&a)
		return a.bytes()
	}
	valid := arpReq().bytes()
	tests := []struct {
		name  string
		frame []byte
		err   wantErr
		want  ARPRequest // checked when err is empty
	}{
		{name: "request", frame: valid,
			want: ARPRequest{EthernetSource: clientMAC, EthernetDestination: ethBroadcast, SenderMAC: clientMAC, SenderIP: client4, TargetIP: vip4}},
		{name: "padded to 60 bytes", frame: append(slices.Clone(valid), make([]byte, 18)...),
			want: ARPRequest{EthernetSource: clientMAC, EthernetDestination: ethBroadcast, SenderMAC: clientMAC, SenderIP: client4, TargetIP: vip4}},
		{name: "RFC 5227 probe from 0.0.0.0", frame: mod(func(a *arpFields) { a.spa = netip.IPv4Unspecified() }),
			want: ARPRequest{EthernetSource: clientMAC, EthernetDestination: ethBroadcast, SenderMAC: clientMAC, SenderIP: netip.IPv4Unspecified(), TargetIP: vip4}},
		{name: "unicast", frame: mod(func(a *arpFields) { a.ethDst = ourMAC }),
			want: ARPRequest{EthernetSource: clientMAC, EthernetDestination: ourMAC, SenderMAC: clientMAC, SenderIP: client4, TargetIP: vip4}},

		{name: "empty", frame: nil, err: wantErr{true, "0 bytes is shorter than the 14-byte header"}},
		{name: "truncated Ethernet header", frame: valid[:13], err: wantErr{true, "13 bytes"}},
		{name: "truncated ARP header", frame: valid[:14+7], err: wantErr{true, "7 bytes are shorter than the 8-byte fixed header"}},
		{name: "truncated ARP body", frame: valid[:14+27], err: wantErr{true, "27 bytes are shorter than the 28"}},
		{name: "not ARP", frame: mod(func(a *arpFields) { a.etherType = 0x0800 }), err: wantErr{false, "EtherType 0x0800 is not ARP"}},
		{name: "VLAN tagged", frame: mod(func(a *arpFields) { a.etherType = 0x8100 }), err: wantErr{false, "802.1Q"}},
		{name: "hardware type IEEE 802", frame: mod(func(a *arpFields) { a.htype = 6 }), err: wantErr{false, "hardware type 6"}},
		{name: "protocol type IPv6", frame: mod(func(a *arpFields) { a.ptype = 0x86dd }), err: wantErr{false, "protocol type 0x86dd"}},
		{name: "hardware length 8", frame: mod(func(a *arpFields) { a.hlen = 8 }), err: wantErr{true, "hardware address length 8, want 6"}},
		{name: "protocol length 16", frame: mod(func(a *arpFields) { a.plen = 16 }), err: wantErr{true, "protocol address length 16, want 4"}},
		{name: "reply", frame: mod(func(a *arpFields) { a.op = 2 }), err: wantErr{false, "operation 2 (reply) needs no answer"}},
		{name: "RARP operation", frame: mod(func(a *arpFields) { a.op = 3 }), err: wantErr{false, "operation 3 is neither"}},
		{name: "multicast Ethernet source", frame: mod(func(a *arpFields) { a.ethSrc = mustMAC("01:00:5e:00:00:01") }), err: wantErr{true, "source 01:00:5e:00:00:01 is not a unicast MAC"}},
		{name: "zero Ethernet source", frame: mod(func(a *arpFields) { a.ethSrc = make(net.HardwareAddr, 6) }), err: wantErr{true, "source 00:00:00:00:00:00 is not a unicast MAC"}},
		{name: "broadcast sender MAC", frame: mod(func(a *arpFields) { a.sha = ethBroadcast }), err: wantErr{true, "sender hardware address ff:ff:ff:ff:ff:ff is not a unicast MAC"}},
		{name: "multicast sender IP", frame: mod(func(a *arpFields) { a.spa = netip.MustParseAddr("224.0.0.1") }), err: wantErr{true, "sender protocol address 224.0.0.1 is not unicast"}},
		{name: "broadcast sender IP", frame: mod(func(a *arpFields) { a.spa = ipv4Broadcast }), err: wantErr{true, "sender protocol address 255.255.255.255"}},
		{name: "target 0.0.0.0", frame: mod(func(a *arpFields) { a.tpa = netip.IPv4Unspecified() }), err: wantErr{true, "target protocol address 0.0.0.0 is not unicast"}},
		{name: "multicast target", frame: mod(func(a *arpFields) { a.tpa = netip.MustParseAddr("239.1.1.1") }), err: wantErr{true, "target protocol address 239.1.1.1"}},
		{name: "broadcast target", frame: mod(func(a *arpFields) { a.tpa = ipv4Broadcast }), err: wantErr{true, "target protocol address 255.255.255.255"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeARP(tt.frame)
			checkErr(t, err, tt.err)
			if err == nil && !equalARP(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			// Decode agrees with DecodeARP on ARP frames.
			req, derr := Decode(tt.frame)
			if (derr == nil) != (err == nil) || (derr == nil && (req.ARP == nil || req.NS != nil || req.Family() != IPv4 || req.Target() != got.TargetIP)) {
				t.Errorf("Decode: %+v, %v", req, derr)
			}
		})
	}
}

func equalARP(a, b ARPRequest) bool {
	return slices.Equal(a.EthernetSource, b.EthernetSource) && slices.Equal(a.EthernetDestination, b.EthernetDestination) &&
		slices.Equal(a.SenderMAC, b.SenderMAC) && a.SenderIP == b.SenderIP && a.TargetIP == b.TargetIP
}

func TestDecodeARPGratuitous(t *testing.T) {
	a := arpReq()
	a.spa = vip4
	got, err := DecodeARP(a.bytes())
	if err != nil || !got.Gratuitous() {
		t.Fatalf("got %+v, %v; want a gratuitous request", got, err)
	}
	if r, _ := DecodeARP(arpReq().bytes()); r.Gratuitous() {
		t.Error("an ordinary request reported as gratuitous")
	}
}

func TestDecodeARPDoesNotAlias(t *testing.T) {
	frame := arpReq().bytes()
	got, err := DecodeARP(frame)
	if err != nil {
		t.Fatal(err)
	}
	clear(frame) // the loop reuses its buffer
	if !slices.Equal(got.SenderMAC, clientMAC) || !slices.Equal(got.EthernetSource, clientMAC) || !slices.Equal(got.EthernetDestination, ethBroadcast) {
		t.Errorf("decoded addresses alias the frame: %+v", got)
	}
}

func TestDecodeNDP(t *testing.T) {
	mod := func(f func(*nsSpec)) []byte {
		s := nsReq()
		f(&s)
		return s.bytes()
	}
	valid := nsReq().bytes()
	snm := SolicitedNodeMulticast(vip6)
	wantValid := NeighborSolicitation{EthernetSource: clientMAC, EthernetDestination: MulticastMAC(snm),
		Source: client6, Destination: snm, Target: vip6, SourceLinkLayer: clientMAC}
	sllaOpt := slices.Concat([]byte{1, 1}, clientMAC)
	nonceOpt := []byte{14, 1, 1, 2, 3, 4, 5, 6}
	tests := []struct {
		name  string
		frame []byte
		err   wantErr
		want  NeighborSolicitation
	}{
		{name: "multicast with SLLA", frame: valid, want: wantValid},
		{name: "trailing bytes after the payload", frame: append(slices.Clone(valid), 0, 0, 0, 0), want: wantValid},
		{name: "unicast NUD probe without SLLA", frame: mod(func(s *nsSpec) { s.ethDst, s.dst, s.opts = ourMAC, vip6, nil }),
			want: NeighborSolicitation{EthernetSource: clientMAC, EthernetDestination: ourMAC, Source: client6, Destination: vip6, Target: vip6}},
		{name: "from link-local", frame: mod(func(s *nsSpec) { s.src = ll6 }),
			want: NeighborSolicitation{EthernetSource: clientMAC, EthernetDestination: MulticastMAC(snm), Source: ll6, Destination: snm, Target: vip6, SourceLinkLayer: clientMAC}},
		{name: "DAD from ::", frame: mod(func(s *nsSpec) { s.src, s.opts = netip.IPv6Unspecified(), nil }),
			want: NeighborSolicitation{EthernetSource: clientMAC, EthernetDestination: MulticastMAC(snm), Source: netip.IPv6Unspecified(), Destination: snm, Target: vip6}},
		{name: "DAD with a nonce option (RFC 7527)", frame: mod(func(s *nsSpec) { s.src, s.opts = netip.IPv6Unspecified(), nonceOpt }),
			want: NeighborSolicitation{EthernetSource: clientMAC, EthernetDestination: MulticastMAC(snm), Source: netip.IPv6Unspecified(), Destination: snm, Target: vip6}},
		{name: "unknown option skipped", frame: mod(func(s *nsSpec) { s.opts = slices.Concat(nonceOpt, sllaOpt) }), want: wantValid},
		{name: "second SLLA ignored", frame: mod(func(s *nsSpec) { s.opts = slices.Concat(sllaOpt, []byte{1, 1}, otherMAC) }), want: wantValid},
		{name: "after a hop-by-hop header", frame: withExtHeader(valid, 0), want: wantValid},
		{name: "after a destination options header", frame: withExtHeader(valid, 60), want: wantValid},
		{name: "after hop-by-hop and destination options", frame: withExtHeader(withExtHeader(valid, 60), 0), want: wantValid},

		{name: "truncated Ethernet", frame: valid[:10], err: wantErr{true, "frame of 10 bytes"}},
		{name: "not IPv6", frame: set(valid, 13, 0xdc), err: wantErr{false, "EtherType 0x86dc is not IPv6"}},
		{name: "truncated IPv6 header", frame: valid[:14+39], err: wantErr{true, "39 bytes are shorter than the 40-byte header"}},
		{name: "IP version 4", frame: set(valid, 14, 0x40), err: wantErr{true, "version 4, want 6"}},
		{name: "payload length past the frame", frame: valid[:len(valid)-1], err: wantErr{true, "payload length 32, but only 31 bytes follow"}},
		{name: "multicast source", frame: mod(func(s *nsSpec) { s.src = netip.MustParseAddr("ff02::1") }), err: wantErr{true, "source ff02::1 is multicast"}},
		{name: "TCP", frame: set(valid, 20, 6), err: wantErr{false, "next header 6 is not ICMPv6"}},
		{name: "fragment", frame: withExtHeader(valid, 44), err: wantErr{false, "RFC 6980"}},
		{name: "hop-by-hop not first", frame: withExtHeader(withExtHeader(valid, 0), 60), err: wantErr{true, "hop-by-hop options header is not the first"}},
		{name: "extension header truncated", frame: func() []byte {
			f := withExtHeader(valid, 60)
			binary.BigEndian.PutUint16(f[18:], 4)
			return f[:14+40+4]
		}(), err: wantErr{true, "extension header 60 truncated to 4 bytes"}},
		{name: "extension header longer than the payload", frame: set(withExtHeader(valid, 60), 55, 9), err: wantErr{true, "extension header 60 of 80 bytes, but only 40 remain"}},
		{name: "ICMPv6 header truncated", frame: func() []byte {
			f := slices.Clone(valid[:14+40+3])
			binary.BigEndian.PutUint16(f[18:], 3)
			return f
		}(), err: wantErr{true, "3 bytes are shorter than the 4-byte header"}},
		{name: "echo request", frame: fixChecksum(set(valid, 54, 128)), err: wantErr{false, "type 128 is not a neighbor solicitation (135)"}},
		{name: "neighbor advertisement", frame: fixChecksum(set(valid, 54, 136)), err: wantErr{false, "type 136 is not a neighbor solicitation"}},
		{name: "hop limit 64", frame: set(valid, 21, 64), err: wantErr{true, "hop limit 64, want 255"}},
		{name: "bad checksum", frame: set(valid, 57, valid[57]^0xff), err: wantErr{true, "checksum"}},
		{name: "checksum over a changed target", frame: set(valid, 14+40+23, 0x11), err: wantErr{true, "checksum"}},
		{name: "code 1", frame: mod(func(s *nsSpec) { s.code = 1 }), err: wantErr{true, "code 1, want 0"}},
		{name: "shorter than 24", frame: func() []byte {
			f := slices.Clone(valid[:14+40+20])
			binary.BigEndian.PutUint16(f[18:], 20)
			return fixChecksum(f)
		}(), err: wantErr{true, "neighbor solicitation of 20 bytes is shorter than 24"}},
		{name: "multicast target", frame: mod(func(s *nsSpec) { s.target = netip.MustParseAddr("ff02::1") }), err: wantErr{true, "target ff02::1 is multicast"}},
		{name: "unspecified target", frame: mod(func(s *nsSpec) { s.target = netip.IPv6Unspecified() }), err: wantErr{true, "target :: is not a unicast address"}},
		{name: "loopback target", frame: mod(func(s *nsSpec) { s.target = netip.IPv6Loopback() }), err: wantErr{true, "target ::1 is not a unicast address"}},
		{name: "IPv4-mapped target", frame: mod(func(s *nsSpec) { s.target = netip.MustParseAddr("::ffff:198.51.100.10") }), err: wantErr{true, "target ::ffff:198.51.100.10 is not a unicast address"}},
		{name: "zero-length option", frame: mod(func(s *nsSpec) { s.opts = []byte{1, 0, 0, 0, 0, 0, 0, 0} }), err: wantErr{true, "option type 1 has length 0"}},
		{name: "zero-length unknown option", frame: mod(func(s *nsSpec) { s.opts = slices.Concat(sllaOpt, []byte{99, 0, 0, 0, 0, 0, 0, 0}) }), err: wantErr{true, "option type 99 has length 0"}},
		{name: "option past the end", frame: mod(func(s *nsSpec) { s.opts = []byte{1, 2, 0, 0, 0, 0, 0, 0} }), err: wantErr{true, "option type 1 of 16 bytes, but only 8 remain"}},
		{name: "option truncated to 1 byte", frame: mod(func(s *nsSpec) { s.opts = []byte{1} }), err: wantErr{true, "option truncated to 1 byte"}},
		{name: "SLLA of 16 bytes", frame: mod(func(s *nsSpec) { s.opts = slices.Concat([]byte{1, 2}, clientMAC, make([]byte, 8)) }), err: wantErr{true, "source link-layer address option of 16 bytes, want 8"}},
		{name: "multicast SLLA", frame: mod(func(s *nsSpec) { s.opts = slices.Concat([]byte{1, 1}, ethBroadcast) }), err: wantErr{true, "source link-layer address ff:ff:ff:ff:ff:ff is not a unicast MAC"}},
		{name: "DAD with SLLA", frame: mod(func(s *nsSpec) { s.src = netip.IPv6Unspecified() }), err: wantErr{true, "solicitation from :: (DAD) carries a source link-layer address"}},
		{name: "DAD to all-nodes", frame: mod(func(s *nsSpec) { s.src, s.dst, s.opts = netip.IPv6Unspecified(), allNodes, nil }), err: wantErr{true, "sent to ff02::1, not to a solicited-node multicast"}},
		{name: "multicast Ethernet source", frame: mod(func(s *nsSpec) { s.ethSrc = mustMAC("33:33:00:00:00:01") }), err: wantErr{true, "source 33:33:00:00:00:01 is not a unicast MAC"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeNDP(tt.frame)
			checkErr(t, err, tt.err)
			if err == nil && !equalNS(got, tt.want) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
			req, derr := Decode(tt.frame)
			if len(tt.frame) >= 14 && binary.BigEndian.Uint16(tt.frame[12:]) == 0x86dd {
				if (derr == nil) != (err == nil) || (derr == nil && (req.NS == nil || req.ARP != nil || req.Family() != IPv6 || req.Target() != got.Target)) {
					t.Errorf("Decode: %+v, %v", req, derr)
				}
			}
		})
	}
}

func equalNS(a, b NeighborSolicitation) bool {
	return slices.Equal(a.EthernetSource, b.EthernetSource) && slices.Equal(a.EthernetDestination, b.EthernetDestination) &&
		a.Source == b.Source && a.Destination == b.Destination && a.Target == b.Target &&
		slices.Equal(a.SourceLinkLayer, b.SourceLinkLayer)
}

func TestDecodeErrorMessage(t *testing.T) {
	_, err := DecodeNDP(set(nsReq().bytes(), 21, 1))
	if got, want := err.Error(), "malformed NDP: hop limit 1, want 255: the neighbor solicitation may come from off-link (RFC 4861 §7.1)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	_, err = DecodeARP(set(arpReq().bytes(), 21, 2))
	if got, want := err.Error(), "ignored ARP: operation 2 (reply) needs no answer"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	// The bad-checksum message names the value the frame should carry.
	f := nsReq().bytes()
	good := binary.BigEndian.Uint16(f[56:])
	f = set(f, 56, f[56]^0x10)
	_, err = DecodeNDP(f)
	if want := "want " + hex4(good); !strings.Contains(err.Error(), want) {
		t.Errorf("%q does not name the right checksum (%s)", err, want)
	}
}

func hex4(v uint16) string {
	const digits = "0123456789abcdef"
	return "0x" + string([]byte{digits[v>>12], digits[v>>8&15], digits[v>>4&15], digits[v&15]})
}

func TestDecodeNotARequest(t *testing.T) {
	for _, frame := range [][]byte{
		nil,
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x08, 0x00, 0x45},
	} {
		if _, err := Decode(frame); err == nil {
			t.Errorf("Decode(% x) succeeded", frame)
		}
	}
}

// The captured frames come from the kernel and real tools: they decode,
// and the checksum the kernel computed agrees with ours and refChecksum.
func TestCapturedFrames(t *testing.T) {
	a, err := DecodeARP(capturedARP)
	if err != nil {
		t.Fatalf("arping's request: %v", err)
	}
	if !slices.Equal(a.SenderMAC, capturedMAC) || a.SenderIP != client4 || a.TargetIP != vip4 {
		t.Errorf("arping's request decoded as %+v", a)
	}

	ns, err := DecodeNDP(capturedNS)
	if err != nil {
		t.Fatalf("ndisc6's solicitation: %v", err)
	}
	src := netip.MustParseAddr("fe80::4cdd:88ff:fe1b:70f9")
	if ns.Source != src || ns.Target != vip6 || !slices.Equal(ns.SourceLinkLayer, capturedMAC) {
		t.Errorf("ndisc6's solicitation decoded as %+v", ns)
	}
	// The kernel's idea of the solicited-node group and its MAC is ours.
	if ns.Destination != SolicitedNodeMulticast(vip6) || !slices.Equal(ns.EthernetDestination, MulticastMAC(ns.Destination)) {
		t.Errorf("solicited-node group %s at %s, we compute %s at %s", ns.Destination, ns.EthernetDestination,
			SolicitedNodeMulticast(vip6), MulticastMAC(SolicitedNodeMulticast(vip6)))
	}
	icmp := capturedNS[54:]
	if got := binary.BigEndian.Uint16(icmp[2:]); got != refChecksum(ns.Source, ns.Destination, icmp) || got != expectedChecksum(ns.Source, ns.Destination, icmp) {
		t.Errorf("kernel checksum %#04x, refChecksum %#04x, expectedChecksum %#04x", got,
			refChecksum(ns.Source, ns.Destination, icmp), expectedChecksum(ns.Source, ns.Destination, icmp))
	}

	// The MLD report's hop-by-hop header is walked; it is not an NS.
	_, err = DecodeNDP(capturedMLD)
	checkErr(t, err, wantErr{false, "type 143 is not a neighbor solicitation"})
	mldSrc, mldDst := netip.AddrFrom16([16]byte(capturedMLD[22:38])), netip.AddrFrom16([16]byte(capturedMLD[38:54]))
	mld := capturedMLD[14+40+8:]
	if checksum(mldSrc, mldDst, mld) != 0xffff || refChecksum(mldSrc, mldDst, mld) != binary.BigEndian.Uint16(mld[2:]) {
		t.Error("the kernel's MLD checksum does not verify")
	}
}

// checksum and refChecksum agree on random messages of every length, and
// a message carrying refChecksum's value verifies.
func TestChecksumMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 4; n < 300; n++ {
		msg := make([]byte, n)
		for i := range msg {
			msg[i] = byte(rng.UintN(256))
		}
		var s, d [16]byte
		for i := range s {
			s[i], d[i] = byte(rng.UintN(256)), byte(rng.UintN(256))
		}
		src, dst := netip.AddrFrom16(s), netip.AddrFrom16(d)
		want := refChecksum(src, dst, msg)
		if got := expectedChecksum(src, dst, msg); got != want {
			t.Fatalf("len %d: expectedChecksum %#04x, refChecksum %#04x", n, got, want)
		}
		binary.BigEndian.PutUint16(msg[2:], want)
		if checksum(src, dst, msg) != 0xffff {
			t.Fatalf("len %d: a correct checksum does not verify", n)
		}
	}
}

func TestSolicitedNodeMulticast(t *testing.T) {
	for _, tt := range []struct{ ip, group, mac string }{
		{"2001:db8::10", "ff02::1:ff00:10", "33:33:ff:00:00:10"},
		{"2001:db8::1:2345:6789", "ff02::1:ff45:6789", "33:33:ff:45:67:89"},
		{"fe80::4cdd:88ff:fe1b:70f9", "ff02::1:ff1b:70f9", "33:33:ff:1b:70:f9"}, // from capturedMLD
	} {
		g := SolicitedNodeMulticast(netip.MustParseAddr(tt.ip))
		if g.String() != tt.group || MulticastMAC(g).String() != tt.mac {
			t.Errorf("%s: group %s at %s, want %s at %s", tt.ip, g, MulticastMAC(g), tt.group, tt.mac)
		}
		if !isSolicitedNode(g) || isSolicitedNode(netip.MustParseAddr(tt.ip)) {
			t.Errorf("isSolicitedNode wrong for %s / %s", g, tt.ip)
		}
	}
	if MulticastMAC(allNodes).String() != "33:33:00:00:00:01" {
		t.Errorf("all-nodes MAC %s", MulticastMAC(allNodes))
	}
}

func TestFamilyString(t *testing.T) {
	if IPv4.String() != "IPv4" || IPv6.String() != "IPv6" || Family(9).String() != "Family(9)" {
		t.Error(IPv4, IPv6, Family(9))
	}
}
