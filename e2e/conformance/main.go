package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/herald-lb/herald/e2e/lab/cluster"
	"github.com/herald-lb/herald/e2e/lab/k8sbin"
	"github.com/herald-lb/herald/e2e/lab/kubeconfig"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// Proxies are the service proxies a run compares, the reference first.
var Proxies = []string{"kube-proxy", "herald"}

// DefaultSpecTimeout bounds one test's time: half as long again as the
// slowest test that passed in the recorded runs (19m34s: LoadBalancers
// "should not have connectivity disruption during rolling update with
// externalTrafficPolicy=Cluster" on real nodes with herald; the slowest
// with kube-proxy took 17m44s), so no passing test comes near it, and a test
// that hangs (upstream v1.34.10's dual-stack hostNetwork test sleeps 10
// hours when its UDP dial fails) holds one ginkgo process half an hour,
// not the run.
const DefaultSpecTimeout = 30 * time.Minute

// Options say what `make conformance` runs.
type Options struct {
	ModuleDir string
	// Proxies to run, in order; the first is the reference.
	Proxies []string
	Nodes   int
	// RealNodes runs the labs with real nodes (the real kubelet,
	// containerd, runc and the CNI plugins) instead of the lab kubelet;
	// the tests only the lab kubelet cannot run are not skipped then.
	RealNodes bool
	// Procs is the number of parallel ginkgo processes.
	Procs       int
	Focus, Skip string
	// Timeout bounds each proxy's run of the suite.
	Timeout time.Duration
	// SpecTimeout bounds each spec (RunOptions.SpecTimeout).
	SpecTimeout time.Duration
	// OutDir receives each run's reports and the table.
	OutDir string
	// Ensure makes the images the suite's pods use (agnhost, pause) and
	// herald's; nil: the caller has made them.
	Ensure func(ctx context.Context) error
	Log    io.Writer
}

// Main is `conformance`: for each proxy, a lab in image mode (with the
// cluster DNS) with that proxy, the focused suite against it, the lab
// down; then the table. It
// returns the process's exit code: 0 when every test that passed with
// the reference passed with the others too.
func Main(ctx context.Context, args []string, ensure func(context.Context) error) int {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	var o Options
	var proxies string
	fs.StringVar(&proxies, "proxies", strings.Join(Proxies, ","), "the service proxies to run the suite with, in order; the first is the reference")
	fs.IntVar(&o.Nodes, "nodes", 3, "nodes in each lab")
	fs.IntVar(&o.Procs, "procs", 6, "parallel ginkgo processes (the tests mostly wait on the cluster: 3 kept two cores 25% busy)")
	fs.StringVar(&o.Focus, "focus", Focus, "ginkgo focus: the tests to run")
	fs.BoolVar(&o.RealNodes, "real-nodes", os.Getenv(cluster.RealNodesEnv) == "1", "real nodes: the real kubelet with containerd, runc and the CNI plugins (default $"+cluster.RealNodesEnv+"=1), instead of the lab kubelet")
	skip := fs.String("skip", "", "ginkgo skip: the tests the lab cannot run (default: the lab's skips for the kind of node, docs/testing.md)")
	fs.DurationVar(&o.Timeout, "timeout", 90*time.Minute, "how long each proxy's run may take")
	fs.DurationVar(&o.SpecTimeout, "spec-timeout", DefaultSpecTimeout, "how long one test may take: a test still running then is reported as failed (timed out) and the run goes on; 0: no bound")
	fs.StringVar(&o.OutDir, "out", "", "where reports and the table go (default e2e/_cache/conformance/<time>)")
	fs.StringVar(&o.ModuleDir, "e2e", "", "the e2e module directory (default: found from the current directory)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.Skip = *skip; o.Skip == "" {
		o.Skip = SkipPattern(o.RealNodes)
	}
	for _, p := range strings.Split(proxies, ",") {
		if p = strings.TrimSpace(p); p != "" {
			o.Proxies = append(o.Proxies, p)
		}
	}
	if len(o.Proxies) == 0 {
		fmt.Fprintln(os.Stderr, "conformance: -proxies names no proxy")
		return 2
	}
	o.Ensure, o.Log = ensure, os.Stdout
	reg, err := RunAll(ctx, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "conformance: %v\n", err)
		return 1
	}
	if reg > 0 {
		return 1
	}
	return 0
}

