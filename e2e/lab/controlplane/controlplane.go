// Package controlplane runs the lab's Kubernetes control plane as child
// processes in the current (root) network namespace: etcd (Debian's
// etcd-server), kube-apiserver, kube-controller-manager and kube-scheduler
// from the lab's multi-call binary (package k8sbin).
//
// Everything lives under one state directory:
//
//	controlplane.json   state file: PIDs, ports, paths (see Down)
//	pki/                CA, serving and client certificates, SA keys
//	kubeconfig/         admin, controller-manager and scheduler kubeconfigs
//	etcd/               etcd data
//	logs/               one log file per process
//	run/                scratch directories of the components, and
//	                    admission.json (Pod Security admission's defaults)
//
// Up writes the state file before it starts the first process and after
// each one, so Down can stop what an interrupted or crashed Up (or a
// crashed owner of a running control plane) left behind.
package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/herald-lb/herald/e2e/lab/kubeconfig"
	"github.com/herald-lb/herald/e2e/lab/pki"
	"github.com/herald-lb/herald/e2e/lab/proc"
	"github.com/herald-lb/herald/e2e/lab/statefile"
)

// Defaults. The lab only ever uses documentation and benchmark ranges.
const (
	// The lab is dual-stack with IPv4 first (topology's ServiceCIDR,
	// ServiceCIDRv6, ClusterCIDR and ClusterCIDRv6).
	DefaultServiceCIDR          = "198.19.0.0/16,2001:db8:2::/112"
	DefaultClusterCIDR          = "198.18.0.0/16,2001:db8:1::/48"
	DefaultNodeCIDRMaskSize     = 24
	DefaultNodeCIDRMaskSizeV6   = 64
	DefaultEtcdPath             = "/usr/bin/etcd"
	DefaultReadyTimeout         = 3 * time.Minute
	DefaultServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

	// StateFile is the state file's name inside the state directory.
	StateFile = "controlplane.json"
)

// Component names, as used for binaries, log files and process records.
const (
	Etcd              = "etcd"
	APIServer         = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
)

// NodeMonitorGracePeriod is kube-controller-manager's
// --node-monitor-grace-period in the lab: how long it waits for a node's
// heartbeat before it marks the node NotReady.
const NodeMonitorGracePeriod = 90 * time.Second

// ErrRunning is returned by Up when the state directory belongs to a
// control plane whose processes still run.
var ErrRunning = errors.New("a control plane from this state directory is still running; run down first")

// Config describes the control plane to start.
type Config struct {
	// StateDir holds everything the control plane writes. Required.
	StateDir string
	// BinDir holds kube-apiserver, kube-controller-manager and
	// kube-scheduler (k8sbin.Bin.Dir). Required.
	BinDir string
	// EtcdPath is the etcd binary. Default /usr/bin/etcd.
	EtcdPath string

	// Address is where the API server listens and what it advertises
	// (the `kubernetes` Service's endpoint). Default 127.0.0.1; the
	// lab's topology gives the host 198.51.100.254 on the LAN bridge so node
	// namespaces can reach the API server, and the address must exist
	// before Up. With a loopback address the `kubernetes` endpoint is not
	// reconciled (Kubernetes rejects loopback endpoint addresses).
	Address string
	// APIServerPort is the API server's port. Zero picks a free port.
	APIServerPort int
	// ExtraSANs are added to the API server certificate (IPs or names).
	ExtraSANs []string

	// ServiceCIDR and ClusterCIDR are one CIDR or two of different
	// families, comma-separated, the primary family first (as the flags
	// take them); NodeCIDRMaskSize(V6) size the nodes' IPv4 (IPv6) pod
	// CIDRs. Defaults: DefaultServiceCIDR, DefaultClusterCIDR, 24 and 64.
	ServiceCIDR        string
	ClusterCIDR        string
	NodeCIDRMaskSize   int
	NodeCIDRMaskSizeV6 int

	// PodSecurity is Pod Security admission's cluster-wide default for
	// namespaces without pod-security.kubernetes.io labels. Nil:
	// DefaultPodSecurity().
	PodSecurity *PodSecurity

	// Extra*Args are appended to the components' generated flags (a later
	// flag wins).
	ExtraEtcdArgs, ExtraAPIServerArgs, ExtraControllerManagerArgs, ExtraSchedulerArgs []string

	// KillWithParent has the kernel kill the processes when the starting
	// process dies (for tests). Off for a control plane that must outlive
	// the command that started it.
	KillWithParent bool
	// ReadyTimeout bounds the wait for each component. Default 3m.
	ReadyTimeout time.Duration
	// Log receives progress lines. Nil: discard.
	Log io.Writer
}

