package rules

import "slices"

// Topology: the EndpointSlice controller turns a Service's
// trafficDistribution (PreferClose, PreferSameZone, PreferSameNode) and
// its service.kubernetes.io/topology-mode annotation into hints on the
// endpoints; the proxy never reads those Service fields itself. It
// narrows the cluster-wide endpoints to the ones hinted for this node,
// or for its zone, and falls back to all of them whenever the hints are
// incomplete or name nothing here, as kube-proxy v1.34 does
// (pkg/proxy/topology.go). The local-endpoints chain of a Local traffic
// policy is never narrowed.

// epHints is what an endpoint's hints say about this node.
type epHints struct {
	// zoned: the endpoint has zone hints; forZone: one is this node's
	// zone.
	zoned, forZone bool
	// noded: the endpoint has node hints; forNode: one is this node.
	noded, forNode bool
}

// hintsFor reads e's hints against this node's name and zone. A zone
// hint matches the zone as spelled, "" included, as kube-proxy's set
// lookup does; node names are never empty, so an unnamed node matches no
// node hint.
func hintsFor(e Endpoint, node, zone string) epHints {
	return epHints{
		zoned:   len(e.ZoneHints) > 0,
		forZone: slices.Contains(e.ZoneHints, zone),
		noded:   len(e.NodeHints) > 0,
		forNode: node != "" && slices.Contains(e.NodeHints, node),
	}
}

// topology is how the cluster-wide endpoints of a Service port are
// narrowed.
type topology int

const (
	// topoAll: no narrowing, every usable endpoint.
	topoAll topology = iota
	// topoSameZone: the endpoints hinted for this node's zone.
	topoSameZone
	// topoSameNode: the endpoints hinted for this node.
	topoSameNode
)

// topologyOf decides from the ready endpoints (others are not looked
// at): node hints win when every ready endpoint has some and one is for
// this node; else zone hints, when every ready endpoint has some and one
// is for this node's zone; else no narrowing. So hints missing on any
// ready endpoint, none for here, or a node without a zone label (whose
// zone matches no controller-written hint) all mean every endpoint.
// Narrowing is therefore never empty while any endpoint is ready.
func topologyOf(eps []epInfo) topology {
	allNoded, anyForNode := true, false
	allZoned, anyForZone := true, false
	for _, e := range eps {
		if !e.ready {
			continue
		}
		allNoded = allNoded && e.hints.noded
		anyForNode = anyForNode || e.hints.forNode
		allZoned = allZoned && e.hints.zoned
		anyForZone = anyForZone || e.hints.forZone
	}
	switch {
	case allNoded && anyForNode:
		return topoSameNode
	case allZoned && anyForZone:
		return topoSameZone
	}
	return topoAll
}

// admits says whether e stays among the cluster-wide endpoints.
func (t topology) admits(e epInfo) bool {
	switch t {
	case topoSameNode:
		return e.hints.forNode
	case topoSameZone:
		return e.hints.forZone
	}
	return true
}
