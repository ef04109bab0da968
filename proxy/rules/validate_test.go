package rules_test

import (
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/herald-lb/herald/proxy/internal/tracer"
	"github.com/herald-lb/herald/proxy/rules"
)

func TestBadServicesAreReportedAndLeaveOthersAlone(t *testing.T) {
	l := lab4
	good := l.web()
	goodEps := epMap(good, ready(l.epLocal, nodeA), ready(l.epRemote, nodeB))
	baseline := render(l, []rules.Service{good}, goodEps)

	cases := []struct {
		name    string
		mut     func(*rules.Service)
		field   string
		skipped bool
	}{
		{"quote in name", func(s *rules.Service) { s.Name = `x" -j ACCEPT` }, "name", true},
		{"space in namespace", func(s *rules.Service) { s.Namespace = "a b" }, "namespace", true},
		{"newline in port name", func(s *rules.Service) { s.PortName = "p\n-A X" }, "port.name", true},
		{"upper case", func(s *rules.Service) { s.Name = "Web" }, "name", true},
		{"empty name", func(s *rules.Service) { s.Name = "" }, "name", true},
		{"unknown protocol", func(s *rules.Service) { s.Protocol = "ICMP" }, "port.protocol", true},
		{"port 0", func(s *rules.Service) { s.Port = 0 }, "port.port", true},
		{"port too big", func(s *rules.Service) { s.Port = 70000 }, "port.port", true},
		{"negative node port", func(s *rules.Service) { s.NodePort = -1 }, "port.nodePort", true},
		{"two v4 cluster IPs", func(s *rules.Service) { s.ClusterIPs = append(s.ClusterIPs, netip.MustParseAddr("10.96.0.99")) }, "clusterIPs[1]", true},
		{"bad policy", func(s *rules.Service) { s.ExternalTrafficPolicy = 7 }, "externalTrafficPolicy", true},
		{"invalid external IP", func(s *rules.Service) { s.ExternalIPs = []netip.Addr{{}} }, "externalIPs[0]", false},
		{"loopback external IP", func(s *rules.Service) { s.ExternalIPs = []netip.Addr{netip.MustParseAddr("127.0.0.1")} }, "externalIPs[0]", false},
		{"invalid ingress IP", func(s *rules.Service) { s.LoadBalancerIngress = []rules.Ingress{{}} }, "loadBalancer.ingress[0].ip", false},
		{"unknown ipMode", func(s *rules.Service) { s.LoadBalancerIngress[0].Mode = 5 }, "loadBalancer.ingress[0].ipMode", false},
		{"invalid source range", func(s *rules.Service) { s.LoadBalancerSourceRanges = []netip.Prefix{{}} }, "loadBalancerSourceRanges[0]", false},
		{"affinity timeout", func(s *rules.Service) { s.SessionAffinity, s.AffinityTimeout = rules.AffinityClientIP, 100000 }, "sessionAffinityConfig.clientIP.timeoutSeconds", false},
		{"health port", func(s *rules.Service) { s.HealthCheckNodePort = 99999 }, "healthCheckNodePort", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bad := l.web()
			bad.Name = "bad"
			bad.ClusterIPs = []netip.Addr{netip.MustParseAddr("10.96.0.77")}
			bad.NodePort = 30099
			bad.LoadBalancerIngress = []rules.Ingress{{IP: l.lbIP2}}
			c.mut(&bad)
			eps := epMap(good, ready(l.epLocal, nodeA), ready(l.epRemote, nodeB))
			eps[bad.ID()] = []rules.Endpoint{ready(l.epRemote2, nodeB)}
			rs := render(l, []rules.Service{bad, good}, eps)
			var hit *rules.Problem
			for i, p := range rs.Problems {
				if p.Field == c.field {
					hit = &rs.Problems[i]
				}
			}
			if hit == nil {
				t.Fatalf("no problem for field %s; got %v", c.field, rs.Problems)
			}
			if hit.Skipped != c.skipped {
				t.Errorf("skipped=%v, want %v: %v", hit.Skipped, c.skipped, hit)
			}
			if msg := hit.Error(); !strings.Contains(msg, c.field) || !strings.Contains(msg, "service ") {
				t.Errorf("message %q does not name the service and field", msg)
			}
			tr := l.load(t, rs) // always valid restore text
			if c.skipped {
				if string(rs.Bytes()) != string(baseline.Bytes()) {
					t.Errorf("a skipped service changed the ruleset")
				}
				return
			}
			// Partly bad services keep working for their good parts, and
			// the good Service is untouched.
			check(t, trace(t, tr, l.flow(fromPod, toClusterIP)), want{verdict: tracer.Accept, endpoints: []string{ep(l.epLocal), ep(l.epRemote)}})
			badFlow := l.flow(fromPod, toClusterIP)
			badFlow.Dst = netip.MustParseAddr("10.96.0.77")
			check(t, trace(t, tr, badFlow), want{verdict: tracer.Accept, endpoints: []string{ep(l.epRemote2)}})
		})
	}
}

