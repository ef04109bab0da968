package bgp

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/herald-lb/herald/config"
	bgpplan "github.com/herald-lb/herald/speaker/bgp/plan"
)

var ctx = context.Background()

func peer(name, addr string) *config.Peer {
	return &config.Peer{Name: name, MyASN: 64512, PeerASN: 64512, Address: netip.MustParseAddr(addr), Port: 179, HoldTime: 90 * time.Second}
}

func route(prefix string, communities ...uint32) bgpplan.Route {
	return bgpplan.Route{Prefix: netip.MustParsePrefix(prefix), Communities: communities}
}

func plan(sessions ...bgpplan.Session) bgpplan.Plan {
	return bgpplan.Plan{Node: "node1", ASN: 64512, RouterID: netip.MustParseAddr("198.51.100.11"), Sessions: sessions}
}

func session(p *config.Peer, routes ...bgpplan.Route) bgpplan.Session {
	return bgpplan.Session{Peer: p, Routes: routes}
}

func apply(t *testing.T, m *Manager, p bgpplan.Plan) {
	t.Helper()
	if err := m.Apply(ctx, p); err != nil {
		t.Fatal(err)
	}
}

func expectCalls(t *testing.T, f *Fake, want ...string) {
	t.Helper()
	if got := f.TakeCalls(); !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
}

func TestApplyOpensSessionsAndRoutes(t *testing.T) {
	f := NewFake()
	m := NewManager(f, nil)
	a, b := peer("a", "198.51.100.1"), peer("b", "198.51.100.2")
	apply(t, m, plan(session(a, route("203.0.113.130/32")), session(b)))
	expectCalls(t, f, "start", "add a", "routes a", "add b", "routes b")
	if f.Global.ASN != 64512 || f.Global.RouterID != netip.MustParseAddr("198.51.100.11") {
		t.Errorf("global %+v", f.Global)
	}
	if got := f.Routes(a.Address); len(got) != 1 || got[0].Prefix.String() != "203.0.113.130/32" {
		t.Errorf("peer a routes %+v", got)
	}
	// The same plan again changes nothing.
	apply(t, m, plan(session(a, route("203.0.113.130/32")), session(b)))
	expectCalls(t, f)
}

// A route change to one peer touches that peer's routes only; a new
// BGPPeer object with the same session settings resets nothing.
func TestUnaffectedSessionsAreNotReset(t *testing.T) {
	f := NewFake()
	m := NewManager(f, nil)
	a, b := peer("a", "198.51.100.1"), peer("b", "198.51.100.2")
	apply(t, m, plan(session(a, route("203.0.113.130/32")), session(b, route("203.0.113.130/32"))))
	f.TakeCalls()

	a2 := *a // a fresh object from the informer, selectors changed
	a2.NodeSelectors = config.Selectors{config.SelectorFromLabels(map[string]string{"rack": "1"})}
	apply(t, m, plan(session(&a2, route("203.0.113.130/32")), session(b, route("203.0.113.130/32"), route("203.0.113.131/32"))))
	expectCalls(t, f, "routes b")

	// New communities are new attributes: re-sent.
	apply(t, m, plan(session(&a2, route("203.0.113.130/32", 1)), session(b, route("203.0.113.130/32"), route("203.0.113.131/32"))))
	expectCalls(t, f, "routes a")
	// Only the advertisement names behind a route changed: nothing sent.
	r := route("203.0.113.130/32", 1)
	r.Advertisements = []string{"renamed"}
	apply(t, m, plan(session(&a2, r), session(b, route("203.0.113.130/32"), route("203.0.113.131/32"))))
	expectCalls(t, f)
}

func TestChangedPeerIsReopened(t *testing.T) {
	f := NewFake()
	m := NewManager(f, nil)
	a, b := peer("a", "198.51.100.1"), peer("b", "198.51.100.2")
	apply(t, m, plan(session(a, route("203.0.113.130/32")), session(b)))
	f.TakeCalls()
	a2 := *a
	a2.Password = "s3cret"
	apply(t, m, plan(session(&a2, route("203.0.113.130/32")), session(b)))
	expectCalls(t, f, "delete a", "add a", "routes a")

	bfd := *b
	bfd.BFD = &config.BFDProfile{Name: "fast", ReceiveInterval: 300, TransmitInterval: 300, DetectMultiplier: 3}
	apply(t, m, plan(session(&a2, route("203.0.113.130/32")), session(&bfd)))
	expectCalls(t, f, "delete b", "add b", "routes b")
	// The same values under another profile name are the same session.
	renamed := bfd
	prof := *bfd.BFD
	prof.Name = "quick"
	renamed.BFD = &prof
	apply(t, m, plan(session(&a2, route("203.0.113.130/32")), session(&renamed)))
	expectCalls(t, f)

	// A peer gone, or moved to a new address under a new name.
	c := peer("c", "198.51.100.1")
	apply(t, m, plan(session(c)))
	expectCalls(t, f, "delete a", "delete b", "add c", "routes c")
}

func TestIdentityChangeRestarts(t *testing.T) {
	f := NewFake()
	m := NewManager(f, nil)
	a := peer("a", "198.51.100.1")
	apply(t, m, plan(session(a)))
	f.TakeCalls()
	p := plan(session(a))
	p.RouterID = netip.MustParseAddr("192.0.2.9")
	apply(t, m, p)
	expectCalls(t, f, "stop", "start", "add a", "routes a")
	if f.Global.RouterID != p.RouterID {
		t.Errorf("router ID %s", f.Global.RouterID)
	}
	// No router ID: refused with a clear error, nothing started.
	f2 := NewFake()
	p.RouterID = netip.Addr{}
	if err := NewManager(f2, nil).Apply(ctx, p); err == nil || !strings.Contains(err.Error(), "spec.routerID") {
		t.Errorf("Apply without a router ID: %v", err)
	}
	if f2.Started() {
		t.Error("started without a router ID")
	}
}

