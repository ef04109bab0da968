// Package cluster brings the whole lab up and down: topology, control
// plane on the host's LAN address, one lab kubelet per node, the CRDs and
// herald. Up records every process and object in one state file, so Down
// removes all of it, also after the process that ran Up crashed.
package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/herald-lb/herald/e2e/lab/clusterdns"
	"github.com/herald-lb/herald/e2e/lab/controlplane"
	"github.com/herald-lb/herald/e2e/lab/k8sbin"
	"github.com/herald-lb/herald/e2e/lab/kubectl"
	"github.com/herald-lb/herald/e2e/lab/kubelet"
	"github.com/herald-lb/herald/e2e/lab/labbin"
	"github.com/herald-lb/herald/e2e/lab/pki"
	"github.com/herald-lb/herald/e2e/lab/proc"
	"github.com/herald-lb/herald/e2e/lab/realnode"
	"github.com/herald-lb/herald/e2e/lab/router"
	"github.com/herald-lb/herald/e2e/lab/statefile"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// Defaults of Options.
const (
	DefaultPrefix = "hlab"
	DefaultNodes  = 3
	// StateFile is the lab's record inside its state directory.
	StateFile = "lab.json"
	// ImageModeEnv=1 selects image mode (Options.ImageMode), also for the
	// e2e tests' labs.
	ImageModeEnv = "HERALD_LAB_IMAGE"
	// ProxyEnv chooses the service proxy (Options.Proxy) when the
	// options leave it empty, also for the e2e tests' labs.
	ProxyEnv = "HERALD_LAB_PROXY"
)

// DefaultStateDir is where `herald-lab` keeps a lab of the given prefix.
func DefaultStateDir(prefix string) string {
	return filepath.Join(os.TempDir(), "herald-lab", prefix)
}

// Options say what lab to build.
type Options struct {
	// Prefix starts every name the lab creates (topology.Plan).
	Prefix string
	Nodes  int
	// StateDir holds the state file, the control plane's files and the
	// kubelets' directories. It must not hold a lab already.
	StateDir string
	// ModuleDir is the e2e module (for building the lab's programs);
	// empty: found from the current directory.
	ModuleDir string
	// Bare leaves herald out: a plain cluster (with Proxy herald, one
	// without a service proxy).
	Bare bool
	// Proxy is the service proxy: ProxyHerald (herald's, in its
	// speakers) or ProxyKubeProxy (kube-proxy as a DaemonSet, herald's
	// speakers with their proxy off). Empty: $HERALD_LAB_PROXY, else
	// herald.
	Proxy string
	// ImageMode runs herald's pods from its image in podman's local
	// storage under runc (kubelet.Config.ImageMode) instead of the host's
	// binary. HERALD_LAB_IMAGE=1 in the environment turns it on.
	ImageMode bool
	// DNS runs the cluster DNS (CoreDNS as kubeadm installs it, from its
	// image: image mode only) and points the pods' resolv.conf at it.
	DNS bool
	// RealNodes runs the real kubelet with containerd, runc and CNI
	// plugins on each node (package realnode) instead of the lab kubelet.
	// Pods then always run from images. HERALD_LAB_REAL_NODES=1 in the
	// environment turns it on.
	RealNodes bool
	// KillWithParent ties every process to the caller (tests); the CLI
	// leaves it off so the lab outlives `herald-lab up`.
	KillWithParent bool
	// WaitForOthers makes Up wait for another lab on the machine to go
	// down (tests); without it Up refuses at once (the CLI).
	WaitForOthers bool
	// BeforeUp, when set, runs once the lab holds the machine's lab lock
	// and before it changes anything (tests record the machine's state).
	BeforeUp func() error
	// HeraldNamespace is where herald is installed: empty or
	// HeraldNamespace (herald-system), as its manifests and docs say, or,
	// with herald's proxy, KubeSystem, where kubeadm runs kube-proxy; the
	// speakers' pods (the nodes' proxies) then carry kube-proxy's labels
	// too (KubeProxyPodLabels).
	HeraldNamespace string
	// K8sVersion is the k8s.io/kubernetes release the control plane,
	// kubelet, kube-proxy and kubectl are built from (k8sbin.Options.Version;
	// the lab kubelet and herald keep their own client libraries).
	// Empty: $HERALD_LAB_K8S_VERSION, else the release e2e/go.mod pins.
	K8sVersion string
	// Log receives progress; nil discards it.
	Log io.Writer
}

