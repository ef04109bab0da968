package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/herald-lb/herald/e2e/lab/clusterdns"
	"github.com/herald-lb/herald/e2e/lab/e2eimages"
	"github.com/herald-lb/herald/e2e/lab/kubelet"
	"github.com/herald-lb/herald/e2e/lab/labbin"
	"github.com/herald-lb/herald/e2e/lab/pki"
	"github.com/herald-lb/herald/e2e/lab/proc"
	"github.com/herald-lb/herald/e2e/lab/realnode"
	"github.com/herald-lb/herald/e2e/lab/topology"
	"github.com/herald-lb/herald/e2e/lab/walkthrough"
)

// RealNodesEnv=1 gives the e2e tests' labs real nodes (Options.RealNodes).
const RealNodesEnv = "HERALD_LAB_REAL_NODES"

// cgroupBase holds every real node's cgroup subtree, in every hierarchy.
const cgroupBase = "/herald-lab"

// imageArchivesDir, in the e2e cache, keeps `podman save` archives by
// image ID, so an image is saved once and loaded into every node.
const imageArchivesDir = "realnode-images"

// realNodeConfig is node n's real-node configuration.
func (l *Lab) realNodeConfig(n topology.Node) realnode.Config {
	c := realnode.Config{
		Lab: l.Prefix, Name: n.Name, Netns: n.Netns,
		IPv4: n.IPv4, IPv6: n.IPv6,
		PodCIDR: n.PodCIDR, PodCIDRv6: n.PodCIDRv6, PodGateway: n.PodGateway, PodGatewayV6: n.PodGatewayV6,
		Bridge:       kubelet.DefaultPodBridge,
		Dir:          filepath.Join(l.StateDir, "nodes", n.Name),
		CgroupParent: cgroupBase + "/" + l.Prefix + "-" + n.Name,
		Runc:         l.Bins.Path(labbin.LabRunc),
		CNIBinDir:    cniBinDir(),
		SandboxImage: e2eimages.LabRefs("")[e2eimages.Pause],
	}
	if l.DNS {
		c.ClusterDNS = []string{clusterdns.ServiceIP(topology.ServiceCIDR).String()}
		c.ClusterDomain = clusterdns.Domain
	}
	return c
}

// cniBinDir is where Debian's containernetworking-plugins put the
// plugins.
func cniBinDir() string {
	for _, d := range []string{"/usr/lib/cni", "/opt/cni/bin"} {
		if _, err := os.Stat(filepath.Join(d, "bridge")); err == nil {
			return d
		}
	}
	return "/usr/lib/cni"
}

// startRealNodes brings every node up as a real node: the kernel
// tunables kubelet wants (recorded, for Down to restore), the Node
// objects with the topology's pod CIDRs (kubelet takes them over: its
// controller-manager would otherwise hand out CIDRs in registration
// order, which the lab's routes do not follow), the images, then per
// node its containerd and kubelet.
func (l *Lab) startRealNodes(ctx context.Context) error {
	for _, tool := range []string{"nsenter", "runc", "podman"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("real nodes need %s (hack/bootstrap.sh installs it): %w", tool, err)
		}
	}
	if _, err := os.Stat(filepath.Join(cniBinDir(), "bridge")); err != nil {
		return fmt.Errorf("real nodes need the CNI plugins (Debian's containernetworking-plugins): %w", err)
	}
	start := time.Now()
	archives, err := l.realNodeImages(ctx)
	if err != nil {
		return err
	}
	l.logf("images for real nodes ready in %s: %d archives", since(start), len(archives))

	// Recorded before anything changes, so that a crash in between
	// still restores what was there.
	old, err := realnode.SysctlsToChange(realnode.SysctlDir, realnode.KubeletSysctls)
	if err != nil {
		return err
	}
	if l.Sysctls == nil {
		l.Sysctls = map[string]string{}
	}
	for k, v := range old {
		l.Sysctls[k] = v
	}
	if err := l.save(); err != nil {
		return err
	}
	if err := realnode.SetSysctls(realnode.SysctlDir, realnode.KubeletSysctls); err != nil {
		return err
	}
	if err := l.createNodes(ctx); err != nil {
		return err
	}
	ca, err := pki.LoadCA(l.ControlPlane.PKIDir(), "ca")
	if err != nil {
		return err
	}
	bins := realnode.Bins{
		Containerd: l.Bins.Path(labbin.Containerd), Shim: l.Bins.Path(labbin.Shim), Ctr: l.Bins.Path(labbin.Ctr),
		Kubelet: l.K8s.Tool("kubelet"),
	}
	// Every node's state is recorded before any of them starts, so Down
	// finds them all whatever fails; then the nodes start at once (each
	// containerd takes seconds to start and load the images).
	nodes := make([]*realnode.Node, len(l.Layout.Nodes))
	for i, n := range l.Layout.Nodes {
		nodes[i] = &realnode.Node{Config: l.realNodeConfig(n)}
		l.RealNodeStates = append(l.RealNodeStates, nodes[i].State())
	}
	if err := l.save(); err != nil {
		return err
	}
	var mu sync.Mutex // l's state and its file
	record := func(node *realnode.Node) error {
		mu.Lock()
		defer mu.Unlock()
		l.setRealNode(node)
		return l.save()
	}
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range l.Layout.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = l.startRealNode(ctx, n, nodes[i], ca, bins, archives, record)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	l.Real = nodes
	return nil
}