// PodSecurity is the PodSecurity admission plugin's configuration: the
// levels of namespaces without pod-security.kubernetes.io labels.
type PodSecurity struct {
	// Enforce is the level enforced there: privileged, baseline or
	// restricted (audit and warn stay privileged, Kubernetes' default).
	Enforce string
	// ExemptNamespaces are not checked at all.
	ExemptNamespaces []string
}

// DefaultPodSecurity is the lab's: baseline enforced, as on many clusters,
// so that herald's node agents run only where their namespace's labels say
// privileged; kube-system (kube-proxy, cluster DNS) and default (the
// lab's own test pods, some on the host network or with NET_RAW) exempt.
// Namespaces the upstream e2e framework makes carry their own labels.
func DefaultPodSecurity() PodSecurity {
	return PodSecurity{Enforce: "baseline", ExemptNamespaces: []string{"kube-system", "default"}}
}

// admissionConfig is kube-apiserver's --admission-control-config-file
// content (JSON, which it reads as YAML) for p.
func (p PodSecurity) admissionConfig() ([]byte, error) {
	switch p.Enforce {
	case "privileged", "baseline", "restricted":
	default:
		return nil, fmt.Errorf("controlplane: PodSecurity.Enforce %q: want privileged, baseline or restricted", p.Enforce)
	}
	exempt := p.ExemptNamespaces
	if exempt == nil {
		exempt = []string{}
	}
	return json.MarshalIndent(map[string]any{
		"apiVersion": "apiserver.config.k8s.io/v1",
		"kind":       "AdmissionConfiguration",
		"plugins": []any{map[string]any{
			"name": "PodSecurity",
			"configuration": map[string]any{
				"apiVersion": "pod-security.admission.config.k8s.io/v1",
				"kind":       "PodSecurityConfiguration",
				"defaults":   map[string]string{"enforce": p.Enforce, "enforce-version": "latest"},
				"exemptions": map[string]any{"namespaces": exempt},
			},
		}},
	}, "", "  ")
}

// State is the content of the state file.
type State struct {
	StateDir        string        `json:"stateDir"`
	StartedAt       time.Time     `json:"startedAt"`
	Address         string        `json:"address"`
	APIServerURL    string        `json:"apiServerURL"`
	EtcdURL         string        `json:"etcdURL"`
	ServiceCIDR     string        `json:"serviceCIDR"`
	ClusterCIDR     string        `json:"clusterCIDR"`
	AdminKubeconfig string        `json:"adminKubeconfig"`
	Processes       []proc.Record `json:"processes"`
	// Created lists what Up created (directories and files), removed by
	// Stop/Down. CreatedStateDir says whether Up created StateDir itself.
	Created         []string `json:"created"`
	CreatedStateDir bool     `json:"createdStateDir"`
}

// ControlPlane is a running control plane started by Up.
type ControlPlane struct {
	cfg   Config
	state State
	procs []*proc.Process
	// specs are the components' start specs by name, for StartComponent.
	specs map[string]proc.Spec
	log   io.Writer

	// Paths.
	pkiDir, kubeconfigDir, logDir string
	caCertPEM                     []byte
	adminTLS                      tls.Certificate

	// Ports of the controller-manager and scheduler secure servers.
	cmPort, schedPort int
}

// Paths of things inside a state directory.
func statePath(dir string) string { return filepath.Join(dir, StateFile) }

// APIServerURL is the https URL of the API server.
func (cp *ControlPlane) APIServerURL() string { return cp.state.APIServerURL }

// AdminKubeconfig is the path of the cluster-admin kubeconfig
// (system:masters), for kubectl.
func (cp *ControlPlane) AdminKubeconfig() string { return cp.state.AdminKubeconfig }

// Kubeconfig is the path of the named kubeconfig ("admin",
// "kube-controller-manager", "kube-scheduler").
func (cp *ControlPlane) Kubeconfig(name string) string {
	return filepath.Join(cp.kubeconfigDir, name+".kubeconfig")
}

