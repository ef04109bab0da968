package rules_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/herald-lb/herald/proxy/internal/tracer"
	"github.com/herald-lb/herald/proxy/nft"
	"github.com/herald-lb/herald/proxy/rules"
)

func render(l lab, svcs []rules.Service, eps map[rules.ServicePortName][]rules.Endpoint) rules.Ruleset {
	return rules.Render(l.family, svcs, eps, l.node())
}

func renderNFT(l lab, svcs []rules.Service, eps map[rules.ServicePortName][]rules.Endpoint) rules.NFTRuleset {
	return rules.RenderNFT(l.family, svcs, eps, l.node())
}

// affinitySets returns the session-affinity sets of an nft table.
func affinitySets(tab *nft.Table) []*nft.Set {
	var out []*nft.Set
	for _, s := range tab.Sets {
		if strings.HasPrefix(s.Name, rules.NFTPrefixAffinity) {
			out = append(out, s)
		}
	}
	return out
}

func TestEvenSpreadOverManyEndpoints(t *testing.T) {
	l := lab4
	for n := 1; n <= 7; n++ {
		svc := l.web()
		var list []rules.Endpoint
		var all []string
		for i := range n {
			ip := netip.AddrFrom4([4]byte{10, 244, 3, byte(10 + i)})
			list = append(list, ready(ip, nodeB))
			all = append(all, ep(ip))
		}
		for _, m := range modes {
			t.Run(fmt.Sprintf("%s/%d", m, n), func(t *testing.T) {
				tr := l.loadMode(t, m, []rules.Service{svc}, epMap(svc, list...))
				check(t, trace(t, tr, l.flow(fromPod, toClusterIP)), want{verdict: tracer.Accept, endpoints: all})
			})
		}
		// nftables: one rule draws among the n slots of the chain's block.
		nrs := renderNFT(l, []rules.Service{svc}, epMap(svc, list...))
		text := []byte(nrs.Table.Text())
		mustContain(t, text, fmt.Sprintf("meta l4proto tcp dnat ip to numgen random mod %d map @endpoints-tcp-0", n))
		if got := len(nrs.Table.Set(rules.NFTEndpointsMap(nft.TCP, 0)).Elements); got != n {
			t.Errorf("%d endpoints: %d elements in the endpoints map", n, got)
		}
		rs := render(l, []rules.Service{svc}, epMap(svc, list...))
		// kube-proxy's spelling: 1/(n-i) with ten decimals, none on the last.
		for i := range n - 1 {
			mustContain(t, rs.NAT, fmt.Sprintf("--probability %.10f -j", 1/float64(n-i)))
		}
		if got := strings.Count(string(rs.NAT), "-m statistic"); got != n-1 {
			t.Errorf("%d endpoints: %d statistic rules, want %d", n, got, n-1)
		}
	}
}

func TestNoEndpointsRejectsAndNoLocalDrops(t *testing.T) {
	l := lab4
	svc := l.web()
	svc.ExternalIPs = []netip.Addr{l.extIP}

	rs := render(l, []rules.Service{svc}, nil)
	mustContain(t, rs.Filter,
		`-A HERALD-SERVICES -m comment --comment "default/web:http has no endpoints" -m tcp -p tcp -d 10.96.0.10 --dport 80 -j REJECT --reject-with icmp-port-unreachable`,
		`-A HERALD-EXTERNAL-SERVICES -m comment --comment "default/web:http has no endpoints" -m tcp -p tcp -d 198.51.100.50 --dport 80 -j REJECT`,
		`-A HERALD-EXTERNAL-SERVICES -m comment --comment "default/web:http has no endpoints" -m tcp -p tcp -d 198.51.100.10 --dport 80 -j REJECT`,
		`-A HERALD-EXTERNAL-SERVICES -m comment --comment "default/web:http has no endpoints" -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 30080 -j REJECT`)
	// No nat rules at all for an endpoint-less Service.
	mustNotContain(t, rs.NAT, "default/web:http")
	for _, m := range modes {
		t.Run(string(m)+"/no endpoints", func(t *testing.T) {
			tr := l.loadMode(t, m, []rules.Service{svc}, nil)
			for _, f := range []tracer.Flow{
				l.flow(fromPod, toClusterIP), l.flow(fromNode, toClusterIP), l.flow(fromExternal, toNodePort),
				{Origin: tracer.External, Src: l.client, Proto: "tcp", Dst: l.extIP, Port: svcPort},
				{Origin: tracer.Node, Src: l.nodeIP, Proto: "tcp", Dst: l.nodeIP, Port: nodePort, DstLocal: true},
			} {
				check(t, trace(t, tr, f), want{verdict: tracer.Reject})
			}
		})
	}

	// Endpoints elsewhere only: Local policies DROP instead.
	svc.ExternalTrafficPolicy, svc.InternalTrafficPolicy = rules.PolicyLocal, rules.PolicyLocal
	eps := epMap(svc, ready(l.epRemote, nodeB))
	rs = render(l, []rules.Service{svc}, eps)
	mustContain(t, rs.Filter,
		`-A HERALD-SERVICES -m comment --comment "default/web:http has no local endpoints" -m tcp -p tcp -d 10.96.0.10 --dport 80 -j DROP`,
		`-A HERALD-EXTERNAL-SERVICES -m comment --comment "default/web:http has no local endpoints" -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 30080 -j DROP`)
	if rs.Stats.NoLocalEndpointsInternal != 1 || rs.Stats.NoLocalEndpointsExternal != 1 {
		t.Errorf("no-local-endpoints stats %+v", rs.Stats)
	}
	if st := renderNFT(l, []rules.Service{svc}, eps).Stats; st.NoLocalEndpointsInternal != 1 || st.NoLocalEndpointsExternal != 1 {
		t.Errorf("nftables no-local-endpoints stats %+v", st)
	}
	for _, m := range modes {
		t.Run(string(m)+"/no local endpoints", func(t *testing.T) {
			tr := l.loadMode(t, m, []rules.Service{svc}, eps)
			check(t, trace(t, tr, tracer.Flow{Origin: tracer.External, Src: l.client, Proto: "tcp", Dst: l.extIP, Port: svcPort}), want{verdict: tracer.Drop})
			// Pods still reach the external IP via the short-circuit.
			check(t, trace(t, tr, tracer.Flow{Origin: tracer.Pod, Src: l.podA, Proto: "tcp", Dst: l.extIP, Port: svcPort}),
				want{verdict: tracer.Accept, endpoints: []string{ep(l.epRemote)}})
		})
	}
}

