package gobgp

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	"github.com/herald-lb/herald/config"
	speakerbgp "github.com/herald-lb/herald/speaker/bgp"
	bgpplan "github.com/herald-lb/herald/speaker/bgp/plan"
)

// The tests run real sessions over the loopback (all of 127.0.0.0/8 is
// local on Linux, no root needed) between the Router and GoBGP servers
// playing the routers. They never enable BFD on both ends: one process
// has a single UDP port 3784.

var ctx = context.Background()

const (
	ourASN  = 64500
	ourAddr = "127.0.0.1"
	timeout = 20 * time.Second
)

// lockedBuffer collects the log written from GoBGP's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// newRouter returns a Router logging everything, GoBGP's debug records
// included, and checks in the end that no secret reached the log.
func newRouter(t *testing.T, secrets ...string) *Router {
	t.Helper()
	r, _ := newRouterLog(t, secrets...)
	return r
}

// newRouterLog is newRouter that also returns the log.
func newRouterLog(t *testing.T, secrets ...string) (*Router, *lockedBuffer) {
	t.Helper()
	buf := &lockedBuffer{}
	r := New(slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	r.level.Set(slog.LevelDebug)
	t.Cleanup(func() {
		out := buf.String()
		if !strings.Contains(out, "component=gobgp") {
			t.Error("GoBGP logged nothing: the password check proves nothing")
		}
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Errorf("the log holds the password %q", s)
			}
		}
	})
	// Registered last, so run first: the log is complete when checked.
	t.Cleanup(func() { r.Stop(ctx) })
	return r, buf
}

func start(t *testing.T, r *Router) {
	t.Helper()
	if err := r.Start(ctx, speakerbgp.Global{ASN: ourASN, RouterID: netip.MustParseAddr("10.0.0.1")}); err != nil {
		t.Fatal(err)
	}
}

// testPeer is a BGPPeer to a test router, with short timers.
func testPeer(name, addr string, port uint16, asn uint32) *config.Peer {
	p := &config.Peer{
		Name: name, MyASN: ourASN, PeerASN: asn, Address: netip.MustParseAddr(addr), Port: port,
		HoldTime: 9 * time.Second, KeepaliveTime: 3 * time.Second, ConnectTime: time.Second,
	}
	if p.Address.Is4() {
		p.SourceAddress = netip.MustParseAddr(ourAddr)
	}
	return p
}

func addPeer(t *testing.T, r *Router, p *config.Peer) {
	t.Helper()
	if err := r.AddPeer(ctx, p); err != nil {
		t.Fatal(err)
	}
}

func setRoutes(t *testing.T, r *Router, p *config.Peer, routes ...bgpplan.Route) {
	t.Helper()
	if err := r.SetRoutes(ctx, p, routes); err != nil {
		t.Fatal(err)
	}
}

func route(prefix string, lp uint32, communities []uint32, large ...[3]uint32) bgpplan.Route {
	return bgpplan.Route{Prefix: netip.MustParsePrefix(prefix), LocalPref: lp, Communities: communities, LargeCommunities: large}
}

func comm(v uint16) uint32 { return ourASN<<16 | uint32(v) }

