package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/herald-lb/herald/e2e/conformance"
	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/cluster"
	"github.com/herald-lb/herald/e2e/lab/e2eimages"
	"github.com/herald-lb/herald/e2e/lab/k8sbin"
)

// TestUpstreamConformance runs part of Kubernetes' own sig-network e2e
// suite (conformance.SubsetFocus: e2e.test from the pinned module, tests
// nobody here wrote) against a 3-node image-mode lab with herald's proxy
// and the cluster DNS. Each of these tests passes with kube-proxy in the
// full comparison (make conformance), so each must pass with herald; a
// test the suite skips itself is logged with its reason. It brings up a
// lab of its own and takes it down again.
func TestUpstreamConformance(t *testing.T) {
	// Every test SubsetFocus selects must pass: a selection or a run
	// that shrinks (a renamed test, a skip that spreads, a suite that
	// stops early) fails here instead of passing with fewer tests.
	if os.Getenv(cluster.ImageModeEnv) != "1" {
		t.Skipf("image mode only (%s=1, as make e2e-image-test sets it): the suite's pods run agnhost's image", cluster.ImageModeEnv)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the lab builds network namespaces, the images go into root's podman storage")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	moduleDir, err := k8sbin.FindModuleDir(".")
	if err != nil {
		t.Fatal(err)
	}
	suite, err := k8sbin.EnsureE2ETest(ctx, k8sbin.Options{ModuleDir: moduleDir, Log: t.Output()})
	if err != nil {
		t.Fatal(err)
	}
	ginkgo, err := conformance.EnsureGinkgo(ctx, moduleDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e2eimages.Ensure(ctx, e2eimages.Options{ModuleDir: moduleDir, Log: t.Output()}); err != nil {
		t.Fatal(err)
	}
	// The lab's skips for the kind of node the lab will have.
	realNodes := os.Getenv(cluster.RealNodesEnv) == "1"
	want, err := conformance.Selection(ctx, suite.Path, conformance.SubsetFocus, conformance.SkipPattern(realNodes), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < upstreamSubsetMinPass {
		t.Fatalf("the subset selects %d tests of the suite, want at least %d (SubsetFocus or the lab's skips no longer match the suite)", len(want), upstreamSubsetMinPass)
	}
	h := harness.UpOwnLab(t, ctx, cluster.Options{Prefix: "hcf", Nodes: 3, ImageMode: true, DNS: true, Proxy: cluster.ProxyHerald})
	if err := conformance.ApplyPool(ctx, h.Lab.KubectlPath, h.Lab.Kubeconfig, h.Lab.HeraldNS()); err != nil {
		t.Fatal(err)
	}
	reports := t.TempDir()
	res, took, err := conformance.RunSuite(ctx, conformance.RunOptions{
		E2ETest: suite.Path, Ginkgo: ginkgo, Procs: 3,
		Kubeconfig: h.Lab.Kubeconfig, Kubectl: h.Lab.KubectlPath,
		Netns:     h.Lab.Layout.Remote,
		Nodes:     3,
		ReportDir: reports, Focus: conformance.SubsetFocus, Skip: conformance.SkipPattern(realNodes),
		Timeout: 20 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	rows := conformance.Compare(want, conformance.Run{Proxy: "herald", Results: res})
	tot := conformance.Totals(rows, 0)
	t.Logf("upstream sig-network subset with herald: %d tests, %d passed, %d failed, %d skipped, %d not run, in %s",
		len(rows), tot[conformance.Pass], tot[conformance.Fail], tot[conformance.Skip], tot[conformance.NotRun], took.Round(time.Second))
	for _, r := range rows {
		res := r.Results[0]
		switch res.Outcome {
		case conformance.Pass:
		case conformance.Skip:
			t.Logf("skipped by the suite: %s: %s", r.Name, res.Reason)
		default:
			t.Errorf("%s: %s %s", r.Name, res.Outcome, res.Reason)
		}
	}
	if tot[conformance.Pass] < upstreamSubsetMinPass {
		t.Errorf("%d tests of the subset passed, want at least %d: a test the suite skips or never runs counts as not passed", tot[conformance.Pass], upstreamSubsetMinPass)
	}
	if t.Failed() {
		log, _ := os.ReadFile(filepath.Join(reports, "e2e.log"))
		if len(log) > 200000 {
			log = log[len(log)-200000:]
		}
		t.Logf("the suite's output (tail):\n%s", log)
	}
}

// upstreamSubsetMinPass is how many tests SubsetFocus selects from the
// pinned release's suite (v1.34.10; the lab kubelet and real nodes alike),
// each of which passes with herald.
const upstreamSubsetMinPass = 25
