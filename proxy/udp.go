package proxy

import (
	"net/netip"

	"github.com/herald-lb/herald/proxy/conntrack"
	"github.com/herald-lb/herald/proxy/rules"
)

// udpFrontends are the addresses at which one family's UDP Service ports
// are reached, each with the endpoints a packet may be DNATed to.
type udpFrontends struct {
	// byAddr: cluster IPs, external IPs and load-balancer IPs.
	byAddr map[netip.AddrPort]udpFrontend
	// byNodePort: NodePorts, on any of nodeIPs.
	byNodePort map[uint16]udpFrontend
	nodeIPs    map[netip.Addr]bool
	keys       map[rules.ServiceKey]bool
}

type udpFrontend struct {
	endpoints map[netip.AddrPort]bool
}

func (u udpFrontends) empty() bool { return len(u.byAddr) == 0 && len(u.byNodePort) == 0 }

// buildUDPFrontends collects the UDP frontends of a family. An endpoint
// counts when rules may send new packets to it: ready, or serving while
// terminating (the fallback when nothing is ready). Flows to a
// terminating endpoint that still serves are left to finish.
func buildUDPFrontends(f rules.Family, services []rules.Service, eps map[rules.ServicePortName][]rules.Endpoint, nodeIPs []netip.Addr) udpFrontends {
	u := udpFrontends{
		byAddr:     map[netip.AddrPort]udpFrontend{},
		byNodePort: map[uint16]udpFrontend{},
		nodeIPs:    map[netip.Addr]bool{},
		keys:       map[rules.ServiceKey]bool{},
	}
	inFamily := func(a netip.Addr) bool { return (f == rules.IPv4 && a.Is4()) || (f == rules.IPv6 && a.Is6()) }
	for _, ip := range nodeIPs {
		if inFamily(ip) {
			u.nodeIPs[ip] = true
		}
	}
	for i := range services {
		s := &services[i]
		if s.Protocol != rules.UDP || s.Port < 1 || s.Port > 65535 {
			continue
		}
		fe := udpFrontend{endpoints: map[netip.AddrPort]bool{}}
		for _, e := range eps[s.ID()] {
			if inFamily(e.IP) && e.Port > 0 && e.Port <= 65535 && (e.Ready || e.Serving && e.Terminating) {
				fe.endpoints[netip.AddrPortFrom(e.IP, uint16(e.Port))] = true
			}
		}
		port := uint16(s.Port)
		found := false
		add := func(a netip.Addr) {
			if a.IsValid() && inFamily(a) {
				u.byAddr[netip.AddrPortFrom(a, port)] = fe
				found = true
			}
		}
		for _, a := range s.ClusterIPs {
			add(a)
		}
		for _, a := range s.ExternalIPs {
			add(a)
		}
		for _, in := range s.LoadBalancerIngress {
			if in.Mode == rules.IPModeVIP {
				add(in.IP)
			}
		}
		if s.NodePort > 0 && s.NodePort <= 65535 && found {
			u.byNodePort[uint16(s.NodePort)] = fe
		}
		if found {
			u.keys[rules.ServiceKey{Namespace: s.Namespace, Name: s.Name}] = true
		}
	}
	return u
}

func (u udpFrontends) lookup(dst netip.AddrPort) (udpFrontend, bool) {
	if fe, ok := u.byAddr[dst]; ok {
		return fe, true
	}
	if u.nodeIPs[dst.Addr()] {
		fe, ok := u.byNodePort[dst.Port()]
		return fe, ok
	}
	return udpFrontend{}, false
}

// staleUDP returns the predicate for conntrack entries to delete: a flow
// to a UDP frontend whose reply does not come from one of its current
// endpoints. That covers an endpoint that went away (the flow still
// DNATs to it), and a Service that had no endpoints and now has some
// (a flow recorded without DNAT, its reply source being the frontend
// itself, would otherwise keep bypassing the new rules). A frontend that
// disappeared since prev loses its DNATed flows too.
func staleUDP(cur, prev udpFrontends) func(conntrack.Flow) bool {
	return func(fl conntrack.Flow) bool {
		if fe, ok := cur.lookup(fl.OrigDst); ok {
			return !fe.endpoints[fl.ReplySrc]
		}
		if _, ok := prev.lookup(fl.OrigDst); ok {
			return fl.ReplySrc != fl.OrigDst
		}
		return false
	}
}

// reconcileConntrack deletes stale UDP entries of one family after its
// rules were restored (before that, new packets would be DNATed the old
// way again). Dumping the table costs time on a busy node, so it runs on
// full syncs and when a changed Service has or had a UDP port.
func (s *Syncer) reconcileConntrack(f *famState, snap Snapshot, node rules.NodeConfig, full bool) int {
	if s.ct == nil {
		return 0
	}
	cur := buildUDPFrontends(f.Family, snap.Services, snap.Endpoints, node.IPs)
	prev := f.udp
	f.udp = cur
	if cur.empty() && prev.empty() {
		return 0
	}
	if !full && !f.udpRetry {
		touched := false
		for k := range snap.Changed {
			if cur.keys[k] || prev.keys[k] {
				touched = true
				break
			}
		}
		if !touched {
			return 0
		}
	}
	n, err := s.ct.DeleteUDP(f.Family, staleUDP(cur, prev))
	f.udpRetry = err != nil
	if err != nil {
		// Keep what is left to clean: the frontends that went away stay
		// known until a cleanup succeeds, and the next sync tries again.
		f.udp = mergeFrontends(cur, prev)
		s.log.Error("deleting stale UDP conntrack entries; retrying at the next sync", "family", f.Family, "deleted", n, "err", err)
	}
	if n > 0 {
		s.log.Info("deleted stale UDP conntrack entries", "family", f.Family, "count", n)
		s.metrics.conntrackDeleted.Add(float64(n))
	}
	return n
}

// mergeFrontends is cur with the frontends only prev has, so that a later
// cleanup, comparing against it, still finds the flows of those.
func mergeFrontends(cur, prev udpFrontends) udpFrontends {
	out := udpFrontends{byAddr: map[netip.AddrPort]udpFrontend{}, byNodePort: map[uint16]udpFrontend{},
		nodeIPs: map[netip.Addr]bool{}, keys: map[rules.ServiceKey]bool{}}
	for _, u := range []udpFrontends{prev, cur} { // cur's entries win
		for k, v := range u.byAddr {
			out.byAddr[k] = v
		}
		for k, v := range u.byNodePort {
			out.byNodePort[k] = v
		}
		for k := range u.nodeIPs {
			out.nodeIPs[k] = true
		}
		for k := range u.keys {
			out.keys[k] = true
		}
	}
	return out
}
