package rules_test

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/herald-lb/herald/proxy/rules"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current renderer")

// goldenCases are small rulesets whose exact text is reviewed by hand.
func goldenCases() map[string]rules.Ruleset {
	l := lab4
	nginx := rules.Service{Namespace: "default", Name: "nginx", PortName: "http", Protocol: rules.TCP, Port: 80,
		ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.10")}}

	lb := l.web()
	lb.Name = "loadbalancer"
	lb.ExternalTrafficPolicy, lb.HealthCheckNodePort = rules.PolicyLocal, hcPort
	lb.LoadBalancerSourceRanges = []netip.Prefix{l.clientNet}
	lb.SessionAffinity, lb.AffinityTimeout = rules.AffinityClientIP, 600

	l6 := lab6
	np6 := l6.web()
	np6.Name, np6.LoadBalancerIngress = "nodeport", nil
	empty6 := l6.web()
	empty6.Name, empty6.PortName, empty6.Protocol, empty6.NodePort, empty6.LoadBalancerIngress = "empty", "", rules.UDP, 0, nil
	empty6.ClusterIPs = []netip.Addr{netip.MustParseAddr("fd00:10:96::53")}

	return map[string]rules.Ruleset{
		"clusterip-v4": rules.Render(rules.IPv4, []rules.Service{nginx}, epMap(nginx, ready(l.epLocal, nodeA), ready(l.epRemote, nodeB)), l.node()),
		"lb-local-v4":  rules.Render(rules.IPv4, []rules.Service{lb}, epMap(lb, ready(l.epLocal, nodeA), ready(l.epRemote, nodeB)), l.node()),
		"nodeport-v6": rules.Render(rules.IPv6, []rules.Service{np6, empty6}, map[rules.ServicePortName][]rules.Endpoint{
			np6.ID(): {ready(l6.epRemote, nodeB)}}, l6.node()),
	}
}

func TestGolden(t *testing.T) {
	for name, rs := range goldenCases() {
		t.Run(name, func(t *testing.T) {
			if len(rs.Problems) != 0 {
				t.Fatalf("problems: %v", rs.Problems)
			}
			path := filepath.Join("testdata", name+".golden")
			got := rs.Bytes()
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if string(got) != string(want) {
				t.Errorf("%s differs from the golden file\n--- got\n%s\n--- want\n%s", name, got, want)
			}
		})
	}
}

// TestWriteSamples writes rulesets for checking with the real
// iptables-restore --test (inside a scratch network namespace) when
// HERALD_RULES_SAMPLES names a directory.
func TestWriteSamples(t *testing.T) {
	dir := os.Getenv("HERALD_RULES_SAMPLES")
	if dir == "" {
		t.Skip("HERALD_RULES_SAMPLES not set")
	}
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, rs := range goldenCases() {
		write(name+".rules", rs.Bytes())
	}
	write("jumps.rules", []byte(rules.JumpsText()))
	before, after, changed := states(lab4)
	full1 := rules.Render(rules.IPv4, before.svcs, before.eps, lab4.node())
	write("full1.rules", full1.Bytes())
	write("full2.rules", rules.Render(rules.IPv4, after.svcs, after.eps, lab4.node()).Bytes())
	p := rules.RenderWith(rules.IPv4, after.svcs, after.eps, lab4.node(), rules.Options{Changed: changed, Existing: full1.NATChains})
	write("partial.rules", p.Bytes())
	svcs, eps := benchState(2000, 2)
	write("big-v4.rules", rules.Render(rules.IPv4, svcs, eps, lab4.node()).Bytes())
}
