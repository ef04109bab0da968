// Package kubelet is the lab's kubelet: one per lab node, it registers the
// node with the API server and runs the pods the scheduler binds to it as
// network namespaces and processes.
//
// What it does, as the real kubelet does it:
//
//   - Registers its Node (labels kubernetes.io/hostname, kubernetes.io/os;
//     spec.podCIDR from the lab topology; status with a Ready condition, the
//     node's LAN address as InternalIP, capacity and allocatable), then
//     renews its Lease in kube-node-lease and refreshes the conditions'
//     heartbeat every HeartbeatInterval.
//   - Watches the pods bound to it (fieldSelector spec.nodeName) and runs
//     each: a network namespace with a veth into the node's pod bridge and
//     the next free address of the pod CIDR (hostNetwork pods use the
//     node's namespace and address), then one process per container for
//     the images it knows (KnownImages). Init containers run first, in
//     order: a regular one to completion (retried after a failure unless
//     the restartPolicy is Never, which fails the pod), a sidecar
//     (restartPolicy Always on the init container) until it has started,
//     after which it keeps running, restarted whenever it exits, next to
//     the app containers, and counts toward the pod's readiness. It
//     reports the pod's status (phase, IPs, conditions, init and app
//     container states, restarts), honours httpGet/tcpSocket readiness
//     and startup probes, restarts containers per restartPolicy with a
//     back-off, and on deletion stops the app containers, then the
//     sidecars last first, with SIGTERM, the grace period, SIGKILL,
//     removes the network and deletes the pod with grace period 0.
//
// It authenticates with a node client certificate (CN=system:node:<name>,
// O=system:nodes; see WriteNodeKubeconfig), so the API server's Node
// authorizer limits it to what a real kubelet may do: its own Node and
// Lease, pods bound to it, and the ConfigMaps and Secrets those pods use.
// The admin credential would work too, but would hide the permission
// problems a real node has.
//
// In image mode (Config.ImageMode) it runs every image but the echo
// server's from podman's local storage under runc instead, with the
// pod's securityContext and volumes (imagemode.go, runc.go).
//
// Given a serving certificate (Config.TLSCertFile), it serves the kubelet
// API on the node's InternalIPs, port 10250, over TLS, and advertises the
// port in the Node's status: exec, containerLogs, portForward, run and
// healthz, so kubectl exec, logs and port-forward work through the API
// server (server.go). Clients are authenticated and authorized as by a
// real kubelet in Webhook mode (serverauth.go). Each container's stdout
// and stderr go to one log file, <pod dir>/<container>.log, which holds
// every run; the API returns a run's part of it.
//
// Everything it creates is recorded in a state file first, so Down can
// remove it after a crash. It runs startup, readiness and liveness
// probes (HTTP, TCP and exec; not gRPC) and preStop hooks (exec, HTTP,
// sleep), not postStart hooks. It has no resource limits,
// attach, stats or metrics, log timestamps or stdout apart from stderr,
// or, in binary mode, images beyond KnownImages; a pod asking for an unknown image stays Pending with its
// container Waiting in ErrImagePull, with a message that says why.
package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/herald-lb/herald/e2e/lab/kubeconfig"
	"github.com/herald-lb/herald/e2e/lab/netns"
	"github.com/herald-lb/herald/e2e/lab/proc"
)

// Defaults.
const (
	DefaultPodBridge         = "cbr0"
	DefaultHeartbeatInterval = 10 * time.Second
	DefaultMaxPods           = 110
	DefaultPort              = 10250
	// LeaseDuration is the Lease's leaseDurationSeconds (the real
	// kubelet's default).
	LeaseDuration = 40
)