// PKIDir holds ca.crt/ca.key (the cluster CA, which also signs kubelet
// client and serving certificates; load it with pki.LoadCA(dir, "ca")),
// sa.key/sa.pub and the components' certificates.
func (cp *ControlPlane) PKIDir() string { return cp.pkiDir }

// CACertPEM is the cluster CA certificate.
func (cp *ControlPlane) CACertPEM() []byte { return cp.caCertPEM }

// CAFile is the path of the cluster CA certificate.
func (cp *ControlPlane) CAFile() string { return filepath.Join(cp.pkiDir, "ca.crt") }

// ServiceCIDR and ClusterCIDR are the ranges the control plane uses.
func (cp *ControlPlane) ServiceCIDR() string { return cp.state.ServiceCIDR }
func (cp *ControlPlane) ClusterCIDR() string { return cp.state.ClusterCIDR }

// State is a copy of the control plane's state file content.
func (cp *ControlPlane) State() State {
	s := cp.state
	s.Processes = append([]proc.Record(nil), s.Processes...)
	s.Created = append([]string(nil), s.Created...)
	return s
}

// LogFiles lists the log file of every process, in start order.
func (cp *ControlPlane) LogFiles() []string {
	var files []string
	for _, p := range cp.state.Processes {
		files = append(files, p.LogPath)
	}
	return files
}

// WriteLogTails writes the last lines of every log file to w, for test
// failures.
func (cp *ControlPlane) WriteLogTails(w io.Writer, lines int) {
	for _, f := range cp.LogFiles() {
		proc.WriteTail(w, f, lines)
	}
}

// Processes are the running processes (etcd first).
func (cp *ControlPlane) Processes() []*proc.Process { return append([]*proc.Process(nil), cp.procs...) }

func (c *Config) setDefaults() error {
	if c.StateDir == "" {
		return errors.New("controlplane: no state directory")
	}
	if c.BinDir == "" {
		return errors.New("controlplane: no binary directory (k8sbin.Bin.Dir)")
	}
	abs, err := filepath.Abs(c.StateDir)
	if err != nil {
		return err
	}
	c.StateDir = abs
	if c.BinDir, err = filepath.Abs(c.BinDir); err != nil {
		return err
	}
	if c.EtcdPath == "" {
		c.EtcdPath = DefaultEtcdPath
	}
	if c.Address == "" {
		c.Address = "127.0.0.1"
	}
	if _, err := netip.ParseAddr(c.Address); err != nil {
		return fmt.Errorf("controlplane: address %q: %w", c.Address, err)
	}
	if c.ServiceCIDR == "" {
		c.ServiceCIDR = DefaultServiceCIDR
	}
	if c.ClusterCIDR == "" {
		c.ClusterCIDR = DefaultClusterCIDR
	}
	if c.NodeCIDRMaskSize == 0 {
		c.NodeCIDRMaskSize = DefaultNodeCIDRMaskSize
	}
	if c.NodeCIDRMaskSizeV6 == 0 {
		c.NodeCIDRMaskSizeV6 = DefaultNodeCIDRMaskSizeV6
	}
	for _, cidrs := range []string{c.ServiceCIDR, c.ClusterCIDR} {
		if _, err := parseCIDRs(cidrs); err != nil {
			return fmt.Errorf("controlplane: %w", err)
		}
	}
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	if c.PodSecurity == nil {
		ps := DefaultPodSecurity()
		c.PodSecurity = &ps
	}
	if _, err := c.PodSecurity.admissionConfig(); err != nil {
		return err
	}
	if _, err := os.Stat(c.EtcdPath); err != nil {
		return fmt.Errorf("controlplane: etcd not installed (%w): apt-get install etcd-server", err)
	}
	for _, b := range []string{APIServer, ControllerManager, Scheduler} {
		if _, err := os.Stat(filepath.Join(c.BinDir, b)); err != nil {
			return fmt.Errorf("controlplane: %w", err)
		}
	}
	return nil
}

// parseCIDRs parses "cidr[,cidr]": at most one per family, as the
// components accept them.
func parseCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	if len(out) > 2 || len(out) == 2 && out[0].Addr().Is4() == out[1].Addr().Is4() {
		return nil, fmt.Errorf("%q: want one CIDR, or one IPv4 and one IPv6", s)
	}
	return out, nil
}