// State is the lab's record on disk.
type State struct {
	Prefix    string `json:"prefix"`
	Nodes     int    `json:"nodes"`
	Bare      bool   `json:"bare"`
	ImageMode bool   `json:"imageMode,omitempty"`
	DNS       bool   `json:"dns,omitempty"`
	RealNodes bool   `json:"realNodes,omitempty"`
	Proxy     string `json:"proxy,omitempty"` // Options.Proxy; see ProxyOf
	// HeraldNamespace is Options.HeraldNamespace (empty: herald-system);
	// see HeraldNS.
	HeraldNamespace string `json:"heraldNamespace,omitempty"`
	// K8sVersion is the Kubernetes release the lab runs (empty in labs
	// recorded before it could be chosen: the pinned one).
	K8sVersion string    `json:"k8sVersion,omitempty"`
	StateDir   string    `json:"stateDir"`
	CreatedAt  time.Time `json:"createdAt"`
	// Phase is "starting" until Up finished, then "up".
	Phase           string `json:"phase"`
	APIServerURL    string `json:"apiServerURL"`
	Kubeconfig      string `json:"kubeconfig"`
	KubectlPath     string `json:"kubectl"`
	ModuleDir       string `json:"moduleDir"`
	ControlPlaneDir string `json:"controlPlaneDir"`
	// CreatedDirs are machine directories the lab made (mount points),
	// removed by Down.
	CreatedDirs []string       `json:"createdDirs,omitempty"`
	Kubelets    []KubeletState `json:"kubelets"`
	// FRRDir holds the router's FRR instance (sockets, config, logs);
	// FRR are its daemons.
	FRRDir string        `json:"frrDir,omitempty"`
	FRR    []proc.Record `json:"frr,omitempty"`
	// RealNodeStates are the real nodes (Options.RealNodes); Sysctls the
	// kernel tunables the lab changed for their kubelets, with the
	// values Down puts back.
	RealNodeStates []realnode.State  `json:"realNodeStates,omitempty"`
	Sysctls        map[string]string `json:"sysctls,omitempty"`
}

// RouterASN is the lab router's AS; it accepts BGP sessions from any
// address on the LAN with any other AS (eBGP), so speakers need no
// per-node router configuration.
const RouterASN = 64512

// RouterConfig is the FRR configuration the lab starts its router with.
func RouterConfig() router.RouterBGP {
	return router.RouterBGP{
		ASN:          RouterASN,
		RouterID:     topology.RouterLANv4,
		MaximumPaths: topology.MaxNodes,
		Neighbors: []router.Neighbor{
			{Name: "NODES", Range: topology.LANv4},
			{Name: "NODES6", Range: topology.LANv6},
		},
	}
}

// KubeletState is one node's kubelet.
type KubeletState struct {
	Node     string      `json:"node"`
	StateDir string      `json:"stateDir"`
	Log      string      `json:"log"`
	Process  proc.Record `json:"process"`
}

// Layout is the lab's topology plan.
func (s *State) Layout() (topology.Layout, error) { return topology.Plan(s.Prefix, s.Nodes) }

// Lab is a lab brought up by this process.
type Lab struct {
	State
	Layout       topology.Layout
	ControlPlane *controlplane.ControlPlane
	K8s          *k8sbin.Bin
	Bins         *labbin.Bins
	Kubectl      *kubectl.Kubectl
	Kubelets     []*Kubelet
	// Real are the real nodes (Options.RealNodes), instead of Kubelets.
	Real []*realnode.Node
	// Router is FRR in the router namespace.
	Router *router.FRR
	// Timings of Up's steps.
	Timings Timings
	log     io.Writer
	// unlock releases the machine's lab lock (topology.Lock).
	unlock         func()
	killWithParent bool
	// dnsImage is CoreDNS's image (Options.DNS).
	dnsImage string
}

// Timings are how long Up's steps took.
type Timings struct {
	Programs, Network, ControlPlane, NodesReady, CRDs, Router, KubeProxy, Herald, DNS time.Duration
	// Total runs from taking the machine's lab lock to the lab being up.
	Total time.Duration
}