func TestExternalIPs(t *testing.T) {
	for _, l := range []lab{lab4, lab6} {
		svc := l.web()
		svc.NodePort, svc.LoadBalancerIngress = 0, nil
		svc.ExternalIPs = []netip.Addr{l.extIP, l.extIP} // duplicates collapse
		eps := epMap(svc, ready(l.epLocal, nodeA), ready(l.epRemote, nodeB))
		rs := render(l, []rules.Service{svc}, eps)
		if got := strings.Count(string(rs.NAT), "external IP"); got != 1 {
			t.Errorf("%s: %d external IP rules, want 1", l.family, got)
		}
		n := 0
		for _, e := range renderNFT(l, []rules.Service{svc}, eps).Table.Set(rules.NFTMapServiceIPs).Elements {
			if e.Key.Addr == l.extIP {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %d nftables service-ips elements for the external IP, want 1", l.family, n)
		}
		for _, m := range modes {
			t.Run(fmt.Sprintf("%s/%s", m, l.family), func(t *testing.T) {
				tr := l.loadMode(t, m, []rules.Service{svc}, eps)
				for _, o := range []tracer.Origin{tracer.External, tracer.Pod, tracer.Node} {
					src := map[tracer.Origin]netip.Addr{tracer.External: l.client, tracer.Pod: l.podA, tracer.Node: l.nodeIP}[o]
					check(t, trace(t, tr, tracer.Flow{Origin: o, Src: src, Proto: "tcp", Dst: l.extIP, Port: svcPort}),
						want{verdict: tracer.Accept, endpoints: []string{ep(l.epLocal), ep(l.epRemote)}, masq: true})
				}
			})
		}
	}
}

func TestSessionAffinity(t *testing.T) {
	for _, l := range []lab{lab4, lab6} {
		svc := l.web()
		svc.SessionAffinity, svc.AffinityTimeout = rules.AffinityClientIP, 600
		eps := []rules.Endpoint{ready(l.epLocal, nodeA), ready(l.epRemote, nodeB), ready(l.epRemote2, nodeB)}
		rs := render(l, []rules.Service{svc}, epMap(svc, eps...))
		mustContain(t, rs.NAT, "--rcheck --seconds 600 --reap -j HERALD-SEP-", "-m recent --name HERALD-SEP-")
		sets := affinitySets(renderNFT(l, []rules.Service{svc}, epMap(svc, eps...)).Table)
		if len(sets) != 3 {
			t.Errorf("%s: %d nftables affinity sets, want 3", l.family, len(sets))
		}
		for _, s := range sets {
			if s.Timeout != 600*time.Second || !s.Dynamic {
				t.Errorf("%s: affinity set %s timeout %v dynamic %v", l.family, s.Name, s.Timeout, s.Dynamic)
			}
		}
		for _, m := range modes {
			t.Run(fmt.Sprintf("%s/%s", m, l.family), func(t *testing.T) {
				tr := l.loadMode(t, m, []rules.Service{svc}, epMap(svc, eps...))
				for _, src := range []source{fromPod, fromExternal} {
					for _, dst := range []dest{toClusterIP, toNodePort, toLBIP} {
						res := trace(t, tr, l.flow(src, dst))
						check(t, res, want{verdict: tracer.Accept, endpoints: []string{ep(l.epLocal), ep(l.epRemote), ep(l.epRemote2)}, masq: src == fromExternal || dst != toClusterIP})
						// Every endpoint remembers its clients in a list of its own,
						// and a remembered client is sent back to that endpoint.
						listOf := map[string]string{}
						for _, o := range res.Outcomes {
							if o.Affinity || len(o.RecentSet) != 1 {
								continue
							}
							if prev, ok := listOf[o.Dst.String()]; ok && prev != o.RecentSet[0] {
								t.Fatalf("endpoint %s recorded in %s and %s", o.Dst, prev, o.RecentSet[0])
							}
							listOf[o.Dst.String()] = o.RecentSet[0]
						}
						if len(listOf) != 3 {
							t.Fatalf("%v: recent lists per endpoint %v", res.Flow, listOf)
						}
						sticky := map[string]bool{}
						for _, o := range res.Outcomes {
							if !o.Affinity {
								continue
							}
							if len(o.RecentChecked) != 1 || listOf[o.Dst.String()] != o.RecentChecked[0] {
								t.Errorf("%v: client remembered in %v sent to %s (whose list is %s)", res.Flow, o.RecentChecked, o.Dst, listOf[o.Dst.String()])
							}
							sticky[o.Dst.String()] = true
						}
						if len(sticky) != 3 {
							t.Errorf("%v: affinity reaches %v, want all three endpoints", res.Flow, sticky)
						}
					}
				}
			})
		}
	}

	// Default timeout, and no affinity without ClientIP.
	l := lab4
	svc := l.web()
	svc.SessionAffinity = rules.AffinityClientIP
	eps := epMap(svc, ready(l.epLocal, nodeA))
	mustContain(t, render(l, []rules.Service{svc}, eps).NAT, "--seconds 10800 --reap")
	if sets := affinitySets(renderNFT(l, []rules.Service{svc}, eps).Table); len(sets) != 1 || sets[0].Timeout != 10800*time.Second {
		t.Errorf("nftables default affinity sets %+v", sets)
	}
	svc.SessionAffinity = rules.AffinityNone
	mustNotContain(t, render(l, []rules.Service{svc}, eps).NAT, "-m recent")
	if sets := affinitySets(renderNFT(l, []rules.Service{svc}, eps).Table); len(sets) != 0 {
		t.Errorf("nftables affinity sets without ClientIP: %+v", sets)
	}
}

func TestLoadBalancerSourceRanges(t *testing.T) {
	l := lab4
	eps := []rules.Endpoint{ready(l.epLocal, nodeA), ready(l.epRemote, nodeB)}
	all := []string{ep(l.epLocal), ep(l.epRemote)}
	lbFlow := func(o tracer.Origin, src netip.Addr) tracer.Flow {
		return tracer.Flow{Origin: o, Src: src, Proto: "tcp", Dst: l.lbIP, Port: svcPort}
	}

	svc := l.web()
	svc.LoadBalancerSourceRanges = []netip.Prefix{l.clientNet}
	rs := render(l, []rules.Service{svc}, epMap(svc, eps...))
	mustContain(t, rs.Filter, "-A HERALD-PROXY-FIREWALL -m comment --comment \"default/web:http traffic not accepted by HERALD-FW-")
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			svc := svc
			tr := l.loadMode(t, m, []rules.Service{svc}, epMap(svc, eps...))
			check(t, trace(t, tr, lbFlow(tracer.External, l.client)), want{verdict: tracer.Accept, endpoints: all, masq: true})
			check(t, trace(t, tr, lbFlow(tracer.External, l.client2)), want{verdict: tracer.Drop})
			check(t, trace(t, tr, lbFlow(tracer.Pod, l.podA)), want{verdict: tracer.Drop})
			check(t, trace(t, tr, lbFlow(tracer.Node, l.nodeIP)), want{verdict: tracer.Drop})
			// NodePorts are not subject to source ranges (as in kube-proxy).
			nf := l.flow(fromExternal, toNodePort)
			nf.Src = l.client2
			check(t, trace(t, tr, nf), want{verdict: tracer.Accept, endpoints: all, masq: true})
			// Neither is the cluster IP.
			cf := l.flow(fromExternal, toClusterIP)
			cf.Src = l.client2
			check(t, trace(t, tr, cf), want{verdict: tracer.Accept, endpoints: all, masq: true})

			// A range covering the node lets the node in, also with the LB IP as
			// its source address.
			svc.LoadBalancerSourceRanges = []netip.Prefix{l.clientNet, netip.MustParsePrefix("192.0.2.0/24")}
			tr = l.loadMode(t, m, []rules.Service{svc}, epMap(svc, eps...))
			check(t, trace(t, tr, lbFlow(tracer.Node, l.nodeIP)), want{verdict: tracer.Accept, endpoints: all, masq: true})
			check(t, trace(t, tr, lbFlow(tracer.Node, l.lbIP)), want{verdict: tracer.Accept, endpoints: all, masq: true})
			check(t, trace(t, tr, lbFlow(tracer.External, l.client2)), want{verdict: tracer.Drop})

			// eTP=Local with ranges: allowed clients keep their IP.
			svc.ExternalTrafficPolicy = rules.PolicyLocal
			tr = l.loadMode(t, m, []rules.Service{svc}, epMap(svc, eps...))
			check(t, trace(t, tr, lbFlow(tracer.External, l.client)), want{verdict: tracer.Accept, endpoints: []string{ep(l.epLocal)}})
			check(t, trace(t, tr, lbFlow(tracer.External, l.client2)), want{verdict: tracer.Drop})

			// Ranges only of the other family, or unparseable ones, still restrict:
			// herald fails closed instead of opening the Service.
			for _, mut := range []func(*rules.Service){
				func(s *rules.Service) { s.LoadBalancerSourceRanges = []netip.Prefix{lab6.clientNet} },
				func(s *rules.Service) { s.LoadBalancerSourceRanges, s.SourceRangesInvalid = nil, true },
				func(s *rules.Service) { s.LoadBalancerSourceRanges = []netip.Prefix{{}} },
			} {
				svc := l.web()
				mut(&svc)
				tr, _ := l.renderMode(t, m, l.node(), []rules.Service{svc}, epMap(svc, eps...))
				check(t, trace(t, tr, lbFlow(tracer.External, l.client)), want{verdict: tracer.Drop})
				check(t, trace(t, tr, l.flow(fromExternal, toNodePort)), want{verdict: tracer.Accept, endpoints: all, masq: true})
			}
		})
	}
}