// FirstServiceIP is the first host address of the (primary) service
// range: the ClusterIP of the `kubernetes` Service.
func FirstServiceIP(cidrs string) (netip.Addr, error) {
	ps, err := parseCIDRs(cidrs)
	if err != nil {
		return netip.Addr{}, err
	}
	return ps[0].Masked().Addr().Next(), nil
}

// nodeCIDRMaskArgs are the controller-manager's node CIDR sizes: one
// flag for a single-stack cluster, one per family for a dual-stack one
// (it refuses --node-cidr-mask-size then).
func (c Config) nodeCIDRMaskArgs() []string {
	ps, _ := parseCIDRs(c.ClusterCIDR)
	if len(ps) < 2 {
		size := c.NodeCIDRMaskSize
		if ps[0].Addr().Is6() {
			size = c.NodeCIDRMaskSizeV6
		}
		return []string{"--node-cidr-mask-size=" + strconv.Itoa(size)}
	}
	return []string{
		"--node-cidr-mask-size-ipv4=" + strconv.Itoa(c.NodeCIDRMaskSize),
		"--node-cidr-mask-size-ipv6=" + strconv.Itoa(c.NodeCIDRMaskSizeV6),
	}
}

// Up starts the control plane and returns once the API server is ready,
// the controller-manager and the scheduler are healthy and the
// controller-manager has created the `default` ServiceAccount. If it
// fails, whatever it started is stopped again.
func Up(ctx context.Context, cfg Config) (_ *ControlPlane, err error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	start := time.Now()
	if old, err := ReadState(cfg.StateDir); err == nil {
		for _, p := range old.Processes {
			if p.Alive() {
				return nil, fmt.Errorf("controlplane: %s (pid %d from %s): %w", p.Name, p.PID, statePath(cfg.StateDir), ErrRunning)
			}
		}
		// Leftovers of a crashed run: clean them up first.
		if err := Down(cfg.StateDir, DownOptions{Log: cfg.Log}); err != nil {
			return nil, err
		}
	}

	cp := &ControlPlane{
		cfg:           cfg,
		log:           cfg.Log,
		pkiDir:        filepath.Join(cfg.StateDir, "pki"),
		kubeconfigDir: filepath.Join(cfg.StateDir, "kubeconfig"),
		logDir:        filepath.Join(cfg.StateDir, "logs"),
	}
	cp.state = State{
		StateDir:    cfg.StateDir,
		StartedAt:   start,
		Address:     cfg.Address,
		ServiceCIDR: cfg.ServiceCIDR,
		ClusterCIDR: cfg.ClusterCIDR,
	}
	if _, err := os.Stat(cfg.StateDir); errors.Is(err, os.ErrNotExist) {
		cp.state.CreatedStateDir = true
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, err
	}
	// Record what we create before creating it, so an interrupted Up is
	// cleaned up by Down.
	for _, d := range []string{"pki", "kubeconfig", "etcd", "logs", "run"} {
		p := filepath.Join(cfg.StateDir, d)
		if _, err := os.Stat(p); err == nil && d != "logs" { // logs kept by an earlier down are appended to
			return nil, fmt.Errorf("controlplane: %s exists; choose an empty state directory or run down", p)
		}
		cp.state.Created = append(cp.state.Created, p)
	}
	cp.state.Created = append(cp.state.Created, statePath(cfg.StateDir))
	if err := cp.saveState(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			fmt.Fprintf(cp.log, "controlplane: start failed: %v\n", err)
			cp.WriteLogTails(cp.log, 30)
			if serr := cp.Stop(StopOptions{}); serr != nil {
				fmt.Fprintf(cp.log, "controlplane: cleanup after failed start: %v\n", serr)
			}
		}
	}()
	for _, d := range []string{cp.logDir, filepath.Join(cfg.StateDir, "run")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}

	ports, err := cp.allocatePorts()
	if err != nil {
		return nil, err
	}
	apiHost := net.JoinHostPort(cfg.Address, strconv.Itoa(ports.apiserver))
	cp.state.APIServerURL = "https://" + apiHost
	cp.state.EtcdURL = "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports.etcdClient))
	cp.cmPort, cp.schedPort = ports.controllerManager, ports.scheduler

	if err := cp.writePKI(); err != nil {
		return nil, err
	}
	if err := cp.saveState(); err != nil {
		return nil, err
	}

	if err := cp.startEtcd(ctx, ports); err != nil {
		return nil, err
	}
	if err := cp.startAPIServer(ctx, ports, start); err != nil {
		return nil, err
	}
	if err := cp.startControllers(ctx, ports); err != nil {
		return nil, err
	}
	fmt.Fprintf(cp.log, "controlplane: ready after %s (kubeconfig %s)\n", time.Since(start).Round(time.Millisecond), cp.state.AdminKubeconfig)
	return cp, nil
}

