package rules_test

import (
	"fmt"
	"testing"

	"github.com/herald-lb/herald/proxy/internal/tracer"
	"github.com/herald-lb/herald/proxy/rules"
)

type epSet int

const (
	epsBoth epSet = iota // one endpoint on node-a, one on node-b
	epsLocal
	epsRemote
	epsNone
)

func (e epSet) String() string { return [...]string{"local+remote", "local", "remote", "none"}[e] }

func (l lab) endpoints(s epSet) (all, local []string, list []rules.Endpoint) {
	if s == epsBoth || s == epsLocal {
		list = append(list, ready(l.epLocal, nodeA))
		all = append(all, ep(l.epLocal))
		local = append(local, ep(l.epLocal))
	}
	if s == epsBoth || s == epsRemote {
		list = append(list, ready(l.epRemote, nodeB))
		all = append(all, ep(l.epRemote))
	}
	return all, local, list
}

// expected is the oracle: the Kubernetes Service semantics written down
// independently of the renderer (Service docs, "Using Source IP", the
// traffic-policy docs, and kube-proxy's documented iptables behaviour).
func (l lab) expected(eTP, iTP rules.TrafficPolicy, src source, dst dest, set epSet) want {
	all, local, _ := l.endpoints(set)
	fromPodCIDR := src == fromPod // the node and the client are outside the pod CIDR

	if len(all) == 0 {
		// A Service without endpoints refuses connections, except that the
		// node's own packets to a (non-local) LB IP are not hooked by the
		// external-services filter and simply leave the node.
		if src == fromNode && dst == toLBIP {
			return want{verdict: tracer.Accept}
		}
		return want{verdict: tracer.Reject}
	}
	switch dst {
	case toClusterIP:
		cands := all
		if iTP == rules.PolicyLocal {
			cands = local
		}
		if len(cands) == 0 {
			return want{verdict: tracer.Drop}
		}
		// Off-cluster sources of a cluster IP are SNATed; pods keep theirs.
		return want{verdict: tracer.Accept, endpoints: cands, masq: !fromPodCIDR}
	default:
		if eTP == rules.PolicyCluster {
			// "Cluster": any endpoint, always SNAT (tutorial: client_address
			// is a node IP).
			return want{verdict: tracer.Accept, endpoints: all, masq: true}
		}
		switch src {
		case fromPod:
			// Pods short-circuit to all endpoints and keep their IP.
			return want{verdict: tracer.Accept, endpoints: all}
		case fromNode:
			// The node reaches all endpoints, SNATed.
			return want{verdict: tracer.Accept, endpoints: all, masq: true}
		}
		// "Local": only this node's endpoints, client IP preserved, and
		// nothing at all (DROP) where there are none.
		if len(local) == 0 {
			return want{verdict: tracer.Drop}
		}
		return want{verdict: tracer.Accept, endpoints: local}
	}
}

func TestTrafficPolicyMatrix(t *testing.T) {
	policies := []rules.TrafficPolicy{rules.PolicyCluster, rules.PolicyLocal}
	pname := map[rules.TrafficPolicy]string{rules.PolicyCluster: "Cluster", rules.PolicyLocal: "Local"}
	n := 0
	for _, m := range modes {
		for _, l := range []lab{lab4, lab6} {
			for _, eTP := range policies {
				for _, iTP := range policies {
					for _, set := range []epSet{epsBoth, epsLocal, epsRemote, epsNone} {
						svc := l.web()
						svc.ExternalTrafficPolicy, svc.InternalTrafficPolicy = eTP, iTP
						_, _, list := l.endpoints(set)
						tr := l.loadMode(t, m, []rules.Service{svc}, epMap(svc, list...))
						for _, src := range []source{fromPod, fromNode, fromExternal} {
							for _, dst := range []dest{toClusterIP, toNodePort, toLBIP} {
								name := fmt.Sprintf("%s/%s/eTP=%s/iTP=%s/%s/%s->%s", m, l.family, pname[eTP], pname[iTP], set, src, dst)
								t.Run(name, func(t *testing.T) {
									check(t, trace(t, tr, l.flow(src, dst)), l.expected(eTP, iTP, src, dst, set))
								})
								n++
							}
						}
					}
				}
			}
		}
	}
	if n != len(modes)*2*2*2*4*3*3 {
		t.Fatalf("matrix has %d cases", n)
	}
}

// With the LB IP configured on the node (BGP setups often add it to a
// dummy interface), the unserved cases are caught on INPUT instead of
// FORWARD; the outcomes must be the same.
func TestLocalLBIPBehavesTheSame(t *testing.T) {
	l := lab4
	for _, m := range modes {
		for _, eTP := range []rules.TrafficPolicy{rules.PolicyCluster, rules.PolicyLocal} {
			for _, set := range []epSet{epsBoth, epsRemote, epsNone} {
				svc := l.web()
				svc.ExternalTrafficPolicy = eTP
				_, _, list := l.endpoints(set)
				tr := l.loadMode(t, m, []rules.Service{svc}, epMap(svc, list...), l.nodeIP, l.lbIP)
				for _, src := range []source{fromPod, fromExternal} {
					f := l.flow(src, toLBIP)
					f.DstLocal = true
					t.Run(fmt.Sprintf("%s/%v/%s/%s", m, eTP, set, src), func(t *testing.T) {
						check(t, trace(t, tr, f), l.expected(eTP, rules.PolicyCluster, src, toLBIP, set))
					})
				}
			}
		}
	}
}