// Kubelet is a node's kubelet process.
type Kubelet struct {
	Config  kubelet.Config
	Process *proc.Process
	Log     string
}

func statePath(dir string) string { return filepath.Join(dir, StateFile) }

// ReadState reads the lab in dir.
func ReadState(dir string) (State, error) { return statefile.Read[State](statePath(dir)) }

func (l *Lab) save() error { return statefile.Write(statePath(l.StateDir), l.State) }

func (l *Lab) logf(format string, args ...any) {
	fmt.Fprintf(l.log, "lab: "+format+"\n", args...)
}

func (o *Options) setDefaults() error {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Nodes == 0 {
		o.Nodes = DefaultNodes
	}
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir(o.Prefix)
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if os.Getenv(ImageModeEnv) == "1" {
		o.ImageMode = true
	}
	if os.Getenv(RealNodesEnv) == "1" {
		o.RealNodes = true
	}
	proxy, err := resolveProxy(o.Proxy, os.Getenv(ProxyEnv))
	if err != nil {
		return err
	}
	o.Proxy = proxy
	if o.K8sVersion, err = resolveK8sVersion(o.K8sVersion, os.Getenv(k8sbin.VersionEnv)); err != nil {
		return err
	}
	if o.ModuleDir == "" {
		dir, err := k8sbin.FindModuleDir("")
		if err != nil {
			return err
		}
		o.ModuleDir = dir
	}
	_, err = topology.Plan(o.Prefix, o.Nodes)
	return err
}

// Up builds the lab. It refuses when a lab is recorded in StateDir or its
// network exists. On failure everything it started is removed again.
// planLab checks opts (setting their defaults) and the machine, and
// plans the lab's topology.
func planLab(ctx context.Context, opts *Options) (*Lab, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(statePath(opts.StateDir)); err == nil {
		return nil, fmt.Errorf("a lab is recorded in %s: run `herald-lab down` first", opts.StateDir)
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("the lab needs root: it creates network namespaces, links and mounts")
	}
	l := &Lab{log: opts.Log, killWithParent: opts.KillWithParent}
	l.Prefix, l.Nodes, l.Bare, l.StateDir, l.ModuleDir = opts.Prefix, opts.Nodes, opts.Bare, opts.StateDir, opts.ModuleDir
	l.ImageMode, l.Proxy, l.DNS, l.RealNodes = opts.ImageMode, opts.Proxy, opts.DNS, opts.RealNodes
	if err := checkHeraldNamespace(opts.HeraldNamespace, opts.Proxy, opts.Bare); err != nil {
		return nil, err
	}
	if opts.HeraldNamespace != HeraldNamespace {
		l.HeraldNamespace = opts.HeraldNamespace
	}
	if l.DNS && !l.ImageMode {
		return nil, errors.New("the cluster DNS (Options.DNS) runs from CoreDNS's image: it needs image mode")
	}
	if (l.ImageMode || l.RealNodes) && !l.Bare {
		if err := checkImage(ctx, kubelet.HeraldImageName); err != nil {
			return nil, err
		}
	}
	l.CreatedAt, l.Phase = time.Now(), "starting"
	var err error
	if l.Layout, err = topology.Plan(opts.Prefix, opts.Nodes); err != nil {
		return nil, err
	}
	return l, nil
}

// buildPrograms builds (or finds cached) the Kubernetes binaries, the
// lab's own programs and, with DNS, CoreDNS's image: before the lab waits
// for the machine, so another lab's run is not held up by a build.
func (l *Lab) buildPrograms(ctx context.Context, opts Options) (err error) {
	start := time.Now()
	if l.K8s, err = k8sbin.Ensure(ctx, k8sbin.Options{ModuleDir: opts.ModuleDir, Log: opts.Log, Version: opts.K8sVersion}); err != nil {
		return err
	}
	l.K8sVersion = l.K8s.Version
	if l.Bins, err = labbin.Ensure(ctx, labbin.Options{ModuleDir: opts.ModuleDir, Log: opts.Log, RealNodes: opts.RealNodes}); err != nil {
		return err
	}
	if l.DNS {
		if l.dnsImage, err = ensureDNSImage(ctx, l.ModuleDir, l.logf); err != nil {
			return err
		}
	}
	l.Timings.Programs = since(start)
	l.logf("programs ready in %s", l.Timings.Programs)
	return nil
}

