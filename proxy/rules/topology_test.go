package rules_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/herald-lb/herald/proxy/internal/tracer"
	"github.com/herald-lb/herald/proxy/rules"
)

// hint adds hints to an endpoint.
func hint(e rules.Endpoint, zones, nodes []string) rules.Endpoint {
	e.ZoneHints, e.NodeHints = zones, nodes
	return e
}

// TestTopologyHintsTraced traces packets from this node (node-a, zone
// z1) and from outside to Services whose endpoints carry hints, in both
// modes and both families: what the hints leave is all a packet reaches,
// and Local traffic policies keep every local endpoint.
func TestTopologyHintsTraced(t *testing.T) {
	for _, l := range []lab{lab4, lab6} {
		local, remote, remote2 := ep(l.epLocal), ep(l.epRemote), ep(l.epRemote2)
		zones := func(a, b, c []string) []rules.Endpoint {
			return []rules.Endpoint{hint(ready(l.epLocal, nodeA), a, nil), hint(ready(l.epRemote, nodeB), b, nil), hint(ready(l.epRemote2, nodeB), c, nil)}
		}
		// PreferClose / PreferSameZone as the controller writes them: the
		// local pod is for zone z2, one remote pod for z1 (ours).
		sameZone := zones([]string{"z2"}, []string{"z1"}, []string{"z2"})
		// PreferSameNode: each endpoint for its own node.
		sameNode := []rules.Endpoint{
			hint(ready(l.epLocal, nodeA), []string{"z2"}, []string{nodeA}),
			hint(ready(l.epRemote, nodeB), []string{"z1"}, []string{nodeB}),
			hint(ready(l.epRemote2, nodeB), []string{"z1"}, []string{nodeB}),
		}
		cases := []struct {
			name     string
			zone     string
			eTP, iTP rules.TrafficPolicy
			eps      []rules.Endpoint
			src      source
			dst      dest
			want     want
		}{
			{"same zone: pod to cluster IP", "z1", 0, 0, sameZone, fromPod, toClusterIP, want{verdict: tracer.Accept, endpoints: []string{remote}}},
			{"same zone: node to cluster IP", "z1", 0, 0, sameZone, fromNode, toClusterIP, want{verdict: tracer.Accept, endpoints: []string{remote}, masq: true}},
			{"same zone: external to NodePort", "z1", 0, 0, sameZone, fromExternal, toNodePort, want{verdict: tracer.Accept, endpoints: []string{remote}, masq: true}},
			{"same zone: external to LB IP", "z1", 0, 0, sameZone, fromExternal, toLBIP, want{verdict: tracer.Accept, endpoints: []string{remote}, masq: true}},
			{"same zone, the other zone", "z2", 0, 0, sameZone, fromPod, toClusterIP, want{verdict: tracer.Accept, endpoints: []string{local, remote2}}},
			{"no endpoint for this zone: all", "z3", 0, 0, sameZone, fromPod, toClusterIP, want{verdict: tracer.Accept, endpoints: []string{local, remote, remote2}}},
			{"node without a zone: all", "", 0, 0, sameZone, fromPod, toClusterIP, want{verdict: tracer.Accept, endpoints: []string{local, remote, remote2}}},
			{"one ready endpoint without a hint: all", "z1", 0, 0, zones([]string{"z2"}, []string{"z1"}, nil), fromPod, toClusterIP, want{verdict: tracer.Accept, endpoints: []string{local, remote, remote2}}},
			{"same node: pod to cluster IP", "z1", 0, 0, sameNode, fromPod, toClusterIP, want{verdict: tracer.Accept, endpoints: []string{local}}},
			{"same node: external to LB IP", "z1", 0, 0, sameNode, fromExternal, toLBIP, want{verdict: tracer.Accept, endpoints: []string{local}, masq: true}},
			{"eTP Local: external keeps every local endpoint", "z1", rules.PolicyLocal, 0, sameZone, fromExternal, toLBIP, want{verdict: tracer.Accept, endpoints: []string{local}}},
			{"eTP Local: pod short-circuit is narrowed", "z1", rules.PolicyLocal, 0, sameZone, fromPod, toLBIP, want{verdict: tracer.Accept, endpoints: []string{remote}}},
			{"eTP Local: cluster IP is narrowed", "z1", rules.PolicyLocal, 0, sameZone, fromPod, toClusterIP, want{verdict: tracer.Accept, endpoints: []string{remote}}},
			{"iTP Local: hints play no part", "z1", 0, rules.PolicyLocal, sameZone, fromPod, toClusterIP, want{verdict: tracer.Accept, endpoints: []string{local}}},
		}
		for _, c := range cases {
			for _, m := range modes {
				t.Run(fmt.Sprintf("%s/%s/%s", m, l.family, c.name), func(t *testing.T) {
					svc := l.web()
					svc.ExternalTrafficPolicy, svc.InternalTrafficPolicy = c.eTP, c.iTP
					node := l.node()
					node.Zone = c.zone
					tr := l.loadModeNode(t, m, node, []rules.Service{svc}, epMap(svc, c.eps...))
					check(t, trace(t, tr, l.flow(c.src, c.dst)), c.want)
				})
			}
		}
	}
}