func TestTerminatingEndpointFallback(t *testing.T) {
	l := lab4
	cases := []struct {
		name string
		eTP  rules.TrafficPolicy
		eps  []rules.Endpoint
		flow tracer.Flow
		want want
	}{
		{"ready endpoints win over terminating ones", rules.PolicyCluster,
			[]rules.Endpoint{ready(l.epRemote, nodeB), terminating(l.epLocal, nodeA, true)},
			l.flow(fromPod, toClusterIP), want{verdict: tracer.Accept, endpoints: []string{ep(l.epRemote)}}},
		{"no ready: serving terminating ones are used", rules.PolicyCluster,
			[]rules.Endpoint{terminating(l.epRemote, nodeB, true), terminating(l.epLocal, nodeA, false)},
			l.flow(fromPod, toClusterIP), want{verdict: tracer.Accept, endpoints: []string{ep(l.epRemote)}}},
		{"no ready, none serving: reject", rules.PolicyCluster,
			[]rules.Endpoint{terminating(l.epRemote, nodeB, false), {IP: l.epLocal, Port: tgtPort, NodeName: nodeA}},
			l.flow(fromPod, toClusterIP), want{verdict: tracer.Reject}},
		{"starting (not ready, not terminating) endpoints are unused", rules.PolicyCluster,
			[]rules.Endpoint{{IP: l.epLocal, Port: tgtPort, Serving: true, NodeName: nodeA}, ready(l.epRemote, nodeB)},
			l.flow(fromPod, toClusterIP), want{verdict: tracer.Accept, endpoints: []string{ep(l.epRemote)}}},
		{"eTP=Local: local falls back to its terminating endpoint", rules.PolicyLocal,
			[]rules.Endpoint{ready(l.epRemote, nodeB), terminating(l.epLocal, nodeA, true)},
			l.flow(fromExternal, toNodePort), want{verdict: tracer.Accept, endpoints: []string{ep(l.epLocal)}}},
		{"eTP=Local: pods still use the ready remote one", rules.PolicyLocal,
			[]rules.Endpoint{ready(l.epRemote, nodeB), terminating(l.epLocal, nodeA, true)},
			l.flow(fromPod, toLBIP), want{verdict: tracer.Accept, endpoints: []string{ep(l.epRemote)}}},
		{"eTP=Local: non-serving local terminating means drop", rules.PolicyLocal,
			[]rules.Endpoint{ready(l.epRemote, nodeB), terminating(l.epLocal, nodeA, false)},
			l.flow(fromExternal, toLBIP), want{verdict: tracer.Drop}},
		{"eTP=Local: only terminating anywhere, still served locally", rules.PolicyLocal,
			[]rules.Endpoint{terminating(l.epRemote, nodeB, true), terminating(l.epLocal, nodeA, true)},
			l.flow(fromExternal, toLBIP), want{verdict: tracer.Accept, endpoints: []string{ep(l.epLocal)}}},
	}
	for _, c := range cases {
		for _, m := range modes {
			t.Run(string(m)+"/"+c.name, func(t *testing.T) {
				svc := l.web()
				svc.ExternalTrafficPolicy = c.eTP
				check(t, trace(t, l.loadMode(t, m, []rules.Service{svc}, epMap(svc, c.eps...)), c.flow), c.want)
			})
		}
	}
	// Health checks count ready local endpoints only, so LBs drain a node
	// whose pods are terminating.
	svc := l.web()
	svc.ExternalTrafficPolicy, svc.HealthCheckNodePort = rules.PolicyLocal, hcPort
	eps := epMap(svc, terminating(l.epLocal, nodeA, true), ready(l.epRemote, nodeB))
	for m, health := range map[mode][]rules.ServiceHealth{
		modeIPTables: render(l, []rules.Service{svc}, eps).Health,
		modeNFT:      renderNFT(l, []rules.Service{svc}, eps).Health,
	} {
		if len(health) != 1 || health[0].LocalEndpoints != 0 || health[0].HealthCheckNodePort != hcPort {
			t.Errorf("%s: health %+v", m, health)
		}
	}
}

