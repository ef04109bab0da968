package layer2

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"slices"
	"testing"
)

// announceAll announces every IP on every interface, so that Decide gets
// as far as encoding for any request the fuzzer finds.
var announceAll = AnnouncerFunc(func(netip.Addr, string) bool { return true })

// checkDecodeError: every decode error is a DecodeError of exactly one
// kind with a message.
func checkDecodeError(t *testing.T, err error) {
	t.Helper()
	var de *DecodeError
	if !errors.As(err, &de) || de.Msg == "" || errors.Is(err, ErrMalformed) == errors.Is(err, ErrUnsupported) {
		t.Fatalf("error %v (%T) is not a proper DecodeError", err, err)
	}
}

// FuzzDecodeARP: decoding never panics; whatever decodes can be answered,
// and the answer decodes back to the reply RFC 826 prescribes.
func FuzzDecodeARP(f *testing.F) {
	f.Fuzz(func(t *testing.T, frame []byte) {
		d := Decide(frame, ourIf, announceAll)
		req, err := DecodeARP(frame)
		if err != nil {
			checkDecodeError(t, err)
			if d.Reply != nil {
				t.Fatalf("Decide replied to a frame DecodeARP rejects (%v)", err)
			}
			return
		}
		reply, err := ARPReply(req, ourMAC)
		if err != nil {
			t.Fatalf("cannot answer %+v: %v", req, err)
		}
		a, err := decodeARP(reply)
		if err != nil {
			t.Fatalf("our reply does not decode: %v", err)
		}
		if a.op != arpReply || !slices.Equal(a.eth.dst, req.SenderMAC) || !slices.Equal(a.sha, ourMAC) ||
			a.spa != req.TargetIP || !slices.Equal(a.tha, req.SenderMAC) || a.tpa != req.SenderIP {
			t.Fatalf("reply %+v to %+v", a, req)
		}
		if d.Reply != nil && !slices.Equal(d.Reply, reply) {
			t.Fatalf("Decide's reply differs from ARPReply's")
		}
		if _, err := GratuitousARPRequest(req.TargetIP, ourMAC); err != nil {
			t.Fatal(err)
		}
		if _, err := GratuitousARPReply(req.TargetIP, ourMAC); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzDecodeNDP: as FuzzDecodeARP for neighbor solicitations. With fix,
// the ICMPv6 checksum of a frame without extension headers is corrected
// first, so that the fuzzer gets past it to the options.
func FuzzDecodeNDP(f *testing.F) {
	f.Fuzz(func(t *testing.T, frame []byte, fix bool) {
		if fix && len(frame) >= 58 && frame[20] == protoICMPv6 {
			if plen := int(binary.BigEndian.Uint16(frame[18:])); plen >= 4 && 54+plen <= len(frame) {
				frame = fixChecksum(frame)
			}
		}
		d := Decide(frame, ourIf, announceAll)
		ns, err := DecodeNDP(frame)
		if err != nil {
			checkDecodeError(t, err)
			if d.Reply != nil {
				t.Fatalf("Decide replied to a frame DecodeNDP rejects (%v)", err)
			}
			return
		}
		na, err := NeighborAdvertisement(ns, ourMAC)
		if err != nil {
			t.Fatalf("cannot answer %+v: %v", ns, err)
		}
		m, err := decodeND(na, icmpv6NA)
		if err != nil {
			t.Fatalf("our advertisement does not decode: %v", err)
		}
		wantDst, wantEth, wantFlags := ns.Source, ns.SourceLinkLayer, uint8(naSolicited|naOverride)
		if wantEth == nil {
			wantEth = ns.EthernetSource
		}
		if ns.DAD() {
			wantDst, wantEth, wantFlags = allNodes, MulticastMAC(allNodes), naOverride
		}
		if m.target != ns.Target || m.src != ns.Target || m.dst != wantDst || !slices.Equal(m.eth.dst, wantEth) ||
			m.flags != wantFlags || !slices.Equal(m.lla, ourMAC) {
			t.Fatalf("advertisement %+v to %+v", m, ns)
		}
		if d.Reply != nil && !slices.Equal(d.Reply, na) {
			t.Fatalf("Decide's reply differs from NeighborAdvertisement's")
		}
		if _, err := UnsolicitedNA(ns.Target, ourMAC); err != nil {
			t.Fatal(err)
		}
	})
}
