package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/herald-lb/herald/e2e/lab/controlplane"
	"github.com/herald-lb/herald/e2e/lab/k8sbin"
	"github.com/herald-lb/herald/e2e/lab/kubeconfig"
	"github.com/herald-lb/herald/e2e/lab/kubectl"
	"github.com/herald-lb/herald/e2e/lab/kubelet"
	"github.com/herald-lb/herald/e2e/lab/labbin"
	"github.com/herald-lb/herald/e2e/lab/netns"
	"github.com/herald-lb/herald/e2e/lab/pki"
	"github.com/herald-lb/herald/e2e/lab/proc"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// kubeletLabPrefix names everything TestLabKubelets creates; other lab
// tests use other "hl" prefixes and may run at the same time (go test
// runs packages in parallel).
const kubeletLabPrefix = "hlkub"

// kubeletLab is a lab with real nodes: topology, a control plane on the
// LAN and one lab kubelet per node.
type kubeletLab struct {
	t        *testing.T
	ctx      context.Context
	layout   topology.Layout
	cp       *controlplane.ControlPlane
	k        *kubectl.Kubectl
	cs       kubernetes.Interface
	bins     *labbin.Bins
	kubelets []*labKubelet
	// kubeletsStarted is when the first kubelet was started.
	kubeletsStarted time.Time
}

type labKubelet struct {
	cfg kubelet.Config
	p   *proc.Process
	log string
}

// machineState is what the lab must leave as it found it.
type machineState struct {
	Netns     []string
	Links     []string
	Processes []string // descendants of the test process: "pid exe"
}

func observeMachine(t *testing.T, ctx context.Context) machineState {
	t.Helper()
	e, err := topology.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var m machineState
	for n := range e.Netns {
		if !foreignLab(n) {
			m.Netns = append(m.Netns, n)
		}
	}
	for l := range e.Links {
		if !foreignLab(l) {
			m.Links = append(m.Links, l)
		}
	}
	sort.Strings(m.Netns)
	sort.Strings(m.Links)
	m.Processes = descendants(os.Getpid())
	return m
}

// foreignLab tells names of other labs' objects (another test's, running
// in parallel): "hl" prefixes other than ours.
func foreignLab(name string) bool {
	p, _, ok := strings.Cut(name, "-")
	return ok && strings.HasPrefix(p, "hl") && p != kubeletLabPrefix && len(p) <= 5
}