func TestIPModeProxyIngressIsLeftAlone(t *testing.T) {
	for _, l := range []lab{lab4, lab6} {
		svc := l.web()
		svc.LoadBalancerIngress = []rules.Ingress{{IP: l.lbIP}, {IP: l.lbIP2, Mode: rules.IPModeProxy}}
		for _, eps := range [][]rules.Endpoint{{ready(l.epLocal, nodeA)}, nil} {
			mustNotContain(t, render(l, []rules.Service{svc}, epMap(svc, eps...)).Bytes(), l.lbIP2.String())
			mustNotContain(t, []byte(renderNFT(l, []rules.Service{svc}, epMap(svc, eps...)).Table.Text()), l.lbIP2.String())
			for _, m := range modes {
				t.Run(fmt.Sprintf("%s/%s/%d endpoints", m, l.family, len(eps)), func(t *testing.T) {
					tr := l.loadMode(t, m, []rules.Service{svc}, epMap(svc, eps...))
					for _, o := range []tracer.Origin{tracer.External, tracer.Pod} {
						src := l.client
						if o == tracer.Pod {
							src = l.podA
						}
						check(t, trace(t, tr, tracer.Flow{Origin: o, Src: src, Proto: "tcp", Dst: l.lbIP2, Port: svcPort}), want{verdict: tracer.Accept})
					}
				})
			}
		}
	}
}