// startEtcd starts etcd and waits for its health.
func (cp *ControlPlane) startEtcd(ctx context.Context, ports ports) error {
	cfg := cp.cfg
	// etcd.
	etcdArgs := []string{
		"--name=herald-lab",
		"--data-dir=" + filepath.Join(cfg.StateDir, "etcd"),
		"--listen-client-urls=" + cp.state.EtcdURL,
		"--advertise-client-urls=" + cp.state.EtcdURL,
		"--listen-peer-urls=" + ports.etcdPeerURL(),
		"--initial-advertise-peer-urls=" + ports.etcdPeerURL(),
		"--initial-cluster=herald-lab=" + ports.etcdPeerURL(),
		"--initial-cluster-state=new",
		"--initial-cluster-token=herald-lab",
		"--logger=zap",
		"--log-outputs=stderr",
	}
	if err := cp.start(ctx, Etcd, cfg.EtcdPath, "", append(etcdArgs, cfg.ExtraEtcdArgs...)); err != nil {
		return err
	}
	if err := cp.waitHTTP(ctx, Etcd, cp.state.EtcdURL+"/health", nil, func(body string) bool {
		return strings.Contains(body, `"health":"true"`)
	}); err != nil {
		return err
	}

	return nil
}

// startAPIServer starts kube-apiserver, with Pod Security admission's
// defaults, and waits for /readyz.
func (cp *ControlPlane) startAPIServer(ctx context.Context, ports ports, start time.Time) error {
	cfg := cp.cfg
	// kube-apiserver, with Pod Security admission's defaults.
	admission, err := cfg.PodSecurity.admissionConfig()
	if err != nil {
		return err
	}
	admissionFile := filepath.Join(cfg.StateDir, "run", "admission.json")
	if err := os.WriteFile(admissionFile, admission, 0o644); err != nil {
		return err
	}
	apiArgs := []string{
		"--etcd-servers=" + cp.state.EtcdURL,
		"--bind-address=" + cfg.Address,
		"--advertise-address=" + cfg.Address,
		"--secure-port=" + strconv.Itoa(ports.apiserver),
		"--cert-dir=" + filepath.Join(cfg.StateDir, "run", APIServer),
		"--tls-cert-file=" + cp.pkiFile("apiserver.crt"),
		"--tls-private-key-file=" + cp.pkiFile("apiserver.key"),
		"--client-ca-file=" + cp.pkiFile("ca.crt"),
		"--kubelet-client-certificate=" + cp.pkiFile("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + cp.pkiFile("apiserver-kubelet-client.key"),
		// Verify the lab kubelets' serving certificates (signed by the
		// cluster CA for their InternalIPs), reached at those addresses.
		"--kubelet-certificate-authority=" + cp.pkiFile("ca.crt"),
		"--kubelet-preferred-address-types=InternalIP",
		"--service-cluster-ip-range=" + cfg.ServiceCIDR,
		"--service-account-issuer=" + DefaultServiceAccountIssuer,
		"--service-account-key-file=" + cp.pkiFile("sa.pub"),
		"--service-account-signing-key-file=" + cp.pkiFile("sa.key"),
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true",
		"--admission-control-config-file=" + admissionFile,
	}
	if addr, _ := netip.ParseAddr(cfg.Address); addr.IsLoopback() {
		apiArgs = append(apiArgs, "--endpoint-reconciler-type=none")
	}
	if err := cp.start(ctx, APIServer, filepath.Join(cfg.BinDir, APIServer), APIServer, append(apiArgs, cfg.ExtraAPIServerArgs...)); err != nil {
		return err
	}
	if err := cp.waitHTTP(ctx, APIServer, cp.state.APIServerURL+"/readyz", cp.adminClient(), okBody); err != nil {
		return err
	}
	fmt.Fprintf(cp.log, "controlplane: kube-apiserver ready at %s after %s\n", cp.state.APIServerURL, time.Since(start).Round(time.Millisecond))

	return nil
}

// startControllers starts kube-controller-manager and kube-scheduler
// and waits until the controller-manager works.
func (cp *ControlPlane) startControllers(ctx context.Context, ports ports) error {
	cfg := cp.cfg
	// kube-controller-manager and kube-scheduler.
	// Both serve their health endpoints over TLS on loopback and
	// authenticate as themselves.
	componentArgs := func(name string, port int) []string {
		kc := cp.Kubeconfig(name)
		return []string{
			"--kubeconfig=" + kc,
			"--authentication-kubeconfig=" + kc,
			"--authorization-kubeconfig=" + kc,
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--tls-cert-file=" + cp.pkiFile(name+"-serving.crt"),
			"--tls-private-key-file=" + cp.pkiFile(name+"-serving.key"),
			"--client-ca-file=" + cp.pkiFile("ca.crt"),
		}
	}
	cmArgs := append(componentArgs(ControllerManager, ports.controllerManager),
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+cp.pkiFile("sa.key"),
		"--root-ca-file="+cp.pkiFile("ca.crt"),
		"--cluster-signing-cert-file="+cp.pkiFile("ca.crt"),
		"--cluster-signing-key-file="+cp.pkiFile("ca.key"),
		"--cluster-cidr="+cfg.ClusterCIDR,
		"--allocate-node-cidrs=true",
		// Longer than the 60 s API outage of the fault tests (the default
		// is 50 s): past it, kube-controller-manager marks every node
		// NotReady and its pods not ready as the API returns, which takes
		// the endpoints from any service proxy, herald's or kube-proxy's,
		// and the test is there to measure herald.
		"--node-monitor-grace-period="+NodeMonitorGracePeriod.String(),
		"--service-cluster-ip-range="+cfg.ServiceCIDR,
		"--configure-cloud-routes=false",
		"--leader-elect=false",
	)
	cmArgs = append(cmArgs, cfg.nodeCIDRMaskArgs()...)
	if err := cp.start(ctx, ControllerManager, filepath.Join(cfg.BinDir, ControllerManager), ControllerManager, append(cmArgs, cfg.ExtraControllerManagerArgs...)); err != nil {
		return err
	}
	schedArgs := append(componentArgs(Scheduler, ports.scheduler), "--leader-elect=false")
	if err := cp.start(ctx, Scheduler, filepath.Join(cfg.BinDir, Scheduler), Scheduler, append(schedArgs, cfg.ExtraSchedulerArgs...)); err != nil {
		return err
	}
	local := func(port int, path string) string {
		return "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + path
	}
	if err := cp.waitHTTP(ctx, ControllerManager, local(ports.controllerManager, "/healthz"), cp.adminClient(), okBody); err != nil {
		return err
	}
	if err := cp.waitHTTP(ctx, Scheduler, local(ports.scheduler, "/healthz"), cp.adminClient(), okBody); err != nil {
		return err
	}
	// The controller-manager works (not just serves /healthz) once its
	// serviceaccount controller has made the default namespace's
	// ServiceAccount.
	if err := cp.waitHTTP(ctx, ControllerManager+" (default ServiceAccount)",
		cp.state.APIServerURL+"/api/v1/namespaces/default/serviceaccounts/default", cp.adminClient(),
		func(string) bool { return true }); err != nil {
		return err
	}
	return nil
}

// pkiFile is a file of the control plane's PKI.
func (cp *ControlPlane) pkiFile(n string) string { return filepath.Join(cp.pkiDir, n) }

func okBody(body string) bool { return strings.TrimSpace(body) == "ok" }

type ports struct {
	etcdClient, etcdPeer, apiserver, controllerManager, scheduler int
}

func (p ports) etcdPeerURL() string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(p.etcdPeer))
}