// noOtherLab sweeps dead labs and fails if another one is up.
func noOtherLab(ctx context.Context, opts Options) error {
	if _, err := ReclaimDead(ctx, opts.Log); err != nil {
		return err
	}
	up, err := topology.LabUp(ctx)
	if err == nil && up {
		err = fmt.Errorf("another lab is up on this machine (the host has %s): bring it down first (herald-lab down)", topology.HostLANv4)
	}
	return err
}

func Up(ctx context.Context, opts Options) (_ *Lab, err error) {
	l, err := planLab(ctx, &opts)
	if err != nil {
		return nil, err
	}
	if err := l.buildPrograms(ctx, opts); err != nil {
		return nil, err
	}
	if !opts.WaitForOthers {
		if err := noOtherLab(ctx, opts); err != nil {
			return nil, err
		}
	}
	if l.unlock, err = topology.Lock(ctx, reclaimer(opts.Log)); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			l.unlock()
		}
	}()
	if opts.BeforeUp != nil {
		if err := opts.BeforeUp(); err != nil {
			return nil, err
		}
	}
	// Timings start once no other lab is in the way.
	l.CreatedAt = time.Now()
	existing, err := topology.Observe(ctx)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(l.StateDir, 0o755); err != nil {
		return nil, err
	}
	// From here on, the state file says what to undo, and the owner
	// record says where it is.
	if err := l.save(); err != nil {
		return nil, err
	}
	if err := writeOwner(l.Prefix, l.StateDir); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			l.logf("up failed: %v; removing what was made", err)
			if derr := Down(context.WithoutCancel(ctx), l.StateDir, DownOptions{Log: opts.Log, KeepLogs: true}); derr != nil {
				err = fmt.Errorf("%w (and cleaning up: %v)", err, derr)
			}
		}
	}()

	start := time.Now()
	if err := topology.Up(ctx, topology.Exec{}, l.Layout, existing); err != nil {
		return nil, err
	}
	l.Timings.Network = since(start)
	l.logf("network up in %s: %d nodes, client, router, remote", l.Timings.Network, opts.Nodes)

	start = time.Now()
	l.ControlPlaneDir = filepath.Join(l.StateDir, "controlplane")
	l.ControlPlane, err = controlplane.Up(ctx, controlplane.Config{
		StateDir: l.ControlPlaneDir,
		BinDir:   l.K8s.Dir,
		Address:  topology.HostLANv4.String(),
		// Dual-stack, IPv4 first: Services that ask for nothing stay
		// IPv4-only, PreferDualStack ones get both families.
		ServiceCIDR:    topology.ServiceCIDR.String() + "," + topology.ServiceCIDRv6.String(),
		ClusterCIDR:    topology.ClusterCIDR.String() + "," + topology.ClusterCIDRv6.String(),
		KillWithParent: opts.KillWithParent,
		Log:            opts.Log,
	})
	if err != nil {
		return nil, err
	}
	l.APIServerURL = l.ControlPlane.APIServerURL()
	l.Kubeconfig = l.ControlPlane.AdminKubeconfig()
	l.KubectlPath = l.K8s.Tool("kubectl")
	if err := l.save(); err != nil {
		return nil, err
	}
	l.Timings.ControlPlane = since(start)
	l.logf("control plane ready in %s at %s", l.Timings.ControlPlane, l.APIServerURL)

	start = time.Now()
	if l.RealNodes {
		if err := l.startRealNodes(ctx); err != nil {
			return nil, err
		}
	} else {
		if l.CreatedDirs, err = kubelet.EnsureMountPoints(); err != nil {
			return nil, err
		}
		if err := l.save(); err != nil {
			return nil, err
		}
		if err := l.startKubelets(); err != nil {
			return nil, err
		}
	}
	if err := l.waitNodesReady(ctx, 2*time.Minute); err != nil {
		return nil, err
	}
	l.Timings.NodesReady = since(start)
	l.logf("%d nodes Ready in %s after their kubelets started", opts.Nodes, l.Timings.NodesReady)

	start = time.Now()
	if err := l.installCRDs(ctx); err != nil {
		return nil, err
	}
	l.Timings.CRDs = since(start)
	start = time.Now()
	if err := l.startRouter(ctx); err != nil {
		return nil, err
	}
	l.Timings.Router = since(start)
	l.logf("FRR up in the router namespace in %s (AS %d; vtysh --vty_socket %s)", l.Timings.Router, RouterASN, l.FRRDir)
	l.logf("herald CRDs installed in %s", l.Timings.CRDs)
	if l.Proxy == ProxyKubeProxy {
		start = time.Now()
		if err := l.installKubeProxy(ctx); err != nil {
			return nil, err
		}
		l.Timings.KubeProxy = since(start)
	}
	if !opts.Bare {
		start = time.Now()
		if err := l.installHerald(ctx); err != nil {
			return nil, err
		}
		l.Timings.Herald = since(start)
	}
	if l.DNS {
		start = time.Now()
		if err := l.installDNS(ctx); err != nil {
			return nil, err
		}
		l.Timings.DNS = since(start)
	}
	l.Timings.Total = since(l.CreatedAt)
	l.Phase = "up"
	return l, l.save()
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

