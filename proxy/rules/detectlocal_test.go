package rules_test

import (
	"strings"
	"testing"

	"github.com/herald-lb/herald/proxy/rules"
)

// TestPodInterfaceReplacesCIDR: with a pod interface, the cluster CIDR
// tells nothing (kube-proxy ignores --cluster-cidr in the interface
// modes), in both renderers; a name the rules cannot hold is reported and
// leaves no detector, rather than a wrong one.
func TestPodInterfaceReplacesCIDR(t *testing.T) {
	lb := lab4.web()
	lb.ExternalTrafficPolicy, lb.HealthCheckNodePort = rules.PolicyLocal, hcPort
	eps := epMap(lb, ready(lab4.epLocal, nodeA))
	for _, tc := range []struct {
		iface         rules.Interface
		ipt, nft      []string
		problem       string
		noneOfTheCIDR bool
	}{
		{rules.Interface{Name: "cni0"}, []string{"! -i cni0 -j HERALD-MARK-MASQ", "-i cni0 -j HERALD-SVC-"}, []string{`iifname != "cni0" jump mark-for-masquerade`, `iifname "cni0" goto svc-`}, "", true},
		{rules.Interface{Name: "cali", Prefix: true}, []string{"! -i cali+ -j HERALD-MARK-MASQ", "-i cali+ -j HERALD-SVC-"}, []string{`iifname != "cali*"`, `iifname "cali*" goto svc-`}, "", true},
		{rules.Interface{Name: "a-very-long-bridge"}, nil, nil, `podInterface: "a-very-long-bridge" is longer than an interface name`, true},
		{rules.Interface{Name: "veth*", Prefix: true}, nil, nil, `podInterface: "veth*": '*' cannot be in an interface name`, true},
		{rules.Interface{}, []string{"! -s 10.244.0.0/16 -j HERALD-MARK-MASQ", "-s 10.244.0.0/16 -j HERALD-SVC-"}, []string{"ip saddr != 10.244.0.0/16"}, "", false},
	} {
		node := lab4.node()
		node.PodInterface = tc.iface
		ipt := rules.Render(rules.IPv4, []rules.Service{lb}, eps, node)
		nft := rules.RenderNFT(rules.IPv4, []rules.Service{lb}, eps, node)
		iptText, nftText := string(ipt.Bytes()), nft.Table.Text()
		for _, w := range tc.ipt {
			if !strings.Contains(iptText, w) {
				t.Errorf("%+v: iptables lacks %q:\n%s", tc.iface, w, iptText)
			}
		}
		for _, w := range tc.nft {
			if !strings.Contains(nftText, w) {
				t.Errorf("%+v: nftables lacks %q:\n%s", tc.iface, w, nftText)
			}
		}
		if tc.noneOfTheCIDR && (strings.Contains(iptText, "10.244.0.0/16") || strings.Contains(nftText, "10.244.0.0/16")) {
			t.Errorf("%+v: the cluster CIDR is still matched", tc.iface)
		}
		for _, probs := range [][]rules.Problem{ipt.Problems, nft.Problems} {
			var got []string
			for _, p := range probs {
				got = append(got, p.Error())
			}
			if all := strings.Join(got, "\n"); (tc.problem == "") != (all == "") || !strings.Contains(all, tc.problem) {
				t.Errorf("%+v: problems %q, want %q", tc.iface, all, tc.problem)
			}
		}
		if tc.problem != "" && (strings.Contains(iptText, "-i ") || strings.Contains(nftText, "iifname")) {
			t.Errorf("%+v: a bad name is still matched", tc.iface)
		}
	}
}
