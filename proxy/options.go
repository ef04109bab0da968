package proxy

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/herald-lb/herald/internal/daemon"
	"github.com/herald-lb/herald/internal/flagusage"
	"github.com/herald-lb/herald/internal/listen"
	"github.com/herald-lb/herald/internal/logging"
	"github.com/herald-lb/herald/proxy/conntrack"
	"github.com/herald-lb/herald/proxy/iptables"
	"github.com/herald-lb/herald/proxy/tunnel"
)

// Mode is --proxy-mode.
type Mode string

// The proxy modes.
const (
	ModeIPTables Mode = "iptables"
	ModeNFTables Mode = "nftables"
)

// UnmarshalText accepts the modes by name.
func (m *Mode) UnmarshalText(b []byte) error {
	switch v := Mode(b); v {
	case ModeIPTables, ModeNFTables:
		*m = v
		return nil
	}
	return fmt.Errorf("%q: use iptables or nftables", string(b))
}

// MarshalText implements encoding.TextMarshaler.
func (m Mode) MarshalText() ([]byte, error) { return []byte(m), nil }

// EnvClusterCIDR is the environment variable --cluster-cidr defaults to,
// so the install manifests can take it from an optional ConfigMap
// (herald-proxy) instead of hard-coding it in the DaemonSet.
const EnvClusterCIDR = "HERALD_CLUSTER_CIDR"

// Options configure `herald proxy`.
type Options struct {
	// APIFlags are --kubeconfig, --kube-api-qps and --kube-api-burst.
	daemon.APIFlags
	// LogFormat is --log-format: text or json.
	LogFormat logging.Format
	// NodeName is this node's name (--hostname-override, else $NODE_NAME,
	// else the host name).
	NodeName string
	// ClusterCIDRs is the pod network, at most one prefix per family.
	ClusterCIDRs  []netip.Prefix
	MasqueradeAll bool
	MasqueradeBit int
	// MinSyncPeriod is the least time between two syncs; SyncPeriod the
	// most (each such periodic sync checks the canary and is partial);
	// FullSyncPeriod the most between two full syncs.
	MinSyncPeriod, SyncPeriod, FullSyncPeriod time.Duration
	// HealthzBindAddress serves /healthz and /livez; MetricsBindAddress
	// /metrics and /proxyMode.
	HealthzBindAddress, MetricsBindAddress string
	// ProxyMode is iptables (the default) or nftables.
	ProxyMode Mode
	// NodePortAddresses is --nodeport-addresses; unset serves NodePorts
	// on every local address but loopback.
	NodePortAddresses NodePortAddresses
	// IPTablesBackend is auto (detect, like kube-proxy's image), nft or
	// legacy.
	IPTablesBackend iptables.Mode
	// Cleanup removes herald's rules and exits.
	Cleanup bool
	// PodNamespace and PodName ($POD_NAMESPACE, $POD_NAME from the
	// downward API) name the proxy's pod, whose DaemonSet tells an
	// uninstall from a restart; empty outside a pod.
	PodNamespace, PodName string
	// Verbosity is -v, kube-proxy's klog level: 4 and above log at debug
	// level.
	Verbosity int
	// Conntrack is the kernel's conntrack settings written at start
	// (kube-proxy's --conntrack-* flags and defaults).
	Conntrack conntrack.Tuning
	// BindAddress is --bind-address: as in kube-proxy since it stopped
	// binding anything, this node's primary IP of its family (for
	// --nodeport-addresses=primary and the node's own addresses in
	// loadBalancerSourceRanges); unset or unspecified: the Node's.
	BindAddress netip.Addr
	// DetectLocalMode is --detect-local-mode; PodBridgeInterface and
	// PodInterfaceNamePrefix name the interfaces of its interface modes.
	DetectLocalMode                            LocalMode
	PodBridgeInterface, PodInterfaceNamePrefix string
	// DSR is --dsr and its settings: the tunnel of direct server return
	// for Services annotated herald.io/forwarding: dsr.
	DSR DSROptions
	// ConfigFile is --config, kube-proxy's KubeProxyConfiguration; its
	// fields fill in the flags the command line leaves out.
	ConfigFile string
	// ConfigWarnings name the file's fields herald leaves out; ConfigNotes
	// the flags that won over a field. Both are logged at start.
	ConfigWarnings, ConfigNotes []string
	// fromFile maps each flag the file set to its field, for messages.
	fromFile map[string]string
	// configDigest is the hash of the file's contents as read, so that a
	// running proxy can tell when they change (watchConfig).
	configDigest [sha256.Size]byte
}

