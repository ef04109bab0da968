package plan

import (
	"net/netip"
	"reflect"
	"testing"
)

// TestDrainPhases: in DrainShutdown every route keeps its attributes and
// gains GRACEFUL_SHUTDOWN, and iBGP routes go out with LOCAL_PREF 0 in
// place of the advertisement's (RFC 8326 §4.1); DrainWithdrawn advertises nothing and
// says why on every address and in the node's summary, with the
// sessions kept; NotDrained is the plan as before.
func TestDrainPhases(t *testing.T) {
	web := svc("web", "bgp", "203.0.113.130")
	normal := Compute(input("node1", web))
	in := input("node1", web)
	in.Drain = DrainShutdown
	p := Compute(in)
	ib, _ := p.Session("ibgp")
	eb, _ := p.Session("ebgp")
	wantIB := []Route{{Prefix: netip.MustParsePrefix("203.0.113.130/32"), Communities: []uint32{64512<<16 | 100, GracefulShutdown},
		LocalPrefZero: true, Advertisements: []string{"all"}}}
	if !reflect.DeepEqual(ib.Routes, wantIB) {
		t.Errorf("ibgp routes %+v, want %+v", ib.Routes, wantIB)
	}
	wantEB := []Route{{Prefix: netip.MustParsePrefix("203.0.113.130/32"), Communities: []uint32{64512<<16 | 100, GracefulShutdown, 0xffffff01},
		LargeCommunities: [][3]uint32{{64512, 1, 2}}, Advertisements: []string{"all", "edge"}}}
	if !reflect.DeepEqual(eb.Routes, wantEB) {
		t.Errorf("ebgp routes %+v, want %+v", eb.Routes, wantEB)
	}
	if ip, _ := p.Lookup(addr("203.0.113.130")); !ip.Advertised() || ip.Reason != "" {
		t.Errorf("graceful shutdown: %+v, want still advertised", ip)
	}
	if !reflect.DeepEqual(p.Summary, normal.Summary) {
		t.Errorf("graceful shutdown summary %+v, want the normal one %+v (the node still advertises)", p.Summary, normal.Summary)
	}
	for _, r := range ib.Routes {
		if r.SameAttributes(normal.Sessions[1].Routes[0]) {
			t.Errorf("graceful shutdown route %+v has the normal attributes: it would not be sent again", r)
		}
	}

	in.Drain = DrainWithdrawn
	p = Compute(in)
	if len(p.Sessions) != len(normal.Sessions) {
		t.Errorf("withdrawn: %d sessions, want the %d of before (undo only advertises again)", len(p.Sessions), len(normal.Sessions))
	}
	for _, s := range p.Sessions {
		if len(s.Routes) != 0 {
			t.Errorf("withdrawn: session %s still has routes %+v", s.Name(), s.Routes)
		}
	}
	if ip, _ := p.Lookup(addr("203.0.113.130")); ip.Advertised() || ip.Reason != ReasonDrained {
		t.Errorf("withdrawn: %+v, want not advertised for %q", ip, ReasonDrained)
	}
	if p.Summary == nil || p.Summary.Reason != ReasonDrained || len(p.Summary.Advertisements) != 0 {
		t.Errorf("withdrawn summary %+v, want reason %q", p.Summary, ReasonDrained)
	}

	in.Drain = NotDrained
	if p := Compute(in); !reflect.DeepEqual(p, normal) {
		t.Errorf("undone: %+v, want the plan of before the drain %+v", p, normal)
	}
}
