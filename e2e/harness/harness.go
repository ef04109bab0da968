// Package harness runs e2e tests against one shared lab per test binary.
//
// A package's TestMain calls Main; tests call Start, which brings the lab
// up on first use (root only) and returns helpers bound to the test:
// kubectl, apply, polling, pods, HTTP from inside a namespace. Main takes
// the lab down after the last test and fails the run if the machine's
// namespaces, links, mounts or processes differ from before. A failed
// test gets the tails of every lab process's log.
package harness

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/herald-lb/herald/e2e/lab/cluster"
	"github.com/herald-lb/herald/e2e/lab/controlplane"
	"github.com/herald-lb/herald/e2e/lab/kubeconfig"
	"github.com/herald-lb/herald/e2e/lab/kubectl"
	"github.com/herald-lb/herald/e2e/lab/netns"
	"github.com/herald-lb/herald/e2e/lab/proc"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// Options describe the shared lab.
type Options struct {
	// Prefix names the lab's objects; it must differ from other
	// packages' labs (they wait for each other, but their names must not
	// collide).
	Prefix string
	Nodes  int
	// Bare leaves herald out.
	Bare bool
}

var shared struct {
	mu      sync.Mutex
	opts    Options
	lab     *cluster.Lab
	err     error
	before  MachineState
	logPath string
	started time.Duration
}

// Main runs the tests, then takes the shared lab down (if a test brought
// it up) and checks that the machine is as before. Use it as
//
//	func TestMain(m *testing.M) { os.Exit(harness.Main(m, harness.Options{...})) }
func Main(m *testing.M, opts Options) int {
	if opts.Prefix == "" {
		opts.Prefix = "hle"
	}
	if opts.Nodes == 0 {
		opts.Nodes = cluster.DefaultNodes
	}
	// HERALD_LAB_NODES runs the benchmarks on a lab of another size (the
	// L2 failover at 10 nodes); the tests themselves assume Options.Nodes,
	// so it is refused outside benchmark runs.
	if v := os.Getenv("HERALD_LAB_NODES"); v != "" {
		n, err := strconv.Atoi(v)
		switch {
		case os.Getenv("HERALD_BENCH") != "1":
			fmt.Fprintf(os.Stderr, "harness: HERALD_LAB_NODES=%s is for benchmark runs only (HERALD_BENCH=1); the tests assume %d nodes\n", v, opts.Nodes)
			return 2
		case err != nil || n < 3 || n > topology.MaxNodes:
			fmt.Fprintf(os.Stderr, "harness: HERALD_LAB_NODES=%q: want a number of nodes from 3 to %d\n", v, topology.MaxNodes)
			return 2
		}
		opts.Nodes = n
	}
	shared.opts = opts
	code := m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if err := downShared(); err != nil {
		fmt.Fprintf(os.Stderr, "harness: %v\n", err)
		return 1
	}
	return code
}

// downShared takes the shared lab down, if it is up, and checks that the
// machine is as before it came up; the next Start brings it up again.
// The caller holds shared.mu.
func downShared() error {
	lab := shared.lab
	if lab == nil {
		return nil
	}
	shared.lab, shared.err = nil, nil
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	if err := lab.Down(ctx, cluster.DownOptions{Log: os.Stderr}); err != nil {
		return fmt.Errorf("lab down: %w", err)
	}
	fmt.Fprintf(os.Stderr, "harness: lab %q down in %s (up took %s)\n", lab.Prefix, time.Since(start).Round(time.Millisecond), shared.started.Round(time.Millisecond))
	if err := checkMachine(ctx, lab.Prefix, shared.before); err != nil {
		return err
	}
	if _, err := os.Stat(lab.StateDir); err == nil {
		return fmt.Errorf("FAIL: the lab's state directory %s is still there", lab.StateDir)
	}
	_ = os.Remove(shared.logPath)
	return nil
}

// checkMachine fails when the machine's namespaces, links, mounts, host
// addresses and routes or processes of the lab prefix differ from before.
func checkMachine(ctx context.Context, prefix string, before MachineState) error {
	after, err := ObserveMachine(ctx, prefix)
	if err != nil {
		return err
	}
	if diff := before.Diff(after); diff != "" {
		return fmt.Errorf("FAIL: the lab did not leave the machine as it found it:\n%s", diff)
	}
	return nil
}

