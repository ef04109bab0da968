package speaker

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/herald-lb/herald/internal/daemon"
	"github.com/herald-lb/herald/internal/flagusage"
	"github.com/herald-lb/herald/internal/lbapi"
	"github.com/herald-lb/herald/internal/listen"
	"github.com/herald-lb/herald/internal/logging"
	"github.com/herald-lb/herald/speaker/heartbeat"
	"github.com/herald-lb/herald/speaker/members"
	"github.com/herald-lb/herald/speaker/partition"
)

// Options configure `herald speaker`.
type Options struct {
	// APIFlags are --kubeconfig, --kube-api-qps and --kube-api-burst.
	daemon.APIFlags
	// LogFormat is --log-format: text or json.
	LogFormat logging.Format
	// NodeName is this node's Node name ($NODE_NAME).
	NodeName string
	// Namespace holds the configuration, the memberlist Secret and the
	// ServiceAnnouncements.
	Namespace string
	// LBClass is the spec.loadBalancerClass handled, as the controller's.
	LBClass string
	// AdvertiseAddr is the address the other speakers reach this one at
	// ($NODE_IP, else the Node's InternalIP); BindAddr where memberlist
	// listens (default: AdvertiseAddr); Port its UDP and TCP port.
	AdvertiseAddr, BindAddr netip.Addr
	Port                    int
	// SecretName is the Secret the memberlist key is derived from.
	SecretName string
	Timers     members.Timers
	// IgnoreExcludeLB lets nodes labelled
	// node.kubernetes.io/exclude-from-external-load-balancers announce.
	IgnoreExcludeLB bool
	// MetricsAddr serves /metrics, /healthz and /readyz.
	MetricsAddr string
	LogLevel    slog.Level
	// BGP runs the embedded BGP speaker (GoBGP) for the BGPPeers that
	// select this node; BGPShutdownWait bounds the wait for withdrawals
	// to go out on a graceful stop.
	BGP             bool
	BGPShutdownWait time.Duration
	// BGPDrainWait is how long a drained node sends its routes with
	// GRACEFUL_SHUTDOWN before it withdraws them (DefaultBGPDrainWait).
	BGPDrainWait time.Duration
	// HeartbeatPeriod is how often the lowest-named speaker renews the
	// heartbeat Lease; a speaker alone in memberlist is isolated while
	// another renewed within 3 periods (see speaker/partition).
	HeartbeatPeriod time.Duration
	// RecoveryHold is how long a speaker the cluster counted out
	// (declared dead, or isolated) stays recovering after the last such
	// time, winning addresses only where no healthy node can; 0 turns it
	// off (see speaker/partition).
	RecoveryHold time.Duration
	// TakeoverCheck is how long a speaker that won an address from a
	// speaker declared dead listens for the latter still answering for
	// it on the LAN before it answers itself; 0 turns the check off.
	TakeoverCheck time.Duration
	// HandoverKeep is how long after this node took a layer-2 address
	// over from a live member it sends the connections it never saw to
	// that member (speaker/handover); 0 turns it off.
	HandoverKeep time.Duration
	// RestartHold is how long the others keep electing a speaker that
	// left saying it restarts in place (a rolling update on a node that
	// stays; its proxy rules stay in the kernel) before they take its
	// addresses over; 0: take them over at once, as after any leave.
	RestartHold time.Duration
	// Proxy: the service proxy runs in this process too (the command line
	// starts it next to the speaker; the speaker only reports it).
	Proxy bool
	// Ready, when set, is another check /readyz makes: the in-process
	// proxy's health, set by the command line that runs both.
	Ready func() error `json:"-"`
	// ProxyRules, when set, is the in-process proxy: addresses won here
	// wait for its rules before they are announced (Deps.Proxy).
	ProxyRules ProxyRules `json:"-"`
	// ProxyMetrics, when set, are the in-process proxy's metrics (without
	// Go and process metrics, which the speaker's registry has): served
	// on --metrics-addr with the speaker's, where the monitoring scrapes.
	ProxyMetrics prometheus.Collector `json:"-"`
	// PodNamespace, PodName and PodUID ($POD_NAMESPACE, $POD_NAME,
	// $POD_UID from the downward API) are the speaker's pod, which owns
	// its ServiceAnnouncements when they are in its namespace: the
	// garbage collector removes them with the pod when the speaker could
	// not (helm uninstall deletes its Role before it stops).
	PodNamespace, PodName, PodUID string
}

