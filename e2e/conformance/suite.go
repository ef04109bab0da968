// Package conformance runs Kubernetes' own sig-network e2e tests (the
// e2e.test binary built from the pinned module, e2e/conformance/upstream)
// against the lab, once with kube-proxy as the service proxy and once
// with herald's, and compares the two lists: every test that passes with
// kube-proxy must pass with herald.
package conformance

import (
	"regexp"
	"strings"
)

// Focus selects the tests issue #14 names: sig-network's Services tests,
// the Networking checks that go through Services, the LoadBalancer and
// ESIPP (externalTrafficPolicy: Local) tests, which herald can serve as
// the load-balancer provider, the proxy's conntrack and kube-proxy
// tests, and every [Conformance] test of sig-network; and those issue #34
// adds: the Traffic Distribution and Topology Hints tests (the lab's
// nodes are in three zones), every [Feature:IPv6DualStack] test (the lab
// is dual-stack: Services of either family and both, their secondary
// family's granular checks, pods' and nodes' two addresses), NoSNAT
// (pod to pod keeps the source), Service CIDRs (a Service served from a
// ServiceCIDR added at run time) and, of Connectivity Pod Lifecycle, the
// one through a Service (a blue-green switch with readiness gates). Session affinity
// tests are among the Services, Networking and LoadBalancers ones.
var Focus = strings.Join([]string{
	`\[sig-network\] Services `,
	`\[sig-network\] Networking Granular Checks: Services `,
	`\[sig-network\] Networking should check kube-proxy urls`,
	`\[sig-network\] LoadBalancers`,
	`\[sig-network\] Conntrack `,
	`\[sig-network\] KubeProxy `,
	`\[sig-network\] Traffic Distribution `,
	`\[sig-network\] Topology Hints `,
	`\[sig-network\] \[Feature:IPv6DualStack\] `,
	`\[sig-network\] NoSNAT `,
	`\[sig-network\] Service CIDRs `,
	`\[sig-network\] Connectivity Pod Lifecycle .*using Services`,
	`\[sig-network\] .*\[Conformance\]`,
}, "|")

// LabSkip is a test the lab cannot run, and why. Each is something a real
// cluster has and the lab does not (listed in docs/testing.md); none is a
// choice of herald's, and every skip applies to both proxies alike.
type LabSkip struct {
	Pattern string // a regexp on the test's full name
	Reason  string
	// LabKubelet: only the lab's own kubelet lacks what the test needs;
	// on real nodes (the real kubelet, containerd, the CNI plugins) it
	// runs.
	LabKubelet bool
}

// LabSkips are the tests skipped for the lab's sake.
var LabSkips = []LabSkip{
	{`\[Feature:SCTPConnectivity\]`, "SCTP: this machine's kernel has none (an SCTP socket fails with EPROTONOSUPPORT, and there are no modules to load); upstream runs these only where the feature is declared", false},
	{`Networking should recreate its iptables rules if they are deleted \[Disruptive\]`, "deletes iptables rules over SSH on a node; the lab has no SSH", false},
	{`Services should be rejected for evicted pods \(no endpoints exist\)`, "needs the kubelet to evict a pod that exceeds its ephemeral-storage limit; the lab kubelet enforces no resource limits", true},
	{`HostPort validates that there is no conflict between pods with same hostPort`, "hostPort is the CNI portmap plugin's DNAT, not the service proxy's; the lab kubelet's pod network has no CNI plugins", true},
	{`KubeProxy should set TCP CLOSE_WAIT timeout`, "its client reaches the server pod through a hostPort on the server's node IP (connection refused without one), and hostPort is the CNI portmap plugin's DNAT; the lab kubelet's pod network has no CNI plugins", true},
}

// Skips are the lab skips that apply on one kind of node: every one on
// the lab kubelet, those real nodes cannot run either on real nodes.
func Skips(realNodes bool) []LabSkip {
	var out []LabSkip
	for _, s := range LabSkips {
		if !realNodes || !s.LabKubelet {
			out = append(out, s)
		}
	}
	return out
}

// SkipPattern is the ginkgo skip pattern of the lab skips on that kind
// of node.
func SkipPattern(realNodes bool) string {
	skips := Skips(realNodes)
	parts := make([]string, len(skips))
	for i, s := range skips {
		parts[i] = s.Pattern
	}
	return strings.Join(parts, "|")
}

// LabSkipReason is why the lab skips the test on that kind of node, or
// "" when it runs.
func LabSkipReason(name string, realNodes bool) string {
	for _, s := range Skips(realNodes) {
		if regexp.MustCompile(s.Pattern).MatchString(name) {
			return s.Reason
		}
	}
	return ""
}

// Select is the selection among names (e2e.test --list-tests): the tests
// focus matches, without those skip matches. Ginkgo applies the same
// patterns to the same full names.
func Select(names []string, focus, skip string) ([]string, error) {
	f, err := regexp.Compile(focus)
	if err != nil {
		return nil, err
	}
	var s *regexp.Regexp
	if skip != "" {
		if s, err = regexp.Compile(skip); err != nil {
			return nil, err
		}
	}
	var out []string
	for _, n := range names {
		if f.MatchString(n) && (s == nil || !s.MatchString(n)) {
			out = append(out, n)
		}
	}
	return out, nil
}

// ParseList reads `e2e.test --list-tests` output: one "file:line: name"
// per test, after a header line.
func ParseList(out string) []string {
	var names []string
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		// The location ends in ":<line>: ".
		i := strings.Index(line, ": [")
		if i < 0 {
			continue
		}
		loc := line[:i]
		if j := strings.LastIndexByte(loc, ':'); j < 0 || strings.Trim(loc[j+1:], "0123456789") != "" {
			continue
		}
		names = append(names, line[i+2:])
	}
	return names
}

// SubsetFocus is the part of the selection `make test` runs
// (TestUpstreamConformance, with herald only, in a few minutes): the
// Services [Conformance] tests, and the proxy's own matters that are
// quick to check: healthCheckNodePort and externalTrafficPolicy changes,
// terminating endpoints, the client's source IP through a ClusterIP, the
// ESIPP LoadBalancer tests from pods and across nodes, a LoadBalancer's
// type and port changes, and UDP conntrack across a NodePort backend's
// restart. Every one of them passed with kube-proxy in the full run
// (docs/testing.md).
var SubsetFocus = strings.Join([]string{
	`\[sig-network\] Services .*\[Conformance\]`,
	`\[sig-network\] Services should implement NodePort and HealthCheckNodePort correctly when ExternalTrafficPolicy changes`,
	`\[sig-network\] Services should fail health check node port if there are only terminating endpoints`,
	`\[sig-network\] Services should fallback to local terminating endpoints when there are no ready endpoints with externalTrafficPolicy=Local`,
	`\[sig-network\] Services should preserve source pod IP for traffic thru service cluster IP`,
	`\[sig-network\] LoadBalancers ExternalTrafficPolicy: Local .*should (target all nodes with endpoints|work from pods)`,
	`\[sig-network\] LoadBalancers .*should be able to change the type and ports of a TCP service`,
	`\[sig-network\] Conntrack should be able to preserve UDP traffic when server pod cycles for a NodePort service`,
}, "|")