// RunAll runs the suite once per proxy and prints the table; it returns
// how many tests passed with the reference and not with another proxy.
func RunAll(ctx context.Context, o Options) (int, error) {
	if os.Geteuid() != 0 {
		return 0, errors.New("the lab needs root")
	}
	var err error
	if o.ModuleDir == "" {
		if o.ModuleDir, err = k8sbin.FindModuleDir("."); err != nil {
			return 0, err
		}
	}
	if o.OutDir == "" {
		o.OutDir = filepath.Join(o.ModuleDir, "_cache", "conformance", time.Now().UTC().Format("20060102-150405"))
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return 0, err
	}
	logf := func(format string, a ...any) { fmt.Fprintf(o.Log, "conformance: "+format+"\n", a...) }
	start := time.Now()
	bopts := k8sbin.Options{ModuleDir: o.ModuleDir, Log: o.Log}
	if _, err := k8sbin.Ensure(ctx, bopts); err != nil {
		return 0, err
	}
	suite, err := k8sbin.EnsureE2ETest(ctx, bopts)
	if err != nil {
		return 0, err
	}
	ginkgo, err := EnsureGinkgo(ctx, o.ModuleDir)
	if err != nil {
		return 0, err
	}
	if o.Ensure != nil {
		if err := o.Ensure(ctx); err != nil {
			return 0, err
		}
	}
	selection, err := Selection(ctx, suite.Path, o.Focus, o.Skip, filepath.Join(o.OutDir, "selection"))
	if err != nil {
		return 0, err
	}
	focused, err := Selection(ctx, suite.Path, o.Focus, "", filepath.Join(o.OutDir, "selection-unskipped"))
	if err != nil {
		return 0, err
	}
	labSkipped := labSkipResults(focused, selection, o.RealNodes)
	logf("%d tests selected, %d of them skipped for the lab (docs/testing.md); programs ready in %s", len(focused), len(labSkipped), time.Since(start).Round(time.Second))

	var runs []Run
	for _, proxy := range o.Proxies {
		res, took, err := runOne(ctx, o, proxy, suite.Path, ginkgo)
		if err != nil {
			return 0, fmt.Errorf("the run with %s: %w", proxy, err)
		}
		run := Run{Proxy: proxy, Results: append(res, labSkipped...)}
		runs = append(runs, run)
		if data, err := json.MarshalIndent(run, "", "  "); err == nil {
			_ = os.WriteFile(filepath.Join(o.OutDir, proxy, "results.json"), data, 0o644)
		}
		rows := Compare(focused, run)
		t := Totals(rows, 0)
		logf("%s: %d passed, %d failed, %d skipped, %d not run, in %s", proxy, t[Pass], t[Fail], t[Skip], t[NotRun], took.Round(time.Second))
	}
	rows := Compare(focused, runs...)
	var table strings.Builder
	WriteTable(&table, rows, runs...)
	fmt.Fprintf(o.Log, "\n%s\n", table.String())
	if err := os.WriteFile(filepath.Join(o.OutDir, "table.md"), []byte(table.String()), 0o644); err != nil {
		return 0, err
	}
	logf("the table is in %s; the whole run took %s", filepath.Join(o.OutDir, "table.md"), time.Since(start).Round(time.Second))
	return len(Regressions(rows)), nil
}

// labSkipResults are the focused tests the skip pattern removed, each
// skipped with the lab's reason.
func labSkipResults(focused, selection []string, realNodes bool) []Result {
	in := map[string]bool{}
	for _, n := range selection {
		in[n] = true
	}
	var out []Result
	for _, n := range focused {
		if in[n] {
			continue
		}
		reason := LabSkipReason(n, realNodes)
		if reason == "" {
			reason = "matched -skip"
		}
		out = append(out, Result{Name: n, Outcome: Skip, Reason: "lab: " + reason})
	}
	return out
}