// DefaultHandoverKeep is --handover-keep's default: long enough for the
// requests and streams of most connections, short enough that a former
// holder does not carry an address's old connections for the day.
const DefaultHandoverKeep = time.Hour

// DefaultOptions are the flag defaults.
func DefaultOptions() Options {
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "herald-system"
	}
	return Options{
		NodeName:        strings.ToLower(strings.TrimSpace(os.Getenv("NODE_NAME"))),
		Namespace:       ns,
		Port:            members.DefaultPort,
		SecretName:      lbapi.MemberlistSecretName,
		Timers:          members.DefaultTimers(),
		MetricsAddr:     ":7473",
		APIFlags:        daemon.APIFlags{QPS: 50, Burst: 100},
		Proxy:           true,
		BGP:             true,
		BGPShutdownWait: time.Second,
		BGPDrainWait:    DefaultBGPDrainWait,
		HeartbeatPeriod: time.Second,
		RecoveryHold:    30 * time.Second,
		TakeoverCheck:   partition.DefaultTakeoverCheckWait,
		HandoverKeep:    DefaultHandoverKeep,
		RestartHold:     DefaultRestartHold,
		PodNamespace:    os.Getenv("POD_NAMESPACE"),
		PodName:         os.Getenv("POD_NAME"),
		PodUID:          os.Getenv("POD_UID"),
	}
}

// ParseFlags reads the command line of `herald speaker` (flags only),
// without the in-process proxy's flags, which the command line adds.
// Errors name the flag; -h returns pflag.ErrHelp.
func ParseFlags(args []string, out io.Writer) (Options, error) {
	o := DefaultOptions()
	err := flagusage.ParseFlags("speaker", args, out, func(fs *pflag.FlagSet) func() error { return Flags(fs, &o) })
	return o, err
}