func TestNoSessionsStops(t *testing.T) {
	f := NewFake()
	m := NewManager(f, nil)
	apply(t, m, plan())
	expectCalls(t, f) // never started for nothing
	apply(t, m, plan(session(peer("a", "198.51.100.1"))))
	f.TakeCalls()
	apply(t, m, plan())
	expectCalls(t, f, "stop")
	if len(m.Sessions()) != 0 {
		t.Errorf("sessions after stop: %+v", m.Sessions())
	}
}

func TestFailuresAreRetriedAndIsolated(t *testing.T) {
	f := NewFake()
	m := NewManager(f, nil)
	a, b := peer("a", "198.51.100.1"), peer("b", "198.51.100.2")
	f.Fail = "add a"
	err := m.Apply(ctx, plan(session(a, route("203.0.113.130/32")), session(b, route("203.0.113.130/32"))))
	if err == nil || !strings.Contains(err.Error(), "BGPPeer a: opening the session to 198.51.100.1") {
		t.Errorf("error %v", err)
	}
	if got := f.Routes(b.Address); len(got) != 1 {
		t.Errorf("peer b not served because a failed: %+v", got)
	}
	f.Fail = ""
	f.TakeCalls()
	apply(t, m, plan(session(a, route("203.0.113.130/32")), session(b, route("203.0.113.130/32"))))
	expectCalls(t, f, "add a", "routes a")

	// A failed route update is retried even if the plan does not change.
	f.Fail = "routes b"
	p := plan(session(a, route("203.0.113.130/32")), session(b))
	if err := m.Apply(ctx, p); err == nil {
		t.Error("no error from a failed SetRoutes")
	}
	f.Fail = ""
	f.TakeCalls()
	apply(t, m, p)
	expectCalls(t, f, "routes b")
	if got := f.Routes(b.Address); len(got) != 0 {
		t.Errorf("peer b still has %+v", got)
	}
}

func TestShutdownWithdrawsFirst(t *testing.T) {
	f := NewFake()
	m := NewManager(f, nil)
	a, b := peer("a", "198.51.100.1"), peer("b", "198.51.100.2")
	apply(t, m, plan(session(a, route("203.0.113.130/32")), session(b)))
	f.TakeCalls()
	if err := m.Shutdown(ctx, time.Second, false); err != nil {
		t.Fatal(err)
	}
	// b had nothing to withdraw.
	expectCalls(t, f, "routes a", "stop")
	if f.Started() {
		t.Error("still started")
	}
}

// A restart in place keeps the routes of the peers with graceful
// restart and their sessions open (the process exit closes them without
// a NOTIFICATION); the others are withdrawn and closed.
func TestShutdownRestartingKeepsGracefulRestartPeers(t *testing.T) {
	f := NewFake()
	m := NewManager(f, nil)
	a, b := peer("a", "198.51.100.1"), peer("b", "198.51.100.2")
	a.GracefulRestart = true
	apply(t, m, plan(session(a, route("203.0.113.130/32")), session(b, route("203.0.113.130/32"))))
	f.TakeCalls()
	if err := m.Shutdown(ctx, time.Second, true); err != nil {
		t.Fatal(err)
	}
	expectCalls(t, f, "routes b", "delete b")
	if !f.Started() {
		t.Error("stopped: the NOTIFICATIONs would end the routers' graceful restart")
	}
	if got := f.Routes(a.Address); len(got) != 1 {
		t.Errorf("peer a has %+v, want its route kept", got)
	}

	// Without a peer with graceful restart, a restart stops as before.
	f2 := NewFake()
	m2 := NewManager(f2, nil)
	apply(t, m2, plan(session(b, route("203.0.113.130/32"))))
	f2.TakeCalls()
	if err := m2.Shutdown(ctx, time.Second, true); err != nil {
		t.Fatal(err)
	}
	expectCalls(t, f2, "routes b", "stop")
}

func TestSamePeerFields(t *testing.T) {
	base := peer("a", "198.51.100.1")
	mods := map[string]func(p *config.Peer){
		"myASN":         func(p *config.Peer) { p.MyASN++ },
		"peerASN":       func(p *config.Peer) { p.PeerASN++ },
		"address":       func(p *config.Peer) { p.Address = netip.MustParseAddr("198.51.100.9") },
		"sourceAddress": func(p *config.Peer) { p.SourceAddress = netip.MustParseAddr("198.51.100.11") },
		"port":          func(p *config.Peer) { p.Port = 1179 },
		"holdTime":      func(p *config.Peer) { p.HoldTime = 9 * time.Second },
		"keepaliveTime": func(p *config.Peer) { p.KeepaliveTime = 3 * time.Second },
		"connectTime":   func(p *config.Peer) { p.ConnectTime = time.Second },
		"password":      func(p *config.Peer) { p.Password = "x" },
		"ebgpMultiHop":  func(p *config.Peer) { p.EBGPMultiHop = true },
		"gracefulRestart": func(p *config.Peer) {
			p.GracefulRestart = true
		},
		"bfdProfile": func(p *config.Peer) { p.BFD = &config.BFDProfile{DetectMultiplier: 3} },
	}
	for field, mod := range mods {
		p := *base
		mod(&p)
		if SamePeer(base, &p) {
			t.Errorf("a change of %s is not seen", field)
		}
	}
	p := *base
	p.NodeSelectors = config.Selectors{config.SelectorFromLabels(map[string]string{"a": "b"})}
	if !SamePeer(base, &p) {
		t.Error("a change of nodeSelectors resets the session")
	}
}
