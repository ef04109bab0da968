package rules

import (
	"cmp"
	"slices"
)

func sortEndpoints(eps []epInfo) {
	slices.SortFunc(eps, func(a, b epInfo) int {
		if c := a.addr.Addr().Compare(b.addr.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.addr.Port(), b.addr.Port())
	})
}

// categorize picks the endpoints for Cluster and Local traffic policy the way
// kube-proxy does:
//
//   - Cluster: the ready endpoints the hints leave (topologyOf: those for
//     this node or zone, else all); if none is ready anywhere, all
//     serving+terminating ones (graceful termination of the last pods).
//   - Local: ready local endpoints; if none, serving+terminating local ones.
//     Hints play no part. The two fall back independently.
//
// hasAny says whether the Service has any usable endpoint anywhere, which
// decides between REJECT (nothing) and DROP (nothing here) for the traffic
// that cannot be served. reachable is every endpoint that needs a SEP chain.
func categorize(s *svcPort, eps []epInfo) (cluster, local, reachable []epInfo, hasAny bool) {
	usesCluster, usesLocal := s.usesClusterEndpoints(), s.usesLocalEndpoints()
	topo := topoAll
	if usesCluster {
		topo = topologyOf(eps)
		for _, e := range eps {
			if e.ready && topo.admits(e) {
				cluster = append(cluster, e)
			}
		}
		if len(cluster) == 0 {
			for _, e := range eps {
				if e.serving && e.terminating {
					cluster = append(cluster, e)
				}
			}
		}
		hasAny = len(cluster) > 0
	}
	if !usesLocal {
		return cluster, nil, cluster, hasAny
	}

	var localReady, localTerminating bool
	for _, e := range eps {
		switch {
		case e.ready:
			hasAny = true
			localReady = localReady || e.local
		case e.serving && e.terminating:
			hasAny = true
			localTerminating = localTerminating || e.local
		}
	}
	terminatingFallback := false
	for _, e := range eps {
		switch {
		case !e.local:
		case localReady && e.ready:
			local = append(local, e)
		case !localReady && localTerminating && e.serving && e.terminating:
			local = append(local, e)
			terminatingFallback = true
		}
	}
	if !usesCluster {
		return nil, local, local, hasAny
	}
	if !terminatingFallback && topo == topoAll {
		// local holds ready endpoints only, all of which are in cluster.
		return cluster, local, cluster, hasAny
	}
	// Local fell back to terminating endpoints, or the hints left out
	// local ready ones: either way cluster may lack some of local.
	in := make(map[string]bool, len(cluster))
	reachable = slices.Clone(cluster)
	for _, e := range cluster {
		in[e.str] = true
	}
	for _, e := range local {
		if !in[e.str] {
			reachable = append(reachable, e)
		}
	}
	sortEndpoints(reachable)
	return cluster, local, reachable, hasAny
}
