package conformance

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseJUnit(t *testing.T) {
	f, err := os.Open("testdata/junit_01.xml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := ParseJUnit(f)
	if err != nil {
		t.Fatal(err)
	}
	want := []Result{
		{Name: "[sig-network] LoadBalancers should handle load balancer cleanup finalizer for service [Slow]", Outcome: Skip, Reason: "Only supported for providers [gce gke] (not local)", Time: 500 * time.Millisecond},
		{Name: "[sig-network] Services should be rejected when no endpoints exist", Outcome: Fail, Reason: "[FAILED] Expected error connecting to 10.96.0.12:80, got none", Time: 60250 * time.Millisecond},
		{Name: "[sig-network] Services should check NodePort out-of-range", Outcome: Fail, Reason: "timedout: [TIMEDOUT] A suite timeout occurred", Time: 27 * time.Second},
		{Name: "[sig-network] Services should serve a basic endpoint from pods [Conformance]", Outcome: Pass, Time: 12500 * time.Millisecond},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%+v\nwant\n%+v", got, want)
	}
}

func TestParseJUnitRejectsGarbage(t *testing.T) {
	if _, err := ParseJUnit(strings.NewReader("not xml")); err == nil {
		t.Fatal("no error for a report that is not XML")
	}
}

func TestCompareAndTable(t *testing.T) {
	ref := Run{Proxy: "kube-proxy", Results: []Result{
		{Name: "a", Outcome: Pass},
		{Name: "b", Outcome: Pass},
		{Name: "c", Outcome: Skip, Reason: "no SSH"},
		{Name: "d", Outcome: Fail, Reason: "boom | bang"},
	}}
	her := Run{Proxy: "herald", Results: []Result{
		{Name: "a", Outcome: Pass},
		{Name: "b", Outcome: Fail, Reason: "timed out"},
		{Name: "c", Outcome: Skip, Reason: "no SSH"},
		{Name: "d", Outcome: Pass},
	}}
	rows := Compare([]string{"a", "b", "c", "d", "e"}, ref, her)
	if len(rows) != 5 || rows[4].Results[0].Outcome != NotRun || rows[4].Results[1].Outcome != NotRun {
		t.Fatalf("rows %+v", rows)
	}
	reg := Regressions(rows)
	if len(reg) != 1 || reg[0].Name != "b" {
		t.Fatalf("regressions %+v, want only b", reg)
	}
	if tot := Totals(rows, 1); tot[Pass] != 2 || tot[Fail] != 1 || tot[Skip] != 1 || tot[NotRun] != 1 {
		t.Fatalf("herald totals %v", tot)
	}
	var b strings.Builder
	WriteTable(&b, rows, ref, her)
	out := b.String()
	for _, want := range []string{
		"| test | kube-proxy | herald |",
		"| b | pass | fail: timed out |",
		"| c | skip: no SSH | skip: no SSH |",
		`| d | fail: boom \| bang | pass |`,
		"| pass | 2 | 2 |",
		"1 test(s) passed with kube-proxy and not with the other proxy:",
		"- b: herald fail: timed out",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestLabSkips(t *testing.T) {
	if r := LabSkipReason("[sig-network] Networking Granular Checks: Services should function for node-Service: sctp [Feature:SCTPConnectivity]", true); r == "" {
		t.Error("SCTP test not skipped")
	}
	if r := LabSkipReason("[sig-network] Services should serve a basic endpoint from pods [Conformance]", false); r != "" {
		t.Errorf("a plain Services test is skipped: %s", r)
	}
	names := []string{
		"[sig-network] Services should serve a basic endpoint from pods [Conformance]",
		"[sig-network] Services should work after restarting apiserver [Disruptive]",
		"[sig-network] Services should work after restarting kube-proxy [Disruptive]",
		"[sig-apps] CronJob should not schedule jobs when suspended [Slow] [Conformance]",
		"[sig-network] LoadBalancers should be able to change the type and ports of a TCP service [Slow]",
		// issue #34's additions.
		"[sig-network] [Feature:IPv6DualStack] Granular Checks: Services Secondary IP Family [LinuxOnly] should function for service endpoints using hostNetwork",
		"[sig-network] [Feature:IPv6DualStack] should create service with ipv6,v4 cluster ip",
		"[sig-network] NoSNAT Should be able to send traffic between Pods without SNAT",
		"[sig-network] Service CIDRs should create Services and serve on different Service CIDRs",
		"[sig-network] Connectivity Pod Lifecycle should be able to have zero downtime on a Blue Green deployment using Services and Readiness Gates",
		"[sig-network] Traffic Distribution should route traffic to an endpoint in the same zone when using PreferClose",
		"[sig-network] Topology Hints should distribute endpoints evenly",
		// Not selected: pod to pod, no Service; SCTP skipped.
		"[sig-network] Connectivity Pod Lifecycle should be able to connect from a Pod to a terminating Pod",
		"[sig-network] [Feature:IPv6DualStack] Granular Checks: Services Secondary IP Family [LinuxOnly] should function for pod-Service: sctp [Feature:SCTPConnectivity]",
	}
	got, err := Select(names, Focus, SkipPattern(false))
	if err != nil {
		t.Fatal(err)
	}
	want := append([]string{names[0], names[1], names[2]}, names[4:12]...)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("selected %q, want %q", got, want)
	}
	// hostPort is the CNI portmap plugin's: skipped on the lab kubelet,
	// run on real nodes; SCTP stays skipped on both.
	hostPort := "[sig-network] HostPort validates that there is no conflict between pods with same hostPort but different hostIP and protocol [LinuxOnly] [Conformance]"
	if LabSkipReason(hostPort, false) == "" {
		t.Error("the hostPort test runs on the lab kubelet")
	}
	if r := LabSkipReason(hostPort, true); r != "" {
		t.Errorf("the hostPort test is skipped on real nodes: %s", r)
	}
	if got, err := Select([]string{hostPort}, Focus, SkipPattern(true)); err != nil || len(got) != 1 {
		t.Errorf("real nodes' selection of the hostPort test: %q, %v", got, err)
	}
}

func TestParseList(t *testing.T) {
	out := "The following spec names can be used with 'ginkgo run --focus/skip':\n" +
		"    ../../root/go/pkg/mod/k8s.io/kubernetes@v1.34.10/test/e2e/network/service.go:812: [sig-network] Services should serve a basic endpoint from pods [Conformance]\n" +
		"    x.go:1: [sig-network] Networking Granular Checks: Services should update nodePort: http [Slow]\n\n"
	got := ParseList(out)
	want := []string{"[sig-network] Services should serve a basic endpoint from pods [Conformance]", "[sig-network] Networking Granular Checks: Services should update nodePort: http [Slow]"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q", got)
	}
}

func TestCommand(t *testing.T) {
	o := RunOptions{E2ETest: "/c/e2e.test", Ginkgo: "/c/ginkgo", Procs: 3, Netns: "hlab-client", Kubeconfig: "/k", Kubectl: "/kubectl", ReportDir: "/r", Focus: "F", Skip: "S", Timeout: time.Hour, SpecTimeout: 30 * time.Minute}
	got := strings.Join(o.Command(), " ")
	want := "ip netns exec hlab-client /c/ginkgo run --procs=3 --focus=F --no-color --timeout=1h0m0s --poll-progress-after=5m --skip=S /c/e2e.test -- --kubeconfig=/k --provider=local --kubectl-path=/kubectl --report-dir=/r --spec-timeout=30m0s"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	o.Ginkgo = ""
	got = strings.Join(o.Command(), " ")
	want = "ip netns exec hlab-client /c/e2e.test --ginkgo.focus=F --ginkgo.no-color --ginkgo.timeout=1h0m0s --ginkgo.poll-progress-after=5m --ginkgo.skip=S --kubeconfig=/k --provider=local --kubectl-path=/kubectl --report-dir=/r --spec-timeout=30m0s"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	// No bound, no flag (the dry run of the selection).
	o.SpecTimeout = 0
	if got := strings.Join(o.Command(), " "); strings.Contains(got, "spec-timeout") {
		t.Fatalf("a run without a bound passes one: %s", got)
	}
}

func TestMainSpecTimeoutFlag(t *testing.T) {
	if DefaultSpecTimeout != 30*time.Minute {
		t.Fatalf("DefaultSpecTimeout %s: update the reasoning in its comment and docs/testing.md", DefaultSpecTimeout)
	}
	// -h prints the flags (exit 2) without running anything.
	if code := Main(t.Context(), []string{"-h"}, nil); code != 2 {
		t.Fatalf("-h: exit %d", code)
	}
}

// A spec cut at the bound: ginkgo's JUnit case for a SpecTimeout, with
// the progress report it writes (abridged from a v2.21.0 run).
const timedOutJUnit = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites><testsuite name="Kubernetes e2e suite">
<testcase name="[It] [sig-network] [Feature:IPv6DualStack] Granular Checks: Services Secondary IP Family [LinuxOnly] should function for service endpoints using hostNetwork" classname="Kubernetes e2e suite" status="timedout" time="1830.5">
<failure message="A spec timeout occurred" type="timedout">[TIMEDOUT] A spec timeout occurred
In [It] at: k8s.io/kubernetes/test/e2e/network/dual_stack.go:575 @ 11/27/26 23:40:02.1

This is the Progress Report generated when the spec timeout occurred:
  [sig-network] [Feature:IPv6DualStack] Granular Checks: Services Secondary IP Family [LinuxOnly] should function for service endpoints using hostNetwork (Spec Runtime: 30m0.012s)
    k8s.io/kubernetes/test/e2e/network/dual_stack.go:575
    In [It] (Node Runtime: 29m58.2s)
      k8s.io/kubernetes/test/e2e/network/dual_stack.go:575
      At [By Step] dialing(udp) fd00:10:0:1::2 (node) --&gt; fd00:10:96::1a2b:90 (config.clusterIP) (Step Runtime: 29m1.3s)
        k8s.io/kubernetes/test/e2e/network/dual_stack.go:645
</failure>
</testcase>
<testcase name="[It] [sig-network] Services should check NodePort out-of-range" classname="Kubernetes e2e suite" status="timedout" time="27">
<failure message="A suite timeout occurred" type="timedout">[TIMEDOUT] A suite timeout occurred</failure>
</testcase>
</testsuite></testsuites>`

func TestParseJUnitSpecTimeout(t *testing.T) {
	got, err := ParseJUnit(strings.NewReader(timedOutJUnit))
	if err != nil {
		t.Fatal(err)
	}
	// Sorted by name: the Services test first.
	if len(got) != 2 {
		t.Fatalf("got %+v", got)
	}
	hung, suite := got[1], got[0]
	want := "timed out after 30m0s (-spec-timeout), in step: dialing(udp) fd00:10:0:1::2 (node) --> fd00:10:96::1a2b:90 (config.clusterIP)"
	if hung.Outcome != Fail || hung.Reason != want {
		t.Errorf("the spec cut at its bound: %s %q, want fail %q", hung.Outcome, hung.Reason, want)
	}
	// A suite timeout is not the spec's bound: its reason is ginkgo's.
	if suite.Outcome != Fail || suite.Reason != "timedout: [TIMEDOUT] A suite timeout occurred" {
		t.Errorf("suite timeout: %s %q", suite.Outcome, suite.Reason)
	}
	var b strings.Builder
	run := Run{Proxy: "herald", Results: []Result{hung}}
	WriteTable(&b, Compare(nil, run), run)
	if !strings.Contains(b.String(), "| fail: timed out after 30m0s (-spec-timeout), in step: dialing(udp)") {
		t.Errorf("the table does not show the bound:\n%s", b.String())
	}
	// Without a progress report, the case's own time.
	if r := specTimedOut("[TIMEDOUT] A spec timeout occurred", 90*time.Second+400*time.Millisecond); r != "timed out after 1m30s (-spec-timeout)" {
		t.Errorf("without a report: %q", r)
	}
}