// DSROptions are the flags of direct server return (docs/dsr.md).
type DSROptions struct {
	// Enabled makes the tunnel, and lets annotated Services use it.
	Enabled bool
	// Seed is the cluster-wide seed of the consistent backend choice; 0
	// derives it from the kube-system namespace's UID, which every node
	// reads alike.
	Seed uint32
	// Port is the tunnel's VXLAN UDP port; MarkMask the packet mark bits
	// that route into it (one id per peer node).
	Port     int
	MarkMask uint32
}

// DefaultOptions are the flag defaults, kube-proxy's where it has the flag.
func DefaultOptions() Options {
	name := os.Getenv("NODE_NAME")
	if name == "" {
		name, _ = os.Hostname()
	}
	return Options{
		NodeName:           strings.ToLower(strings.TrimSpace(name)),
		PodNamespace:       os.Getenv("POD_NAMESPACE"),
		PodName:            os.Getenv("POD_NAME"),
		MasqueradeBit:      14,
		ProxyMode:          ModeIPTables,
		IPTablesBackend:    iptables.ModeAuto,
		MinSyncPeriod:      time.Second,
		SyncPeriod:         30 * time.Second,
		FullSyncPeriod:     time.Hour,
		HealthzBindAddress: "0.0.0.0:10256",
		MetricsBindAddress: "127.0.0.1:10249",
		Conntrack:          conntrack.DefaultTuning(),
		DSR:                DSROptions{Port: tunnel.DefaultPort, MarkMask: tunnel.DefaultMarkMask},
		APIFlags:           daemon.APIFlags{QPS: 50, Burst: 100},
	}
}

// ParseFlags reads the command line of `herald proxy` (flags only).
// Errors name the flag; -h returns pflag.ErrHelp.
func ParseFlags(args []string, out io.Writer) (Options, error) {
	o := DefaultOptions()
	err := flagusage.ParseFlags("proxy", args, out, func(fs *pflag.FlagSet) func() error { return Flags(fs, &o) })
	return o, err
}

// Flags defines the flags of `herald proxy` on fs, into o (whose values
// are the defaults). finish, called once fs is parsed, reads --config and
// the flags that need it, and checks the options.
func Flags(fs *pflag.FlagSet, o *Options) (finish func() error) {
	o.APIFlags.Register(fs)
	logging.Register(fs, &o.LogFormat)
	// -v and --v, as kube-proxy's (klog's) verbosity.
	fs.IntVarP(&o.Verbosity, "v", "v", o.Verbosity, "log verbosity as kube-proxy's -v: 4 or more logs at debug level (each sync, each rule change)")
	fs.StringVar(&o.NodeName, "hostname-override", o.NodeName, "this node's name (default: $NODE_NAME, else the host name)")
	fs.BoolVar(&o.Cleanup, "cleanup", o.Cleanup, "remove every rule and chain herald's proxy installed, then exit")
	// The file may set these too: here they are the proxy's own.
	bound := bindFlags(fs, o, "kubeconfig", "kube-api-qps", "kube-api-burst", "hostname-override", "v", "log-format")
	return func() error {
		if err := bound(); err != nil {
			return err
		}
		o.NodeName = strings.ToLower(strings.TrimSpace(o.NodeName))
		if o.Cleanup {
			return nil // needs no node, API server or ports
		}
		return o.Validate()
	}
}

// BindFlags registers the flags that shape the proxy's rules and servers
// on fs, into o: those of `herald proxy` without the connection, node
// name and --cleanup, so `herald speaker` can offer them for the proxy it
// runs in its own process. finish, called after fs.Parse, reads
// --config, --cluster-cidr, --nodeport-addresses and --bind-address into o.
func BindFlags(fs *pflag.FlagSet, o *Options) (finish func() error) { return bindFlags(fs, o) }