// Config describes one lab kubelet.
type Config struct {
	// NodeName is the Node's name, e.g. node1.
	NodeName string
	// NodeNetns is the node's network namespace; NodeIP its LAN address
	// (the Node's InternalIP).
	NodeNetns string
	NodeIP    netip.Addr
	// PodCIDR is the node's pod range (spec.podCIDR); PodGateway the
	// node's address on PodBridge, the pods' default gateway.
	PodCIDR    netip.Prefix
	PodGateway netip.Addr
	// NodeIPv6, PodCIDRv6 and PodGatewayV6, all set or none, make the
	// node dual-stack with IPv4 first: a second InternalIP and pod CIDR,
	// and every pod an IPv6 address too. A pod's IPv6 address carries
	// the host number of its IPv4 one (198.18.1.7 -> 2001:db8:1:1::7), so
	// one allocator serves both and PodGatewayV6 must be the gateway's.
	NodeIPv6     netip.Addr
	PodCIDRv6    netip.Prefix
	PodGatewayV6 netip.Addr
	PodBridge    string
	// NodeZone, when set, is the Node's topology.kubernetes.io/zone label.
	NodeZone string
	// NetnsPrefix starts the name of every pod namespace
	// (<prefix>-pod-<namespace>-<name>): the lab's prefix.
	NetnsPrefix string
	// Kubeconfig holds the node's credentials.
	Kubeconfig string
	// StateDir holds the state file and the pods' log directories.
	StateDir string
	// Programs are the binaries behind KnownImages.
	Programs Programs
	// KubeletVersion is reported in the Node's nodeInfo (the control
	// plane's version, e.g. v1.34.10).
	KubeletVersion string
	// APIFromHost makes the kubelet reach the API server from the
	// namespace it runs in instead of the node's namespace. By default
	// every API connection is opened inside NodeNetns, so the kubelet's
	// traffic crosses the lab's LAN like a real node's.
	APIFromHost bool
	// ImageMode runs images from podman's local storage under runc
	// instead of the host's programs (see usesImage); ImageDir caches
	// their unpacked filesystems, shared by the lab's kubelets (default
	// <StateDir>/images).
	ImageMode bool
	ImageDir  string
	// TLSCertFile and TLSKeyFile are the kubelet API's serving
	// certificate (WriteServingCert), ClientCAFile the CA its clients'
	// certificates must chain to. Without them the kubelet serves no API
	// (a kubelet started on its own by a unit of the lab, not the lab).
	TLSCertFile  string
	TLSKeyFile   string
	ClientCAFile string
	// Port is the kubelet API's port on the node's InternalIPs (default
	// 10250, the real kubelet's).
	Port int
	// DNS is the cluster DNS pods resolve through (image mode: it writes
	// their /etc/resolv.conf by dnsPolicy); none: the node's resolver.
	DNS DNSConfig
	// HeartbeatInterval defaults to 10s; MaxPods to 110.
	HeartbeatInterval time.Duration
	MaxPods           int
	// Log receives what the kubelet does. Nil: os.Stderr.
	Log io.Writer
}

// servesAPI tells whether the kubelet serves the kubelet API.
func (k *Kubelet) servesAPI() bool { return k.cfg.TLSCertFile != "" }

// dualStack tells whether the node has IPv6 too.
func (c *Config) dualStack() bool { return c.PodCIDRv6.IsValid() }

// podIPv6 is the IPv6 address that goes with a pod's IPv4 address: the
// same host number in PodCIDRv6.
func (c *Config) podIPv6(v4 netip.Addr) netip.Addr {
	a, base := v4.As4(), c.PodCIDR.Masked().Addr().As4()
	host := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	host -= uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	b := c.PodCIDRv6.Masked().Addr().As16()
	b[12], b[13], b[14], b[15] = byte(host>>24), byte(host>>16), byte(host>>8), byte(host)
	return netip.AddrFrom16(b)
}