// hintedWorld is a random cluster of three nodes in two zones whose
// EndpointSlices carry hints of every kind: as the controller writes
// them for zones or nodes, some missing, some for nowhere.
type hintedWorld struct {
	rnd  *rand.Rand
	l    lab
	svcs []rules.Service
	eps  map[rules.ServicePortName][]rules.Endpoint
	node rules.NodeConfig
}

var (
	hintNodes = []string{nodeA, nodeB, "node-c"}
	hintZones = map[string]string{nodeA: "z1", nodeB: "z2", "node-c": "z1"}
)

// nth is the i-th address after base.
func nth(base netip.Addr, i int) netip.Addr {
	for range i {
		base = base.Next()
	}
	return base
}

func newHintedWorld(rnd *rand.Rand, l lab) *hintedWorld {
	w := &hintedWorld{rnd: rnd, l: l, eps: map[rules.ServicePortName][]rules.Endpoint{}, node: l.node()}
	w.node.Zone = []string{"z1", "z2", "z3", ""}[rnd.IntN(4)]
	for i := range 1 + rnd.IntN(5) {
		s := l.web()
		s.Name = fmt.Sprintf("svc%d", i)
		s.ClusterIPs = []netip.Addr{nth(l.clusterIP, i)}
		s.NodePort, s.LoadBalancerIngress = 0, nil
		if rnd.IntN(2) == 0 {
			s.NodePort = nodePort + i
			s.LoadBalancerIngress = []rules.Ingress{{IP: nth(l.lbIP, 10*i)}}
		}
		s.ExternalTrafficPolicy = rules.TrafficPolicy(rnd.IntN(2))
		s.InternalTrafficPolicy = rules.TrafficPolicy(rnd.IntN(2))
		if rnd.IntN(4) == 0 {
			s.SessionAffinity, s.AffinityTimeout = rules.AffinityClientIP, 60
		}
		w.svcs = append(w.svcs, s)
		w.eps[s.ID()] = w.endpoints(i)
	}
	return w
}

// endpoints of the i-th Service: up to five pods on random nodes, ready,
// terminating or starting, hinted by one scheme per Service.
func (w *hintedWorld) endpoints(i int) []rules.Endpoint {
	r := w.rnd
	scheme := []int{0, 1, 1, 2, 2, 3, 4, 5}[r.IntN(8)]
	var out []rules.Endpoint
	for j := range r.IntN(6) {
		node := hintNodes[r.IntN(len(hintNodes))]
		e := rules.Endpoint{IP: nth(w.l.epRemote, 16*i+j), Port: tgtPort, NodeName: node, Ready: r.IntN(5) != 0, Serving: true}
		if !e.Ready {
			e.Terminating, e.Serving = r.IntN(2) == 0, r.IntN(3) != 0
		}
		switch scheme {
		case 1: // PreferClose: each endpoint for its node's zone
			e.ZoneHints = []string{hintZones[node]}
		case 2: // PreferSameNode: for its node, and its zone
			e.ZoneHints, e.NodeHints = []string{hintZones[node]}, []string{node}
		case 3: // topology-mode Auto moved an endpoint to another zone
			e.ZoneHints = []string{[]string{"z1", "z2"}[r.IntN(2)]}
		case 4: // hints missing here and there
			if r.IntN(2) == 0 {
				e.ZoneHints = []string{hintZones[node]}
			}
			if r.IntN(2) == 0 {
				e.NodeHints = []string{node}
			}
		case 5: // for places that do not exist
			e.ZoneHints, e.NodeHints = []string{"z9", ""}, []string{"node-z"}
		}
		out = append(out, e)
	}
	return out
}

