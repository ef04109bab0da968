// Package bgp applies the plans of speaker/bgp/plan to the node's
// embedded BGP implementation (GoBGP v4, package speaker/bgp/gobgp) and
// reports the sessions' states.
//
// Manager is the only writer. It changes only what a plan changes: a
// session whose BGPPeer is unchanged is never reset, whatever happens to
// Services, pools or other peers; a changed route set reaches its peer
// as UPDATEs (routes added, withdrawn or re-sent with new attributes).
// Only a new speaker identity (ASN or router ID) restarts everything.
// The Router interface hides GoBGP, so a fake drives the tests.
package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/herald-lb/herald/config"
	bgpplan "github.com/herald-lb/herald/speaker/bgp/plan"
)

// Global is the BGP speaker's identity.
type Global struct {
	ASN      uint32
	RouterID netip.Addr
}

// Session states, as BGP names them (RFC 4271 section 8).
const (
	StateIdle        = "Idle"
	StateConnect     = "Connect"
	StateActive      = "Active"
	StateOpenSent    = "OpenSent"
	StateOpenConfirm = "OpenConfirm"
	StateEstablished = "Established"
)

// PeerState is one session's state.
type PeerState struct {
	Address netip.Addr
	// State is one of the State constants.
	State string
	// Since is when the session entered State, when known.
	Since time.Time
	// BFD is the BFD session's state ("Up", "Down", "Init", "AdminDown"),
	// "" without BFD.
	BFD string
	// Advertised counts the prefixes sent and not withdrawn.
	Advertised int
	// UpdatesSent and UpdatesReceived count UPDATE messages.
	UpdatesSent, UpdatesReceived uint64
	// Flaps counts the times the session left Established.
	Flaps uint64
}

// Up reports whether the session is established.
func (s PeerState) Up() bool { return s.State == StateEstablished }

// Router is the embedded BGP implementation.
type Router interface {
	// Start starts the speaker; nothing is sent before.
	Start(ctx context.Context, g Global) error
	// Stop closes every session (a NOTIFICATION Cease each) and stops.
	Stop(ctx context.Context) error
	// AddPeer opens a session; it advertises nothing until SetRoutes.
	AddPeer(ctx context.Context, p *config.Peer) error
	// DeletePeer closes a session; the peer drops its routes.
	DeletePeer(ctx context.Context, p *config.Peer) error
	// SetRoutes replaces what the peer is sent: routes not given are
	// withdrawn, new ones advertised, changed attributes re-sent.
	SetRoutes(ctx context.Context, p *config.Peer, routes []bgpplan.Route) error
	// Peers returns the state of every session, by address.
	Peers(ctx context.Context) (map[netip.Addr]PeerState, error)
}

// Manager brings a Router in line with plans.
type Manager struct {
	r   Router
	log *slog.Logger

	// mu serialises Apply and Shutdown with the readers (Sessions, Peers).
	mu sync.Mutex

	started bool
	global  Global
	// peers and routes are what the Router holds, by BGPPeer name.
	peers  map[string]*config.Peer
	routes map[string][]bgpplan.Route
}

// NewManager returns a Manager of r.
func NewManager(r Router, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{r: r, log: log, peers: map[string]*config.Peer{}, routes: map[string][]bgpplan.Route{}}
}

// Applied is what the Manager last applied for a peer (for status).
type Applied struct {
	Peer   *config.Peer
	Routes []bgpplan.Route
}

// Sessions returns the sessions the Router holds, by name.
func (m *Manager) Sessions() []Applied {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := make([]string, 0, len(m.peers))
	for n := range m.peers {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]Applied, len(names))
	for i, n := range names {
		out[i] = Applied{Peer: m.peers[n], Routes: m.routes[n]}
	}
	return out
}

// Peers returns the Router's session states (nil before the start).
func (m *Manager) Peers(ctx context.Context) (map[netip.Addr]PeerState, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.started {
		return nil, nil
	}
	return m.r.Peers(ctx)
}