// UpOwnLab brings up a lab of the test's own with opts (the harness sets
// StateDir, KillWithParent, WaitForOthers, Log and BeforeUp; the Prefix
// must differ from the shared lab's) and takes it down when the test
// ends, also after a failure, checking that the machine is as before.
// One lab runs on a machine at a time, so a shared lab this test binary
// holds goes down first (checked the same way; the next Start brings it
// up again): run such tests first or last to spare a restart.
func UpOwnLab(t *testing.T, ctx context.Context, opts cluster.Options) *T {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the lab builds network namespaces and runs pods in them")
	}
	if _, err := os.Stat(controlplane.DefaultEtcdPath); err != nil {
		t.Fatalf("etcd not found at %s (apt-get install etcd-server, or run bash hack/bootstrap.sh): %v", controlplane.DefaultEtcdPath, err)
	}
	shared.mu.Lock()
	err := downShared()
	shared.mu.Unlock()
	if err != nil {
		t.Fatalf("taking the shared lab down first: %v", err)
	}
	logf, err := os.CreateTemp("", "herald-e2e-"+opts.Prefix+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	var before MachineState
	opts.StateDir = filepath.Join(t.TempDir(), "lab")
	opts.KillWithParent, opts.WaitForOthers, opts.Log = true, true, logf
	opts.BeforeUp = func() (err error) {
		before, err = ObserveMachine(ctx, opts.Prefix)
		return err
	}
	start := time.Now()
	lab, err := cluster.Up(ctx, opts)
	if err != nil {
		data, _ := os.ReadFile(logf.Name())
		t.Fatalf("lab up: %v\n%s", err, data)
	}
	t.Logf("lab %q up in %s (%s of it waiting for the machine and building), %d nodes, service proxy %s, image mode %v, real nodes %v; its log: %s",
		opts.Prefix, time.Since(start).Round(time.Millisecond), (time.Since(start) - lab.Timings.Total).Round(time.Millisecond),
		lab.Nodes, lab.Proxy, lab.ImageMode, lab.RealNodes, logf.Name())
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		start := time.Now()
		if err := lab.Down(dctx, cluster.DownOptions{Log: t.Output()}); err != nil {
			t.Errorf("lab down: %v", err)
			return
		}
		t.Logf("lab %q down in %s", opts.Prefix, time.Since(start).Round(time.Millisecond))
		if err := checkMachine(dctx, opts.Prefix, before); err != nil {
			t.Error(err)
		}
		if !t.Failed() {
			_ = os.Remove(logf.Name())
		}
	})
	h := ForLab(t, ctx, lab)
	h.upLog = logf.Name()
	return h
}

// T is the shared lab seen from one test.
type T struct {
	T      *testing.T
	Ctx    context.Context
	Lab    *cluster.Lab
	Layout topology.Layout
	K      *kubectl.Kubectl
	CS     kubernetes.Interface
	// upLog is the lab's bring-up log, if the harness brought it up.
	upLog string
}

// Start returns the shared lab, bringing it up on first use. It skips the
// test when not root and fails it when the lab cannot come up.
func Start(t *testing.T) *T {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the lab builds network namespaces and runs pods in them")
	}
	if _, err := os.Stat(controlplane.DefaultEtcdPath); err != nil {
		t.Fatalf("etcd not found at %s (apt-get install etcd-server, or run bash hack/bootstrap.sh): %v", controlplane.DefaultEtcdPath, err)
	}
	lab, err := sharedLab()
	if err != nil {
		t.Fatalf("the shared lab is not up: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	h := ForLab(t, ctx, lab)
	h.upLog = shared.logPath
	return h
}

// ForLab binds the helpers to a lab the test brought up itself (one
// that is not the shared lab); the lab's logs are dumped if it fails.
func ForLab(t *testing.T, ctx context.Context, lab *cluster.Lab) *T {
	t.Helper()
	h := &T{T: t, Ctx: ctx, Lab: lab, Layout: lab.Layout}
	h.K = &kubectl.Kubectl{Path: lab.KubectlPath, Kubeconfig: lab.Kubeconfig, Log: t.Output()}
	rc, err := kubeconfig.RESTConfig(lab.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if h.CS, err = kubernetes.NewForConfig(rc); err != nil {
		t.Fatal(err)
	}
	// HERALD_LAB_LOGS=1 shows the logs of a passing test too.
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("HERALD_LAB_LOGS") != "" {
			h.DumpLogs()
		}
	})
	return h
}