// bindFlags is BindFlags; the --config file may set the flags it
// registers and those named in more, no other.
func bindFlags(fs *pflag.FlagSet, o *Options, more ...string) (finish func() error) {
	before := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) { before[f.Name] = true })
	cidrs := os.Getenv(EnvClusterCIDR)
	fs.StringVar(&cidrs, "cluster-cidr", cidrs, "the pods' addresses, one CIDR per family, comma-separated; traffic from outside them to a cluster IP is masqueraded (default: $"+EnvClusterCIDR+", else the Node's spec.podCIDRs)")
	fs.BoolVar(&o.MasqueradeAll, "masquerade-all", o.MasqueradeAll, "masquerade all traffic sent to cluster IPs")
	fs.IntVar(&o.MasqueradeBit, "iptables-masquerade-bit", o.MasqueradeBit, "the fwmark bit (0-31) that marks packets to masquerade")
	fs.TextVar(&o.ProxyMode, "proxy-mode", o.ProxyMode, "the proxy `mode`: iptables, or nftables: one nftables table per family, programmed over netlink in one transaction per sync")
	fs.TextVar(&o.IPTablesBackend, "iptables-backend", o.IPTablesBackend, "the iptables `backend` the rules go through: nft, legacy, or auto (the one the node's rules are in, as kube-proxy's image detects it; plain iptables when only that is installed)")
	fs.DurationVar(&o.MinSyncPeriod, "min-sync-period", o.MinSyncPeriod, "least time between two syncs of the rules (changes in between are batched)")
	fs.DurationVar(&o.SyncPeriod, "sync-period", o.SyncPeriod, "most time between two syncs; a periodic sync checks the canary chain and rewrites what changed")
	// kube-proxy's names for the same two, so its command lines carry over.
	fs.DurationVar(&o.MinSyncPeriod, "iptables-min-sync-period", o.MinSyncPeriod, "kube-proxy's name for --min-sync-period")
	fs.DurationVar(&o.SyncPeriod, "iptables-sync-period", o.SyncPeriod, "kube-proxy's name for --sync-period")
	fs.DurationVar(&o.FullSyncPeriod, "full-sync-period", o.FullSyncPeriod, "most time between two syncs that rewrite all rules")
	npa := o.NodePortAddresses.String()
	fs.StringVar(&npa, "nodeport-addresses", npa, "serve NodePorts only on the node's addresses inside these CIDRs (comma-separated, IPv4 and/or IPv6; a family without a CIDR stays unrestricted, as with kube-proxy), or on the node's primary IPs with \""+NodePortAddressesPrimary+"\" (default: every local address but loopback)")
	fs.StringVar(&o.HealthzBindAddress, "healthz-bind-address", o.HealthzBindAddress, "address serving /healthz and /livez")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, "address serving /metrics and /proxyMode")
	bindConntrackFlags(fs, &o.Conntrack)
	fs.BoolVar(&o.DSR.Enabled, "dsr", o.DSR.Enabled, "direct server return for Services annotated herald.io/forwarding: dsr (nftables mode): a VXLAN tunnel to the other nodes, a consistent backend choice, the client's address kept (docs/dsr.md)")
	fs.Uint32Var(&o.DSR.Seed, "dsr-seed", o.DSR.Seed, "the consistent backend choice's seed, the same on every node (0: derived from the kube-system namespace's UID)")
	fs.IntVar(&o.DSR.Port, "dsr-port", o.DSR.Port, "the DSR tunnel's VXLAN UDP port, the same on every node")
	fs.Var((*hexUint32)(&o.DSR.MarkMask), "dsr-mark-mask", "the packet mark bits that route flows into the DSR tunnel, one value per peer node (must leave the masquerade bit alone)")
	bind := ""
	fs.StringVar(&bind, "bind-address", bind, "kube-proxy's: this node's primary IP of its family, instead of the Node's (for --nodeport-addresses=primary and the node's own addresses in loadBalancerSourceRanges); no socket binds it; 0.0.0.0 or :: means the Node's")
	fs.TextVar(&o.DetectLocalMode, "detect-local-mode", o.DetectLocalMode, "how pod traffic is told apart (the `mode`): ClusterCIDR (--cluster-cidr; the default, the Node's spec.podCIDRs without it), NodeCIDR (the Node's spec.podCIDRs), BridgeInterface (arriving on --pod-bridge-interface) or InterfaceNamePrefix (on interfaces named --pod-interface-name-prefix...)")
	fs.StringVar(&o.PodBridgeInterface, "pod-bridge-interface", o.PodBridgeInterface, "the pods' bridge, for --detect-local-mode=BridgeInterface")
	fs.StringVar(&o.PodInterfaceNamePrefix, "pod-interface-name-prefix", o.PodInterfaceNamePrefix, "how the pods' interfaces are named, for --detect-local-mode=InterfaceNamePrefix")
	fs.StringVar(&o.ConfigFile, "config", o.ConfigFile, "kube-proxy's configuration file (a KubeProxyConfiguration, kubeproxy.config.k8s.io/v1alpha1, as kubeadm writes it): its fields set the flags the command line does not; a field herald cannot honour without serving traffic differently is an error, any other it leaves out is logged. Read again when it changes: the proxy restarts in its process with the new contents, or keeps running and logs why it cannot use them")
	allowed := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) { allowed[f.Name] = !before[f.Name] })
	for _, n := range more {
		allowed[n] = true
	}
	return func() error {
		var err error
		if o.ConfigFile != "" {
			if err := applyConfigFile(fs, o, allowed); err != nil {
				return err
			}
		}
		if bind != "" {
			if o.BindAddress, err = netip.ParseAddr(bind); err != nil {
				return fmt.Errorf("--bind-address%s: %q is not an IP address", o.origin("bind-address"), bind)
			}
			o.BindAddress = o.BindAddress.Unmap()
		}
		if o.ClusterCIDRs, err = parseClusterCIDRs(cidrs); err != nil {
			return fmt.Errorf("--cluster-cidr%s: %w", o.origin("cluster-cidr"), err)
		}
		if o.NodePortAddresses, err = ParseNodePortAddresses(npa); err != nil {
			return fmt.Errorf("--nodeport-addresses%s: %w", o.origin("nodeport-addresses"), err)
		}
		return nil
	}
}