func TestHeadlessAndOtherFamilyServicesGetNoRules(t *testing.T) {
	l := lab4
	headless := rules.Service{Namespace: "default", Name: "db", Protocol: rules.TCP, Port: 5432}
	v6only := lab6.web()
	v6only.Name = "web6"
	eps := map[rules.ServicePortName][]rules.Endpoint{
		headless.ID(): {ready(l.epLocal, nodeA)},
		v6only.ID():   {ready(lab6.epLocal, nodeA)},
	}
	rs := render(l, []rules.Service{headless, v6only}, eps)
	if len(rs.Problems) != 0 || rs.Stats.Services != 0 || len(rs.NATChains) != 0 {
		t.Fatalf("problems %v stats %+v chains %v", rs.Problems, rs.Stats, rs.NATChains)
	}
	mustNotContain(t, rs.Bytes(), "default/db", "default/web6", "HERALD-SVC-", "HERALD-SEP-")
	// ...and the rest of the ruleset is exactly that of no services.
	empty := render(l, nil, nil)
	if string(rs.Bytes()) != string(empty.Bytes()) {
		t.Errorf("headless services changed the ruleset")
	}

	nrs := renderNFT(l, []rules.Service{headless, v6only}, eps)
	if len(nrs.Problems) != 0 || nrs.Stats.Services != 0 || len(nrs.ServiceChains) != 0 {
		t.Fatalf("nftables: problems %v stats %+v chains %v", nrs.Problems, nrs.Stats, nrs.ServiceChains)
	}
	if nrs.Table.Text() != renderNFT(l, nil, nil).Table.Text() {
		t.Errorf("headless services changed the nftables table")
	}
}

func TestDualStackServiceSplitsByFamily(t *testing.T) {
	svc := lab4.web()
	svc.ClusterIPs = []netip.Addr{lab4.clusterIP, lab6.clusterIP}
	svc.LoadBalancerIngress = []rules.Ingress{{IP: lab4.lbIP}, {IP: lab6.lbIP}}
	svc.ExternalIPs = []netip.Addr{lab6.extIP, lab4.extIP}
	svc.LoadBalancerSourceRanges = []netip.Prefix{lab4.clientNet, lab6.clientNet}
	eps := epMap(svc, ready(lab4.epLocal, nodeA), ready(lab6.epLocal, nodeA), ready(lab6.epRemote, nodeB))
	node := rules.NodeConfig{Name: nodeA, IPs: []netip.Addr{lab4.nodeIP, lab6.nodeIP}, ClusterCIDRs: []netip.Prefix{lab4.podCIDR, lab6.podCIDR}}
	for _, m := range modes {
		for _, l := range []lab{lab4, lab6} {
			t.Run(fmt.Sprintf("%s/%s", m, l.family), func(t *testing.T) {
				tr := l.loadModeNode(t, m, node, []rules.Service{svc}, eps) // the tracers refuse mixed families
				wantEps := []string{ep(l.epLocal)}
				if l.family == rules.IPv6 {
					wantEps = append(wantEps, ep(l.epRemote))
				}
				check(t, trace(t, tr, l.flow(fromExternal, toLBIP)), want{verdict: tracer.Accept, endpoints: wantEps, masq: true})
				check(t, trace(t, tr, tracer.Flow{Origin: tracer.External, Src: l.client, Proto: "tcp", Dst: l.extIP, Port: svcPort}),
					want{verdict: tracer.Accept, endpoints: wantEps, masq: true})
			})
		}
	}
}