// startRealNode writes node n's files and starts its containerd, then
// its kubelet, recording each process as it starts.
func (l *Lab) startRealNode(ctx context.Context, n topology.Node, node *realnode.Node, ca *pki.CA, bins realnode.Bins, archives []string, record func(*realnode.Node) error) error {
	c := node.Config
	if err := realnode.Prepare(c); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	if err := kubelet.WriteNodeKubeconfig(c.Kubeconfig(), n.Name, l.APIServerURL, ca); err != nil {
		return err
	}
	kc := kubelet.ForNode(l.Layout, n)
	kc.TLSCertFile, kc.TLSKeyFile, kc.ClientCAFile = c.ServingCert(), c.ServingKey(), c.ClientCA()
	if err := kubelet.WriteServingCert(kc, ca); err != nil {
		return err
	}
	opts := realnode.StartOptions{Bins: bins, Images: archives, KillWithParent: l.killWithParent, Log: l.log}
	t0 := time.Now()
	var err error
	if node.Containerd, err = realnode.StartRuntime(ctx, c, opts); err != nil {
		return err
	}
	if err := record(node); err != nil {
		return err
	}
	tRuntime := since(t0)
	if node.Kubelet, err = realnode.StartKubelet(c, opts); err != nil {
		return err
	}
	if err := record(node); err != nil {
		return err
	}
	l.logf("real node %s: containerd up with %d images in %s, kubelet started", n.Name, len(archives), tRuntime)
	return nil
}

func (l *Lab) setRealNode(n *realnode.Node) {
	for i := range l.RealNodeStates {
		if l.RealNodeStates[i].Name == n.Config.Name {
			l.RealNodeStates[i] = n.State()
		}
	}
}

