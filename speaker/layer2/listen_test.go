package layer2

import (
	"testing"

	"golang.org/x/net/bpf"
)

// The BPF filters, run in x/net/bpf's VM over the frames they must keep
// and drop.
func TestFilters(t *testing.T) {
	vm := func(prog []bpf.Instruction) *bpf.VM {
		t.Helper()
		v, err := bpf.NewVM(prog)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	arpVM, ndpVM := vm(arpFilter()), vm(ndpFilter(icmpv6NS))
	naVM, probeARPVM := vm(ndpFilter(icmpv6NA)), vm(allARPFilter())
	reply := arpReq()
	reply.op = 2
	na, err := UnsolicitedNA(vip6, ourMAC)
	if err != nil {
		t.Fatal(err)
	}
	garp, err := GratuitousARPRequest(vip4, ourMAC)
	if err != nil {
		t.Fatal(err)
	}
	ns := nsReq().bytes()
	for _, tt := range []struct {
		name  string
		vm    *bpf.VM
		frame []byte
		keep  bool
	}{
		{"ARP request", arpVM, arpReq().bytes(), true},
		{"captured arping request", arpVM, capturedARP, true},
		{"gratuitous ARP request (conflict detection)", arpVM, garp, true},
		{"ARP reply", arpVM, reply.bytes(), false},
		{"truncated ARP", arpVM, arpReq().bytes()[:20], false},
		{"NS", ndpVM, ns, true},
		{"captured ndisc6 NS", ndpVM, capturedNS, true},
		{"NS after hop-by-hop", ndpVM, withExtHeader(ns, 0), true},
		{"NS after destination options", ndpVM, withExtHeader(ns, 60), true},
		{"captured MLD report (hop-by-hop: left to the decoder)", ndpVM, capturedMLD, true},
		{"NA", ndpVM, na, false},
		{"echo request", ndpVM, set(ns, 54, 128), false},
		{"TCP", ndpVM, set(ns, 20, 6), false},
		{"truncated before the ICMPv6 type", ndpVM, ns[:54], false},
		{"probe socket: NA", naVM, na, true},
		{"probe socket: NS", naVM, ns, false},
		{"probe socket: ARP reply", probeARPVM, reply.bytes(), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n, err := tt.vm.Run(tt.frame)
			if err != nil {
				t.Fatal(err)
			}
			if kept := n > 0; kept != tt.keep {
				t.Errorf("kept %v (returned %d), want %v", kept, n, tt.keep)
			}
			if tt.keep && n < len(tt.frame) {
				t.Errorf("keeps %d bytes of %d", n, len(tt.frame))
			}
		})
	}
}