func TestIPv6Spelling(t *testing.T) {
	l := lab6
	svc := l.web()
	rs := render(l, []rules.Service{svc}, epMap(svc, ready(l.epLocal, nodeA)))
	mustContain(t, rs.NAT, "-j DNAT --to-destination [fd00:10:244:1::20]:8080", "! -d ::1/128 -j HERALD-NODEPORTS", "! -s fd00:10:244::/48 -j HERALD-MARK-MASQ")
	rs = render(l, []rules.Service{svc}, nil)
	mustContain(t, rs.Filter, "-j REJECT --reject-with icmp6-port-unreachable")
	mustNotContain(t, rs.Filter, "icmp-port-unreachable")

	text := []byte(renderNFT(l, []rules.Service{svc}, epMap(svc, ready(l.epLocal, nodeA))).Table.Text())
	mustContain(t, text, "dnat ip6 to numgen random mod 1 map @endpoints-tcp-0", "0 : fd00:10:244:1::20 . 8080", "ip6 daddr != ::1 ", "ip6 saddr != fd00:10:244::/48 jump mark-for-masquerade")
	mustNotContain(t, text, "ip daddr", "ip saddr")
	text = []byte(renderNFT(l, []rules.Service{svc}, nil).Table.Text())
	mustContain(t, text, "reject with icmpv6 port-unreachable")
	mustNotContain(t, text, "icmp port-unreachable")
}

func TestHairpin(t *testing.T) {
	for _, m := range modes {
		for _, l := range []lab{lab4, lab6} {
			t.Run(fmt.Sprintf("%s/%s", m, l.family), func(t *testing.T) {
				svc := l.web()
				// A pod reaching itself through its Service must be SNATed, or it
				// would drop the reply coming from its own address.
				f := l.flow(fromPod, toClusterIP)
				f.Src = l.epLocal
				tr := l.loadMode(t, m, []rules.Service{svc}, epMap(svc, ready(l.epLocal, nodeA)))
				check(t, trace(t, tr, f), want{verdict: tracer.Accept, endpoints: []string{ep(l.epLocal)}, masq: true})

				// With two endpoints only the path back to itself is SNATed.
				tr = l.loadMode(t, m, []rules.Service{svc}, epMap(svc, ready(l.epLocal, nodeA), ready(l.epRemote, nodeB)))
				res := trace(t, tr, f)
				for _, o := range res.Outcomes {
					if self := o.Dst.Addr() == l.epLocal; o.Masquerade != self {
						t.Errorf("%v: masquerade=%v for %s", f, o.Masquerade, o.Dst)
					}
				}
			})
		}
	}
}

// TestHairpinOnlyThroughTheService: a hostNetwork endpoint shares the
// node's address, so the node reaching its own address on another port
// looks like a hairpin by its addresses alone. Only traffic that went
// through the Service (DNATed) is SNATed; found by FuzzModesAgree, where
// the nftables mode masqueraded such a packet and iptables did not.
func TestHairpinOnlyThroughTheService(t *testing.T) {
	for _, m := range modes {
		for _, l := range []lab{lab4, lab6} {
			t.Run(fmt.Sprintf("%s/%s", m, l.family), func(t *testing.T) {
				svc := l.web()
				tr := l.loadMode(t, m, []rules.Service{svc}, epMap(svc, ready(l.nodeIP, nodeA)))
				direct := tracer.Flow{Origin: tracer.Node, Src: l.nodeIP, Proto: "tcp", Dst: l.nodeIP, Port: 53, DstLocal: true}
				check(t, trace(t, tr, direct), want{verdict: tracer.Accept})
				f := l.flow(fromNode, toClusterIP)
				f.Src = l.nodeIP
				check(t, trace(t, tr, f), want{verdict: tracer.Accept, endpoints: []string{ep(l.nodeIP)}, masq: true})
			})
		}
	}
}

func TestMasqueradeAllAndMissingClusterCIDR(t *testing.T) {
	l := lab4
	svc := l.web()
	svc.ExternalTrafficPolicy = rules.PolicyLocal
	eps := epMap(svc, ready(l.epLocal, nodeA), ready(l.epRemote, nodeB))

	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			node := l.node()
			node.MasqueradeAll = true
			tr := l.loadModeNode(t, m, node, []rules.Service{svc}, eps)
			check(t, trace(t, tr, l.flow(fromPod, toClusterIP)), want{verdict: tracer.Accept, endpoints: []string{ep(l.epLocal), ep(l.epRemote)}, masq: true})

			// Without a cluster CIDR there is no way to tell pods from clients:
			// like kube-proxy, no ClusterIP SNAT and no pod short-circuit.
			node = l.node()
			node.ClusterCIDRs = nil
			tr = l.loadModeNode(t, m, node, []rules.Service{svc}, eps)
			check(t, trace(t, tr, l.flow(fromExternal, toClusterIP)), want{verdict: tracer.Accept, endpoints: []string{ep(l.epLocal), ep(l.epRemote)}})
			check(t, trace(t, tr, l.flow(fromPod, toLBIP)), want{verdict: tracer.Accept, endpoints: []string{ep(l.epLocal)}})
			check(t, trace(t, tr, l.flow(fromNode, toLBIP)), want{verdict: tracer.Accept, endpoints: []string{ep(l.epLocal), ep(l.epRemote)}, masq: true})
		})
	}
}