func TestBadEndpointsAndDuplicates(t *testing.T) {
	l := lab4
	svc := l.web()
	rs := render(l, []rules.Service{svc, svc}, epMap(svc,
		rules.Endpoint{IP: netip.Addr{}, Port: 1, Ready: true},
		rules.Endpoint{IP: l.epRemote, Port: 0, Ready: true},
		rules.Endpoint{IP: netip.MustParseAddr("0.0.0.0"), Port: 80, Ready: true},
		ready(l.epLocal, nodeA),
		ready(lab6.epLocal, nodeA), // other family: silently ignored
	))
	fields := map[string]bool{}
	for _, p := range rs.Problems {
		fields[p.Field] = true
	}
	for _, f := range []string{"endpoints[0]", "endpoints[1].port", "endpoints[2]", "port.name"} {
		if !fields[f] {
			t.Errorf("no problem for %s: %v", f, rs.Problems)
		}
	}
	check(t, trace(t, l.load(t, rs), l.flow(fromPod, toClusterIP)), want{verdict: tracer.Accept, endpoints: []string{ep(l.epLocal)}})
}

// TestZonedAddressesAreRefused: a zone (fe80::1%eth0) makes
// iptables-restore refuse the whole input, so every address field
// leaves such an address out and says so, and the rest renders.
// FuzzRenderIPTables found it (testdata/fuzz: zoned-cluster-ip).
func TestZonedAddressesAreRefused(t *testing.T) {
	l := lab6
	zoned := netip.MustParseAddr("fe80::1%eth0")
	svc := l.web()
	svc.ExternalIPs = []netip.Addr{zoned}
	svc.LoadBalancerIngress = append(svc.LoadBalancerIngress, rules.Ingress{IP: zoned})
	other := l.web()
	other.Name, other.ClusterIPs = "other", []netip.Addr{zoned}
	node := l.restricted(l.nodeIP, zoned)
	node.IPs = append(node.IPs, zoned)
	eps := epMap(svc, ready(l.epLocal, nodeA), rules.Endpoint{IP: zoned, Port: tgtPort, Ready: true, Serving: true, NodeName: nodeA})
	rs := rules.Render(l.family, []rules.Service{svc, other}, eps, node)
	got := map[string]string{}
	for _, p := range rs.Problems {
		if !strings.Contains(p.Message, "fe80::1%eth0") {
			continue
		}
		got[p.Field] = ""
		if p.Service != (rules.ServicePortName{}) {
			got[p.Field] = p.Service.String()
		}
	}
	wantFields := map[string]string{
		"externalIPs[0]": "default/web:http", "loadBalancer.ingress[1].ip": "default/web:http", "endpoints[1]": "default/web:http",
		"clusterIPs[0]": "default/other:http", "ips[1]": "", "nodePortAddresses[IPv6][1]": "",
	}
	for f, s := range wantFields {
		if g, ok := got[f]; !ok || g != s {
			t.Errorf("no zone problem for %s of %q: %v", f, s, rs.Problems)
		}
	}
	mustNotContain(t, rs.Bytes(), "%eth0")
	if rs.Stats.Services != 1 {
		t.Errorf("%d service ports rendered, want web's", rs.Stats.Services)
	}
	check(t, trace(t, l.load(t, rs), l.flow(fromPod, toClusterIP)), want{verdict: tracer.Accept, endpoints: []string{ep(l.epLocal)}})
}

func TestBadNodeConfig(t *testing.T) {
	l := lab4
	node := rules.NodeConfig{
		IPs:            []netip.Addr{{}},
		ClusterCIDRs:   []netip.Prefix{l.podCIDR, netip.MustParsePrefix("10.245.0.0/16"), {}},
		MasqueradeMark: 0x3,
	}
	svc := l.web()
	rs := rules.Render(l.family, []rules.Service{svc}, epMap(svc, ready(l.epLocal, nodeA)), node)
	fields := map[string]bool{}
	for _, p := range rs.Problems {
		fields[p.Field] = true
		if !strings.HasPrefix(p.Error(), "node config: ") {
			t.Errorf("node problem reads %q", p.Error())
		}
	}
	for _, f := range []string{"name", "ips[0]", "clusterCIDRs[1]", "clusterCIDRs[2]", "masqueradeMark"} {
		if !fields[f] {
			t.Errorf("no problem for %s: %v", f, rs.Problems)
		}
	}
	mustContain(t, rs.NAT, "--or-mark 0x4000", "! -s 10.244.0.0/16")
	// Without a node name nothing is local: eTP=Local drops external traffic.
	svc.ExternalTrafficPolicy = rules.PolicyLocal
	rs = rules.Render(l.family, []rules.Service{svc}, epMap(svc, ready(l.epLocal, nodeA)), node)
	check(t, trace(t, l.load(t, rs), l.flow(fromExternal, toNodePort)), want{verdict: tracer.Drop})

	if rs := rules.Render(rules.Family(5), nil, nil, l.node()); len(rs.Problems) != 1 || len(rs.Bytes()) != 0 {
		t.Errorf("unknown family: %+v", rs.Problems)
	}
}