func (l *Lab) kubectlClient() *kubectl.Kubectl {
	if l.Kubectl == nil {
		l.Kubectl = l.KubectlClient()
	}
	return l.Kubectl
}

func (l *Lab) startKubelets() error {
	ca, err := pki.LoadCA(l.ControlPlane.PKIDir(), "ca")
	if err != nil {
		return err
	}
	for _, n := range l.Layout.Nodes {
		cfg := kubelet.ForNode(l.Layout, n)
		cfg.StateDir = filepath.Join(l.StateDir, "nodes", n.Name)
		cfg.Kubeconfig = filepath.Join(cfg.StateDir, "kubeconfig")
		cfg.KubeletVersion = l.K8s.Version
		cfg.Programs = kubelet.Programs{EchoServer: l.Bins.Path(labbin.EchoServer), Herald: l.Bins.Path(labbin.Herald), KubeProxy: l.K8s.Tool("kube-proxy")}
		cfg.ImageMode, cfg.ImageDir = l.ImageMode, filepath.Join(l.StateDir, imagesDir)
		if l.DNS {
			cfg.DNS = kubelet.DNSConfig{Servers: []string{clusterdns.ServiceIP(topology.ServiceCIDR).String()}, Domain: clusterdns.Domain}
		}
		if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
			return err
		}
		if err := kubelet.WriteNodeKubeconfig(cfg.Kubeconfig, n.Name, l.APIServerURL, ca); err != nil {
			return err
		}
		// The kubelet API (exec, logs, port-forward): a serving
		// certificate of the cluster CA, and the same CA for the API
		// server's client certificate.
		cfg.TLSCertFile, cfg.TLSKeyFile = filepath.Join(cfg.StateDir, "kubelet.crt"), filepath.Join(cfg.StateDir, "kubelet.key")
		cfg.ClientCAFile = filepath.Join(cfg.StateDir, "client-ca.crt")
		if err := kubelet.WriteServingCert(cfg, ca); err != nil {
			return err
		}
		k := &Kubelet{Config: cfg, Log: filepath.Join(cfg.StateDir, "lab-kubelet.log")}
		l.Kubelets = append(l.Kubelets, k)
		l.State.Kubelets = append(l.State.Kubelets, KubeletState{Node: n.Name, StateDir: cfg.StateDir, Log: k.Log})
		if err := l.StartKubelet(k); err != nil {
			return err
		}
	}
	return nil
}

// StartKubelet starts the kubelet of k's node (again, after a test
// stopped or killed it) and records its process in the state file.
func (l *Lab) StartKubelet(k *Kubelet) error {
	p, err := kubelet.Start(k.Config, kubelet.StartOptions{Binary: l.Bins.Path(labbin.Kubelet), LogPath: k.Log, KillWithParent: l.killWithParent})
	if err != nil {
		return err
	}
	k.Process = p
	for i := range l.State.Kubelets {
		if l.State.Kubelets[i].Node == k.Config.NodeName {
			l.State.Kubelets[i].Process = p.Record
		}
	}
	return l.save()
}