func TestProtocolsAndMultiplePorts(t *testing.T) {
	l := lab4
	dns := rules.Service{Namespace: "kube-system", Name: "dns", PortName: "dns", Protocol: rules.UDP, Port: 53, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.53")}}
	dnsTCP := dns
	dnsTCP.PortName, dnsTCP.Protocol = "dns-tcp", rules.TCP
	sig := rules.Service{Namespace: "tel", Name: "sig", Protocol: rules.SCTP, Port: 3868, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.68")}, NodePort: 30868}
	udp := netip.MustParseAddr("10.244.2.53")
	tcp := netip.MustParseAddr("10.244.2.54")
	eps := map[rules.ServicePortName][]rules.Endpoint{
		dns.ID():    {{IP: udp, Port: 5353, Ready: true, Serving: true, NodeName: nodeB}},
		dnsTCP.ID(): {{IP: tcp, Port: 5354, Ready: true, Serving: true, NodeName: nodeB}},
		sig.ID():    {{IP: tcp, Port: 3868, Ready: true, Serving: true, NodeName: nodeB}},
	}
	svcs := []rules.Service{sig, dnsTCP, dns}
	rs := render(l, svcs, eps)
	mustContain(t, rs.NAT, "-m udp -p udp -d 10.96.0.53 --dport 53", "-m sctp -p sctp --dport 30868", `"kube-system/dns:dns cluster IP"`, `"tel/sig cluster IP"`)
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			tr := l.loadMode(t, m, svcs, eps)
			for _, c := range []struct {
				proto string
				dst   string
				port  uint16
				want  []string
			}{
				{"udp", "10.96.0.53", 53, []string{"10.244.2.53:5353"}},
				{"tcp", "10.96.0.53", 53, []string{"10.244.2.54:5354"}},
				{"sctp", "10.96.0.68", 3868, []string{"10.244.2.54:3868"}},
				{"udp", "10.96.0.68", 3868, nil}, // wrong protocol: not a service
			} {
				f := tracer.Flow{Origin: tracer.Pod, Src: l.podA, Proto: c.proto, Dst: netip.MustParseAddr(c.dst), Port: c.port}
				check(t, trace(t, tr, f), want{verdict: tracer.Accept, endpoints: c.want})
			}
		})
	}
}

func TestHealthCheckNodePort(t *testing.T) {
	l := lab4
	svc := l.web()
	svc.ExternalTrafficPolicy, svc.HealthCheckNodePort = rules.PolicyLocal, hcPort
	eps := epMap(svc, ready(l.epLocal, nodeA), ready(l.epRemote, nodeB), ready(l.epRemote2, nodeB))
	want1 := []rules.ServiceHealth{{Service: svc.ID(), HealthCheckNodePort: hcPort, LocalEndpoints: 1}}
	if rs := render(l, []rules.Service{svc}, eps); !slices.Equal(rs.Health, want1) {
		t.Errorf("health %+v, want %+v", rs.Health, want1)
	}
	if rs := renderNFT(l, []rules.Service{svc}, eps); !slices.Equal(rs.Health, want1) {
		t.Errorf("nftables health %+v, want %+v", rs.Health, want1)
	}
	hc := tracer.Flow{Origin: tracer.External, Src: l.client, Proto: "tcp", Dst: l.nodeIP, Port: hcPort, DstLocal: true}
	// On a host whose INPUT policy is DROP the health port is still open,
	// with or without local endpoints.
	for _, eps := range [][]rules.Endpoint{{ready(l.epLocal, nodeA)}, nil} {
		tr := l.load(t, render(l, []rules.Service{svc}, epMap(svc, eps...)), "*filter\n:INPUT DROP [0:0]\nCOMMIT\n")
		res := trace(t, tr, hc)
		check(t, res, want{verdict: tracer.Accept})
		if !res.Outcomes[0].Local {
			t.Errorf("health check not delivered locally: %v", res)
		}
		other := hc
		other.Port++
		check(t, trace(t, tr, other), want{verdict: tracer.Drop})
	}
	// nftables: herald's table cannot override another table's drop, so
	// only check that herald's filter-input accepts the port itself.
	acceptedByHC := func(res tracer.Result) bool {
		for _, s := range res.Outcomes[0].Trail {
			if strings.HasPrefix(s, rules.NFTChainFilterInput+"#") && strings.Contains(s, "@"+rules.NFTSetHealthCheckPorts+" accept") {
				return true
			}
		}
		return false
	}
	for _, eps := range [][]rules.Endpoint{{ready(l.epLocal, nodeA)}, nil} {
		rs := renderNFT(l, []rules.Service{svc}, epMap(svc, eps...))
		if s := rs.Table.Set(rules.NFTSetHealthCheckPorts); s == nil || !slices.Contains(s.Elements, nft.Element{Key: nft.Key{Port: hcPort}}) {
			t.Errorf("nftables: %s lacks %d: %+v", rules.NFTSetHealthCheckPorts, hcPort, s)
		}
		tr := l.loadNFT(t, rs)
		res := trace(t, tr, hc)
		check(t, res, want{verdict: tracer.Accept})
		if !res.Outcomes[0].Local || !acceptedByHC(res) {
			t.Errorf("nftables: health check not accepted locally by the health-check rule\n%s", res.Explain())
		}
		other := hc
		other.Port++
		if res := trace(t, tr, other); acceptedByHC(res) {
			t.Errorf("nftables: port %d accepted as a health check\n%s", other.Port, res.Explain())
		}
	}
}

