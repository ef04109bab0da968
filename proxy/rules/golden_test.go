package rules_test

import (
	"bytes"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/herald-lb/herald/proxy/rules"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current renderer")

// goldenInput is the input of one golden case.
type goldenInput struct {
	family rules.Family
	svcs   []rules.Service
	eps    map[rules.ServicePortName][]rules.Endpoint
	node   rules.NodeConfig
}

// goldenInputs are small rulesets whose exact text is reviewed by hand,
// in both modes.
func goldenInputs() map[string]goldenInput {
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

	// --nodeport-addresses: NodePorts on two of the node's addresses
	// only, one Service served and one without endpoints.
	npa := l.web()
	npa.Name = "npa"
	npaEmpty := l.web()
	npaEmpty.Name, npaEmpty.NodePort, npaEmpty.LoadBalancerIngress = "npa-empty", nodePort+1, nil
	npaNode := l.node()
	npaNode.NodePortAddresses = map[rules.Family][]netip.Addr{rules.IPv4: {l.nodeIP, l.nodeIP2}}

	// Topology hints, node-a in zone z1: the cluster-wide chain balances
	// over the endpoint hinted for z1 only; the local chain of
	// externalTrafficPolicy Local keeps node-a's own, hinted for z2.
	zonal := l.web()
	zonal.Name, zonal.ExternalTrafficPolicy = "zonal", rules.PolicyLocal
	zonalNode := l.node()
	zonalNode.Zone = "z1"
	zonalEps := epMap(zonal, hint(ready(l.epLocal, nodeA), []string{"z2"}, nil),
		hint(ready(l.epRemote, nodeB), []string{"z1"}, nil), hint(ready(l.epRemote2, nodeB), []string{"z2"}, nil))

	// --detect-local-mode BridgeInterface and InterfaceNamePrefix: pods
	// told by the interface they come in on, not by a CIDR.
	bridgeNode, prefixNode := l.node(), l6.node()
	bridgeNode.PodInterface = rules.Interface{Name: "cni0"}
	prefixNode.PodInterface = rules.Interface{Name: "veth", Prefix: true}
	lb6 := l6.web()
	lb6.ExternalTrafficPolicy, lb6.HealthCheckNodePort = rules.PolicyLocal, hcPort

	return map[string]goldenInput{
		"detect-bridge-v4":      {rules.IPv4, []rules.Service{lb}, epMap(lb, ready(l.epLocal, nodeA)), bridgeNode},
		"detect-prefix-v6":      {rules.IPv6, []rules.Service{lb6}, epMap(lb6, ready(l6.epLocal, nodeA)), prefixNode},
		"topology-v4":           {rules.IPv4, []rules.Service{zonal}, zonalEps, zonalNode},
		"nodeport-addresses-v4": {rules.IPv4, []rules.Service{npa, npaEmpty}, epMap(npa, ready(l.epRemote, nodeB)), npaNode},
		"clusterip-v4":          {rules.IPv4, []rules.Service{nginx}, epMap(nginx, ready(l.epLocal, nodeA), ready(l.epRemote, nodeB)), l.node()},
		"lb-local-v4":           {rules.IPv4, []rules.Service{lb}, epMap(lb, ready(l.epLocal, nodeA), ready(l.epRemote, nodeB)), l.node()},
		"nodeport-v6": {rules.IPv6, []rules.Service{np6, empty6}, map[rules.ServicePortName][]rules.Endpoint{
			np6.ID(): {ready(l6.epRemote, nodeB)}}, l6.node()},
	}
}

// goldenCases are goldenInputs rendered for iptables.
func goldenCases() map[string]rules.Ruleset {
	out := map[string]rules.Ruleset{}
	for name, c := range goldenInputs() {
		out[name] = rules.Render(c.family, c.svcs, c.eps, c.node)
	}
	return out
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

// TestRulesetsInIPTables loads rendered rulesets with the real
// iptables-restore, with --noflush as the proxy runs it, inside a
// throwaway network namespace: the text the golden files review by eye
// must also be what the kernel takes. Everything is applied for real
// (iptables-nft's --test does not even check that a chain exists), the
// full sync, the jumps into it and a partial sync on top in the proxy's
// order.
func TestRulesetsInIPTables(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	for _, tool := range []string{"ip", "iptables-restore", "ip6tables-restore"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	ns := fmt.Sprintf("hlrules-%d", os.Getpid()%100000)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", ns, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v\n%s", ns, err, out)
		}
	})
	restore := func(name string, f rules.Family, text []byte) {
		t.Helper()
		bin := "iptables-restore"
		if f == rules.IPv6 {
			bin = "ip6tables-restore"
		}
		args := []string{"netns", "exec", ns, bin, "-w", "5", "--noflush"}
		cmd := exec.Command("ip", args...)
		cmd.Stdin = bytes.NewReader(text)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: %s: %v\n%s", name, strings.Join(args[3:], " "), err, out)
		}
	}
	// First, in the empty namespace, so the partial sync can only lean on
	// chains the full sync made.
	before, after, changed := states(lab4)
	full1 := rules.Render(rules.IPv4, before.svcs, before.eps, lab4.node())
	restore("full sync", rules.IPv4, full1.Bytes())
	restore("jumps", rules.IPv4, []byte(rules.JumpsText()))
	p := rules.RenderWith(rules.IPv4, after.svcs, after.eps, lab4.node(), rules.Options{Changed: changed, Existing: full1.NATChains})
	restore("partial sync", rules.IPv4, p.Bytes())
	restore("next full sync", rules.IPv4, rules.Render(rules.IPv4, after.svcs, after.eps, lab4.node()).Bytes())

	for name, rs := range goldenCases() {
		f := rules.IPv4
		if strings.HasSuffix(name, "-v6") {
			f = rules.IPv6
		}
		restore(name, f, rs.Bytes())
	}
	svcs, eps := benchState(2000, 2)
	restore("2,000 Services", rules.IPv4, rules.Render(rules.IPv4, svcs, eps, lab4.node()).Bytes())
}