// Flags defines the flags of `herald speaker` on fs, into o (whose
// values are the defaults). finish, called once fs is parsed, reads the
// flags that need it and checks the options.
func Flags(fs *pflag.FlagSet, o *Options) (finish func() error) {
	advertise, bind := os.Getenv("NODE_IP"), ""
	logLevel := "info"
	o.APIFlags.Register(fs)
	logging.Register(fs, &o.LogFormat)
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "this node's Node name (default: $NODE_NAME)")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "namespace of herald's configuration, the memberlist Secret and the ServiceAnnouncements (default: $POD_NAMESPACE or herald-system)")
	fs.StringVar(&o.LBClass, "lb-class", o.LBClass, "announce only Services with this spec.loadBalancerClass (default: only Services without a class), as the controller's --lb-class")
	fs.StringVar(&advertise, "memberlist-advertise-address", advertise, "address the other speakers reach this one at (default: $NODE_IP, else the Node's InternalIP)")
	fs.StringVar(&bind, "memberlist-bind-address", "", "address memberlist listens on (default: the advertise address)")
	fs.IntVar(&o.Port, "memberlist-port", o.Port, "memberlist UDP and TCP port; every speaker must use the same")
	fs.StringVar(&o.SecretName, "memberlist-secret", o.SecretName, "Secret in --namespace whose key "+lbapi.MemberlistSecretKey+" the memberlist encryption key is derived from")
	fs.DurationVar(&o.Timers.ProbeInterval, "memberlist-probe-interval", o.Timers.ProbeInterval, "time between failure-detection probes; a dead speaker is noticed after about 5.5 of these (with the default suspicion multiplier)")
	fs.DurationVar(&o.Timers.ProbeTimeout, "memberlist-probe-timeout", o.Timers.ProbeTimeout, "wait for a probe's answer before asking others to probe")
	fs.IntVar(&o.Timers.SuspicionMult, "memberlist-suspicion-mult", o.Timers.SuspicionMult, "suspicion time in probe intervals (scaled by log10 of the cluster size) before a suspect is declared dead, when other members confirm the suspicion; above 2, memberlist waits for (mult-2) confirmations, at most (cluster size-2)")
	fs.IntVar(&o.Timers.SuspicionMaxTimeoutMult, "memberlist-suspicion-max-mult", o.Timers.SuspicionMaxTimeoutMult, "how many times the suspicion time an unconfirmed suspicion lasts (one member alone could not reach the suspect): the time the suspect has to refute it")
	fs.DurationVar(&o.Timers.GossipInterval, "memberlist-gossip-interval", o.Timers.GossipInterval, "time between gossip rounds")
	fs.BoolVar(&o.IgnoreExcludeLB, "ignore-exclude-lb", o.IgnoreExcludeLB, "let nodes labelled node.kubernetes.io/exclude-from-external-load-balancers announce")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", o.MetricsAddr, "address serving /metrics, /healthz and /readyz")
	fs.StringVar(&logLevel, "log-level", logLevel, "debug, info, warn or error")
	fs.BoolVar(&o.BGP, "bgp", o.BGP, "peer with the BGPPeers selecting this node and advertise the LoadBalancer IPs of BGPAdvertisements (embedded GoBGP)")
	fs.DurationVar(&o.HeartbeatPeriod, "heartbeat-period", o.HeartbeatPeriod, "how often the speakers' heartbeat Lease "+heartbeat.LeaseName+" is renewed; a speaker whose memberlist view is a minority of the speakers it knows of holds back its claims while one outside its view renewed it within 3 periods, and for 3 periods after it found itself in a minority")
	fs.DurationVar(&o.RestartHold, "restart-hold", o.RestartHold, "when another node's speaker stops for a restart in place (its pod deleted by a rolling update while the node stays schedulable and Ready, and its DaemonSet stays), how long this speaker keeps electing it instead of taking its addresses over: the node keeps forwarding, so the addresses do not move twice; after the hold without the new speaker, they are taken over (0: at once)")
	fs.DurationVar(&o.RecoveryHold, "recovery-hold", o.RecoveryHold, "after memberlist declared this speaker dead (it was paused or cut off, and came back) or it was isolated, how long it leaves its addresses with the other nodes and wins only those no other node can announce; each new such event starts the hold over, so a flapping speaker does not move addresses back and forth (0: claim them back at once)")
	fs.DurationVar(&o.HandoverKeep, "handover-keep", o.HandoverKeep, "after this node took a layer-2 address over from another node (herald drain and --undo, the move back to a node that recovered or restarted, a node declared dead that refuted it), how long it sends packets of TCP connections it never saw to that node while it is a live member, where they are known, instead of resetting them (nftables, a table herald-handover per family; docs/concepts.md); 0: off")
	fs.DurationVar(&o.TakeoverCheck, "takeover-check", o.TakeoverCheck, "before answering for an address won from a speaker memberlist declared dead (not one that left), how long to listen for that speaker still answering for it on the LAN (an ARP or NDP probe, sent twice); while it does (memberlist cut between nodes, the LAN working) the address is not answered here, for up to "+partition.MaxTakeoverHold.String()+"; every failover from a dead node takes this much longer (0: no check)")
	fs.DurationVar(&o.BGPShutdownWait, "bgp-shutdown-wait", o.BGPShutdownWait, "on a graceful stop, how long to wait for the withdrawals to be sent before closing the BGP sessions")
	fs.DurationVar(&o.BGPDrainWait, "bgp-drain-wait", o.BGPDrainWait, "once herald drain marked this node, how long it advertises its routes with the GRACEFUL_SHUTDOWN community (65535:0) before it withdraws them, for the routers to move traffic to the other nodes first (0: withdraw at once)")
	fs.BoolVar(&o.Proxy, "proxy", o.Proxy, "run herald's service proxy in this process too (false when another proxy serves the node)")
	return func() error {
		var errs []error
		bad := func(flag, format string, args ...any) {
			errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
		}
		o.NodeName = strings.ToLower(strings.TrimSpace(o.NodeName))
		if err := o.LogLevel.UnmarshalText([]byte(logLevel)); err != nil {
			bad("log-level", "%q is not debug, info, warn or error", logLevel)
		}
		if advertise != "" {
			a, err := netip.ParseAddr(strings.TrimSpace(advertise))
			if err != nil || a.Zone() != "" || a.IsUnspecified() {
				bad("memberlist-advertise-address", "%q is not a unicast IP address", advertise)
			}
			o.AdvertiseAddr = a.Unmap()
		}
		if bind != "" {
			a, err := netip.ParseAddr(strings.TrimSpace(bind))
			if err != nil || a.Zone() != "" {
				bad("memberlist-bind-address", "%q is not an IP address", bind)
			}
			o.BindAddr = a.Unmap()
		}
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
		return o.Validate()
	}
}