// wantCluster is the oracle for a pod's packet to a cluster IP under
// internalTrafficPolicy Cluster, restating kube-proxy v1.34: ready
// endpoints, narrowed to this node's when every ready one has node hints
// and some are for this node, else to this zone's when every ready one has
// zone hints and some are for this zone; with none ready, the serving
// terminating ones. byHints says the hints left some ready one out.
func wantCluster(eps []rules.Endpoint, node, zone string) (want []string, byHints bool) {
	var ready, forNode, forZone, fallback []string
	everyNode, everyZone := true, true
	for _, e := range eps {
		if !e.Ready {
			if e.Serving && e.Terminating {
				fallback = append(fallback, ep(e.IP))
			}
			continue
		}
		ready = append(ready, ep(e.IP))
		everyNode = everyNode && len(e.NodeHints) > 0
		everyZone = everyZone && len(e.ZoneHints) > 0
		if slices.Contains(e.NodeHints, node) {
			forNode = append(forNode, ep(e.IP))
		}
		if slices.Contains(e.ZoneHints, zone) {
			forZone = append(forZone, ep(e.IP))
		}
	}
	switch {
	case len(ready) == 0:
		return fallback, false
	case everyNode && len(forNode) > 0:
		return forNode, len(forNode) < len(ready)
	case everyZone && len(forZone) > 0:
		return forZone, len(forZone) < len(ready)
	}
	return ready, false
}

// TestRandomHintedClustersAgree renders random clusters with hints both
// ways and traces every kind of flow to every Service: both modes must
// reach the same endpoints with the same verdicts and masquerading, and a
// pod's packet to the cluster IP must reach exactly the endpoints the
// oracle gives.
func TestRandomHintedClustersAgree(t *testing.T) {
	rnd := rand.New(rand.NewPCG(34, 2))
	narrowed, traced := 0, 0
	for round := range 200 {
		l := []lab{lab4, lab6}[round%2]
		w := newHintedWorld(rnd, l)
		ipt := l.loadModeNode(t, modeIPTables, w.node, w.svcs, w.eps)
		nft := l.loadModeNode(t, modeNFT, w.node, w.svcs, w.eps)
		for _, s := range w.svcs {
			flows := []tracer.Flow{
				{Origin: tracer.Pod, Src: l.podA, Proto: "tcp", Dst: s.ClusterIPs[0], Port: svcPort},
				{Origin: tracer.Node, Src: l.nodeIP, Proto: "tcp", Dst: s.ClusterIPs[0], Port: svcPort},
			}
			if s.NodePort != 0 {
				flows = append(flows,
					tracer.Flow{Origin: tracer.External, Src: l.client, Proto: "tcp", Dst: l.nodeIP, Port: uint16(s.NodePort), DstLocal: true},
					tracer.Flow{Origin: tracer.External, Src: l.client, Proto: "tcp", Dst: s.LoadBalancerIngress[0].IP, Port: svcPort},
					tracer.Flow{Origin: tracer.Pod, Src: l.podA, Proto: "tcp", Dst: s.LoadBalancerIngress[0].IP, Port: svcPort})
			}
			for _, f := range flows {
				a, b := trace(t, ipt, f), trace(t, nft, f)
				traced++
				am, aok := a.Masquerade()
				bm, bok := b.Masquerade()
				if !slices.Equal(a.Verdicts(), b.Verdicts()) || !slices.Equal(a.Endpoints(), b.Endpoints()) || am != bm || aok != bok {
					t.Fatalf("round %d, %s, zone %q: the modes differ\niptables: %v %v masq %v/%v\nnftables: %v %v masq %v/%v\n%+v\n%s\n%s",
						round, s.Name, w.node.Zone, a.Verdicts(), a.Endpoints(), am, aok, b.Verdicts(), b.Endpoints(), bm, bok, w.eps[s.ID()], a.Explain(), b.Explain())
				}
				uniform(t, a)
				uniform(t, b)
			}
			if s.InternalTrafficPolicy != rules.PolicyCluster {
				continue
			}
			want, byHints := wantCluster(w.eps[s.ID()], nodeA, w.node.Zone)
			slices.Sort(want)
			got := trace(t, ipt, flows[0]).Endpoints()
			if len(want) == 0 {
				if v := trace(t, ipt, flows[0]).Verdicts(); !slices.Equal(v, []tracer.Verdict{tracer.Reject}) {
					t.Fatalf("round %d, %s: no usable endpoint, verdicts %v", round, s.Name, v)
				}
				continue
			}
			if !slices.Equal(got, want) {
				t.Fatalf("round %d, %s, zone %q: endpoints %v, want %v\n%+v", round, s.Name, w.node.Zone, got, want, w.eps[s.ID()])
			}
			if byHints {
				narrowed++
			}
		}
	}
	// The generator must exercise the narrowing, not only the fallbacks.
	if narrowed < 30 || traced < 1000 {
		t.Fatalf("only %d narrowed Services and %d traced flows", narrowed, traced)
	}
	t.Logf("%d flows traced both ways, %d Services narrowed", traced, narrowed)
}