func TestDispatchChainReadsLikeTheDocs(t *testing.T) {
	l := lab4
	svc := l.web()
	svc.Namespace, svc.Name = "default", "nginx"
	svc2 := l.web()
	svc2.Name, svc2.ClusterIPs, svc2.NodePort, svc2.LoadBalancerIngress = "aaa", []netip.Addr{netip.MustParseAddr("10.96.0.11")}, 30081, nil
	rs := render(l, []rules.Service{svc, svc2}, map[rules.ServicePortName][]rules.Endpoint{
		svc.ID():  {ready(l.epLocal, nodeA), ready(l.epRemote, nodeB)},
		svc2.ID(): {ready(l.epLocal, nodeA)},
	})
	tr := l.load(t, rs)
	comments := tr.Comments("nat", rules.ChainServices)
	want := []string{
		"default/aaa:http cluster IP",
		"default/nginx:http cluster IP",
		"default/nginx:http loadbalancer IP",
		"herald service nodeports; NOTE: this must be the last rule in this chain",
	}
	if !slices.Equal(comments, want) {
		t.Errorf("HERALD-SERVICES comments\n got %q\nwant %q", comments, want)
	}
	last := tr.Rules("nat", rules.ChainServices)[len(comments)-1]
	if !strings.Contains(last, "-m addrtype --dst-type LOCAL") || !strings.HasSuffix(last, "-j HERALD-NODEPORTS") {
		t.Errorf("last rule %q", last)
	}
	for _, c := range tr.Chains("nat") {
		if len(c) > 28 {
			t.Errorf("chain %s longer than 28 characters", c)
		}
	}
	svcChain := rules.PrefixService + rules.ChainSuffix(svc.ID(), rules.TCP)
	got := tr.Comments("nat", svcChain)
	if !slices.Equal(got, []string{"default/nginx:http cluster IP", "default/nginx:http -> 10.244.1.20:8080", "default/nginx:http -> 10.244.2.20:8080"}) {
		t.Errorf("%s comments %q", svcChain, got)
	}
	// Chain names are stable: a re-render with endpoints in another order
	// produces the same text.
	again := render(l, []rules.Service{svc2, svc}, map[rules.ServicePortName][]rules.Endpoint{
		svc.ID():  {ready(l.epRemote, nodeB), ready(l.epLocal, nodeA), ready(l.epLocal, nodeA)},
		svc2.ID(): {ready(l.epLocal, nodeA)},
	})
	if string(again.Bytes()) != string(rs.Bytes()) {
		t.Errorf("render depends on input order")
	}
	nftA := renderNFT(l, []rules.Service{svc, svc2}, map[rules.ServicePortName][]rules.Endpoint{
		svc.ID():  {ready(l.epLocal, nodeA), ready(l.epRemote, nodeB)},
		svc2.ID(): {ready(l.epLocal, nodeA)},
	})
	nftB := renderNFT(l, []rules.Service{svc2, svc}, map[rules.ServicePortName][]rules.Endpoint{
		svc.ID():  {ready(l.epRemote, nodeB), ready(l.epLocal, nodeA), ready(l.epLocal, nodeA)},
		svc2.ID(): {ready(l.epLocal, nodeA)},
	})
	if nftA.Table.Text() != nftB.Table.Text() {
		t.Errorf("nftables render depends on input order")
	}
}

func TestMasqueradeMarkAndOptions(t *testing.T) {
	l := lab4
	node := l.node()
	node.MasqueradeMark, node.NoRandomFully, node.ConntrackLiberal = 0x10000, true, true
	svc := l.web()
	eps := epMap(svc, ready(l.epRemote, nodeB))
	rs := rules.Render(l.family, []rules.Service{svc}, eps, node)
	mustContain(t, rs.NAT, "-j MARK --or-mark 0x10000", "! --mark 0x10000/0x10000 -j RETURN", "-j MASQUERADE\n")
	mustNotContain(t, rs.NAT, "0x4000", "--random-fully")
	mustNotContain(t, rs.Filter, "INVALID")
	text := []byte(rules.RenderNFT(l.family, []rules.Service{svc}, eps, node).Table.Text())
	mustContain(t, text, "meta mark set meta mark | 0x00010000", "meta mark & 0x00010000 == 0x00000000 return")
	mustNotContain(t, text, "0x00004000", "fully-random", "ct state invalid")
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			tr := l.loadModeNode(t, m, node, []rules.Service{svc}, eps)
			check(t, trace(t, tr, l.flow(fromExternal, toNodePort)), want{verdict: tracer.Accept, endpoints: []string{ep(l.epRemote)}, masq: true})
		})
	}
}