// Validate checks the options, naming the flag at fault.
func (o Options) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	if o.NodeName == "" {
		bad("node-name", "no node name: set it, or NODE_NAME")
	} else if m := validation.IsDNS1123Subdomain(o.NodeName); len(m) > 0 {
		bad("node-name", "%q is not a node name: %s", o.NodeName, strings.Join(m, "; "))
	}
	if m := validation.IsDNS1123Label(o.Namespace); len(m) > 0 {
		bad("namespace", "%q is not a namespace name: %s", o.Namespace, strings.Join(m, "; "))
	}
	if o.LBClass != "" {
		if m := validation.IsQualifiedName(o.LBClass); len(m) > 0 {
			bad("lb-class", "%q is not a valid loadBalancerClass: %s", o.LBClass, strings.Join(m, "; "))
		}
	}
	if o.Port < 1 || o.Port > 65535 {
		bad("memberlist-port", "%d is not a port (1-65535)", o.Port)
	}
	if m := validation.IsDNS1123Subdomain(o.SecretName); len(m) > 0 {
		bad("memberlist-secret", "%q is not a Secret name: %s", o.SecretName, strings.Join(m, "; "))
	}
	t := o.Timers
	switch {
	case t.ProbeInterval <= 0:
		bad("memberlist-probe-interval", "must be positive, got %s", t.ProbeInterval)
	case t.ProbeTimeout <= 0 || t.ProbeTimeout >= t.ProbeInterval:
		bad("memberlist-probe-timeout", "%s must be positive and shorter than --memberlist-probe-interval (%s)", t.ProbeTimeout, t.ProbeInterval)
	}
	if t.SuspicionMult < 1 {
		bad("memberlist-suspicion-mult", "must be at least 1, got %d", t.SuspicionMult)
	}
	if t.SuspicionMaxTimeoutMult < 1 {
		bad("memberlist-suspicion-max-mult", "must be at least 1, got %d", t.SuspicionMaxTimeoutMult)
	}
	if t.GossipInterval <= 0 || t.GossipInterval > time.Minute {
		bad("memberlist-gossip-interval", "must be positive and at most 1m, got %s", t.GossipInterval)
	}
	if o.HeartbeatPeriod < 100*time.Millisecond || o.HeartbeatPeriod > time.Minute {
		bad("heartbeat-period", "must be between 100ms and 1m, got %s", o.HeartbeatPeriod)
	}
	if o.RestartHold < 0 || o.RestartHold > 10*time.Minute {
		bad("restart-hold", "must be between 0s and 10m, got %s", o.RestartHold)
	}
	if o.RecoveryHold < 0 || o.RecoveryHold > time.Hour {
		bad("recovery-hold", "must be between 0s and 1h, got %s", o.RecoveryHold)
	}
	if o.HandoverKeep < 0 || o.HandoverKeep > 24*time.Hour {
		bad("handover-keep", "must be between 0s and 24h, got %s", o.HandoverKeep)
	}
	if o.TakeoverCheck < 0 || o.TakeoverCheck > 2*time.Second {
		bad("takeover-check", "must be between 0s and 2s, got %s", o.TakeoverCheck)
	}
	if o.BGPShutdownWait < 0 || o.BGPShutdownWait > time.Minute {
		bad("bgp-shutdown-wait", "must be between 0s and 1m, got %s", o.BGPShutdownWait)
	}
	if o.BGPDrainWait < 0 || o.BGPDrainWait > 10*time.Minute {
		bad("bgp-drain-wait", "must be between 0s and 10m, got %s", o.BGPDrainWait)
	}
	if err := listen.Check(o.MetricsAddr); err != nil {
		bad("metrics-addr", "%v", err)
	}
	errs = append(errs, o.APIFlags.Validate()...)
	return errors.Join(errs...)
}