// createNodes creates the Node objects with the lab's pod CIDRs before
// their kubelets start; a kubelet that finds its Node adopts it.
func (l *Lab) createNodes(ctx context.Context) error {
	var b strings.Builder
	for _, n := range l.Layout.Nodes {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Node
metadata:
  name: %s
  labels: {kubernetes.io/hostname: %s, kubernetes.io/os: linux, %s: %s}
spec:
  podCIDR: %s
  podCIDRs: [%s, %s]
`, n.Name, n.Name, topology.ZoneLabel, n.Zone, n.PodCIDR, n.PodCIDR, n.PodCIDRv6)
	}
	_, err := l.kubectlClient().RunStdin(ctx, strings.NewReader(b.String()), "create", "-f", "-")
	return err
}

// realNodeImages makes sure the images real nodes run are in podman's
// storage (the upstream suite's pause, busybox and agnhost, the
// tutorial's echoserver, and unless the lab is bare herald's), and
// returns an archive of each for the nodes' runtimes.
func (l *Lab) realNodeImages(ctx context.Context) ([]string, error) {
	kubeProxy := ""
	if l.Proxy == ProxyKubeProxy {
		kubeProxy = l.K8s.Version
	}
	refs := e2eimages.LabRefs(kubeProxy)
	if l.ImageMode {
		// Image mode on real nodes is for upstream's suite: every image
		// of the pinned framework goes to the nodes, which pull nothing.
		for name, ref := range e2eimages.FrameworkRefs() {
			refs[name] = ref
		}
	}
	res, err := e2eimages.Ensure(ctx, e2eimages.Options{ModuleDir: l.ModuleDir, Refs: refs, Log: l.log})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, im := range res.Images {
		ids = append(ids, im.ID)
	}
	if l.DNS {
		id, err := podmanImageID(ctx, l.dnsImage)
		if err != nil {
			return nil, fmt.Errorf("the cluster DNS image %s: %w", l.dnsImage, err)
		}
		ids = append(ids, id)
	}
	// herald's image goes to the nodes even in a bare lab: its tests
	// install herald themselves (helm install), and nodes pull nothing.
	switch id, err := podmanImageID(ctx, kubelet.HeraldImageName); {
	case err == nil:
		ids = append(ids, id)
	case !l.Bare:
		return nil, fmt.Errorf("real nodes run herald from its image, which podman's storage lacks (run `make image`): %w", err)
	default:
		l.logf("real nodes: no %s in podman's storage (make image): a later herald install will find no image", kubelet.HeraldImageName)
	}
	dir := filepath.Join(l.ModuleDir, "_cache", imageArchivesDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var out []string
	for _, id := range ids {
		path := filepath.Join(dir, id+".tar")
		if _, err := os.Stat(path); err != nil {
			tmp := path + ".tmp"
			// The archive names the image by its references, which the
			// runtime keeps on import.
			names, err := podmanImageNames(ctx, id)
			if err != nil {
				return nil, err
			}
			args := append([]string{"save", "-q", "--format", "oci-archive", "-o", tmp}, names...)
			if cmd := exec.CommandContext(ctx, "podman", args...); true {
				if o, err := cmd.CombinedOutput(); err != nil {
					_ = os.Remove(tmp)
					return nil, fmt.Errorf("podman save %s: %w: %s", strings.Join(names, " "), err, strings.TrimSpace(string(o)))
				}
			}
			if err := os.Rename(tmp, path); err != nil {
				return nil, err
			}
		}
		out = append(out, path)
	}
	return out, nil
}

func podmanImageID(ctx context.Context, ref string) (string, error) {
	out, err := exec.CommandContext(ctx, "podman", "image", "inspect", "--format", "{{.Id}}", ref).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("podman image inspect %s: %w: %s", ref, err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

func podmanImageNames(ctx context.Context, id string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "podman", "image", "inspect", "--format", "{{range .RepoTags}}{{.}} {{end}}", id).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("podman image inspect %s: %w: %s", id, err, strings.TrimSpace(string(out)))
	}
	names := strings.Fields(string(out))
	if len(names) == 0 {
		return nil, fmt.Errorf("image %s has no name", id)
	}
	return names, nil
}

// downRealNodes stops the real nodes recorded in s, restores the kernel
// tunables, and removes the lab's cgroup parent if it is empty.
func downRealNodes(s State, keepLogs bool, log func(string, ...any)) []error {
	var errs []error
	for _, n := range s.RealNodeStates {
		log("lab: stopping real node %s (kubelet, containers, containerd)", n.Name)
		if err := realnode.Down(n, keepLogs); err != nil {
			errs = append(errs, fmt.Errorf("real node %s: %w", n.Name, err))
		}
	}
	if len(s.RealNodeStates) > 0 {
		realnode.RemoveEmptyCgroup(cgroupBase)
		// The pods' namespaces PodNetns named.
		handles, _ := filepath.Glob(filepath.Join(realnode.NetnsDir, s.Prefix+"-pod-*"))
		for _, h := range handles {
			if err := realnode.DetachNetns(filepath.Base(h)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(s.Sysctls) > 0 {
		if err := realnode.RestoreSysctls(realnode.SysctlDir, s.Sysctls); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// realNodeProcesses are the real nodes' processes, for the health checks.
func (s State) realNodeProcesses() []proc.Record {
	var out []proc.Record
	for _, n := range s.RealNodeStates {
		out = append(out, n.Processes...)
	}
	return out
}

// HelmEnv names the Helm binary the lab installs herald with on real
// nodes (make sets it to the pinned one); unset: <repo>/bin/helm.
const HelmEnv = "HERALD_HELM"

// helmBinary is the Helm the lab uses.
func (l *Lab) helmBinary() (string, error) {
	p := os.Getenv(HelmEnv)
	if p == "" {
		p = filepath.Join(l.ModuleDir, "..", "bin", "helm")
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("real nodes install herald with Helm, and there is none at %s: run `make helm` (it installs the pinned Helm into bin/helm) or set %s: %w", p, HelmEnv, err)
	}
	return p, nil
}

// HeraldRelease is the Helm release real nodes install herald as.
const HeraldRelease = "herald"

// ChartDir is charts/herald of the root module.
func ChartDir(e2eModuleDir string) string {
	return filepath.Join(e2eModuleDir, "..", "charts", "herald")
}

// HelmValues are the chart values a real-node lab installs herald with:
// its image from the nodes' runtimes (never pulled), the API server's
// own address (with herald as the proxy nothing else leads there), the
// lab's pod network for the proxy, with kube-proxy no proxy of herald's,
// and in namespace ns the speakers' pods with ns's labels
// (speakerPodLabels).
func HelmValues(apiServerURL, proxy, ns string) ([]string, error) {
	host, port, err := splitHostPort(apiServerURL)
	if err != nil {
		return nil, err
	}
	ref := kubelet.HeraldImageName
	repo, tag, _ := strings.Cut(ref[strings.LastIndexByte(ref, '/')+1:], ":")
	repo = ref[:strings.LastIndexByte(ref, '/')+1] + repo
	vals := []string{
		"image.repository=" + repo, "image.tag=" + tag, "image.pullPolicy=Never",
		"apiServer.host=" + host, "apiServer.port=" + port,
		"proxy.clusterCIDR=" + strings.Join(clusterCIDRs(), `\,`),
	}
	if proxy == ProxyKubeProxy {
		vals = append(vals, "proxy.mode=disabled")
	} else {
		// kube-proxy's conntrack settings, as kube-proxy writes them in
		// the lab: like for like in the comparisons (the TCP CLOSE_WAIT
		// conformance test reads one).
		vals = append(vals, "proxy.conntrack.privilegedInit=true")
	}
	if ns == KubeSystem {
		// There already, exempt from Pod Security on kubeadm clusters
		// (and in the lab), and not herald's to label.
		vals = append(vals, "podSecurity.labelNamespace=false")
	}
	for _, k := range slices.Sorted(maps.Keys(speakerPodLabels(ns))) {
		vals = append(vals, "speaker.podLabels."+k+"="+speakerPodLabels(ns)[k])
	}
	return vals, nil
}

// installHeraldChart installs herald with its Helm chart into its
// namespace (created by Helm, labelled by the chart's hook), as
// docs/install.md tells users to.
func (l *Lab) installHeraldChart(ctx context.Context) error {
	helm, err := l.helmBinary()
	if err != nil {
		return err
	}
	vals, err := HelmValues(l.APIServerURL, l.Proxy, l.HeraldNS())
	if err != nil {
		return err
	}
	args := []string{"install", HeraldRelease, ChartDir(l.ModuleDir), "--kubeconfig", l.Kubeconfig,
		"-n", l.HeraldNS(), "--create-namespace", "--skip-crds", "--wait", "--timeout", "3m"}
	for _, v := range vals {
		args = append(args, "--set", v)
	}
	start := time.Now()
	out, err := exec.CommandContext(ctx, helm, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	l.logf("herald installed with its Helm chart in %s", since(start))
	return nil
}

func splitHostPort(rawURL string) (host, port string, err error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Hostname() == "" || u.Port() == "" {
		return "", "", fmt.Errorf("the API server URL %q has no host and port", rawURL)
	}
	return u.Hostname(), u.Port(), nil
}

// WalkthroughEnv is the source-IP walkthrough's environment for this lab.
func (s State) WalkthroughEnv(l topology.Layout, out io.Writer) walkthrough.Env {
	return walkthrough.Env{Layout: l, Kubectl: s.KubectlClient(), Out: out, RealNodes: s.RealNodes, BusyBox: e2eimages.LabRefs("")[e2eimages.BusyBox]}
}

// PodNetns is the name of a named network namespace (ip netns) that is
// pod's, for tests that open sockets from inside a pod. The lab kubelet
// names every pod's namespace so; on real nodes the runtime keeps them
// under its state directory, and the pod's namespace is attached under
// the same name (`ip netns attach`) from a process of the pod, found in
// the pod's cgroup; again if the pod's sandbox changed since.
func (l *Lab) PodNetns(ctx context.Context, namespace, pod string) (string, error) {
	name := kubelet.PodNetnsName(l.Prefix, namespace, pod)
	if !l.RealNodes {
		return name, nil
	}
	out, err := l.kubectlClient().Output(ctx, "-n", namespace, "get", "pod", pod, "-o", "jsonpath={.metadata.uid} {.spec.nodeName}")
	if err != nil {
		return "", err
	}
	f := strings.Fields(out)
	if len(f) != 2 {
		return "", fmt.Errorf("pod %s/%s is not scheduled yet", namespace, pod)
	}
	n, ok := l.Layout.Node(f[1])
	if !ok {
		return "", fmt.Errorf("pod %s/%s runs on %s, not a lab node", namespace, pod, f[1])
	}
	pid, err := realnode.PodPID(l.realNodeConfig(n).PodsCgroup(), f[0])
	if err != nil {
		return "", fmt.Errorf("pod %s/%s: %w", namespace, pod, err)
	}
	return name, realnode.AttachNetns(name, pid)
}

// LoadImages loads images from podman's storage into every real node's
// runtime (a test's new tag of herald's image, say). Labs of lab kubelets
// read podman's storage themselves: nothing to do there.
func (l *Lab) LoadImages(ctx context.Context, refs ...string) error {
	if !l.RealNodes {
		return nil
	}
	dir, err := os.MkdirTemp("", "herald-lab-images-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	archive := filepath.Join(dir, "images.tar")
	if out, err := exec.CommandContext(ctx, "podman", append([]string{"save", "-q", "--format", "oci-archive", "-o", archive}, refs...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("podman save %s: %w: %s", strings.Join(refs, " "), err, strings.TrimSpace(string(out)))
	}
	for _, n := range l.Layout.Nodes {
		c := l.realNodeConfig(n)
		cmd := exec.CommandContext(ctx, l.Bins.Path(labbin.Ctr), "--address", c.Socket(), "--namespace", "k8s.io", "images", "import", archive)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("loading %s into %s: %w: %s", strings.Join(refs, " "), n.Name, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// ContainerPID is the main process of a container, from the ID in its
// status: the lab kubelet writes lab://NETNS/PID; on real nodes it is
// containerd://ID, whose process the runc shim records in the task's
// init.pid under the node's containerd state.
func (l *Lab) ContainerPID(node, containerID string) (int, error) {
	if rest, ok := strings.CutPrefix(containerID, "lab://"); ok {
		i := strings.LastIndexByte(rest, '/')
		if i < 0 {
			return 0, fmt.Errorf("container ID %q is not lab://NETNS/PID", containerID)
		}
		return strconv.Atoi(rest[i+1:])
	}
	id, ok := strings.CutPrefix(containerID, "containerd://")
	if !ok || !l.RealNodes || id == "" {
		return 0, fmt.Errorf("container ID %q: neither lab://NETNS/PID nor a real node's containerd://ID", containerID)
	}
	n, ok := l.Layout.Node(node)
	if !ok {
		return 0, fmt.Errorf("container %s: %s is not a lab node", id, node)
	}
	data, err := os.ReadFile(filepath.Join(l.realNodeConfig(n).ContainerdState(), "io.containerd.runtime.v2.task", "k8s.io", id, "init.pid"))
	if err != nil {
		return 0, fmt.Errorf("container %s on %s: %w", id, node, err)
	}
	return strconv.Atoi(strings.TrimSpace(string(data)))
}

// PodLogFiles are the log files the node keeps of container in the pods
// of namespace whose names start with podPrefix: the lab kubelet keeps
// one file per container (every run, deleted pods too) under its
// state; a real kubelet one file per run under its pod log directory,
// for the pods that still exist.
func (l *Lab) PodLogFiles(node, namespace, podPrefix, container string) []string {
	n, ok := l.Layout.Node(node)
	if !ok {
		return nil
	}
	if l.RealNodes {
		files, _ := filepath.Glob(filepath.Join(l.realNodeConfig(n).PodLogs(), namespace+"_"+podPrefix+"*", container, "*.log"))
		return files
	}
	for _, k := range l.Kubelets {
		if k.Config.NodeName == node {
			files, _ := filepath.Glob(filepath.Join(k.Config.StateDir, kubelet.PodsDir, namespace+"_"+podPrefix+"*", container+"*.log"))
			return files
		}
	}
	return nil
}

// NodeLogs are every log file of a node: its kubelet's (and runtime's)
// and its containers'.
func (l *Lab) NodeLogs(node string) []string {
	n, ok := l.Layout.Node(node)
	if !ok {
		return nil
	}
	if l.RealNodes {
		c := l.realNodeConfig(n)
		files := []string{filepath.Join(c.Dir, "kubelet.log"), filepath.Join(c.Dir, "containerd.log")}
		more, _ := filepath.Glob(filepath.Join(c.PodLogs(), "*", "*", "*.log"))
		return append(files, more...)
	}
	for _, k := range l.Kubelets {
		if k.Config.NodeName == node {
			files, _ := filepath.Glob(filepath.Join(k.Config.StateDir, kubelet.PodsDir, "*", "*.log"))
			return append([]string{k.Log}, files...)
		}
	}
	return nil
}