// descendants lists the processes below pid ("pid exe"), from /proc.
func descendants(root int) []string {
	entries, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		parent[pid] = ppid
	}
	var out []string
	for pid := range parent {
		for p := parent[pid]; p > 1; p = parent[p] {
			if p == root {
				exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
				out = append(out, fmt.Sprintf("%d %s", pid, exe))
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

// labProcesses lists running processes whose program is one of the lab's
// own binaries (wherever they were reparented to).
func labProcesses(bins *labbin.Bins) []string {
	want := map[string]bool{}
	for _, p := range bins.Paths {
		want[p] = true
	}
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		exe, err := os.Readlink("/proc/" + e.Name() + "/exe")
		if err == nil && want[exe] {
			out = append(out, e.Name()+" "+exe)
		}
	}
	return out
}

// startKubeletLab builds the lab: topology, control plane on the host's
// LAN address, kubelets. Everything is undone in t.Cleanup, and the
// machine's namespaces, links and the test's child processes are checked
// against what was there before.
func startKubeletLab(t *testing.T, ctx context.Context, nodes int) *kubeletLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: builds network namespaces and runs pods in them")
	}
	requireEtcd(t)
	lab := &kubeletLab{t: t, ctx: ctx}
	bin, err := k8sbin.Ensure(ctx, k8sbin.Options{ModuleDir: ".", Log: t.Output()})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if lab.bins, err = labbin.Ensure(ctx, labbin.Options{ModuleDir: ".", Log: t.Output()}); err != nil {
		t.Fatal(err)
	}
	t.Logf("lab programs built in %s", time.Since(start).Round(time.Millisecond))

	// One lab at a time on this machine: they share the address plan.
	release, err := topology.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release) // after everything below is undone
	before := observeMachine(t, ctx)
	if lab.layout, err = topology.Plan(kubeletLabPrefix, nodes); err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-registered first: this one runs last.
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := topology.Down(cctx, topology.Exec{}, kubeletLabPrefix); err != nil {
			t.Errorf("topology down: %v", err)
		}
		after := observeMachine(t, cctx)
		if !reflect.DeepEqual(before, after) {
			t.Errorf("the lab did not leave the machine as it found it:\nbefore %+v\nafter  %+v", before, after)
		}
		if left := labProcesses(lab.bins); len(left) > 0 {
			t.Errorf("lab programs still running: %v", left)
		}
	})
	start = time.Now()
	if err := topology.Up(ctx, topology.Exec{}, lab.layout, topology.Existing{Netns: set(before.Netns), Links: set(before.Links)}); err != nil {
		t.Fatal(err)
	}
	t.Logf("topology up in %s", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	lab.cp, err = controlplane.Up(ctx, controlplane.Config{
		StateDir:       t.TempDir(),
		BinDir:         bin.Dir,
		Address:        topology.HostLANv4.String(),
		KillWithParent: true,
		Log:            t.Output(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("control plane on %s ready in %s", lab.cp.APIServerURL(), time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := lab.cp.Stop(controlplane.StopOptions{}); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	// Runs after the kubelets have stopped (so their shutdown is in the
	// logs) and before the control plane's files are removed.
	// HERALD_LAB_LOGS=1 shows the logs of a passing run too.
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("HERALD_LAB_LOGS") != "" {
			lab.dumpLogs()
		}
	})
	lab.k = &kubectl.Kubectl{Path: bin.Tool("kubectl"), Kubeconfig: lab.cp.AdminKubeconfig(), Log: t.Output()}
	rc, err := kubeconfig.RESTConfig(lab.cp.AdminKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	if lab.cs, err = kubernetes.NewForConfig(rc); err != nil {
		t.Fatal(err)
	}

	ca, err := pki.LoadCA(lab.cp.PKIDir(), "ca")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	lab.kubeletsStarted = time.Now()
	for _, n := range lab.layout.Nodes {
		cfg := kubelet.ForNode(lab.layout, n)
		cfg.StateDir = filepath.Join(root, n.Name)
		cfg.Kubeconfig = filepath.Join(cfg.StateDir, "kubeconfig")
		cfg.KubeletVersion = bin.Version
		cfg.Programs = kubelet.Programs{EchoServer: lab.bins.Path(labbin.EchoServer), Herald: lab.bins.Path(labbin.Herald)}
		if err := kubelet.WriteNodeKubeconfig(cfg.Kubeconfig, n.Name, lab.cp.APIServerURL(), ca); err != nil {
			t.Fatal(err)
		}
		kl := &labKubelet{cfg: cfg, log: filepath.Join(cfg.StateDir, "lab-kubelet.log")}
		if kl.p, err = kubelet.Start(cfg, kubelet.StartOptions{Binary: lab.bins.Path(labbin.Kubelet), LogPath: kl.log, KillWithParent: true}); err != nil {
			t.Fatal(err)
		}
		lab.kubelets = append(lab.kubelets, kl)
	}
	t.Cleanup(func() {
		for _, kl := range lab.kubelets {
			start := time.Now()
			if err := kl.p.Stop(20 * time.Second); err != nil {
				t.Errorf("stopping kubelet %s: %v", kl.cfg.NodeName, err)
			}
			if err := kl.p.Err(); err != nil {
				t.Errorf("kubelet %s exited with %v", kl.cfg.NodeName, err)
			}
			t.Logf("kubelet %s stopped in %s", kl.cfg.NodeName, time.Since(start).Round(time.Millisecond))
			if s, err := kubelet.ReadState(kl.cfg.StateDir); err == nil && len(s.Pods) > 0 {
				t.Errorf("kubelet %s left pods behind in its state: %+v", kl.cfg.NodeName, s.Pods)
			}
			if err := kubelet.Down(kl.cfg.StateDir, kubelet.DownOptions{KeepLogs: true, Log: t.Output()}); err != nil {
				t.Errorf("kubelet down %s: %v", kl.cfg.NodeName, err)
			}
		}
	})
	return lab
}

func set(list []string) map[string]bool {
	m := map[string]bool{}
	for _, s := range list {
		m[s] = true
	}
	return m
}

// dumpLogs writes every log of the lab: control plane, kubelets,
// containers.
func (lab *kubeletLab) dumpLogs() {
	var b strings.Builder
	lab.cp.WriteLogTails(&b, 80)
	for _, kl := range lab.kubelets {
		proc.WriteTail(&b, kl.log, 300)
		files, _ := filepath.Glob(filepath.Join(kl.cfg.StateDir, kubelet.PodsDir, "*", "*.log"))
		for _, f := range files {
			proc.WriteTail(&b, f, 40)
		}
	}
	lab.t.Log("logs of the lab:\n" + b.String())
}

func (lab *kubeletLab) kubectl(args ...string) string {
	lab.t.Helper()
	out, err := lab.k.Run(lab.ctx, args...)
	if err != nil {
		lab.t.Fatal(err)
	}
	return out
}

func (lab *kubeletLab) apply(yaml string) {
	lab.t.Helper()
	if _, err := lab.k.RunStdin(lab.ctx, strings.NewReader(yaml), "apply", "-f", "-"); err != nil {
		lab.t.Fatal(err)
	}
}

// poll calls cond until it returns true, failing the test with cond's
// last explanation after timeout.
func (lab *kubeletLab) poll(timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	lab.t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return time.Since(start)
		}
		if time.Now().After(deadline) || lab.ctx.Err() != nil {
			lab.t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (lab *kubeletLab) pods(selector string) []v1.Pod {
	lab.t.Helper()
	l, err := lab.cs.CoreV1().Pods("default").List(lab.ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		lab.t.Fatal(err)
	}
	return l.Items
}

func podReady(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// readyPods waits until n pods match selector, all Running and Ready.
func (lab *kubeletLab) readyPods(selector string, n int, timeout time.Duration) ([]v1.Pod, time.Duration) {
	lab.t.Helper()
	var pods []v1.Pod
	d := lab.poll(timeout, fmt.Sprintf("%d ready pods %s", n, selector), func() (bool, string) {
		pods = lab.pods(selector)
		var states []string
		ready := 0
		for i := range pods {
			p := &pods[i]
			if p.DeletionTimestamp == nil && p.Status.Phase == v1.PodRunning && podReady(p) {
				ready++
			}
			states = append(states, fmt.Sprintf("%s on %q: %s ready=%v ip=%s", p.Name, p.Spec.NodeName, p.Status.Phase, podReady(p), p.Status.PodIP))
		}
		return ready == n && len(pods) == n, strings.Join(states, "; ")
	})
	return pods, d
}

func (lab *kubeletLab) node(name string) topology.Node {
	n, ok := lab.layout.Node(name)
	if !ok {
		lab.t.Fatalf("no lab node %q", name)
	}
	return n
}

// httpGetFrom sends GET url from inside the network namespace ns.
func httpGetFrom(ns, url string) (string, error) {
	tr := &http.Transport{
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
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// expectEcho checks that GET url from ns answers as echoserver:1.4 with
// client_address=client.
func (lab *kubeletLab) expectEcho(ns, url, client string) {
	lab.t.Helper()
	var page string
	var err error
	for range 20 { // a fresh veth may need a moment for its first ARP
		if page, err = httpGetFrom(ns, url); err == nil {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		lab.t.Errorf("GET %s from %s: %v", url, ns, err)
		return
	}
	if !strings.Contains(page, "CLIENT VALUES:") || !strings.Contains(page, "client_address="+client+"\n") {
		lab.t.Errorf("GET %s from %s: want client_address=%s, got:\n%s", url, ns, client, page)
		return
	}
	lab.t.Logf("GET %s from %s: client_address=%s", url, ns, client)
}

// TestLabKubelets brings up a 3-node lab with lab kubelets and runs the
// Kubernetes "Using Source IP" tutorial's app on it, checking the nodes,
// pods, EndpointSlices and the pod network with real traffic.
func TestLabKubelets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	lab := startKubeletLab(t, ctx, 3)
	l := lab.layout

	// --- Nodes: registered, Ready, schedulable, with the topology's
	// addresses and pod CIDRs.
	var start time.Time
	lab.poll(2*time.Minute, "3 Ready, schedulable nodes", func() (bool, string) {
		nodes, err := lab.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var states []string
		ok := 0
		for _, n := range nodes.Items {
			ready := false
			for _, c := range n.Status.Conditions {
				if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue {
					ready = true
				}
			}
			if ready && len(n.Spec.Taints) == 0 {
				ok++
			}
			states = append(states, fmt.Sprintf("%s ready=%v taints=%v", n.Name, ready, n.Spec.Taints))
		}
		return ok == 3 && len(nodes.Items) == 3, strings.Join(states, "; ")
	})
	t.Logf("TIMING kubelet start to 3 Ready, untainted nodes: %s", time.Since(lab.kubeletsStarted).Round(time.Millisecond))
	out := lab.kubectl("get", "nodes", "-o", "wide")
	if strings.Count(out, " Ready ") != 3 {
		t.Errorf("kubectl get nodes does not show 3 Ready nodes:\n%s", out)
	}
	for _, n := range l.Nodes {
		node, err := lab.cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var internal string
		for _, a := range node.Status.Addresses {
			if a.Type == v1.NodeInternalIP {
				internal = a.Address
			}
		}
		if internal != n.IPv4.String() || node.Spec.PodCIDR != n.PodCIDR.String() ||
			node.Labels["kubernetes.io/hostname"] != n.Name || node.Labels["kubernetes.io/os"] != "linux" {
			t.Errorf("node %s: InternalIP %s podCIDR %s labels %v; want %s, %s", n.Name, internal, node.Spec.PodCIDR, node.Labels, n.IPv4, n.PodCIDR)
		}
		if _, err := lab.cs.CoordinationV1().Leases(kubelet.NodeLeaseNamespace).Get(ctx, n.Name, metav1.GetOptions{}); err != nil {
			t.Errorf("node %s has no Lease: %v", n.Name, err)
		}
	}
	// The client on the LAN reaches every node's InternalIP.
	for _, n := range l.Nodes {
		var ln net.Listener
		if err := netns.Do(n.Netns, func() (err error) {
			ln, err = net.Listen("tcp", net.JoinHostPort(n.IPv4.String(), "9000"))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		go func() {
			c, err := ln.Accept()
			if err == nil {
				fmt.Fprint(c, n.Name)
				c.Close()
			}
		}()
		var got []byte
		err := netns.Do(l.Client, func() error {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(n.IPv4.String(), "9000"), 5*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			got, err = io.ReadAll(c)
			return err
		})
		ln.Close()
		if err != nil || string(got) != n.Name {
			t.Errorf("client -> %s (%s): %q %v", n.Name, n.IPv4, got, err)
		}
	}

	// --- The tutorial's app: a Running pod with an address of its
	// node's pod CIDR, and an EndpointSlice listing it as ready.
	start = time.Now()
	lab.kubectl("create", "deployment", "source-ip-app", "--image=registry.k8s.io/echoserver:1.4")
	pods, _ := lab.readyPods("app=source-ip-app", 1, 2*time.Minute)
	t.Logf("TIMING kubectl create deployment to a Running, Ready pod: %s", time.Since(start).Round(time.Millisecond))
	first := pods[0]
	ip := netip.MustParseAddr(first.Status.PodIP)
	if !lab.node(first.Spec.NodeName).PodCIDR.Contains(ip) {
		t.Errorf("pod %s on %s has IP %s outside the node's pod CIDR", first.Name, first.Spec.NodeName, ip)
	}
	if first.Status.HostIP != lab.node(first.Spec.NodeName).IPv4.String() {
		t.Errorf("pod hostIP %s", first.Status.HostIP)
	}
	lab.kubectl("get", "pods", "-o", "wide")
	// The kubelet reports what it did as events, as `kubectl describe`
	// shows them.
	lab.poll(30*time.Second, "a Started event from the kubelet", func() (bool, string) {
		evs, err := lab.cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + first.Name})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Reason == "Started" && e.Source.Component == "kubelet" && e.Source.Host == first.Spec.NodeName {
				return true, ""
			}
			seen = append(seen, e.Source.Component+"/"+e.Reason)
		}
		return false, fmt.Sprint(seen)
	})
	lab.kubectl("expose", "deployment", "source-ip-app", "--port=8080")
	lab.waitEndpoints("source-ip-app", map[string]bool{first.Status.PodIP: true})

	// --- Three replicas, spread over the nodes.
	start = time.Now()
	lab.kubectl("scale", "deployment", "source-ip-app", "--replicas=3")
	pods, _ = lab.readyPods("app=source-ip-app", 3, 2*time.Minute)
	t.Logf("TIMING scale to 3 replicas to all Ready: %s", time.Since(start).Round(time.Millisecond))
	lab.kubectl("get", "pods", "-o", "wide")
	byNode := map[string][]v1.Pod{}
	want := map[string]bool{}
	for _, p := range pods {
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
		want[p.Status.PodIP] = true
	}
	if len(byNode) < 2 {
		t.Fatalf("3 replicas all on one node: %v", byNode)
	}
	lab.waitEndpoints("source-ip-app", want)

	// --- The pod network across nodes: from every node to a pod on
	// another node, the echo shows the node's address; from a pod, the
	// pod's.
	otherPod := func(node string) v1.Pod {
		for n, ps := range byNode {
			if n != node {
				return ps[0]
			}
		}
		t.Fatalf("no pod off %s", node)
		return v1.Pod{}
	}
	for _, n := range l.Nodes {
		target := otherPod(n.Name)
		lab.expectEcho(n.Netns, "http://"+net.JoinHostPort(target.Status.PodIP, "8080")+"/", n.IPv4.String())
	}
	for _, src := range pods {
		target := otherPod(src.Spec.NodeName)
		srcNetns := kubelet.PodNetnsName(kubeletLabPrefix, src.Namespace, src.Name)
		lab.expectEcho(srcNetns, "http://"+net.JoinHostPort(target.Status.PodIP, "8080")+"/from-pod", src.Status.PodIP)
	}
	// The kubelets record those namespaces and processes.
	recorded := map[string]proc.Record{}
	for _, kl := range lab.kubelets {
		s, err := kubelet.ReadState(kl.cfg.StateDir)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range s.Pods {
			if r, ok := p.Processes["echoserver"]; ok && strings.HasPrefix(p.Name, "source-ip-app-") {
				recorded[p.Netns] = r
			}
		}
	}
	for _, p := range pods {
		ns := kubelet.PodNetnsName(kubeletLabPrefix, p.Namespace, p.Name)
		if r, ok := recorded[ns]; !ok || !r.Alive() {
			t.Errorf("pod %s: no live process recorded for netns %s (%+v)", p.Name, ns, recorded)
		}
	}

	// Subtests get the lab with their own *testing.T.
	sub := func(name string, f func(*kubeletLab)) {
		t.Run(name, func(t *testing.T) {
			c := *lab
			c.t = t
			f(&c)
		})
	}
	sub("readiness-probes", testProbes)
	sub("host-network-and-herald", testHostNetworkAndHerald)
	sub("unknown-image", testUnknownImage)
	sub("kubelet-crash", testKubeletCrash)
	sub("heartbeats", testHeartbeats)

	// --- Deleting the deployment stops the processes and removes the
	// pods' namespaces; the objects disappear.
	start = time.Now()
	lab.kubectl("delete", "deployment", "source-ip-app")
	lab.poll(2*time.Minute, "the deployment's pods to disappear", func() (bool, string) {
		left := lab.pods("app=source-ip-app")
		names := []string{}
		for _, p := range left {
			names = append(names, p.Name)
		}
		return len(left) == 0, fmt.Sprint(names)
	})
	t.Logf("TIMING delete deployment to all pods gone: %s", time.Since(start).Round(time.Millisecond))
	existing, err := topology.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for ns, r := range recorded {
		if existing.Netns[ns] {
			t.Errorf("pod namespace %s survived the pod", ns)
		}
		if r.Alive() {
			t.Errorf("process %d of %s survived the pod", r.PID, ns)
		}
	}
	lab.waitEndpoints("source-ip-app", map[string]bool{})
}

// waitEndpoints waits until the EndpointSlices of service list exactly
// the addresses in want, all ready, made by the endpointslice
// controller.
func (lab *kubeletLab) waitEndpoints(service string, want map[string]bool) {
	lab.t.Helper()
	d := lab.poll(90*time.Second, "EndpointSlices of "+service, func() (bool, string) {
		l, err := lab.cs.DiscoveryV1().EndpointSlices("default").List(lab.ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
		if err != nil {
			return false, err.Error()
		}
		got := map[string]bool{}
		var desc []string
		for _, s := range l.Items {
			if s.Labels[discoveryv1.LabelManagedBy] != "endpointslice-controller.k8s.io" {
				return false, "slice " + s.Name + " not managed by the endpointslice controller"
			}
			for _, e := range s.Endpoints {
				ready := e.Conditions.Ready != nil && *e.Conditions.Ready
				for _, a := range e.Addresses {
					got[a] = ready
					desc = append(desc, fmt.Sprintf("%s ready=%v node=%v", a, ready, strPtr(e.NodeName)))
				}
			}
		}
		if len(got) != len(want) {
			return false, strings.Join(desc, ", ")
		}
		for a := range want {
			if !got[a] {
				return false, strings.Join(desc, ", ")
			}
		}
		return true, ""
	})
	lab.t.Logf("EndpointSlices of %s list %d ready addresses (after %s)", service, len(want), d.Round(time.Millisecond))
}

func strPtr(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

func (lab *kubeletLab) pod(name string) *v1.Pod {
	lab.t.Helper()
	p, err := lab.cs.CoreV1().Pods("default").Get(lab.ctx, name, metav1.GetOptions{})
	if err != nil {
		lab.t.Fatal(err)
	}
	return p
}

// deletePods deletes pods by name and waits until they are gone.
func (lab *kubeletLab) deletePods(names ...string) {
	lab.t.Helper()
	lab.kubectl(append([]string{"delete", "pod", "--wait=false"}, names...)...)
	lab.poll(time.Minute, fmt.Sprintf("pods %v to disappear", names), func() (bool, string) {
		var left []string
		for _, n := range names {
			if _, err := lab.cs.CoreV1().Pods("default").Get(lab.ctx, n, metav1.GetOptions{}); err == nil {
				left = append(left, n)
			}
		}
		return len(left) == 0, fmt.Sprint(left)
	})
}

// testProbes: an httpGet readiness probe that passes makes the pod Ready;
// a tcpSocket probe on a closed port keeps it Running but not Ready, and
// the EndpointSlice says so.
func testProbes(lab *kubeletLab) {
	lab.apply(`
apiVersion: v1
kind: Pod
metadata: {name: probe-ok, labels: {app: probe}}
spec:
  containers:
  - name: echo
    image: registry.k8s.io/echoserver:1.4
    ports: [{name: http, containerPort: 8080}]
    readinessProbe:
      httpGet: {path: /healthz, port: http}
      periodSeconds: 1
---
apiVersion: v1
kind: Pod
metadata: {name: probe-bad, labels: {app: probe}}
spec:
  containers:
  - name: echo
    image: k8s.gcr.io/echoserver:1.4
    readinessProbe:
      tcpSocket: {port: 9999}
      periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata: {name: probe}
spec:
  selector: {app: probe}
  ports: [{port: 8080}]
`)
	lab.poll(time.Minute, "probe-ok Ready and probe-bad Running", func() (bool, string) {
		ok, bad := lab.pod("probe-ok"), lab.pod("probe-bad")
		return podReady(ok) && bad.Status.Phase == v1.PodRunning,
			fmt.Sprintf("probe-ok %s ready=%v, probe-bad %s", ok.Status.Phase, podReady(ok), bad.Status.Phase)
	})
	time.Sleep(3 * time.Second) // several failed probes
	bad := lab.pod("probe-bad")
	if podReady(bad) || len(bad.Status.ContainerStatuses) != 1 || bad.Status.ContainerStatuses[0].Ready {
		lab.t.Errorf("probe-bad is ready although its probe fails: %+v", bad.Status)
	}
	okIP, badIP := lab.pod("probe-ok").Status.PodIP, bad.Status.PodIP
	lab.poll(time.Minute, "probe EndpointSlice: probe-ok ready, probe-bad not", func() (bool, string) {
		l, err := lab.cs.DiscoveryV1().EndpointSlices("default").List(lab.ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=probe"})
		if err != nil {
			return false, err.Error()
		}
		got := map[string]bool{}
		for _, s := range l.Items {
			for _, e := range s.Endpoints {
				for _, a := range e.Addresses {
					got[a] = e.Conditions.Ready != nil && *e.Conditions.Ready
				}
			}
		}
		r1, ok1 := got[okIP]
		r2, ok2 := got[badIP]
		return ok1 && ok2 && r1 && !r2, fmt.Sprint(got)
	})
	lab.kubectl("delete", "service", "probe")
	lab.deletePods("probe-ok", "probe-bad")
}

// testHostNetworkAndHerald: a hostNetwork echoserver answers on its
// node's address (the client's own address shows); herald's image runs
// bin/herald with its args, downward-API env and restartPolicy.
func testHostNetworkAndHerald(lab *kubeletLab) {
	l := lab.layout
	node := l.Nodes[len(l.Nodes)-1]
	lab.apply(fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: host-echo}
spec:
  hostNetwork: true
  nodeSelector: {kubernetes.io/hostname: %[1]s}
  containers:
  - name: echo
    image: registry.k8s.io/echoserver:1.4
---
apiVersion: v1
kind: Pod
metadata: {name: herald-version}
spec:
  hostNetwork: true
  restartPolicy: Never
  nodeSelector: {kubernetes.io/hostname: %[1]s}
  containers:
  - name: herald
    image: %[2]s
    args: [version]
---
apiVersion: v1
kind: Pod
metadata: {name: herald-crash}
spec:
  restartPolicy: OnFailure
  containers:
  - name: herald
    image: herald:dev
    command: [/herald, validate]
    args: [-f, /nonexistent/$(NODE_NAME)/$(POD_IP)/$(HOST_IP)/$(POD_NAME).yaml]
    env:
    - {name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}
    - {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
    - {name: HOST_IP, valueFrom: {fieldRef: {fieldPath: status.hostIP}}}
    - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
---
apiVersion: v1
kind: Pod
metadata: {name: herald-fail}
spec:
  restartPolicy: Never
  containers:
  - name: herald
    image: %[2]s
    args: [validate, -f, /nonexistent.yaml]
`, node.Name, kubelet.HeraldImageName))

	lab.poll(time.Minute, "host-echo Ready", func() (bool, string) {
		p := lab.pod("host-echo")
		return podReady(p), string(p.Status.Phase)
	})
	if p := lab.pod("host-echo"); p.Status.PodIP != node.IPv4.String() {
		lab.t.Errorf("hostNetwork pod IP %s, want the node's %s", p.Status.PodIP, node.IPv4)
	}
	lab.expectEcho(l.Client, "http://"+net.JoinHostPort(node.IPv4.String(), "8080")+"/", topology.ClientV4.String())

	lab.poll(time.Minute, "herald-version Succeeded", func() (bool, string) {
		p := lab.pod("herald-version")
		return p.Status.Phase == v1.PodSucceeded, fmt.Sprintf("%s %+v", p.Status.Phase, p.Status.ContainerStatuses)
	})
	if cs := lab.pod("herald-version").Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Terminated == nil ||
		cs[0].State.Terminated.ExitCode != 0 || cs[0].State.Terminated.Reason != "Completed" {
		lab.t.Errorf("herald-version container: %+v", cs)
	}
	lab.poll(time.Minute, "herald-fail Failed", func() (bool, string) {
		p := lab.pod("herald-fail")
		return p.Status.Phase == v1.PodFailed, fmt.Sprintf("%s %+v", p.Status.Phase, p.Status.ContainerStatuses)
	})
	if cs := lab.pod("herald-fail").Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Terminated == nil ||
		cs[0].State.Terminated.ExitCode == 0 || cs[0].RestartCount != 0 {
		lab.t.Errorf("herald-fail container: %+v", cs)
	}
	var crash *v1.Pod
	lab.poll(time.Minute, "herald-crash restarted", func() (bool, string) {
		crash = lab.pod("herald-crash")
		cs := crash.Status.ContainerStatuses
		return crash.Status.Phase == v1.PodRunning && len(cs) == 1 && cs[0].RestartCount >= 2 &&
				cs[0].LastTerminationState.Terminated != nil && cs[0].LastTerminationState.Terminated.ExitCode != 0,
			fmt.Sprintf("%s %+v", crash.Status.Phase, cs)
	})
	// The container's log shows the arguments with the downward API's
	// values filled in.
	want := fmt.Sprintf("/nonexistent/%s/%s/%s/herald-crash.yaml", crash.Spec.NodeName, crash.Status.PodIP, lab.node(crash.Spec.NodeName).IPv4)
	kl := lab.kubelets[0]
	for _, k := range lab.kubelets {
		if k.cfg.NodeName == crash.Spec.NodeName {
			kl = k
		}
	}
	logPath := filepath.Join(kl.cfg.StateDir, kubelet.PodsDir, fmt.Sprintf("default_herald-crash_%s", crash.UID), "herald.log")
	data, err := os.ReadFile(logPath)
	if err != nil || !strings.Contains(string(data), want) {
		lab.t.Errorf("herald-crash log %s lacks %q (%v):\n%s", logPath, want, err, data)
	}
	lab.deletePods("host-echo", "herald-version", "herald-crash", "herald-fail")
}

// testUnknownImage: an image the lab cannot run leaves the container
// Waiting with a clear reason, the pod Pending, the kubelet alive; the pod
// can still be deleted.
func testUnknownImage(lab *kubeletLab) {
	lab.kubectl("run", "unknown-image", "--image=nginx:1.27", "--restart=Never")
	lab.poll(time.Minute, "unknown-image Waiting in ErrImagePull", func() (bool, string) {
		p := lab.pod("unknown-image")
		cs := p.Status.ContainerStatuses
		return p.Status.Phase == v1.PodPending && len(cs) == 1 && cs[0].State.Waiting != nil &&
				cs[0].State.Waiting.Reason == "ErrImagePull" && strings.Contains(cs[0].State.Waiting.Message, `"nginx:1.27"`),
			fmt.Sprintf("%s %+v", p.Status.Phase, cs)
	})
	lab.kubectl("get", "pod", "unknown-image", "-o", "jsonpath={.status.containerStatuses[0].state.waiting}")
	for _, kl := range lab.kubelets {
		if kl.p.Exited() {
			lab.t.Errorf("kubelet %s exited: %v", kl.cfg.NodeName, kl.p.Err())
		}
	}
	lab.deletePods("unknown-image")
}

// testKubeletCrash: a SIGKILLed kubelet takes its containers with it (they
// die with their parent), kubelet.Down removes the namespaces it left, and
// a new kubelet with the same state directory runs the node's pods again.
func testKubeletCrash(lab *kubeletLab) {
	kl := lab.kubelets[0]
	lab.apply(fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: crash-victim}
spec:
  nodeSelector: {kubernetes.io/hostname: %s}
  containers:
  - name: echo
    image: registry.k8s.io/echoserver:1.4
`, kl.cfg.NodeName))
	lab.poll(time.Minute, "crash-victim Ready", func() (bool, string) {
		p := lab.pod("crash-victim")
		return podReady(p), string(p.Status.Phase)
	})
	s, err := kubelet.ReadState(kl.cfg.StateDir)
	if err != nil {
		lab.t.Fatal(err)
	}
	var rec kubelet.PodRecord
	for _, p := range s.Pods {
		if p.Name == "crash-victim" {
			rec = p
		}
	}
	container, ok := rec.Processes["echo"]
	if !ok || rec.Netns == "" {
		lab.t.Fatalf("no record of crash-victim in %+v", s)
	}

	if err := syscall.Kill(kl.p.PID, syscall.SIGKILL); err != nil {
		lab.t.Fatal(err)
	}
	<-kl.p.Done()
	lab.poll(10*time.Second, "the container to die with its kubelet", func() (bool, string) {
		return !container.Alive(), fmt.Sprintf("pid %d alive", container.PID)
	})
	existing, _ := topology.Observe(lab.ctx)
	if !existing.Netns[rec.Netns] {
		lab.t.Errorf("expected %s to be left behind by the killed kubelet", rec.Netns)
	}
	if err := kubelet.Down(kl.cfg.StateDir, kubelet.DownOptions{KeepLogs: true, Log: lab.t.Output()}); err != nil {
		lab.t.Fatal(err)
	}
	existing, _ = topology.Observe(lab.ctx)
	if existing.Netns[rec.Netns] {
		lab.t.Errorf("down left %s", rec.Netns)
	}

	// A new kubelet picks the node's pods up again.
	if kl.p, err = kubelet.Start(kl.cfg, kubelet.StartOptions{Binary: lab.bins.Path(labbin.Kubelet), LogPath: kl.log, KillWithParent: true}); err != nil {
		lab.t.Fatal(err)
	}
	var p *v1.Pod
	lab.poll(time.Minute, "crash-victim running again under the new kubelet", func() (bool, string) {
		p = lab.pod("crash-victim")
		cs := p.Status.ContainerStatuses
		return podReady(p) && len(cs) == 1 && cs[0].ContainerID != "" && cs[0].ContainerID != lab.containerIDBefore(rec),
			fmt.Sprintf("%s ready=%v %+v", p.Status.Phase, podReady(p), cs)
	})
	// From its own node a pod is reached over the pod bridge, from the
	// node's address there.
	lab.expectEcho(kl.cfg.NodeNetns, "http://"+net.JoinHostPort(p.Status.PodIP, "8080")+"/", kl.cfg.PodGateway.String())
	lab.deletePods("crash-victim")
}

// containerIDBefore is the container ID the kubelet reported for the
// recorded process.
func (lab *kubeletLab) containerIDBefore(rec kubelet.PodRecord) string {
	return fmt.Sprintf("lab://%s/%d", rec.Netns, rec.Processes["echo"].PID)
}

// testHeartbeats: every node's Lease is renewed and its Ready condition's
// heartbeat refreshed (every 10s).
func testHeartbeats(lab *kubeletLab) {
	first := map[string]time.Time{}
	for _, n := range lab.layout.Nodes {
		l, err := lab.cs.CoordinationV1().Leases(kubelet.NodeLeaseNamespace).Get(lab.ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			lab.t.Fatal(err)
		}
		first[n.Name] = l.Spec.RenewTime.Time
	}
	lab.poll(30*time.Second, "renewed Leases and node heartbeats", func() (bool, string) {
		var stale []string
		for _, n := range lab.layout.Nodes {
			l, err := lab.cs.CoordinationV1().Leases(kubelet.NodeLeaseNamespace).Get(lab.ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			node, err := lab.cs.CoreV1().Nodes().Get(lab.ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			var hb time.Time
			for _, c := range node.Status.Conditions {
				if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue {
					hb = c.LastHeartbeatTime.Time
				}
			}
			if !l.Spec.RenewTime.Time.After(first[n.Name]) || hb.Before(first[n.Name].Truncate(time.Second)) {
				stale = append(stale, fmt.Sprintf("%s lease %s heartbeat %s", n.Name, l.Spec.RenewTime.Time, hb))
			}
		}
		return len(stale) == 0, strings.Join(stale, "; ")
	})
}
