package speaker

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/herald-lb/herald/speaker/bgp"
	bgpplan "github.com/herald-lb/herald/speaker/bgp/plan"
	"github.com/herald-lb/herald/speaker/view"
)

// Event reasons of the BGP side: on Services (Advertising,
// StoppedAdvertising) and on BGPPeers (SessionEstablished, SessionDown).
const (
	EventAdvertising        = "Advertising"
	EventStoppedAdvertising = "StoppedAdvertising"
	EventSessionEstablished = "SessionEstablished"
	EventSessionDown        = "SessionDown"
)

// bgpProtocol advertises this node's routes over BGP: it applies the
// BGP plan to the manager, and reports what reached the sessions.
type bgpProtocol struct {
	*env
	// advertised are the announcements of the last sync, for events;
	// owned by the loop.
	advertised []view.Announcement

	// The rest is shared with the metrics collector and the session
	// watcher.
	mu sync.Mutex
	// sessions are the applied sessions by name, with their addresses.
	sessions map[string]netip.Addr
	// routes counts the prefixes applied per session.
	routes map[string]int
	// states are the last observed session states, by address.
	states map[netip.Addr]bgp.PeerState
}

func newBGPProtocol(e *env) *bgpProtocol { return &bgpProtocol{env: e} }

// sync decides what this node advertises and applies it; it returns
// the ServiceAnnouncements and the NodeAnnouncement of what was applied.
func (s *bgpProtocol) sync(r *round) result {
	drain, unprogrammed := r.bgpDrain, r.unprogrammed
	plan := bgpplan.Compute(bgpplan.Input{
		Config: r.snap.Config, Services: r.snap.Services, Nodes: r.snap.Nodes,
		Node: s.d.Node, NodeIPs: r.snap.NodeIPs, Options: s.d.Options, Reporter: r.reporter,
		Unprogrammed: unprogrammed, Drain: drain,
	})
	s.logs.once("bgp/drain", drain.String(), func() {
		if drain != bgpplan.NotDrained {
			s.d.Log.Info("BGP drain", "phase", drain.String())
		}
	})
	if s.d.Metrics != nil {
		s.d.Metrics.observeBGP(plan.Unadvertised)
	}
	s.apply(plan, unprogrammed)
	s.logProblems(plan)
	anns, advertised, sum := s.applied(plan)
	// Events are about what is advertised, not about the reasons.
	s.events(s.advertised, advertised)
	s.advertised = advertised
	return result{anns: anns, node: sum}
}

// apply hands the plan to the manager, unless the first sessions would
// open without the routes the proxy is not ready for yet.
func (s *bgpProtocol) apply(plan bgpplan.Plan, unprogrammed map[netip.Addr]bool) {
	var err error
	if len(plan.Sessions) > 0 && len(unprogrammed) > 0 && len(s.d.BGP.Sessions()) == 0 {
		// The first sessions open with every route the proxy is ready
		// for: a router keeping this node's routes from before a restart
		// drops those missing from the first End-of-RIB. The wait is
		// bounded by the proxy's (MaxProxyWait).
		s.logs.once("bgp/proxywait", "waiting", func() {
			s.d.Log.Info("waiting for the proxy's rules before opening the BGP sessions", "addresses", len(unprogrammed))
		})
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = s.d.BGP.Apply(ctx, plan)
		cancel()
	}
	if err != nil {
		s.logs.once("bgp/apply", err.Error(), func() {
			s.d.Log.Error("applying BGP sessions and routes; retrying", "err", err)
		})
		// Nothing else may trigger a sync soon (a router refusing the
		// session is not a Kubernetes change), so retry on a timer.
		time.AfterFunc(5*time.Second, s.trigger)
	} else {
		s.logs.forget("bgp/apply")
	}
}

// logProblems logs, once per change, what this node cannot honour and
// why addresses are not advertised.
func (s *bgpProtocol) logProblems(plan bgpplan.Plan) {
	seen := map[string]bool{}
	for _, p := range plan.Problems {
		key := "bgp/problem/" + p
		seen[key] = true
		s.logs.once(key, p, func() { s.d.Log.Warn("BGP configuration this node cannot honour", "problem", p) })
	}
	for _, ip := range plan.IPs {
		if ip.Reason == "" {
			continue
		}
		key := "bgp/ip/" + ip.Addr.String()
		seen[key] = true
		s.logs.once(key, ip.Reason, func() {
			s.d.Log.Info("not advertised over BGP", "ip", ip.Addr, "services", refs(ip.Services), "reason", ip.Reason)
		})
	}
	s.logs.forgetUnseen(seen, "bgp/problem/", "bgp/ip/")
}

