// Package gobgp is the speaker's BGP implementation: GoBGP v4 embedded
// as a library, behind speaker/bgp's Router interface.
//
// One GoBGP server runs per speaker (its BFD server binds UDP port 3784
// once per server). It never listens for BGP: the speaker connects to the
// routers. Each prefix is originated once in GoBGP's global RIB, with the
// session's local address as next hop; what each peer receives, with which
// communities and LOCAL_PREF, is decided by export policies (policy.go).
package gobgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/config/v1beta1"
	speakerbgp "github.com/herald-lb/herald/speaker/bgp"
	bgpplan "github.com/herald-lb/herald/speaker/bgp/plan"
)

var _ speakerbgp.Router = (*Router)(nil)

var errNotStarted = errors.New("BGP is not running")

// Router runs GoBGP. Its methods are safe for concurrent use.
type Router struct {
	log *slog.Logger
	// level is the lowest level of GoBGP's own records that are logged.
	level    *slog.LevelVar
	sessions *sessionLog

	mu      sync.Mutex
	s       *server.BgpServer // nil when stopped
	unwatch context.CancelFunc
	peers   map[netip.Addr]*peer
	// rib holds the prefixes in GoBGP's global RIB (possibly a few that
	// a failed call left there: withdrawing those is harmless), each with
	// how its path was added.
	rib map[netip.Prefix]ribPath
	// gen numbers the generations of export policies.
	gen uint64
}

// ribPath is how a prefix's path in the global RIB was added.
type ribPath struct {
	// lowPref: with LOCAL_PREF 0, which iBGP peers get and eBGP peers
	// do not (Route.LocalPrefZero).
	lowPref bool
}

// peer is one session, by address (GoBGP's key).
type peer struct {
	cfg *config.Peer
	// routes are those last applied, by prefix.
	routes map[netip.Prefix]bgpplan.Route
	// synced is false after a SetRoutes failed midway: routes may not be
	// what the peer got.
	synced bool
	// export is the peer's export policy, nil while it gets nothing.
	export *exportPolicy
}

// New returns a stopped Router logging to log.
func New(log *slog.Logger) *Router {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	level := new(slog.LevelVar)
	level.Set(slog.LevelWarn)
	r := &Router{log: log, level: level, sessions: newSessionLog(log), peers: map[netip.Addr]*peer{}, rib: map[netip.Prefix]ribPath{}}
	r.sessions.refuse = r.shutdownPeer
	return r
}

// shutdownPeer closes a session (a NOTIFICATION Cease, administrative
// shutdown, carrying why) and keeps it administratively down until the
// BGPPeer changes, which deletes and re-adds the peer. It holds r.mu so
// that a peer deleted and re-added meanwhile is not the one disabled.
func (r *Router) shutdownPeer(addr netip.Addr, s *session, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.s == nil || !r.sessions.current(addr, s) {
		return
	}
	err := r.s.DisablePeer(context.Background(), &api.DisablePeerRequest{Address: addr.String(), Communication: why})
	if err != nil {
		r.log.Warn("could not shut the BGP session down", "address", addr, "error", err)
	}
}

// Start starts a GoBGP server with the speaker's identity. Its default
// export policy rejects everything, so nothing is sent before SetRoutes.
func (r *Router) Start(ctx context.Context, g speakerbgp.Global) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.s != nil {
		return errors.New("BGP is already running")
	}
	if !g.RouterID.Is4() {
		return fmt.Errorf("router ID %s is not an IPv4 address", g.RouterID)
	}
	logger := slog.New(&levelHandler{inner: r.log.With("component", "gobgp").Handler(), level: r.level})
	s := server.NewBgpServer(server.LoggerOption(logger, r.level))
	go s.Serve()
	// Port -1: no listener; the routers accept our connections.
	err := s.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: g.ASN, RouterId: g.RouterID.String(), ListenPort: -1}})
	if err == nil {
		err = setGlobalPolicies(ctx, s)
	}
	watch, unwatch := context.WithCancel(context.Background())
	if err == nil {
		err = s.WatchEvent(watch, server.WatchEventMessageCallbacks{OnPeerUpdate: r.sessions.event}, server.WatchPeer())
	}
	if err != nil {
		unwatch()
		s.Stop()
		return err
	}
	r.s, r.unwatch = s, unwatch
	return nil
}