// runOne brings up a lab with proxy, runs the suite against it and takes
// the lab down again (also when the run fails).
func runOne(ctx context.Context, o Options, proxy, suite, ginkgo string) (_ []Result, _ time.Duration, err error) {
	kind := "the lab kubelet"
	if o.RealNodes {
		kind = "real nodes"
	}
	fmt.Fprintf(o.Log, "conformance: a %d-node lab in image mode on %s with %s as the service proxy\n", o.Nodes, kind, proxy)
	lab, err := cluster.Up(ctx, cluster.Options{Nodes: o.Nodes, ImageMode: true, DNS: true, RealNodes: o.RealNodes, Proxy: proxy, Log: o.Log,
		HeraldNamespace: heraldNamespaceFor(proxy),
		// Another lab on the machine (a test's) is waited for, not an error.
		WaitForOthers: true})
	if err != nil {
		return nil, 0, err
	}
	defer func() {
		if derr := cluster.Down(context.WithoutCancel(ctx), lab.StateDir, cluster.DownOptions{Log: o.Log}); derr != nil && err == nil {
			err = derr
		}
	}()
	if err := ApplyPool(ctx, lab.KubectlPath, lab.Kubeconfig, lab.HeraldNS()); err != nil {
		return nil, 0, err
	}
	rc, err := kubeconfig.RESTConfig(lab.Kubeconfig)
	if err != nil {
		return nil, 0, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, 0, err
	}
	keepCtx, stopKeeping := context.WithCancel(ctx)
	kept, err := KeepAPIServerPod(keepCtx, cs, "kube-apiserver-"+lab.Prefix, lab.K8sVersion, 250*time.Millisecond, o.Log)
	if err != nil {
		stopKeeping()
		return nil, 0, fmt.Errorf("the API server's stand-in pod: %w", err)
	}
	defer func() { stopKeeping(); <-kept }()
	return RunSuite(ctx, RunOptions{
		E2ETest: suite, Ginkgo: ginkgo, Procs: o.Procs,
		Kubeconfig: lab.Kubeconfig, Kubectl: lab.KubectlPath,
		Netns:     lab.Layout.Remote,
		Nodes:     o.Nodes,
		ReportDir: filepath.Join(o.OutDir, proxy),
		Focus:     o.Focus, Skip: o.Skip, Timeout: o.Timeout, SpecTimeout: o.SpecTimeout,
		Out: o.Log,
	})
}

// heraldNamespaceFor is where a run with proxy installs herald: with
// herald's proxy in kube-system, where kubeadm runs kube-proxy, its
// speakers' pods (the nodes' proxies) labelled as kube-proxy's are, so
// that the suite's "should work after restarting kube-proxy" finds and
// restarts them as it does kube-proxy's; with kube-proxy, where herald's
// manifests put it.
func heraldNamespaceFor(proxy string) string {
	if proxy == cluster.ProxyHerald {
		return cluster.KubeSystem
	}
	return cluster.HeraldNamespace
}

// PoolManifest is the IPAddressPool the LoadBalancer tests draw from: the
// lab LAN's free range, announced over layer 2, in herald's namespace ns.
func PoolManifest(ns string) string {
	return fmt.Sprintf(`apiVersion: herald.io/v1beta1
kind: IPAddressPool
metadata: {name: conformance, namespace: %[1]s}
spec:
  addresses: [%[2]q, %[3]q]
---
apiVersion: herald.io/v1beta1
kind: L2Advertisement
metadata: {name: conformance, namespace: %[1]s}
spec:
  ipAddressPools: [conformance]
`, ns, topology.L2PoolV4, topology.L2PoolV6)
}

// ApplyPool creates the pool in the lab, in herald's namespace ns.
func ApplyPool(ctx context.Context, kubectl, kubeconfig, ns string) error {
	cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(PoolManifest(ns))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("creating the LoadBalancer pool: %w: %s", err, out)
	}
	return nil
}

// EnsureGinkgo builds the ginkgo CLI of the module's ginkgo version (a go.mod
// tool) into the cache; the go build cache makes repeats take a second.
func EnsureGinkgo(ctx context.Context, moduleDir string) (string, error) {
	out := filepath.Join(moduleDir, "_cache", "tools", "ginkgo")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/onsi/ginkgo/v2/ginkgo")
	cmd.Dir = moduleDir
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the ginkgo CLI: %w: %s", err, b)
	}
	return out, nil
}