// allocatePorts picks free ports by binding port 0 and keeping every
// listener open until all are chosen (so no two are the same).
func (cp *ControlPlane) allocatePorts() (ports, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	pick := func(host string, fixed int) (int, error) {
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(fixed)))
		if err != nil {
			return 0, fmt.Errorf("controlplane: no port on %s: %w", host, err)
		}
		ls = append(ls, l)
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	var p ports
	var err error
	for _, x := range []struct {
		dst   *int
		host  string
		fixed int
	}{
		{&p.etcdClient, "127.0.0.1", 0},
		{&p.etcdPeer, "127.0.0.1", 0},
		{&p.apiserver, cp.cfg.Address, cp.cfg.APIServerPort},
		{&p.controllerManager, "127.0.0.1", 0},
		{&p.scheduler, "127.0.0.1", 0},
	} {
		if *x.dst, err = pick(x.host, x.fixed); err != nil {
			return ports{}, err
		}
	}
	return p, nil
}

// writePKI makes the CA, the certificates, the service-account keys and
// the kubeconfigs.
func (cp *ControlPlane) writePKI() error {
	ca, err := pki.NewCA("herald-lab-ca")
	if err != nil {
		return err
	}
	if err := ca.Write(cp.pkiDir, "ca"); err != nil {
		return err
	}
	cp.caCertPEM = ca.CertPEM

	serviceIP, err := FirstServiceIP(cp.cfg.ServiceCIDR)
	if err != nil {
		return err
	}
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.IP(serviceIP.AsSlice())}
	if a := net.ParseIP(cp.cfg.Address); !a.Equal(ips[0]) {
		ips = append(ips, a)
	}
	dns := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	for _, san := range cp.cfg.ExtraSANs {
		if ip := net.ParseIP(san); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, san)
		}
	}
	certs := []struct {
		file string
		spec pki.CertSpec
	}{
		{"apiserver", pki.CertSpec{CommonName: APIServer, DNSNames: dns, IPs: ips, Server: true}},
		{"apiserver-kubelet-client", pki.CertSpec{CommonName: "kube-apiserver-kubelet-client", Organizations: []string{"system:masters"}, Client: true}},
		{"admin", pki.CertSpec{CommonName: "herald-lab-admin", Organizations: []string{"system:masters"}, Client: true}},
		{ControllerManager, pki.CertSpec{CommonName: "system:kube-controller-manager", Client: true}},
		{Scheduler, pki.CertSpec{CommonName: "system:kube-scheduler", Client: true}},
		{ControllerManager + "-serving", pki.CertSpec{CommonName: ControllerManager, DNSNames: []string{"localhost"}, IPs: ips[:1], Server: true}},
		{Scheduler + "-serving", pki.CertSpec{CommonName: Scheduler, DNSNames: []string{"localhost"}, IPs: ips[:1], Server: true}},
	}
	pairs := map[string]*pki.Pair{}
	for _, c := range certs {
		pair, err := ca.Issue(c.spec)
		if err != nil {
			return fmt.Errorf("controlplane: certificate %s: %w", c.file, err)
		}
		if err := pair.Write(cp.pkiDir, c.file); err != nil {
			return err
		}
		pairs[c.file] = pair
	}
	if cp.adminTLS, err = pairs["admin"].TLSCertificate(); err != nil {
		return err
	}
	if _, _, err := pki.WriteServiceAccountKeys(cp.pkiDir, "sa"); err != nil {
		return err
	}

	for _, k := range []struct{ name, user string }{
		{"admin", "herald-lab-admin"},
		{ControllerManager, "system:kube-controller-manager"},
		{Scheduler, "system:kube-scheduler"},
	} {
		if err := kubeconfig.Write(cp.Kubeconfig(k.name), kubeconfig.Config{
			Server:        cp.state.APIServerURL,
			CAPEM:         ca.CertPEM,
			ClientCertPEM: pairs[k.name].CertPEM,
			ClientKeyPEM:  pairs[k.name].KeyPEM,
			UserName:      k.user,
		}); err != nil {
			return err
		}
	}
	cp.state.AdminKubeconfig = cp.Kubeconfig("admin")
	return nil
}