func (c *Config) validate() error {
	switch {
	case c.NodeName == "":
		return errors.New("kubelet: no node name")
	case c.NodeNetns == "":
		return errors.New("kubelet: no node network namespace")
	case !c.NodeIP.IsValid():
		return errors.New("kubelet: no node IP")
	case !c.PodCIDR.IsValid() || !c.PodGateway.IsValid() || !c.PodCIDR.Contains(c.PodGateway) || !c.PodCIDR.Addr().Is4():
		return fmt.Errorf("kubelet: pod CIDR %s and gateway %s do not fit", c.PodCIDR, c.PodGateway)
	case c.NetnsPrefix == "":
		return errors.New("kubelet: no namespace prefix")
	case c.Kubeconfig == "":
		return errors.New("kubelet: no kubeconfig")
	case c.StateDir == "":
		return errors.New("kubelet: no state directory")
	}
	// IPv6 is optional, but all or nothing.
	if c.NodeIPv6.IsValid() || c.PodCIDRv6.IsValid() || c.PodGatewayV6.IsValid() {
		if !c.NodeIPv6.Is6() || !c.PodCIDRv6.Addr().Is6() || c.PodCIDRv6.Bits() > 96 || c.podIPv6(c.PodGateway) != c.PodGatewayV6 {
			return fmt.Errorf("kubelet: IPv6 node IP %s, pod CIDR %s and gateway %s do not fit (a /96 or larger, the gateway with the IPv4 gateway's host number)", c.NodeIPv6, c.PodCIDRv6, c.PodGatewayV6)
		}
	}
	if c.PodBridge == "" {
		c.PodBridge = DefaultPodBridge
	}
	if c.Programs.KubeProxyVersion == "" {
		c.Programs.KubeProxyVersion = c.KubeletVersion
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.MaxPods <= 0 {
		c.MaxPods = DefaultMaxPods
	}
	if c.Port <= 0 {
		c.Port = DefaultPort
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") || (c.TLSCertFile == "") != (c.ClientCAFile == "") {
		return errors.New("kubelet: the API needs all of a serving certificate, its key and a client CA, or none")
	}
	if c.KubeletVersion == "" {
		c.KubeletVersion = "v0.0.0-lab"
	}
	if c.Log == nil {
		c.Log = os.Stderr
	}
	if c.ImageDir == "" {
		c.ImageDir = filepath.Join(c.StateDir, "images")
	}
	return nil
}

// Kubelet is a running lab kubelet.
type Kubelet struct {
	cfg      Config
	client   kubernetes.Interface
	recorder record.EventRecorder

	// known serves the API reads a container start needs while the API
	// server is away.
	known lastKnown

	mu         sync.Mutex
	state      State
	workers    map[types.UID]*podWorker
	finished   map[types.UID]bool
	ips        map[netip.Addr]types.UID
	lastIP     netip.Addr // the last address handed out (allocateIP)
	netnsOwner map[string]types.UID
	nodeUID    types.UID
	logMu      sync.Mutex
	wg         sync.WaitGroup
	ctx        context.Context
	// self is this program, which makes containers' volume mounts
	// (MountExecCommand).
	self string

	// Image mode: the runtime, the images, the capabilities the kubelet
	// may hand out, and a counter naming runc's containers.
	runtime   ociRuntime
	images    imageStore
	available []string
	runs      uint64
}

func (k *Kubelet) logf(format string, args ...any) {
	k.logMu.Lock()
	defer k.logMu.Unlock()
	fmt.Fprintf(k.cfg.Log, "%s kubelet %s: %s\n", time.Now().Format("15:04:05.000"), k.cfg.NodeName, fmt.Sprintf(format, args...))
}

// Run runs the kubelet until ctx ends. Leftovers of an earlier kubelet
// with the same state directory are removed first. On return every pod it
// ran is stopped and its network removed (the API objects are left as
// they are, as when a node goes away).
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return err
	}
	k := &Kubelet{
		cfg:        cfg,
		workers:    map[types.UID]*podWorker{},
		finished:   map[types.UID]bool{},
		ips:        map[netip.Addr]types.UID{},
		netnsOwner: map[string]types.UID{},
		state:      State{NodeName: cfg.NodeName, NodeNetns: cfg.NodeNetns},
		ctx:        ctx,
	}
	var err error
	if k.self, err = os.Executable(); err != nil {
		return fmt.Errorf("kubelet: own path: %w", err)
	}
	if cfg.ImageMode {
		if err := k.setupImageMode(); err != nil {
			return err
		}
	}
	if err := Down(cfg.StateDir, DownOptions{Log: cfg.Log, KeepLogs: true}); err != nil {
		return fmt.Errorf("kubelet: removing what an earlier kubelet left: %w", err)
	}
	if err := k.save(); err != nil {
		return err
	}

	rc, err := kubeconfig.RESTConfig(cfg.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubelet: %w", err)
	}
	rc.UserAgent = "lab-kubelet/" + cfg.NodeName
	rc.QPS, rc.Burst = 50, 100
	if !cfg.APIFromHost {
		rc.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			d := net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
			err := netns.Do(cfg.NodeNetns, func() (err error) {
				c, err = d.DialContext(ctx, network, addr)
				return err
			})
			return c, err
		}
	}
	if k.client, err = kubernetes.NewForConfig(rc); err != nil {
		return err
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: k.client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	k.recorder = broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "kubelet", Host: cfg.NodeName})

	if k.servesAPI() {
		if err := k.serveAPI(ctx); err != nil {
			return err
		}
	} else {
		k.logf("no serving certificate: not serving the kubelet API")
	}
	start := time.Now()
	if err := k.registerNode(ctx); err != nil {
		if ctx.Err() != nil {
			k.logf("stopped before the node was registered")
			return nil
		}
		return err
	}
	k.logf("node registered in %s (InternalIPs %v, podCIDRs %v)", time.Since(start).Round(time.Millisecond), k.nodeIPs(), k.podCIDRs())
	go k.heartbeat(ctx)

	lw := cache.NewListWatchFromClient(k.client.CoreV1().RESTClient(), "pods", v1.NamespaceAll,
		fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName))
	informer := cache.NewSharedIndexInformer(lw, &v1.Pod{}, 0, cache.Indexers{})
	_, err = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.dispatch(obj) },
		UpdateFunc: func(_, obj any) { k.dispatch(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*v1.Pod); ok {
				k.removed(pod)
			}
		},
	})
	if err != nil {
		return err
	}
	informer.Run(ctx.Done()) // returns when ctx ends

	k.logf("stopping: tearing down %d pods", len(k.workerList()))
	k.wg.Wait()
	k.mu.Lock()
	left := len(k.state.Pods)
	k.mu.Unlock()
	if left > 0 {
		return fmt.Errorf("kubelet: %d pods not fully torn down; run down", left)
	}
	k.logf("stopped")
	return nil
}