// Random, mostly broken input must never panic or produce text that
// iptables-restore would refuse.
func TestRandomInputNeverBreaksTheRuleset(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	// Each field is usually valid, so that many services render next to
	// the broken ones.
	names := []string{"a", "web", "x-y", "db", "api", "ok.name", "", "A", "a b", `q"`, "-x", "x.", strings.Repeat("n", 70)}
	protos := []rules.Protocol{rules.TCP, rules.UDP, rules.SCTP, "", "tcp"}
	addrs := []netip.Addr{netip.MustParseAddr("10.96.0.1"), netip.MustParseAddr("10.96.0.2"), netip.MustParseAddr("fd00::1"),
		netip.MustParseAddr("::ffff:10.96.0.3"), {}, netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("224.0.0.1")}
	prefixes := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("10.1.2.3/8"), netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("::ffff:10.0.0.0/104"), {}}
	// pick mostly returns one of the first few (valid) choices.
	pick := func(n int) int {
		if n > 3 && rng.IntN(8) != 0 {
			return rng.IntN(3)
		}
		return rng.IntN(n)
	}
	rendered := 0
	for round := range 200 {
		var svcs []rules.Service
		eps := map[rules.ServicePortName][]rules.Endpoint{}
		for range 1 + pick(8) {
			s := rules.Service{
				Namespace: names[pick(len(names))], Name: names[pick(len(names))], PortName: names[pick(len(names))],
				Protocol: protos[pick(len(protos))], Port: []int{80, 443, 0, 70000, -1, 8080}[pick(6)], NodePort: pick(3) * (30000 + pick(2000)),
				ClusterIPs:               []netip.Addr{addrs[pick(len(addrs))], addrs[2+pick(len(addrs)-2)]},
				ExternalIPs:              []netip.Addr{addrs[pick(len(addrs))]},
				LoadBalancerIngress:      []rules.Ingress{{IP: addrs[pick(len(addrs))], Mode: rules.IPMode(pick(3))}},
				LoadBalancerSourceRanges: []netip.Prefix{prefixes[pick(len(prefixes))]},
				ExternalTrafficPolicy:    rules.TrafficPolicy(pick(3)), InternalTrafficPolicy: rules.TrafficPolicy(pick(3)),
				HealthCheckNodePort: pick(70000) - 5, SessionAffinity: rules.Affinity(pick(3)), AffinityTimeout: pick(90000) - 5,
			}
			svcs = append(svcs, s)
			for range pick(4) {
				eps[s.ID()] = append(eps[s.ID()], rules.Endpoint{IP: addrs[pick(len(addrs))], Port: pick(70000) - 5,
					Ready: pick(2) == 0, Serving: pick(2) == 0, Terminating: pick(2) == 0, NodeName: []string{nodeA, nodeB, ""}[pick(3)]})
			}
		}
		node := rules.NodeConfig{Name: []string{nodeA, ""}[pick(2)], IPs: []netip.Addr{addrs[pick(len(addrs))]},
			ClusterCIDRs: []netip.Prefix{prefixes[pick(len(prefixes))], prefixes[pick(len(prefixes))]}, MasqueradeMark: uint32(pick(3)) << 14}
		for _, f := range []rules.Family{rules.IPv4, rules.IPv6} {
			rs := rules.Render(f, svcs, eps, node)
			if _, err := tracer.Parse(string(rs.Bytes()), rules.JumpsText()); err != nil {
				t.Fatalf("round %d %s: %v\n%s", round, f, err, rs.Bytes())
			}
			for _, p := range rs.Problems {
				if p.Message == "" {
					t.Fatalf("problem without message: %+v", p)
				}
			}
			rendered += rs.Stats.Services
		}
	}
	if rendered < 100 {
		t.Fatalf("only %d service ports rendered; the generator is too hostile to test anything", rendered)
	}
}