// Apply brings the Router in line with p. A session that fails to open
// or update is reported in the error and retried at the next Apply; the
// others are applied regardless.
func (m *Manager) Apply(ctx context.Context, p bgpplan.Plan) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(p.Sessions) == 0 {
		if m.started {
			m.log.Info("no BGPPeer selects this node: stopping BGP")
			return m.stop(ctx)
		}
		return nil
	}
	g := Global{ASN: p.ASN, RouterID: p.RouterID}
	if !g.RouterID.IsValid() || !g.RouterID.Is4() {
		return fmt.Errorf("no IPv4 router ID for BGP: set spec.routerID on the BGPPeers of node %s", p.Node)
	}
	if m.started && g != m.global {
		m.log.Warn("the BGP speaker's ASN or router ID changed: restarting it, every session resets",
			"asn", g.ASN, "routerID", g.RouterID, "was.asn", m.global.ASN, "was.routerID", m.global.RouterID)
		if err := m.stop(ctx); err != nil {
			return err
		}
	}
	if !m.started {
		if err := m.r.Start(ctx, g); err != nil {
			return fmt.Errorf("starting BGP (ASN %d, router ID %s): %w", g.ASN, g.RouterID, err)
		}
		m.started, m.global = true, g
		m.log.Info("BGP started", "asn", g.ASN, "routerID", g.RouterID)
	}

	var errs []error
	want := map[string]bgpplan.Session{}
	for _, s := range p.Sessions {
		want[s.Name()] = s
	}
	// Closed first, so that a peer moving to another name or changing
	// address frees its address before it is opened again.
	for _, name := range sortedKeys(m.peers) {
		old := m.peers[name]
		s, ok := want[name]
		if ok && SamePeer(old, s.Peer) {
			continue
		}
		why := "BGPPeer removed or no longer selecting this node"
		if ok {
			why = "BGPPeer changed"
		}
		if err := m.r.DeletePeer(ctx, old); err != nil {
			errs = append(errs, fmt.Errorf("BGPPeer %s: closing the session to %s: %w", name, old.Address, err))
			continue
		}
		m.log.Info("BGP session closed", "peer", name, "address", old.Address, "why", why)
		delete(m.peers, name)
		delete(m.routes, name)
	}
	for _, s := range p.Sessions {
		name := s.Name()
		if _, ok := m.peers[name]; !ok {
			if err := m.r.AddPeer(ctx, s.Peer); err != nil {
				errs = append(errs, fmt.Errorf("BGPPeer %s: opening the session to %s: %w", name, s.Peer.Address, err))
				continue
			}
			m.peers[name] = s.Peer
			m.log.Info("BGP session opened", "peer", name, "address", s.Peer.Address, "myASN", s.Peer.MyASN,
				"peerASN", s.Peer.PeerASN, "bfd", s.Peer.BFD != nil, "gracefulRestart", s.Peer.GracefulRestart)
		} else {
			// Same session: keep the newest object (its selectors may
			// have changed, which does not touch the session).
			m.peers[name] = s.Peer
		}
		if old, ok := m.routes[name]; ok && sameRoutes(old, s.Routes) {
			m.routes[name] = s.Routes
			continue
		}
		if err := m.r.SetRoutes(ctx, s.Peer, s.Routes); err != nil {
			errs = append(errs, fmt.Errorf("BGPPeer %s: advertising to %s: %w", name, s.Peer.Address, err))
			delete(m.routes, name)
			continue
		}
		m.log.Info("BGP routes set", "peer", name, "prefixes", prefixes(s.Routes))
		m.routes[name] = s.Routes
	}
	return errors.Join(errs...)
}