// waitFor polls cond until it holds, or fails with what msg says.
func waitFor(t *testing.T, cond func() bool, msg func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(msg())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func peers(t *testing.T, r *Router) map[netip.Addr]speakerbgp.PeerState {
	t.Helper()
	st, err := r.Peers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func waitEstablished(t *testing.T, r *Router, ps ...*config.Peer) {
	t.Helper()
	var st map[netip.Addr]speakerbgp.PeerState
	waitFor(t, func() bool {
		st = peers(t, r)
		for _, p := range ps {
			if !st[p.Address].Up() {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("sessions not established: %+v", st) })
}

func freePort(t *testing.T, addr string) uint16 {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

// testRouter is a GoBGP server playing a router: it listens on its own
// address and port and accepts the session from the speaker.
//
// GoBGP keeps some settings in package variables, written by each
// StartBgp: the tests start every server before any session (and run one
// after another), so that the race detector has nothing to report.
type testRouter struct {
	s        *server.BgpServer
	port     uint16
	family   *api.Family
	neighbor *api.Peer
}

func newTestRouter(t *testing.T, addr string, asn uint32) *testRouter {
	t.Helper()
	tr := &testRouter{port: freePort(t, addr), family: &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}, s: server.NewBgpServer()}
	routerID := addr
	if netip.MustParseAddr(addr).Is6() {
		routerID, tr.family.Afi = "10.255.255.1", api.Family_AFI_IP6
	}
	go tr.s.Serve()
	err := tr.s.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: asn, RouterId: routerID, ListenPort: int32(tr.port), ListenAddresses: []string{addr}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.s.Stop)
	return tr
}

// accept configures the speaker as the router's neighbor.
func (tr *testRouter) accept(t *testing.T, neighbor string, asn uint32, password string) {
	t.Helper()
	tr.neighbor = &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: neighbor, PeerAsn: asn, AuthPassword: password},
		Transport: &api.Transport{PassiveMode: true},
		AfiSafis:  []*api.AfiSafi{{Config: &api.AfiSafiConfig{Family: tr.family, Enabled: true}}},
	}
	if err := tr.s.AddPeer(ctx, &api.AddPeerRequest{Peer: tr.neighbor}); err != nil {
		t.Fatal(err)
	}
}

// reset re-creates the neighbor, sparing the test GoBGP's 5s idle hold
// after a session went down.
func (tr *testRouter) reset(t *testing.T) {
	t.Helper()
	if err := tr.s.DeletePeer(ctx, &api.DeletePeerRequest{Address: tr.neighbor.Conf.NeighborAddress}); err != nil {
		t.Fatal(err)
	}
	if err := tr.s.AddPeer(ctx, &api.AddPeerRequest{Peer: tr.neighbor}); err != nil {
		t.Fatal(err)
	}
}

// session returns the state of the session from the speaker, and how
// many UPDATEs the router received on it.
func (tr *testRouter) session(t *testing.T) (state api.PeerState_SessionState, updates uint64) {
	t.Helper()
	err := tr.s.ListPeer(ctx, &api.ListPeerRequest{Address: tr.neighbor.Conf.NeighborAddress}, func(p *api.Peer) {
		state, updates = p.GetState().GetSessionState(), p.GetState().GetMessages().GetReceived().GetUpdate()
	})
	if err != nil {
		t.Fatal(err)
	}
	return state, updates
}

// routes returns the routes received from the speaker, each with its
// attributes as a string.
func (tr *testRouter) routes(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	req := apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_ADJ_IN, Name: tr.neighbor.Conf.NeighborAddress, Family: apiutil.ToFamily(tr.family)}
	err := tr.s.ListPath(req, func(nlri bgp.NLRI, paths []*apiutil.Path) {
		for _, p := range paths {
			var nh netip.Addr
			var lp uint32
			var as, communities, large []string
			for _, a := range p.Attrs {
				switch a := a.(type) {
				case *bgp.PathAttributeNextHop:
					nh = a.Value
				case *bgp.PathAttributeMpReachNLRI:
					nh = a.Nexthop
				case *bgp.PathAttributeLocalPref:
					lp = a.Value
				case *bgp.PathAttributeAsPath:
					for _, seg := range a.Value {
						for _, n := range seg.GetAS() {
							as = append(as, fmt.Sprint(n))
						}
					}
				case *bgp.PathAttributeCommunities:
					for _, c := range a.Value {
						communities = append(communities, fmt.Sprintf("%d:%d", c>>16, c&0xffff))
					}
				case *bgp.PathAttributeLargeCommunities:
					for _, c := range a.Values {
						large = append(large, fmt.Sprintf("%d:%d:%d", c.ASN, c.LocalData1, c.LocalData2))
					}
				}
			}
			out[nlri.String()] = attrs(nh.String(), lp, strings.Join(as, " "), strings.Join(communities, " "), strings.Join(large, " "))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// localPrefSent tells whether the route for prefix carries LOCAL_PREF
// at all (attrs shows a missing one as 0).
func (tr *testRouter) localPrefSent(t *testing.T, prefix string) bool {
	t.Helper()
	found := false
	req := apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_ADJ_IN, Name: tr.neighbor.Conf.NeighborAddress, Family: apiutil.ToFamily(tr.family)}
	err := tr.s.ListPath(req, func(nlri bgp.NLRI, paths []*apiutil.Path) {
		for _, p := range paths {
			for _, a := range p.Attrs {
				if _, ok := a.(*bgp.PathAttributeLocalPref); ok && nlri.String() == prefix {
					found = true
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func attrs(nextHop string, lp uint32, asPath, communities, large string) string {
	return fmt.Sprintf("nh=%s lp=%d as=[%s] comm=[%s] large=[%s]", nextHop, lp, asPath, communities, large)
}

func (tr *testRouter) waitRoutes(t *testing.T, want map[string]string) {
	t.Helper()
	var got map[string]string
	waitFor(t, func() bool {
		got = tr.routes(t)
		return maps.Equal(got, want)
	}, func() string { return fmt.Sprintf("router on port %d has routes %q, want %q", tr.port, got, want) })
}

// TestRoutesPerPeer sends one prefix to an eBGP and an iBGP peer with
// different attributes, changes them, and checks each change reaches only
// the peer it is for.
func TestRoutesPerPeer(t *testing.T) {
	const password = "md5-secret-for-b"
	r := newRouter(t, password)
	start(t, r)
	rtA := newTestRouter(t, "127.0.0.2", 64501)
	rtB := newTestRouter(t, "127.0.0.3", ourASN)
	rtA.accept(t, ourAddr, ourASN, "")
	rtB.accept(t, ourAddr, ourASN, password)
	a := testPeer("router-a", "127.0.0.2", rtA.port, 64501)
	b := testPeer("router-b", "127.0.0.3", rtB.port, ourASN)
	b.Password = password
	addPeer(t, r, a)
	addPeer(t, r, b)

	// Set before the sessions are up: sent as they come up.
	const x, y = "198.51.100.10/32", "198.51.100.11/32"
	setRoutes(t, r, a, route(x, 0, []uint32{comm(100)}, [3]uint32{ourASN, 1, 2}), route(y, 0, nil))
	setRoutes(t, r, b, route(x, 150, []uint32{comm(200)}))
	waitEstablished(t, r, a, b)
	// eBGP: our ASN prepended, no LOCAL_PREF; iBGP: empty AS path,
	// LOCAL_PREF. Both: the session's local address as next hop.
	wantA := map[string]string{
		x: attrs(ourAddr, 0, "64500", "64500:100", "64500:1:2"),
		y: attrs(ourAddr, 0, "64500", "", ""),
	}
	rtA.waitRoutes(t, wantA)
	rtB.waitRoutes(t, map[string]string{x: attrs(ourAddr, 150, "", "64500:200", "")})

	// New communities for B, and y, already in the RIB for A: B gets
	// them, A gets no UPDATE at all.
	_, updatesA := rtA.session(t)
	setRoutes(t, r, b, route(x, 150, []uint32{comm(300)}), route(y, 120, nil))
	wantB := map[string]string{x: attrs(ourAddr, 150, "", "64500:300", ""), y: attrs(ourAddr, 120, "", "", "")}
	rtB.waitRoutes(t, wantB)
	if _, n := rtA.session(t); n != updatesA {
		t.Errorf("router A received %d UPDATEs, had %d before B's change", n, updatesA)
	}
	if got := rtA.routes(t); !maps.Equal(got, wantA) {
		t.Errorf("router A routes %q after B's change, want %q", got, wantA)
	}

	// A drain's graceful shutdown, as the plan sends it (RFC 8326):
	// GRACEFUL_SHUTDOWN added to every route, and towards iBGP (B)
	// LOCAL_PREF 0 in place of the advertisement's; eBGP (A) gets no
	// LOCAL_PREF still. Then back as before, to both.
	shut := func(rt bgpplan.Route, ibgp bool) bgpplan.Route {
		rt.Communities = append(slices.Clone(rt.Communities), bgpplan.GracefulShutdown)
		if ibgp {
			rt.LocalPref, rt.LocalPrefZero = 0, true
		}
		return rt
	}
	setRoutes(t, r, a, shut(route(x, 0, []uint32{comm(100)}, [3]uint32{ourASN, 1, 2}), false), shut(route(y, 0, nil), false))
	setRoutes(t, r, b, shut(route(x, 150, []uint32{comm(300)}), true), shut(route(y, 120, nil), true))
	rtB.waitRoutes(t, map[string]string{x: attrs(ourAddr, 0, "", "64500:300 65535:0", ""), y: attrs(ourAddr, 0, "", "65535:0", "")})
	rtA.waitRoutes(t, map[string]string{
		x: attrs(ourAddr, 0, "64500", "64500:100 65535:0", "64500:1:2"),
		y: attrs(ourAddr, 0, "64500", "65535:0", ""),
	})
	if !rtB.localPrefSent(t, x) {
		t.Errorf("router B got %s without LOCAL_PREF, want LOCAL_PREF 0", x)
	}
	if rtA.localPrefSent(t, x) {
		t.Errorf("router A, eBGP, got %s with LOCAL_PREF", x)
	}
	setRoutes(t, r, a, route(x, 0, []uint32{comm(100)}, [3]uint32{ourASN, 1, 2}), route(y, 0, nil))
	setRoutes(t, r, b, route(x, 150, []uint32{comm(300)}), route(y, 120, nil))
	rtB.waitRoutes(t, wantB)
	rtA.waitRoutes(t, wantA)

	// A stops getting x, which B keeps: withdrawn from A only.
	_, updatesB := rtB.session(t)
	setRoutes(t, r, a, route(y, 0, nil))
	rtA.waitRoutes(t, map[string]string{y: attrs(ourAddr, 0, "64500", "", "")})
	if _, n := rtB.session(t); n != updatesB {
		t.Errorf("router B received %d UPDATEs, had %d before A's change", n, updatesB)
	}
	if got := rtB.routes(t); !maps.Equal(got, wantB) {
		t.Errorf("router B routes %q after A's change, want %q", got, wantB)
	}

	// The same routes again change nothing, not even GoBGP's policies.
	r.mu.Lock()
	gen := r.gen
	r.mu.Unlock()
	setRoutes(t, r, a, route(y, 0, nil))
	r.mu.Lock()
	if r.gen != gen {
		t.Errorf("repeating SetRoutes installed a new policy")
	}
	r.mu.Unlock()

	// B gets nothing any more; A keeps y.
	setRoutes(t, r, b)
	rtB.waitRoutes(t, map[string]string{})
	rtA.waitRoutes(t, map[string]string{y: attrs(ourAddr, 0, "64500", "", "")})

	st := peers(t, r)
	for _, c := range []struct {
		p          *config.Peer
		advertised int
	}{{a, 1}, {b, 0}} {
		s := st[c.p.Address]
		if !s.Up() || s.Advertised != c.advertised || s.UpdatesSent == 0 || s.Flaps != 0 || s.BFD != "" ||
			s.Since.IsZero() || s.Since.After(time.Now()) || s.Address != c.p.Address {
			t.Errorf("peer %s state %+v", c.p.Name, s)
		}
	}
	if len(st) != 2 {
		t.Errorf("peers %+v", st)
	}
}

// TestIPv6 sends a prefix to an IPv6 peer: the next hop is the session's
// IPv6 address, and changed communities are re-sent.
func TestIPv6(t *testing.T) {
	if l, err := net.Listen("tcp", "[::1]:0"); err != nil {
		t.Skip("no IPv6 loopback:", err)
	} else {
		l.Close()
	}
	r := newRouter(t)
	start(t, r)
	rt := newTestRouter(t, "::1", 64501)
	rt.accept(t, "::1", ourASN, "")
	p := testPeer("router-v6", "::1", rt.port, 64501)
	addPeer(t, r, p)
	const x = "2001:db8::10/128"
	setRoutes(t, r, p, route(x, 0, []uint32{comm(7)}, [3]uint32{ourASN, 7, 7}))
	rt.waitRoutes(t, map[string]string{x: attrs("::1", 0, "64500", "64500:7", "64500:7:7")})
	setRoutes(t, r, p, route(x, 0, []uint32{comm(8)}))
	rt.waitRoutes(t, map[string]string{x: attrs("::1", 0, "64500", "64500:8", "")})
	setRoutes(t, r, p)
	rt.waitRoutes(t, map[string]string{})
}

// TestDeletePeerStopStart closes one session of two, then stops and
// starts the speaker again.
func TestDeletePeerStopStart(t *testing.T) {
	r := newRouter(t)
	start(t, r)
	rtA := newTestRouter(t, "127.0.0.4", 64501)
	rtB := newTestRouter(t, "127.0.0.5", 64502)
	rtA.accept(t, ourAddr, ourASN, "")
	rtB.accept(t, ourAddr, ourASN, "")
	a := testPeer("router-a", "127.0.0.4", rtA.port, 64501)
	b := testPeer("router-b", "127.0.0.5", rtB.port, 64502)
	addPeer(t, r, a)
	addPeer(t, r, b)
	const x = "198.51.100.20/32"
	setRoutes(t, r, a, route(x, 0, []uint32{comm(1)}))
	setRoutes(t, r, b, route(x, 0, []uint32{comm(2)}))
	waitEstablished(t, r, a, b)
	wantB := map[string]string{x: attrs(ourAddr, 0, "64500", "64500:2", "")}
	rtA.waitRoutes(t, map[string]string{x: attrs(ourAddr, 0, "64500", "64500:1", "")})
	rtB.waitRoutes(t, wantB)
	sinceB := peers(t, r)[b.Address].Since
	_, updatesB := rtB.session(t)

	if err := r.DeletePeer(ctx, a); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		st, _ := rtA.session(t)
		return st != api.PeerState_SESSION_STATE_ESTABLISHED
	}, func() string { return "router A's session still established" })
	rtA.waitRoutes(t, map[string]string{})
	st := peers(t, r)
	if _, ok := st[a.Address]; ok || len(st) != 1 {
		t.Errorf("peers after deleting A: %+v", st)
	}
	if s := st[b.Address]; !s.Up() || !s.Since.Equal(sinceB) || s.Flaps != 0 {
		t.Errorf("peer B disturbed: %+v, up since %s before", s, sinceB)
	}
	if _, n := rtB.session(t); n != updatesB {
		t.Errorf("router B received %d UPDATEs, had %d before A's deletion", n, updatesB)
	}
	if got := rtB.routes(t); !maps.Equal(got, wantB) {
		t.Errorf("router B routes %q, want %q", got, wantB)
	}
	// Deleting it again is no error.
	if err := r.DeletePeer(ctx, a); err != nil {
		t.Error(err)
	}

	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		st, _ := rtB.session(t)
		return st != api.PeerState_SESSION_STATE_ESTABLISHED
	}, func() string { return "router B's session still established after Stop" })
	rtB.waitRoutes(t, map[string]string{})
	if _, err := r.Peers(ctx); err == nil {
		t.Error("Peers works after Stop")
	}
	if err := r.SetRoutes(ctx, b, nil); err == nil {
		t.Error("SetRoutes works after Stop")
	}

	// A new GoBGP server: the router's neighbor is re-created after it
	// (see testRouter).
	start(t, r)
	rtB.reset(t)
	addPeer(t, r, b)
	setRoutes(t, r, b, route(x, 0, []uint32{comm(3)}))
	waitEstablished(t, r, b)
	rtB.waitRoutes(t, map[string]string{x: attrs(ourAddr, 0, "64500", "64500:3", "")})
}

// TestDynamicASN opens sessions whose peer AS comes from the router's
// OPEN: external to another AS, internal to ours, and external to ours,
// which must be shut down rather than run as iBGP.
func TestDynamicASN(t *testing.T) {
	r, log := newRouterLog(t)
	start(t, r)
	rtE := newTestRouter(t, "127.0.0.6", 64509)
	rtI := newTestRouter(t, "127.0.0.7", ourASN)
	rtWrong := newTestRouter(t, "127.0.0.8", ourASN)
	for _, rt := range []*testRouter{rtE, rtI, rtWrong} {
		rt.accept(t, ourAddr, ourASN, "")
	}
	ext := testPeer("dyn-external", "127.0.0.6", rtE.port, 0)
	ext.DynamicASN = "external"
	in := testPeer("dyn-internal", "127.0.0.7", rtI.port, 0)
	in.DynamicASN = "internal"
	wrong := testPeer("dyn-external-ours", "127.0.0.8", rtWrong.port, 0)
	wrong.DynamicASN = "external"
	const x = "198.51.100.30/32"
	for _, p := range []*config.Peer{ext, in, wrong} {
		addPeer(t, r, p)
		setRoutes(t, r, p, route(x, 0, nil))
	}
	waitEstablished(t, r, ext, in)
	// eBGP: our AS prepended; iBGP: an empty AS path.
	rtE.waitRoutes(t, map[string]string{x: attrs(ourAddr, 0, "64500", "", "")})
	rtI.waitRoutes(t, map[string]string{x: attrs(ourAddr, 100, "", "", "")})

	// The session to our own AS may come up for a moment before the
	// shutdown; then it stays down, past GoBGP's wait before a reconnect,
	// and the router drops what it got in that moment.
	const refused = "BGPPeer dyn-external-ours: spec.dynamicASN is external, but the peer at 127.0.0.8 is in our own AS 64500"
	waitFor(t, func() bool {
		st, _ := rtWrong.session(t)
		return strings.Contains(log.String(), refused) && st != api.PeerState_SESSION_STATE_ESTABLISHED && !peers(t, r)[wrong.Address].Up()
	}, func() string { return "the session to a peer in our own AS is up under dynamicASN external" })
	rtWrong.waitRoutes(t, map[string]string{})
	for end := time.Now().Add((idleHoldAfterReset + 2) * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if st, _ := rtWrong.session(t); st == api.PeerState_SESSION_STATE_ESTABLISHED {
			t.Fatal("the session to a peer in our own AS came back")
		}
	}
	// Counted by our own record; GoBGP's logs the NOTIFICATION too.
	if n := strings.Count(log.String(), `msg="BGP session refused: shutting it down" peer=dyn-external-ours`); n != 1 {
		t.Errorf("the session was refused %d times, want once (it must stay down)\n%s", n, log.String())
	}
	if !peers(t, r)[ext.Address].Up() || !peers(t, r)[in.Address].Up() {
		t.Errorf("the other sessions went down: %+v", peers(t, r))
	}
}

// TestBFDConfigured checks GoBGP runs BFD for the peers that ask for it
// and Peers reports its state. No router answers: the BFD session stays
// down.
func TestBFDConfigured(t *testing.T) {
	r := newRouter(t)
	start(t, r)
	withBFD := testPeer("bfd", "127.0.0.99", freePort(t, "127.0.0.99"), 64501)
	withBFD.BFD = &config.BFDProfile{Name: "fast", ReceiveInterval: 300, TransmitInterval: 300, DetectMultiplier: 3}
	plain := testPeer("plain", "127.0.0.98", freePort(t, "127.0.0.98"), 64501)
	addPeer(t, r, withBFD)
	addPeer(t, r, plain)

	dup := *plain
	dup.Name = "plain-again"
	if err := r.AddPeer(ctx, &dup); err == nil || !strings.Contains(err.Error(), "BGPPeer plain") {
		t.Errorf("second session to the same address: error %v", err)
	}

	var bfdPeers []string
	waitFor(t, func() bool {
		bfdPeers = nil
		r.mu.Lock()
		r.s.ListBfdPeer(ctx, func(addr string, _ *api.BfdPeerState) { bfdPeers = append(bfdPeers, addr) })
		r.mu.Unlock()
		return len(bfdPeers) == 1 && bfdPeers[0] == "127.0.0.99"
	}, func() string { return fmt.Sprintf("GoBGP's BFD peers %v, want 127.0.0.99 alone", bfdPeers) })
	st := peers(t, r)
	if s := st[withBFD.Address]; s.BFD != "Down" || s.Up() {
		t.Errorf("peer with BFD: %+v", s)
	}
	if s := st[plain.Address]; s.BFD != "" || s.Up() || s.State == "" {
		t.Errorf("peer without BFD: %+v", s)
	}
}

func TestNotRunning(t *testing.T) {
	r := New(nil)
	p := testPeer("a", "127.0.0.2", 179, 64501)
	if err := r.AddPeer(ctx, p); err == nil {
		t.Error("AddPeer before Start")
	}
	if err := r.SetRoutes(ctx, p, nil); err == nil {
		t.Error("SetRoutes before Start")
	}
	if _, err := r.Peers(ctx); err == nil {
		t.Error("Peers before Start")
	}
	if err := r.DeletePeer(ctx, p); err != nil {
		t.Error(err)
	}
	if err := r.Stop(ctx); err != nil {
		t.Error(err)
	}
	if err := r.Start(ctx, speakerbgp.Global{ASN: ourASN, RouterID: netip.MustParseAddr("2001:db8::1")}); err == nil {
		t.Error("Start with an IPv6 router ID")
		r.Stop(ctx)
	}
}

// TestUnknownPeer checks SetRoutes refuses a peer without a session.
func TestUnknownPeer(t *testing.T) {
	r := New(nil)
	start(t, r)
	t.Cleanup(func() { r.Stop(ctx) })
	if err := r.SetRoutes(ctx, testPeer("ghost", "127.0.0.97", 179, 64501), nil); err == nil || !strings.Contains(err.Error(), "BGPPeer ghost") {
		t.Errorf("SetRoutes for a peer never added: %v", err)
	}
}