func sharedLab() (*cluster.Lab, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.lab != nil || shared.err != nil {
		return shared.lab, shared.err
	}
	opts := shared.opts
	if opts.Prefix == "" {
		return nil, fmt.Errorf("harness.Start without harness.Main in TestMain")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "herald-e2e-"+opts.Prefix+"-")
	if err != nil {
		shared.err = err
		return nil, err
	}
	logf, err := os.CreateTemp("", "herald-e2e-"+opts.Prefix+"-*.log")
	if err != nil {
		shared.err = err
		return nil, err
	}
	defer logf.Close()
	shared.logPath = logf.Name()
	start := time.Now()
	// The lab waits here for any other lab on the machine to finish; the
	// machine is observed once it holds the lock, so the comparison
	// after down sees only this lab's doing.
	shared.lab, shared.err = cluster.Up(ctx, cluster.Options{
		Prefix:         opts.Prefix,
		Nodes:          opts.Nodes,
		Bare:           opts.Bare,
		StateDir:       filepath.Join(dir, "lab"),
		KillWithParent: true,
		WaitForOthers:  true,
		Log:            logf,
		BeforeUp: func() error {
			shared.before, err = ObserveMachine(ctx, opts.Prefix)
			return err
		},
	})
	shared.started = time.Since(start)
	_ = os.Remove(dir) // only if the lab did not use it
	if shared.err != nil {
		data, _ := os.ReadFile(logf.Name())
		shared.err = fmt.Errorf("%w\nlab log:\n%s", shared.err, data)
	}
	return shared.lab, shared.err
}

// DumpLogs writes the tails of every log of the lab to the test's log:
// control plane, router, kubelets, containers.
func (h *T) DumpLogs() {
	var b strings.Builder
	if h.upLog != "" {
		proc.WriteTail(&b, h.upLog, 40)
	}
	if h.Lab.ControlPlane != nil {
		h.Lab.ControlPlane.WriteLogTails(&b, 80)
	}
	if h.Lab.Router != nil {
		h.Lab.Router.WriteLogTails(&b, 40)
	}
	for _, n := range h.Layout.Nodes {
		for i, f := range h.Lab.NodeLogs(n.Name) {
			lines := 40
			if i == 0 {
				lines = 200 // the kubelet's
			}
			proc.WriteTail(&b, f, lines)
		}
	}
	h.T.Log("logs of the lab:\n" + b.String())
}

// Kubectl runs kubectl and fails the test on error.
func (h *T) Kubectl(args ...string) string {
	h.T.Helper()
	out, err := h.K.Run(h.Ctx, args...)
	if err != nil {
		h.T.Fatal(err)
	}
	return out
}

// Apply applies YAML with kubectl.
func (h *T) Apply(yaml string) {
	h.T.Helper()
	if _, err := h.K.RunStdin(h.Ctx, strings.NewReader(yaml), "apply", "-f", "-"); err != nil {
		h.T.Fatal(err)
	}
}