func (k *Kubelet) workerList() []*podWorker {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]*podWorker, 0, len(k.workers))
	for _, w := range k.workers {
		out = append(out, w)
	}
	return out
}

// dispatch hands an added or updated pod to its worker, starting one for
// a new pod.
func (k *Kubelet) dispatch(obj any) {
	pod, ok := obj.(*v1.Pod)
	if !ok || pod.Spec.NodeName != k.cfg.NodeName {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.finished[pod.UID] || k.ctx.Err() != nil {
		return
	}
	if w := k.workers[pod.UID]; w != nil {
		w.update(pod)
		return
	}
	w := newPodWorker(k, pod)
	k.workers[pod.UID] = w
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		w.run(k.ctx)
		k.mu.Lock()
		delete(k.workers, w.uid)
		k.finished[w.uid] = true
		k.mu.Unlock()
	}()
}

func (k *Kubelet) removed(pod *v1.Pod) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.finished, pod.UID)
	if w := k.workers[pod.UID]; w != nil {
		w.remove()
	}
}

// save writes the state file; the caller holds k.mu or is alone.
func (k *Kubelet) save() error {
	return writeState(k.cfg.StateDir, k.state)
}

func (k *Kubelet) saveLocked() {
	if err := k.save(); err != nil {
		k.logf("writing the state file: %v", err)
	}
}

// putRecord adds or replaces a pod's record and saves the state.
func (k *Kubelet) putRecord(rec PodRecord) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, p := range k.state.Pods {
		if p.UID == rec.UID {
			rec.Processes = p.Processes
			k.state.Pods[i] = rec
			k.saveLocked()
			return
		}
	}
	k.state.Pods = append(k.state.Pods, rec)
	k.saveLocked()
}

// forgetPod drops a pod's record once nothing of it is left.
func (k *Kubelet) forgetPod(uid types.UID) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, p := range k.state.Pods {
		if p.UID == uid {
			k.state.Pods = append(k.state.Pods[:i], k.state.Pods[i+1:]...)
			k.saveLocked()
			return
		}
	}
}

// recordProcess records (or, with nil, clears) a container's process.
func (k *Kubelet) recordProcess(uid types.UID, container string, r *proc.Record) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := range k.state.Pods {
		p := &k.state.Pods[i]
		if p.UID != uid {
			continue
		}
		if r == nil {
			delete(p.Processes, container)
		} else {
			if p.Processes == nil {
				p.Processes = map[string]proc.Record{}
			}
			p.Processes[container] = *r
		}
		k.saveLocked()
		return
	}
}
