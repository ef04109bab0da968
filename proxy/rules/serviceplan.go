package rules

import (
	"cmp"
	"slices"
)

// servicePlan is what one Service port's rules must do, decided once for
// both renderers (iptables-restore text and nftables objects): which
// endpoints each chain balances over, where the cluster IP and the
// external addresses lead, which per-Service chains exist, and what
// happens to traffic nothing can take. A renderer only names the chains
// and writes the plan in its own syntax.
type servicePlan struct {
	// cluster are the endpoints of the cluster-wide chain, local those
	// of the local-endpoints chain, reachable every endpoint a chain
	// leads to (each gets an endpoint chain).
	cluster, local, reachable []epInfo
	// hasAny: some chain leads to an endpoint.
	hasAny bool
	// internalLocal: the cluster IP leads to the local-endpoints chain
	// (internalTrafficPolicy Local), else to the cluster-wide one;
	// hasInternal: that chain has endpoints.
	internalLocal, hasInternal bool
	// externalLocal and hasExternal: the same for the external
	// addresses (externalTrafficPolicy Local).
	externalLocal, hasExternal bool
	// The per-Service chains that exist: cluster-wide and local
	// endpoints, the external-destinations chain, and the firewall of
	// loadBalancerSourceRanges.
	clusterChain, localChain, extChain, fwChain bool
	// internalBlock and externalBlock say what the filter does with
	// traffic to the cluster IP, or to an external address, that the
	// nat rules send nowhere.
	internalBlock, externalBlock block
}

// block is what becomes of traffic no endpoint can take.
type block int

const (
	// pass: some endpoint takes it.
	pass block = iota
	// reject: the Service has no endpoints at all (an ICMP error, so
	// clients fail at once).
	reject
	// drop: it lacks endpoints on this node only (as a cloud load
	// balancer's health check expects).
	drop
)

// planService decides s's plan from its endpoints.
func planService(s *svcPort, eps []epInfo) servicePlan {
	var pl servicePlan
	pl.cluster, pl.local, pl.reachable, pl.hasAny = categorize(s, eps)
	pl.clusterChain = len(pl.cluster) > 0 && s.usesClusterEndpoints()
	pl.localChain = len(pl.local) > 0 && s.usesLocalEndpoints()
	pl.internalLocal, pl.hasInternal = s.iTPLocal, pl.hasAny
	if s.iTPLocal {
		pl.hasInternal = len(pl.local) > 0
	}
	pl.externalLocal, pl.hasExternal = s.eTPLocal, pl.hasAny
	if s.eTPLocal {
		pl.hasExternal = len(pl.local) > 0
	}
	// The external-destinations chain exists whenever anything is
	// reachable, even with no local endpoints, for the pod and node
	// short-circuits.
	pl.extChain = pl.hasAny && s.externallyAccessible()
	pl.fwChain = pl.hasAny && len(s.lbVIPs) > 0 && s.restricted
	switch {
	case !pl.hasAny:
		pl.internalBlock, pl.externalBlock = reject, reject
	default:
		if !pl.hasInternal {
			pl.internalBlock = drop
		}
		if !pl.hasExternal && s.externallyAccessible() {
			pl.externalBlock = drop
		}
	}
	return pl
}

// record counts the Service in stats and, with a healthCheckNodePort,
// adds its ready local endpoints to health, for the health check server.
func (pl servicePlan) record(stats *Stats, health *[]ServiceHealth, s *svcPort, eps []epInfo) {
	stats.Services++
	if pl.internalBlock == drop {
		stats.NoLocalEndpointsInternal++
	}
	if pl.externalBlock == drop {
		stats.NoLocalEndpointsExternal++
	}
	if s.hcnp == 0 {
		return
	}
	n := 0
	for _, e := range eps {
		if e.local && e.ready {
			n++
		}
	}
	*health = append(*health, ServiceHealth{Service: s.id, HealthCheckNodePort: s.hcnp, LocalEndpoints: n})
}

// pick is local when the plan says so, else cluster: the chain a
// traffic policy leads to.
func pick(local bool, cluster, localChain string) string {
	if local {
		return localChain
	}
	return cluster
}

// eachServicePort normalizes every Service port for the family, in a
// fixed order (namespace, name, port name; the first of duplicates
// wins), and calls fn with each usable one and its endpoints. Problems
// are appended to probs, which it returns. Both renderers walk the
// input with it, so they see the same ports and report alike.
func eachServicePort(f Family, services []Service, endpoints map[ServicePortName][]Endpoint, node nodeParams, probs []Problem, fn func(*svcPort, []epInfo)) []Problem {
	order := make([]int, len(services))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		x, y := &services[a], &services[b]
		return cmp.Or(cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Name, y.Name), cmp.Compare(x.PortName, y.PortName))
	})
	seen := make(map[ServicePortName]bool, len(services))
	for _, i := range order {
		in := &services[i]
		id := in.ID()
		if seen[id] {
			probs = append(probs, Problem{Service: id, Field: "port.name", Message: "duplicate service port; the first one wins", Skipped: true})
			continue
		}
		seen[id] = true
		s, ok, p := normalize(f, in)
		probs = append(probs, p...)
		if !ok {
			continue
		}
		eps, p := normalizeEndpoints(f, &s, node.name, node.zone, endpoints[id])
		probs = append(probs, p...)
		fn(&s, eps)
	}
	return probs
}