// start starts one component and records it in the state file.
func (cp *ControlPlane) start(ctx context.Context, name, path, argv0 string, args []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	fmt.Fprintf(cp.log, "controlplane: starting %s\n", name)
	spec := proc.Spec{
		Name:           name,
		Path:           path,
		Argv0:          argv0,
		Args:           args,
		Dir:            cp.cfg.StateDir,
		LogPath:        filepath.Join(cp.logDir, name+".log"),
		KillWithParent: cp.cfg.KillWithParent,
	}
	p, err := proc.Start(spec)
	if err != nil {
		return err
	}
	if cp.specs == nil {
		cp.specs = map[string]proc.Spec{}
	}
	cp.specs[name] = spec
	cp.procs = append(cp.procs, p)
	cp.state.Processes = append(cp.state.Processes, p.Record)
	return cp.saveState()
}

// adminClient is an HTTPS client trusting the cluster CA and presenting
// the admin certificate.
func (cp *ControlPlane) adminClient() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.caCertPEM)
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cp.adminTLS}},
		},
	}
}

// waitHTTP polls url until it answers 200 with a body that ok accepts,
// failing early when the component's process exits.
func (cp *ControlPlane) waitHTTP(ctx context.Context, what, url string, client *http.Client, ok func(string) bool) error {
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Second}
	}
	ctx, cancel := context.WithTimeout(ctx, cp.cfg.ReadyTimeout)
	defer cancel()
	start := time.Now()
	var last string
	for {
		for _, p := range cp.procs {
			if p.Exited() {
				return fmt.Errorf("controlplane: %s exited (%v) while waiting for %s; see %s", p.Name, p.Err(), what, p.LogPath)
			}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64*1024))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && ok(string(body)) {
				fmt.Fprintf(cp.log, "controlplane: %s healthy (%s)\n", what, time.Since(start).Round(time.Millisecond))
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("controlplane: %s not ready after %s (%s): last answer: %s", what, time.Since(start).Round(time.Second), url, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (cp *ControlPlane) saveState() error {
	return writeState(cp.cfg.StateDir, cp.state)
}

func writeState(dir string, s State) error { return statefile.Write(statePath(dir), s) }

// ReadState reads the state file of the control plane in dir.
func ReadState(dir string) (State, error) {
	s, err := statefile.Read[State](statePath(dir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		err = fmt.Errorf("controlplane: %w", err)
	}
	return s, err
}

// StopOptions tune Stop and Down.
type StopOptions struct {
	// Grace is how long each process gets between SIGTERM and SIGKILL.
	// Default proc.DefaultGrace.
	Grace time.Duration
	// KeepFiles leaves the state directory's content (logs, PKI, etcd
	// data) in place; only the processes are stopped.
	KeepFiles bool
	// KeepLogs removes everything but logs/.
	KeepLogs bool
}

// Stop stops the processes in reverse start order (SIGTERM by PID, then
// SIGKILL after the grace period) and removes what Up created.
func (cp *ControlPlane) Stop(opts StopOptions) error {
	var errs []error
	for i := len(cp.procs) - 1; i >= 0; i-- {
		p := cp.procs[i]
		if err := p.Stop(opts.Grace); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 && !opts.KeepFiles {
		errs = append(errs, removeCreated(cp.state, opts.KeepLogs))
	}
	if len(errs) == 0 {
		fmt.Fprintf(cp.log, "controlplane: stopped\n")
	}
	return errors.Join(errs...)
}

// DownOptions tune Down.
type DownOptions struct {
	StopOptions
	// Log receives progress lines. Nil: discard.
	Log io.Writer
}

// Down stops the control plane recorded in dir's state file — also when
// the process that started it is gone — and removes what Up created. A
// directory without a state file is left alone and is not an error.
// Processes whose PID now belongs to another program are not touched.
func Down(dir string, opts DownOptions) error {
	log := opts.Log
	if log == nil {
		log = io.Discard
	}
	s, err := ReadState(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for i := len(s.Processes) - 1; i >= 0; i-- {
		r := s.Processes[i]
		if r.Alive() {
			fmt.Fprintf(log, "controlplane: stopping %s (pid %d)\n", r.Name, r.PID)
		}
		if err := r.Stop(opts.Grace); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 && !opts.KeepFiles {
		errs = append(errs, removeCreated(s, opts.KeepLogs))
	}
	return errors.Join(errs...)
}

// removeCreated removes the paths Up recorded (never anything else), then
// the state directory if Up created it and it is empty.
func removeCreated(s State, keepLogs bool) error {
	var errs []error
	kept := false
	for _, p := range s.Created {
		if !strings.HasPrefix(p, s.StateDir+string(filepath.Separator)) {
			errs = append(errs, fmt.Errorf("controlplane: refusing to remove %s outside %s", p, s.StateDir))
			continue
		}
		if keepLogs && p == filepath.Join(s.StateDir, "logs") {
			kept = true
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	if s.CreatedStateDir && !kept && len(errs) == 0 {
		_ = os.Remove(s.StateDir) // only if empty
	}
	return errors.Join(errs...)
}