// Poll calls cond until it returns true, failing the test with cond's
// last explanation after timeout. It returns how long it waited.
func (h *T) Poll(timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	h.T.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return time.Since(start)
		}
		if time.Now().After(deadline) || h.Ctx.Err() != nil {
			h.T.Fatalf("timed out after %s waiting for %s: %s", timeout, what, why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Pods lists the pods of the default namespace matching selector.
func (h *T) Pods(selector string) []v1.Pod {
	h.T.Helper()
	l, err := h.CS.CoreV1().Pods("default").List(h.Ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		h.T.Fatal(err)
	}
	return l.Items
}

// Pod gets a pod of the default namespace.
func (h *T) Pod(name string) *v1.Pod {
	h.T.Helper()
	p, err := h.CS.CoreV1().Pods("default").Get(h.Ctx, name, metav1.GetOptions{})
	if err != nil {
		h.T.Fatal(err)
	}
	return p
}

// PodReady tells whether the pod's Ready condition is true.
func PodReady(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// ReadyPods waits until n pods match selector, all Running and Ready.
func (h *T) ReadyPods(selector string, n int, timeout time.Duration) ([]v1.Pod, time.Duration) {
	h.T.Helper()
	var pods []v1.Pod
	d := h.Poll(timeout, fmt.Sprintf("%d ready pods %s", n, selector), func() (bool, string) {
		pods = h.Pods(selector)
		var states []string
		ready := 0
		for i := range pods {
			p := &pods[i]
			if p.DeletionTimestamp == nil && p.Status.Phase == v1.PodRunning && PodReady(p) {
				ready++
			}
			states = append(states, fmt.Sprintf("%s on %q: %s ready=%v ip=%s", p.Name, p.Spec.NodeName, p.Status.Phase, PodReady(p), p.Status.PodIP))
		}
		return ready == n && len(pods) == n, strings.Join(states, "; ")
	})
	return pods, d
}

// DeletePods deletes pods of the default namespace by name and waits
// until they are gone.
func (h *T) DeletePods(names ...string) {
	h.T.Helper()
	h.Kubectl(append([]string{"delete", "pod", "--wait=false"}, names...)...)
	h.Poll(time.Minute, fmt.Sprintf("pods %v to disappear", names), func() (bool, string) {
		var left []string
		for _, n := range names {
			if _, err := h.CS.CoreV1().Pods("default").Get(h.Ctx, n, metav1.GetOptions{}); err == nil {
				left = append(left, n)
			}
		}
		return len(left) == 0, fmt.Sprint(left)
	})
}

// Node is the lab node with the Kubernetes name.
func (h *T) Node(name string) topology.Node {
	h.T.Helper()
	n, ok := h.Layout.Node(name)
	if !ok {
		h.T.Fatalf("no lab node %q", name)
	}
	return n
}

// Kubelet is the kubelet of the named node.
func (h *T) Kubelet(node string) *cluster.Kubelet {
	h.T.Helper()
	for _, k := range h.Lab.Kubelets {
		if k.Config.NodeName == node {
			return k
		}
	}
	h.T.Fatalf("no kubelet for node %q", node)
	return nil
}

// KubeletPID is the process of the named node's kubelet: the lab
// kubelet's, or on real nodes the real kubelet's (a test stops it with
// SIGSTOP to make the node NotReady).
func (h *T) KubeletPID(node string) int {
	h.T.Helper()
	if !h.Lab.RealNodes {
		return h.Kubelet(node).Process.PID
	}
	for _, n := range h.Lab.RealNodeStates {
		if n.Name != node {
			continue
		}
		for _, p := range n.Processes {
			if p.Name == "kubelet-"+node {
				return p.PID
			}
		}
	}
	h.T.Fatalf("no kubelet process recorded for real node %q", node)
	return 0
}

// NetnsTransport is an HTTP transport whose connections are opened
// inside the network namespace ns, one per request.
func NetnsTransport(ns string) *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := netns.Do(ns, func() (err error) {
				c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
		DisableKeepAlives: true,
	}
}

// HTTPGetFrom sends GET url from inside the network namespace ns.
func HTTPGetFrom(ns, url string) (string, error) {
	tr := NetnsTransport(ns)
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// ExpectEcho checks that GET url from ns answers as echoserver:1.4 with
// client_address=client.
func (h *T) ExpectEcho(ns, url, client string) {
	h.T.Helper()
	var page string
	var err error
	for range 20 { // a fresh veth may need a moment for its first ARP
		if page, err = HTTPGetFrom(ns, url); err == nil {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		h.T.Errorf("GET %s from %s: %v", url, ns, err)
		return
	}
	if !strings.Contains(page, "CLIENT VALUES:") || !strings.Contains(page, "client_address="+client+"\n") {
		h.T.Errorf("GET %s from %s: want client_address=%s, got:\n%s", url, ns, client, page)
		return
	}
	h.T.Logf("GET %s from %s: client_address=%s", url, ns, client)
}

// Exec runs a command in a lab target (see cluster.Netns) and returns its
// combined output.
func (h *T) Exec(target string, args ...string) (string, error) {
	ns, err := cluster.Netns(h.Ctx, h.Layout, target, cluster.KubectlPodLookup(h.K))
	if err != nil {
		return "", err
	}
	return netns.Run(h.Ctx, ns, args...)
}

// Bench skips a benchmark unless HERALD_BENCH=1: benchmarks print
// figures and run with `make bench`, never in `make test` or CI.
func Bench(t *testing.T) {
	t.Helper()
	if os.Getenv("HERALD_BENCH") != "1" {
		t.Skip("a benchmark, run by `make bench` (HERALD_BENCH=1), not by make test")
	}
}

// Trials is a benchmark's number of trials: HERALD_BENCH_TRIALS, else def.
func Trials(t *testing.T, def int) int {
	t.Helper()
	v := os.Getenv("HERALD_BENCH_TRIALS")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("HERALD_BENCH_TRIALS=%q: want a positive number of trials", v)
	}
	return n
}

// PodNetns names the pod's network namespace for netns.Do and `ip netns
// exec`, on lab kubelets and real nodes alike (cluster.Lab.PodNetns).
func (h *T) PodNetns(namespace, pod string) string {
	h.T.Helper()
	name, err := h.Lab.PodNetns(h.Ctx, namespace, pod)
	if err != nil {
		h.T.Fatalf("the network namespace of pod %s/%s: %v", namespace, pod, err)
	}
	return name
}

// ContainerPID is the main process of pod's container (by name), on lab
// kubelets and real nodes alike (cluster.Lab.ContainerPID).
func (h *T) ContainerPID(pod *v1.Pod, container string) (int, error) {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == container {
			return h.Lab.ContainerPID(pod.Spec.NodeName, cs.ContainerID)
		}
	}
	return 0, fmt.Errorf("pod %s: no status of container %s", pod.Name, container)
}