// bindConntrackFlags registers kube-proxy's conntrack flags, with its
// defaults: written once at start, a zero leaving the node's value.
func bindConntrackFlags(fs *pflag.FlagSet, t *conntrack.Tuning) {
	fs.IntVar(&t.MaxPerCore, "conntrack-max-per-core", t.MaxPerCore, "conntrack entries per CPU: nf_conntrack_max becomes this times the CPUs, at least --conntrack-min (0 leaves the table's size alone)")
	fs.IntVar(&t.Min, "conntrack-min", t.Min, "the least nf_conntrack_max set from --conntrack-max-per-core")
	fs.DurationVar(&t.TCPEstablishedTimeout, "conntrack-tcp-timeout-established", t.TCPEstablishedTimeout, "how long an idle established TCP connection stays tracked (0 leaves the node's)")
	fs.DurationVar(&t.TCPCloseWaitTimeout, "conntrack-tcp-timeout-close-wait", t.TCPCloseWaitTimeout, "how long a TCP connection in CLOSE_WAIT stays tracked (0 leaves the node's)")
	fs.BoolVar(&t.TCPBeLiberal, "conntrack-tcp-be-liberal", t.TCPBeLiberal, "track out-of-window TCP packets instead of marking them INVALID (false leaves the node's setting)")
	fs.DurationVar(&t.UDPTimeout, "conntrack-udp-timeout", t.UDPTimeout, "how long an unreplied UDP flow stays tracked (0 leaves the node's)")
	fs.DurationVar(&t.UDPStreamTimeout, "conntrack-udp-timeout-stream", t.UDPStreamTimeout, "how long a UDP flow that has seen replies stays tracked (0 leaves the node's)")
}