// setGlobalPolicies lets into the global RIB only our own paths, and out
// of it nothing until SetRoutes says what each peer gets.
func setGlobalPolicies(ctx context.Context, s *server.BgpServer) error {
	err := s.AddPolicy(ctx, &api.AddPolicyRequest{Policy: &api.Policy{Name: importPolicy, Statements: []*api.Statement{{
		Name:       importPolicy + "-local",
		Conditions: &api.Conditions{RouteType: api.Conditions_ROUTE_TYPE_LOCAL},
		Actions:    &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_ACCEPT},
	}}}})
	if err != nil {
		return fmt.Errorf("adding the import policy: %w", err)
	}
	err = s.SetPolicyAssignment(ctx, &api.SetPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
		Direction:     api.PolicyDirection_POLICY_DIRECTION_IMPORT,
		Policies:      []*api.Policy{{Name: importPolicy}},
		DefaultAction: api.RouteAction_ROUTE_ACTION_REJECT,
	}})
	if err != nil {
		return fmt.Errorf("assigning the import policy: %w", err)
	}
	return assignExport(ctx, s, nil)
}

// assignExport makes policies the global export policy, all at once.
func assignExport(ctx context.Context, s *server.BgpServer, policies []*api.Policy) error {
	err := s.SetPolicyAssignment(ctx, &api.SetPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
		Direction:     api.PolicyDirection_POLICY_DIRECTION_EXPORT,
		Policies:      policies,
		DefaultAction: api.RouteAction_ROUTE_ACTION_REJECT,
	}})
	if err != nil {
		return fmt.Errorf("assigning the export policies: %w", err)
	}
	return nil
}

// Stop closes every session (a NOTIFICATION Cease each) and stops GoBGP.
// A later Start runs a new GoBGP server: a stopped one cannot restart.
func (r *Router) Stop(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.s == nil {
		return nil
	}
	s, unwatch := r.s, r.unwatch
	r.s, r.unwatch = nil, nil
	r.peers = map[netip.Addr]*peer{}
	r.rib = map[netip.Prefix]ribPath{}
	r.sessions.reset()
	unwatch()
	done := make(chan struct{})
	go func() {
		// Stop runs StopBgp (the NOTIFICATIONs), then stops BFD.
		s.Stop()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("GoBGP still stopping: %w", ctx.Err())
	}
}

// AddPeer opens a session. The export policy sends it nothing until
// SetRoutes.
func (r *Router) AddPeer(ctx context.Context, p *config.Peer) error {
	ap, err := apiPeer(p)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.s == nil {
		return errNotStarted
	}
	addr := p.Address.Unmap()
	if old := r.peers[addr]; old != nil {
		return fmt.Errorf("BGPPeer %s: a session to %s is already open for BGPPeer %s", p.Name, addr, old.cfg.Name)
	}
	if err := r.s.AddPeer(ctx, &api.AddPeerRequest{Peer: ap}); err != nil {
		return err
	}
	r.peers[addr] = &peer{cfg: p, synced: true}
	var notAS uint32
	if p.DynamicASN == string(v1beta1.DynamicASNExternal) {
		notAS = p.MyASN
	}
	r.sessions.track(addr, p.Name, notAS)
	return nil
}

// DeletePeer closes a session (a NOTIFICATION Cease) and withdraws from
// the global RIB the prefixes no other peer gets.
func (r *Router) DeletePeer(ctx context.Context, p *config.Peer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	addr := p.Address.Unmap()
	ps := r.peers[addr]
	if r.s == nil || ps == nil {
		return nil // no such session open
	}
	// The policy goes first: were the peer to stay, it must get nothing
	// rather than keep a policy nobody tracks.
	if old := ps.export; old != nil {
		ps.export, ps.synced = nil, false
		if err := r.assignExport(ctx); err != nil {
			ps.export = old
			return err
		}
		r.removePolicy(ctx, old)
	}
	if err := r.s.DeletePeer(ctx, &api.DeletePeerRequest{Address: addr.String()}); err != nil {
		return err
	}
	delete(r.peers, addr)
	r.sessions.forget(addr)
	return r.pruneRIB()
}