func (l *Lab) waitNodesReady(ctx context.Context, timeout time.Duration) error {
	k := l.kubectlClient()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		out, err := k.Output(ctx, "get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
		if err == nil {
			ready := 0
			for _, line := range strings.Fields(out) {
				if strings.HasSuffix(line, "=True") {
					ready++
				}
			}
			if ready == l.Nodes {
				return nil
			}
			last = strings.Join(strings.Fields(out), " ")
		} else {
			last = err.Error()
		}
		for _, kl := range l.Kubelets {
			if kl.Process.Exited() {
				var b strings.Builder
				proc.WriteTail(&b, kl.Log, 30)
				return fmt.Errorf("kubelet of %s exited: %v\n%s", kl.Config.NodeName, kl.Process.Err(), b.String())
			}
		}
		for _, n := range l.Real {
			for _, p := range []*proc.Process{n.Containerd, n.Kubelet} {
				if p != nil && p.Exited() {
					var b strings.Builder
					proc.WriteTail(&b, p.LogPath, 30)
					return fmt.Errorf("%s exited: %v\n%s", p.Name, p.Err(), b.String())
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("nodes not Ready after %s: %s", timeout, last)
}

// installCRDs applies herald's CRDs (from the root module) and waits
// until the API server serves them.
func (l *Lab) installCRDs(ctx context.Context) error {
	dir := CRDDir(l.ModuleDir)
	k := l.kubectlClient()
	if _, err := k.Run(ctx, "apply", "--server-side", "-f", dir); err != nil {
		return err
	}
	_, err := k.Run(ctx, "wait", "--for=condition=Established", "--timeout=60s", "-f", dir)
	return err
}

// CRDDir is config/crd/bases of the root module, next to the e2e module.
func CRDDir(e2eModuleDir string) string {
	return filepath.Join(e2eModuleDir, "..", "config", "crd", "bases")
}

// DeployDir is config/deploy of the root module: herald's install
// manifests.
func DeployDir(e2eModuleDir string) string {
	return filepath.Join(e2eModuleDir, "..", "config", "deploy")
}

// installHerald applies herald's install manifests, which run the
// controller and the speakers as pods of the lab's kubelets: config/deploy
// with herald's proxy, or with kube-proxy the no-proxy overlay
// (`kubectl apply -k`), so herald still assigns and announces
// LoadBalancer IPs. Without herald's proxy running, the `kubernetes`
// Service's ClusterIP may lead nowhere yet: the ConfigMap
// herald-apiserver, which the manifests load into herald's containers
// (docs/install.md), points them at the API server itself; the ConfigMap
// herald-proxy gives herald's proxy the lab's pod network. Up returns once
// the controller is available and every node's speaker is ready (with
// herald's proxy: it has written the node's rules).
// InstallHerald installs herald into a lab brought up Bare, as Up would
// have (with kube-proxy as the proxy, herald without its own proxy), and
// waits until its controller is available and its speakers are ready:
// for tests of what happens before herald arrives (a move from MetalLB).
func (l *Lab) InstallHerald(ctx context.Context) error {
	if !l.Bare {
		return errors.New("herald is installed already (the lab is not bare)")
	}
	if err := l.installHerald(ctx); err != nil {
		return err
	}
	l.Bare = false
	return l.save()
}

func (l *Lab) installHerald(ctx context.Context) error {
	if l.RealNodes {
		return l.installHeraldChart(ctx)
	}
	apply, dir := []string{"apply", "-f"}, DeployDir(l.ModuleDir)
	if l.Proxy == ProxyKubeProxy {
		apply, dir = []string{"apply", "-k"}, NoProxyDir(l.ModuleDir)
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		l.logf("herald: no install manifests yet (%s arrives with the controller, issue #4): CRDs only", dir)
		return nil
	}
	start := time.Now()
	k := l.kubectlClient()
	ns := l.HeraldNS()
	cm, err := apiServerConfigMap(l.APIServerURL, l.Proxy == ProxyHerald, ns)
	if err != nil {
		return err
	}
	if _, err := k.RunStdin(ctx, strings.NewReader(cm), "apply", "-f", "-"); err != nil {
		return err
	}
	if ns == HeraldNamespace {
		if _, err := k.Run(ctx, append(apply, dir)...); err != nil {
			return err
		}
	} else if err := l.applyMoved(ctx, dir, ns); err != nil {
		return err
	}
	if _, err := k.Run(ctx, "-n", ns, "wait", "--for=condition=Available", "--timeout=120s", "deployment/"+HeraldController); err != nil {
		return fmt.Errorf("herald's controller did not become available: %w", err)
	}
	// A speaker is ready on a node once it has run its first election and
	// its in-process proxy has written the node's rules; until every node
	// is, Services do not work everywhere.
	if _, err := k.Output(ctx, "-n", ns, "get", "daemonset", HeraldSpeaker); err == nil {
		if _, err := k.Run(ctx, "-n", ns, "rollout", "status", "--timeout=120s", "daemonset/"+HeraldSpeaker); err != nil {
			return fmt.Errorf("herald's speakers did not become ready on every node: %w", err)
		}
	}
	l.logf("herald installed from %s in %s", dir, since(start))
	return nil
}

// Where the install manifests put herald.
const (
	HeraldNamespace  = "herald-system"
	HeraldController = "herald-controller"
	HeraldSpeaker    = "herald-speaker"
	// HeraldProxy is the DaemonSet whose pods run the proxies: the
	// speaker runs the proxy in its own process (config/proxy-only has
	// a DaemonSet for the proxy alone, which the lab does not install).
	HeraldProxy = HeraldSpeaker
)

// apiServerConfigMap is herald's namespace ns, the ConfigMap
// herald-apiserver with the API server's address and port, and with
// herald's proxy the ConfigMap herald-proxy with the lab's pod network
// (the proxy's --cluster-cidr).
func apiServerConfigMap(apiServerURL string, heraldProxy bool, ns string) (string, error) {
	u, err := url.Parse(apiServerURL)
	if err != nil || u.Hostname() == "" || u.Port() == "" {
		return "", fmt.Errorf("the API server URL %q has no host and port", apiServerURL)
	}
	m := ""
	if ns != KubeSystem { // there already, and not herald's to label
		m = fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %s
---
`, ns)
	}
	m += fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata:
  name: herald-apiserver
  namespace: %[1]s
data:
  KUBERNETES_SERVICE_HOST: %[2]q
  KUBERNETES_SERVICE_PORT: %[3]q
`, ns, u.Hostname(), u.Port())
	if heraldProxy {
		m += fmt.Sprintf(`---
apiVersion: v1
kind: ConfigMap
metadata:
  name: herald-proxy
  namespace: %s
data:
  HERALD_CLUSTER_CIDR: %q
`, ns, strings.Join(clusterCIDRs(), ","))
	}
	return m, nil
}

// applyMoved applies the install manifests in dir moved into namespace
// ns (MoveManifest), the speakers' pods with ns's labels.
func (l *Lab) applyMoved(ctx context.Context, dir, ns string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no install manifests in %s", dir)
	}
	var all []byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		moved, err := MoveManifest(data, HeraldNamespace, ns, speakerPodLabels(ns))
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		all = append(all, moved...)
	}
	_, err = l.kubectlClient().RunStdin(ctx, bytes.NewReader(all), "apply", "-f", "-")
	return err
}

// startRouter runs FRR (zebra, bgpd, bfdd) in the router namespace.
func (l *Lab) startRouter(ctx context.Context) error {
	l.FRRDir = filepath.Join(l.StateDir, "router", "frr")
	f, err := router.StartFRR(ctx, router.FRRConfig{
		Netns:          l.Layout.Router,
		Dir:            l.FRRDir,
		Name:           l.Prefix + "-router",
		Config:         router.FRRBGPConfig(RouterConfig()),
		KillWithParent: l.killWithParent,
	})
	if err != nil {
		return err
	}
	l.Router = f
	l.FRR = f.Records()
	return l.save()
}

// RestartRouter restarts FRR in the router namespace (router.FRR.Restart)
// and records its new processes, so Down stops them.
func (l *Lab) RestartRouter(ctx context.Context) error {
	if l.Router == nil {
		return fmt.Errorf("lab %s runs no router", l.Prefix)
	}
	err := l.Router.Restart(ctx)
	l.FRR = l.Router.Records()
	return errors.Join(err, l.save())
}