// parseClusterCIDRs reads "a/n[,b/m]": at most one prefix per family.
func parseClusterCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR", f)
		}
		if p.Addr().Is4In6() {
			return nil, fmt.Errorf("%q: write IPv4 prefixes as IPv4", f)
		}
		for _, o := range out {
			if o.Addr().Is4() == p.Addr().Is4() {
				return nil, fmt.Errorf("%s and %s: at most one CIDR per address family", o, p)
			}
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Validate checks the options, naming the flag at fault.
func (o Options) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	o.validateDetectLocal(bad)
	if o.NodeName == "" {
		bad("hostname-override", "no node name: set it, or NODE_NAME")
	} else {
		for _, m := range validation.IsDNS1123Subdomain(o.NodeName) {
			bad("hostname-override", "%q is not a node name: %s", o.NodeName, m)
		}
	}
	if o.MasqueradeBit < 0 || o.MasqueradeBit > 31 {
		bad("iptables-masquerade-bit", "%d is out of range 0-31", o.MasqueradeBit)
	}
	if o.SyncPeriod <= 0 {
		bad("sync-period", "must be positive, got %s", o.SyncPeriod)
	}
	if o.FullSyncPeriod < o.SyncPeriod {
		bad("full-sync-period", "must be at least --sync-period (%s), got %s", o.SyncPeriod, o.FullSyncPeriod)
	}
	if o.MinSyncPeriod < 0 {
		bad("min-sync-period", "must not be negative, got %s", o.MinSyncPeriod)
	} else if o.SyncPeriod > 0 && o.MinSyncPeriod > o.SyncPeriod {
		bad("min-sync-period", "%s is longer than --sync-period (%s)", o.MinSyncPeriod, o.SyncPeriod)
	}
	if err := listen.Check(o.HealthzBindAddress); err != nil {
		bad("healthz-bind-address", "%v", err)
	}
	if err := listen.Check(o.MetricsBindAddress); err != nil {
		bad("metrics-bind-address", "%v", err)
	}
	if err := o.Conntrack.Validate(); err != nil {
		errs = append(errs, err)
	}
	o.validateDSR(bad)
	errs = append(errs, o.APIFlags.Validate()...)
	return errors.Join(o.attribute(errs)...)
}

// hexUint32 is a flag value shown in hex, as marks are.
type hexUint32 uint32

func (h *hexUint32) String() string { return fmt.Sprintf("%#08x", uint32(*h)) }

func (h *hexUint32) Set(s string) error {
	v, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		return fmt.Errorf("%q is not a 32-bit number (decimal, or hex with 0x)", s)
	}
	*h = hexUint32(v)
	return nil
}

func (h *hexUint32) Type() string { return "mask" }

func (o Options) validateDSR(bad func(flag, format string, args ...any)) {
	if !o.DSR.Enabled {
		return
	}
	if o.ProxyMode != ModeNFTables {
		bad("dsr", "needs --proxy-mode=nftables (the iptables mode has no consistent hash)")
	}
	if o.DSR.Port < 1 || o.DSR.Port > 65535 {
		bad("dsr-port", "%d is out of range 1-65535", o.DSR.Port)
	}
	if o.DSR.MarkMask == 0 {
		bad("dsr-mark-mask", "must have bits set")
	} else if o.MasqueradeBit >= 0 && o.MasqueradeBit < 32 && o.DSR.MarkMask&(1<<uint(o.MasqueradeBit)) != 0 {
		bad("dsr-mark-mask", "%#x holds the masquerade bit %d (--iptables-masquerade-bit)", o.DSR.MarkMask, o.MasqueradeBit)
	}
}

// ParseConntrackFlags reads the command line of `herald conntrack`
// (flags only). Errors name the flag; -h returns pflag.ErrHelp.
func ParseConntrackFlags(args []string, out io.Writer) (conntrack.Tuning, logging.Format, error) {
	t, format := conntrack.DefaultTuning(), logging.Text
	err := flagusage.ParseFlags("conntrack", args, out, func(fs *pflag.FlagSet) func() error { return ConntrackFlags(fs, &t, &format) })
	return t, format, err
}

// ConntrackFlags defines the flags of `herald conntrack` on fs: the
// proxy's --conntrack-* flags alone, for a privileged init container
// that writes them before the unprivileged proxy starts, and
// --log-format. finish, called once fs is parsed, checks them.
func ConntrackFlags(fs *pflag.FlagSet, t *conntrack.Tuning, format *logging.Format) (finish func() error) {
	logging.Register(fs, format)
	bindConntrackFlags(fs, t)
	return func() error { return t.Validate() }
}

// LogLevel is the slog level -v asks for.
func (o Options) LogLevel() slog.Level {
	if o.Verbosity >= 4 {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}