// SetRoutes replaces what the peer gets. The order keeps every other
// peer's routes in place: the peer's new policy first, then the new
// prefixes into the RIB (GoBGP sends them to the peers whose policy
// accepts them), then a soft reset out of this peer alone when prefixes
// already in the RIB change for it (GoBGP re-sends what the policy accepts
// and withdraws what it no longer does), and last the prefixes no peer
// gets any more leave the RIB (withdrawn from everyone).
func (r *Router) SetRoutes(ctx context.Context, p *config.Peer, routes []bgpplan.Route) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.s == nil {
		return errNotStarted
	}
	addr := p.Address.Unmap()
	ps := r.peers[addr]
	if ps == nil {
		return fmt.Errorf("BGPPeer %s: no session to %s", p.Name, addr)
	}
	want, err := routeMap(addr, routes)
	if err != nil {
		return fmt.Errorf("BGPPeer %s: %w", p.Name, err)
	}
	if ps.synced && sameRoutes(ps.routes, want) {
		return nil
	}
	// What the peer already got, and whether the new policy changes it.
	resend := !ps.synced
	for pfx, rt := range want {
		cur, ok := ps.routes[pfx]
		switch {
		case ok && !sameRoute(cur, rt):
			resend = true // new attributes
		case !ok && r.inRIB(pfx):
			resend = true // in the RIB already: no UPDATE comes by itself
		}
	}
	for pfx := range ps.routes {
		if _, ok := want[pfx]; !ok && r.exportedElsewhere(pfx, addr) {
			resend = true // stays in the RIB: only a soft reset withdraws it
		}
	}
	ps.synced = false

	var export *exportPolicy
	if len(want) > 0 {
		r.gen++
		if export, err = r.addPolicy(ctx, policyName(p.Name, r.gen), addr, want); err != nil {
			return fmt.Errorf("BGPPeer %s: %w", p.Name, err)
		}
	}
	old := ps.export
	ps.export = export
	if err := r.assignExport(ctx); err != nil {
		ps.export = old
		r.removePolicy(ctx, export)
		return fmt.Errorf("BGPPeer %s: %w", p.Name, err)
	}
	r.removePolicy(ctx, old)

	if err := r.addPaths(r.pathsToAdd(addr, want)); err != nil {
		return fmt.Errorf("BGPPeer %s: %w", p.Name, err)
	}
	if resend {
		err := r.s.ResetPeer(ctx, &api.ResetPeerRequest{Address: addr.String(), Soft: true, Direction: api.ResetPeerRequest_DIRECTION_OUT})
		if err != nil {
			return fmt.Errorf("BGPPeer %s: re-sending the routes: %w", p.Name, err)
		}
	}
	ps.routes = want
	if err := r.pruneRIB(); err != nil {
		return fmt.Errorf("BGPPeer %s: %w", p.Name, err)
	}
	ps.synced = true
	return nil
}

// exportedElsewhere tells whether a peer other than addr gets pfx.
func (r *Router) exportedElsewhere(pfx netip.Prefix, addr netip.Addr) bool {
	for a, ps := range r.peers {
		if a != addr && ps.export != nil && ps.export.prefixes[pfx] {
			return true
		}
	}
	return false
}

// addPolicy adds a generation of a peer's export policy, unassigned.
func (r *Router) addPolicy(ctx context.Context, name string, addr netip.Addr, routes map[netip.Prefix]bgpplan.Route) (*exportPolicy, error) {
	e := buildExport(name, addr, routes)
	for i, set := range e.sets {
		if err := r.s.AddDefinedSet(ctx, &api.AddDefinedSetRequest{DefinedSet: set, Replace: true}); err != nil {
			r.deleteSets(ctx, e.sets[:i])
			return nil, fmt.Errorf("adding the defined set %s: %w", set.Name, err)
		}
	}
	if err := r.s.AddPolicy(ctx, &api.AddPolicyRequest{Policy: e.policy}); err != nil {
		r.deleteSets(ctx, e.sets)
		return nil, fmt.Errorf("adding the export policy %s: %w", name, err)
	}
	return e, nil
}

// assignExport assigns the export policies of every peer.
func (r *Router) assignExport(ctx context.Context) error {
	var policies []*api.Policy
	for _, a := range slices.SortedFunc(maps.Keys(r.peers), netip.Addr.Compare) {
		if e := r.peers[a].export; e != nil {
			policies = append(policies, &api.Policy{Name: e.name})
		}
	}
	return assignExport(ctx, r.s, policies)
}

// removePolicy deletes an unassigned policy with its statements and sets.
// A failure leaves only unused objects behind, so it is logged, not
// returned.
func (r *Router) removePolicy(ctx context.Context, e *exportPolicy) {
	if e == nil {
		return
	}
	err := r.s.DeletePolicy(ctx, &api.DeletePolicyRequest{Policy: &api.Policy{Name: e.name}, All: true})
	if err != nil {
		r.log.Warn("could not delete an unused GoBGP policy", "policy", e.name, "error", err)
		return
	}
	r.deleteSets(ctx, e.sets)
}

func (r *Router) deleteSets(ctx context.Context, sets []*api.DefinedSet) {
	for _, set := range sets {
		err := r.s.DeleteDefinedSet(ctx, &api.DeleteDefinedSetRequest{DefinedSet: &api.DefinedSet{DefinedType: set.DefinedType, Name: set.Name}, All: true})
		if err != nil {
			r.log.Warn("could not delete an unused GoBGP defined set", "set", set.Name, "error", err)
		}
	}
}

func (r *Router) inRIB(pfx netip.Prefix) bool {
	_, ok := r.rib[pfx]
	return ok
}