// applied keeps, of the plan's announcements and summary, only what
// reached the BGP implementation: the sessions it holds.
func (s *bgpProtocol) applied(plan bgpplan.Plan) (anns, advertised []view.Announcement, sum *view.NodeSummary) {
	applied := s.d.BGP.Sessions()
	names := map[string]bool{}
	s.mu.Lock()
	s.sessions, s.routes = map[string]netip.Addr{}, map[string]int{}
	for _, a := range applied {
		names[a.Peer.Name] = true
		s.sessions[a.Peer.Name] = a.Peer.Address
		s.routes[a.Peer.Name] = len(a.Routes)
	}
	s.mu.Unlock()
	onSessions := func(peers []string) []string {
		return slices.DeleteFunc(slices.Clone(peers), func(p string) bool { return !names[p] })
	}
	for _, a := range plan.Announcements {
		a.Peers = onSessions(a.Peers)
		if len(a.Peers) == 0 {
			a.IPs = nil
		}
		if len(a.IPs) > 0 || len(a.Unannounced) > 0 {
			anns = append(anns, a)
		}
	}
	for _, a := range plan.Advertising {
		if a.Peers = onSessions(a.Peers); len(a.Peers) > 0 {
			advertised = append(advertised, a)
		}
	}
	if plan.Summary != nil {
		c := *plan.Summary
		c.Advertisements = slices.Clone(c.Advertisements)
		for i := range c.Advertisements {
			na := &c.Advertisements[i]
			na.IPv4Peers, na.IPv6Peers = onSessions(na.IPv4Peers), onSessions(na.IPv6Peers)
		}
		sum = &c
	}
	return anns, advertised, sum
}

// events records an event on each Service whose BGP advertisement by
// this node started, changed or stopped.
func (s *bgpProtocol) events(old, cur []view.Announcement) {
	if s.d.Events == nil {
		return
	}
	prev := map[view.ServiceRef]view.Announcement{}
	for _, a := range old {
		prev[a.Service] = a
	}
	for _, a := range cur {
		p, had := prev[a.Service]
		delete(prev, a.Service)
		if had && slices.Equal(p.IPs, a.IPs) && slices.Equal(p.Peers, a.Peers) {
			continue
		}
		if obj := s.d.Source.Service(a.Service); obj != nil {
			s.d.Events.Eventf(obj, corev1.EventTypeNormal, EventAdvertising, "advertising %s from node %s over BGP to %s",
				ipList(a.IPs), a.Node, strings.Join(a.Peers, ", "))
		}
	}
	for _, ref := range slices.SortedFunc(maps.Keys(prev), func(a, b view.ServiceRef) int { return strings.Compare(a.String(), b.String()) }) {
		if obj := s.d.Source.Service(ref); obj != nil {
			s.d.Events.Eventf(obj, corev1.EventTypeNormal, EventStoppedAdvertising, "stopped advertising %s from node %s over BGP",
				ipList(prev[ref].IPs), prev[ref].Node)
		}
	}
}

// watchSessions polls the session states, for the metrics, the logs and
// events on the BGPPeers when a session comes up or goes down.
func (s *bgpProtocol) watchSessions(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		states, err := s.d.BGP.Peers(qctx)
		cancel()
		if err != nil {
			s.d.Log.Warn("reading the BGP session states", "err", err)
			continue
		}
		s.mu.Lock()
		old := s.states
		s.states = states
		sessions := maps.Clone(s.sessions)
		s.mu.Unlock()
		for _, name := range slices.Sorted(maps.Keys(sessions)) {
			addr := sessions[name]
			was, now := old[addr], states[addr]
			if was.Up() == now.Up() {
				continue
			}
			bfd := ""
			if now.BFD != "" {
				bfd = ", BFD " + now.BFD
			}
			if now.Up() {
				s.d.Log.Info("BGP session established", "peer", name, "address", addr, "bfd", now.BFD)
				s.peerEvent(name, corev1.EventTypeNormal, EventSessionEstablished, fmt.Sprintf("BGP session from node %s to %s established%s", s.d.Node, addr, bfd))
			} else if was.State != "" {
				s.d.Log.Warn("BGP session down", "peer", name, "address", addr, "state", now.State, "bfd", now.BFD)
				s.peerEvent(name, corev1.EventTypeWarning, EventSessionDown, fmt.Sprintf("BGP session from node %s to %s down (state %s%s)", s.d.Node, addr, orNone(now.State), bfd))
			}
		}
	}
}

func (s *bgpProtocol) peerEvent(name, typ, reason, msg string) {
	if s.d.Events == nil {
		return
	}
	if obj := s.d.Source.BGPPeer(name); obj != nil {
		s.d.Events.Event(obj, typ, reason, msg)
	}
}

// snapshot returns the sessions with their states, for the metrics.
func (s *bgpProtocol) snapshot() (sessions map[string]netip.Addr, routes map[string]int, states map[netip.Addr]bgp.PeerState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.sessions), maps.Clone(s.routes), maps.Clone(s.states)
}