// Shutdown withdraws every route, waits up to wait for the withdrawals
// to be on the wire (the UPDATE counter of each established session that
// had routes moved), then closes the sessions and stops: routers move
// traffic away before the node stops serving, rather than after a hold
// time or on the Cease alone.
//
// With restarting (a restart in place: a new speaker follows at once on
// this node, which keeps forwarding), the sessions of peers with graceful
// restart keep their routes and stay open until the process exits: the
// TCP connection then closes without a NOTIFICATION, so the router keeps
// the routes as stale (RFC 4724) until the new speaker sends them again
// and its End-of-RIB, and no flow is hashed elsewhere meanwhile. The
// other peers' sessions are withdrawn and closed as above.
func (m *Manager) Shutdown(ctx context.Context, wait time.Duration, restarting bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.started {
		return nil
	}
	var errs []error
	before, _ := m.r.Peers(ctx)
	pending := map[netip.Addr]uint64{}
	kept := 0
	for _, name := range sortedKeys(m.peers) {
		p := m.peers[name]
		if restarting && p.GracefulRestart {
			kept++
			continue
		}
		if len(m.routes[name]) == 0 {
			continue
		}
		if err := m.r.SetRoutes(ctx, p, nil); err != nil {
			errs = append(errs, fmt.Errorf("BGPPeer %s: withdrawing: %w", name, err))
			continue
		}
		m.routes[name] = nil
		if st, ok := before[p.Address]; ok && st.Up() {
			pending[p.Address] = st.UpdatesSent
		}
	}
	deadline := time.Now().Add(wait)
	for len(pending) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		st, err := m.r.Peers(ctx)
		if err != nil {
			break
		}
		for a, sent := range pending {
			if s, ok := st[a]; !ok || !s.Up() || s.UpdatesSent > sent {
				delete(pending, a)
			}
		}
		if len(pending) > 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if len(pending) > 0 {
		m.log.Warn("closing BGP sessions before their withdrawals were seen sent", "peers", len(pending))
	}
	if kept > 0 {
		for _, name := range sortedKeys(m.peers) {
			if p := m.peers[name]; !p.GracefulRestart {
				if err := m.r.DeletePeer(ctx, p); err != nil {
					errs = append(errs, fmt.Errorf("BGPPeer %s: closing the session to %s: %w", name, p.Address, err))
				}
			}
		}
		m.log.Info("restarting in place: the sessions with graceful restart stay open until this process exits", "peers", kept)
		return errors.Join(errs...)
	}
	if err := m.stop(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (m *Manager) stop(ctx context.Context) error {
	err := m.r.Stop(ctx)
	m.started = false
	m.peers = map[string]*config.Peer{}
	m.routes = map[string][]bgpplan.Route{}
	if err != nil {
		return fmt.Errorf("stopping BGP: %w", err)
	}
	return nil
}

// SamePeer tells whether two BGPPeers describe the same session, so that
// one may replace the other without a reset. Node selectors do not
// matter: they decide whether the session exists, not how it runs.
func SamePeer(a, b *config.Peer) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Name == b.Name && a.MyASN == b.MyASN && a.PeerASN == b.PeerASN && a.DynamicASN == b.DynamicASN &&
		a.Address == b.Address && a.SourceAddress == b.SourceAddress && a.Port == b.Port &&
		a.HoldTime == b.HoldTime && a.KeepaliveTime == b.KeepaliveTime && a.ConnectTime == b.ConnectTime &&
		a.Password.Reveal() == b.Password.Reveal() && a.EBGPMultiHop == b.EBGPMultiHop &&
		a.GracefulRestart == b.GracefulRestart && sameBFD(a.BFD, b.BFD)
}

func sameBFD(a, b *config.BFDProfile) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	x.Name, y.Name = "", "" // a renamed profile with the same values is the same session
	return x == y
}

func sameRoutes(a, b []bgpplan.Route) bool {
	return slices.EqualFunc(a, b, bgpplan.Route.SameAttributes)
}

func prefixes(rs []bgpplan.Route) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Prefix.String()
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