// pathsToAdd are the paths the global RIB lacks, or holds with other
// attributes, once addr's routes are want: LOCAL_PREF 0 is on a prefix's
// path while any peer's route for it asks for it (a drain sets it on
// every iBGP route of the node at once).
func (r *Router) pathsToAdd(addr netip.Addr, want map[netip.Prefix]bgpplan.Route) map[netip.Prefix]ribPath {
	wantPath := func(pfx netip.Prefix) ribPath {
		low := want[pfx].LocalPrefZero
		for a, ps := range r.peers {
			low = low || a != addr && ps.routes[pfx].LocalPrefZero
		}
		return ribPath{lowPref: low}
	}
	add := map[netip.Prefix]ribPath{}
	for pfx := range want {
		w := wantPath(pfx)
		if cur, ok := r.rib[pfx]; !ok || cur != w {
			add[pfx] = w
		}
	}
	for pfx, cur := range r.rib {
		if _, ok := want[pfx]; ok {
			continue
		}
		// Another peer's prefix, changed with this one's routes.
		if w := wantPath(pfx); cur != w {
			add[pfx] = w
		}
	}
	return add
}

// addPaths originates prefixes in the global RIB, or replaces their
// paths there.
func (r *Router) addPaths(add map[netip.Prefix]ribPath) error {
	if len(add) == 0 {
		return nil
	}
	prefixes := slices.SortedFunc(maps.Keys(add), comparePrefixes)
	paths := make([]*apiutil.Path, 0, len(prefixes))
	for _, pfx := range prefixes {
		path, err := localPath(pfx, false, add[pfx].lowPref)
		if err != nil {
			return fmt.Errorf("prefix %s: %w", pfx, err)
		}
		paths = append(paths, path)
	}
	_, err := r.s.AddPath(apiutil.AddPathRequest{Paths: paths})
	// GoBGP does not say which paths failed: count them all in, as
	// withdrawing a prefix that is not there does no harm.
	for _, pfx := range prefixes {
		r.rib[pfx] = add[pfx]
	}
	if err != nil {
		return fmt.Errorf("adding %d prefixes to the RIB: %w", len(prefixes), err)
	}
	return nil
}

// pruneRIB withdraws the prefixes no peer's policy lets through any more.
func (r *Router) pruneRIB() error {
	var del []netip.Prefix
	for pfx := range r.rib {
		if !r.exportedElsewhere(pfx, netip.Addr{}) {
			del = append(del, pfx)
		}
	}
	if len(del) == 0 {
		return nil
	}
	slices.SortFunc(del, comparePrefixes)
	paths := make([]*apiutil.Path, 0, len(del))
	for _, pfx := range del {
		path, err := localPath(pfx, true, false)
		if err != nil {
			return fmt.Errorf("prefix %s: %w", pfx, err)
		}
		paths = append(paths, path)
	}
	if err := r.s.DeletePath(apiutil.DeletePathRequest{Paths: paths}); err != nil {
		return fmt.Errorf("withdrawing %d prefixes from the RIB: %w", len(del), err)
	}
	for _, pfx := range del {
		delete(r.rib, pfx)
	}
	return nil
}

// Peers returns the state of every session, by address.
func (r *Router) Peers(ctx context.Context) (map[netip.Addr]speakerbgp.PeerState, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.s == nil {
		return nil, errNotStarted
	}
	out := map[netip.Addr]speakerbgp.PeerState{}
	err := r.s.ListPeer(ctx, &api.ListPeerRequest{EnableAdvertised: true}, func(ap *api.Peer) {
		addr, err := netip.ParseAddr(ap.GetConf().GetNeighborAddress())
		if err != nil {
			return
		}
		addr = addr.Unmap()
		st := ap.GetState()
		fsm := fsmState(st.GetSessionState())
		ps := speakerbgp.PeerState{
			Address:         addr,
			State:           stateName(fsm),
			UpdatesSent:     st.GetMessages().GetSent().GetUpdate(),
			UpdatesReceived: st.GetMessages().GetReceived().GetUpdate(),
		}
		ps.Since, ps.Flaps = r.sessions.get(addr, fsm)
		if ps.Since.IsZero() {
			// GoBGP's own record: when the session last came up or went
			// down.
			t := ap.GetTimers().GetState().GetDowntime()
			if fsm == bgp.BGP_FSM_ESTABLISHED {
				t = ap.GetTimers().GetState().GetUptime()
			}
			if t != nil {
				ps.Since = t.AsTime()
			}
		}
		for _, af := range ap.GetAfiSafis() {
			ps.Advertised += int(af.GetState().GetAdvertised())
		}
		if p := r.peers[addr]; p != nil && p.cfg.BFD != nil {
			ps.BFD = bfdState(st.GetBfdState().GetSessionState())
		}
		out[addr] = ps
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
