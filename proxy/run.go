package proxy

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"

	"github.com/herald-lb/herald/internal/daemon"
	"github.com/herald-lb/herald/internal/version"
	"github.com/herald-lb/herald/proxy/conntrack"
	"github.com/herald-lb/herald/proxy/healthcheck"
	"github.com/herald-lb/herald/proxy/iptables"
	"github.com/herald-lb/herald/proxy/nft"
	"github.com/herald-lb/herald/proxy/rules"
	"github.com/herald-lb/herald/proxy/tunnel"
)

// informerSelector leaves out what no proxy programs: Services another
// proxy owns and headless Services' slices (the labels the endpointslice
// controller sets), so the API server does not even send them.
const informerSelector = "!" + LabelServiceProxyName + ",!" + LabelHeadless

// nodeWait bounds how long the first sync waits for the Node object; its
// addresses pick the families and feed the rules, but a node whose
// object cannot be read still gets its Services.
const nodeWait = 30 * time.Second

// Proxy is the service proxy of one node. Whoever runs it (herald proxy,
// or the speaker's process) can ask it whether it is healthy.
type Proxy struct {
	o      Options
	health atomic.Pointer[healthcheck.ProxyHealth]
	// mode is the iptables backend chosen at start, once chosen.
	mode atomic.Pointer[iptables.Mode]
	// syncer is the running one, for Programmed; notify is told when
	// the programmed VIPs change (SetOnProgrammed).
	syncer atomic.Pointer[Syncer]
	notify atomic.Pointer[func()]
	// metrics outlive a run, so a restarted proxy's counters go on.
	metrics *Metrics
	// reread reads the options again (SetReread); next holds them when
	// --config's file changed, for Run to start again with.
	reread func() (Options, error)
	next   atomic.Pointer[Options]
	// configPoll is configPollPeriod, shorter in tests.
	configPoll time.Duration
}

// Programmed is Syncer.Programmed of the running proxy; handled is false
// while it is not running or has not synced ip's family.
func (p *Proxy) Programmed(ip netip.Addr) (handled, ok bool) {
	s := p.syncer.Load()
	if s == nil {
		return false, false
	}
	return s.Programmed(ip)
}

// SetOnProgrammed sets what is called (from the sync loop; it must not
// block) when the LoadBalancer VIPs in this node's rules change.
func (p *Proxy) SetOnProgrammed(f func()) { p.notify.Store(&f) }

// New returns a proxy with the options; Run runs it.
func New(o Options) *Proxy { return &Proxy{o: o, metrics: NewMetrics()} }

// Metrics are the proxy's metrics, for the process that runs it to serve
// them elsewhere too (the speaker includes Metrics().Registry in its own).
func (p *Proxy) Metrics() *Metrics { return p.metrics }

// Healthy is the proxy's /healthz as an error: nil once this node's rules
// are written and syncs keep up.
func (p *Proxy) Healthy() error {
	h := p.health.Load()
	if h == nil {
		return errors.New("proxy: starting")
	}
	if err := h.Ready(); err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	return nil
}

// Run runs `herald proxy` until ctx ends (or, with --cleanup, removes
// herald's rules and returns). The rules stay in place when it stops, so
// a restart does not interrupt traffic; cmd/herald/cli removes them
// (RemoveRules) when DecideUninstall says herald is being uninstalled.
func Run(ctx context.Context, o Options, log *slog.Logger) error {
	return New(o).Run(ctx, log)
}

// Run runs the proxy until ctx ends; it may be run again after it
// returned. When --config's file changes to a valid configuration that
// differs from the running one (SetReread), the proxy stops and starts
// again with it in this process, as kube-proxy does by exiting; the rules
// stay in the kernel in between.
func (p *Proxy) Run(ctx context.Context, log *slog.Logger) error {
	return p.runRestarting(ctx, log, p.runOnce)
}

// runRestarting runs once (runOnce; a fake in tests) until ctx ends or,
// when --config changed, again with the new options.
func (p *Proxy) runRestarting(ctx context.Context, log *slog.Logger, once func(context.Context, *slog.Logger) error) error {
	for {
		runCtx, stop := context.WithCancel(ctx)
		watched := make(chan struct{})
		go func() { defer close(watched); p.watchConfig(runCtx, stop, log) }()
		err := once(runCtx, log)
		stop()
		<-watched
		next := p.next.Swap(nil)
		if next == nil || ctx.Err() != nil {
			return err
		}
		p.o = *next
		log.Info("restarted the proxy with --config's new contents", "config", p.o.ConfigFile)
	}
}

func (p *Proxy) runOnce(ctx context.Context, log *slog.Logger) error {
	o := p.o
	if o.Cleanup {
		return runCleanup(ctx, o.IPTablesBackend, log)
	}
	cl, err := o.APIFlags.Connect("proxy")
	if err != nil {
		return err
	}
	kube := cl.Kube
	rec, stopEvents := daemon.Recorder(ctx, kube, clientscheme.Scheme, "proxy", o.NodeName)
	defer stopEvents()

	m := p.metrics
	health := healthcheck.NewProxyHealth(2 * o.SyncPeriod)
	loop := NewLoop(o.MinSyncPeriod, o.SyncPeriod)
	tracker := NewTracker(o.NodeName, func() {
		health.QueuedUpdate()
		loop.Request()
	})
	tracker.Metrics, tracker.Log = m, log
	// Set before the first sync; /healthz reads it meanwhile.
	var current atomic.Pointer[Syncer]
	health.NodeEligible = func() bool {
		// A node whose rules are not written yet must not attract load
		// balancers' traffic either.
		s := current.Load()
		return tracker.Node().Eligible && s != nil && s.Synced()
	}
	p.health.Store(health) // complete: Healthy may read it from now on
	hc := healthcheck.NewServiceServer(nil, health.Healthy)
	defer hc.Close()

	stopServers, err := serve(log, serverHandlers(o, health, m))
	if err != nil {
		return err
	}
	defer stopServers()

	warn := func(svc *corev1.Service, msg string) {
		log.Warn("service input the proxy cannot use", "service", svc.Namespace+"/"+svc.Name, "problem", msg)
		rec.Event(svc, corev1.EventTypeWarning, "ProxyInvalidService", msg)
	}
	synced, stopInformers, err := watchCluster(ctx, kube, o.NodeName, o.DSR.Enabled, tracker, warn)
	if err != nil {
		return err
	}
	defer stopInformers()
	logConfigFile(log, o)
	log.Info("herald proxy starting", "version", version.String(), "node", o.NodeName, "clusterCIDRs", o.ClusterCIDRs, "nodePortAddresses", o.NodePortAddresses.String(),
		"minSyncPeriod", o.MinSyncPeriod, "syncPeriod", o.SyncPeriod, "healthz", o.HealthzBindAddress, "metrics", o.MetricsBindAddress)
	// The first sync must see every Service, or it would delete the rules
	// of those not yet listed.
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return ctx.Err()
	}
	node, ok := waitForNode(ctx, tracker)
	if !ok {
		return nil
	}
	if !node.Seen {
		log.Warn("no Node object with this name: programming Services without the node's addresses", "node", o.NodeName, "waited", nodeWait)
	}

	fams, err := p.backends(ctx, node, log)
	if err != nil {
		return err
	}
	// Before the be-liberal setting is read below: the tuning may set it.
	sysctls := conntrack.Files{}
	tuneConntrack(o.Conntrack, sysctls, log)
	cfg := Config{
		NodeName:          o.NodeName,
		ClusterCIDRs:      o.ClusterCIDRs,
		NodeCIDR:          o.DetectLocalMode == LocalModeNodeCIDR,
		PodInterface:      o.podInterface(),
		BindAddress:       o.BindAddress,
		MasqueradeAll:     o.MasqueradeAll,
		MasqueradeBit:     o.MasqueradeBit,
		ConntrackLiberal:  conntrackLiberal(sysctls),
		FullSyncPeriod:    o.FullSyncPeriod,
		NodePortAddresses: o.NodePortAddresses,
	}
	if o.DSR.Enabled {
		if cfg.DSR = dsrSetup(ctx, kube, o.DSR, log); cfg.DSR != nil {
			pr := tunnel.NewProber(cfg.DSR.Device, o.DSR.Port, log)
			pr.OnChange = loop.Request
			cfg.DSR.Prober = pr
			go pr.Run(ctx, dsrProbeEvery)
		}
	} else if err := (tunnel.Netlink{}).Remove(tunnel.Config{MarkMask: o.DSR.MarkMask}); err != nil {
		// Without --dsr no tunnel stays from an earlier run with it.
		log.Warn("removing the DSR tunnel of an earlier run", "err", err)
	}
	syncer := NewSyncer(cfg, tracker, fams, hc, health, conntrack.Netlink{}, m, log)
	current.Store(syncer)
	syncer.OnProgrammed = func() {
		if f := p.notify.Load(); f != nil {
			(*f)()
		}
	}
	p.syncer.Store(syncer)
	defer p.syncer.Store(nil)
	syncer.Report = func(p rules.Problem) {
		if p.Service == (rules.ServicePortName{}) {
			return
		}
		ref := &corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: p.Service.Namespace, Name: p.Service.Name}
		rec.Event(ref, corev1.EventTypeWarning, "ProxyInvalidService", p.Error())
	}
	var names []string
	for _, f := range fams {
		names = append(names, f.Family.String())
	}
	log.Info("syncing", "families", strings.Join(names, ","), "nodeIPs", node.IPs, "podCIDRs", node.PodCIDRs, "zone", node.Zone)
	loop.Run(ctx, func(ctx context.Context, periodic bool) bool {
		res := syncer.Sync(ctx, periodic)
		logSync(log, res)
		return res.Retry
	})
	return nil
}

func logSync(log *slog.Logger, res SyncResult) {
	if res.Idle {
		return
	}
	for _, f := range res.Families {
		kind := "partial"
		if f.Full {
			kind = "full"
		}
		if f.Err != nil {
			continue // logged by the syncer
		}
		args := []any{"family", f.Family, "kind", kind, "reason", f.Reason, "services", f.Stats.Services,
			"natRules", f.Stats.NATRulesTotal, "natRulesWritten", f.Stats.NATRules, "filterRules", f.Stats.FilterRules,
			"bytes", f.Bytes, "took", res.Duration.Round(time.Microsecond), "housekeeping", f.Housekeeping.Round(time.Microsecond),
			"save", f.Save.Round(time.Microsecond), "render", f.Render.Round(time.Microsecond), "restore", f.Restore.Round(time.Microsecond)}
		if f.Chunks > 0 { // iptables-restore runs; the nftables mode has none
			args = append(args, "chunks", f.Chunks)
		}
		log.Info("synced", append(args, "conntrackDeleted", res.ConntrackDeleted)...)
	}
}

// Families are the address families to program: those of the node's
// addresses and of --cluster-cidr (or the node's pod CIDRs); IPv4 when
// nothing tells.
func Families(node NodeInfo, clusterCIDRs []netip.Prefix) []rules.Family {
	v4, v6 := false, false
	see := func(a netip.Addr) {
		v4 = v4 || a.Is4()
		v6 = v6 || a.Is6()
	}
	for _, ip := range node.IPs {
		see(ip)
	}
	for _, p := range clusterCIDRs {
		see(p.Addr())
	}
	for _, p := range node.PodCIDRs {
		see(p.Addr())
	}
	var out []rules.Family
	if v4 || !v6 {
		out = append(out, rules.IPv4)
	}
	if v6 {
		out = append(out, rules.IPv6)
	}
	return out
}

// serverHandlers are the proxy's health and metrics endpoints by
// address: one mux when both flags name the same address.
func serverHandlers(o Options, health *healthcheck.ProxyHealth, m *Metrics) map[string]http.Handler {
	handlers := map[string]http.Handler{}
	metricsHandler := healthcheck.MetricsHandler(promhttp.HandlerFor(m.Endpoint, promhttp.HandlerOpts{}), string(o.ProxyMode))
	if o.HealthzBindAddress == o.MetricsBindAddress {
		mux := http.NewServeMux()
		mux.Handle("/healthz", health.Handler())
		mux.Handle("/livez", health.Handler())
		mux.Handle("/", metricsHandler)
		handlers[o.HealthzBindAddress] = mux
	} else {
		handlers[o.HealthzBindAddress] = health.Handler()
		handlers[o.MetricsBindAddress] = metricsHandler
	}
	return handlers
}

// dsrSetup makes direct server return's tunnel manager and finds the
// seed; nil (the mode off, annotated Services keep SNAT and say why) when
// the seed cannot be had.
func dsrSetup(ctx context.Context, kube kubernetes.Interface, o DSROptions, log *slog.Logger) *DSRSetup {
	seed := o.Seed
	if seed == 0 {
		ns, err := kube.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
		if err != nil {
			log.Error("--dsr: reading the kube-system namespace for the seed failed; set --dsr-seed. DSR is off", "err", err)
			return nil
		}
		seed = DSRSeed(string(ns.UID))
	}
	m := tunnel.NewManager(tunnel.Config{Port: o.Port, MarkMask: o.MarkMask}, tunnel.Netlink{})
	c := m.Config()
	log.Info("--dsr: direct server return", "device", c.Device, "port", c.Port, "vni", c.VNI, "markMask", fmt.Sprintf("%#x", c.MarkMask), "maxPeers", m.MaxPeers())
	return &DSRSetup{Tunnel: m, Device: c.Device, Seed: seed, MarkMask: c.MarkMask}
}

// dsrProbeEvery is how often the peers are probed over the tunnel: a
// peer whose proxy stopped, or whose tunnel is blocked, is taken out
// after tunnel.ProbeRounds of these.
const dsrProbeEvery = 5 * time.Second

// DSRSeed derives the consistent backend choice's seed from a cluster-wide
// identity (the kube-system namespace's UID): never 0, which the kernel
// would replace by a random seed.
func DSRSeed(identity string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(identity))
	if s := h.Sum32(); s != 0 {
		return s
	}
	return 1
}

// watchCluster starts the informers that feed the tracker: Services
// (without other proxies' and headless ones), EndpointSlices, and this
// node's Node, or with allNodes every Node (the DSR tunnel's peers). It
// returns their HasSynced and a stop.
func watchCluster(ctx context.Context, kube kubernetes.Interface, nodeName string, allNodes bool, tracker *Tracker, warn func(*corev1.Service, string)) ([]cache.InformerSynced, func(), error) {
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = informerSelector }))
	svcInf := factory.Core().V1().Services().Informer()
	if _, err := svcInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { serviceEvent(tracker, obj, warn) },
		UpdateFunc: func(_, obj any) { serviceEvent(tracker, obj, warn) },
		DeleteFunc: func(obj any) {
			if svc, ok := tombstone[*corev1.Service](obj); ok {
				tracker.DeleteService(svc.Namespace, svc.Name)
			}
		},
	}); err != nil {
		return nil, nil, err
	}
	sliceInf := factory.Discovery().V1().EndpointSlices().Informer()
	if _, err := sliceInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { sliceEvent(tracker, obj) },
		UpdateFunc: func(_, obj any) { sliceEvent(tracker, obj) },
		DeleteFunc: func(obj any) {
			if sl, ok := tombstone[*discoveryv1.EndpointSlice](obj); ok {
				tracker.DeleteSlice(sl)
			}
		},
	}); err != nil {
		return nil, nil, err
	}
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			if !allNodes {
				lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", nodeName).String()
			}
		}))
	nodeInf := nodeFactory.Core().V1().Nodes().Informer()
	if _, err := nodeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { nodeEvent(tracker, obj, allNodes) },
		UpdateFunc: func(_, obj any) { nodeEvent(tracker, obj, allNodes) },
		DeleteFunc: func(obj any) {
			if n, ok := tombstone[*corev1.Node](obj); ok {
				tracker.DeleteNode(n.Name)
				if allNodes {
					tracker.DeletePeer(n.Name)
				}
			}
		},
	}); err != nil {
		return nil, nil, err
	}
	factory.Start(ctx.Done())
	nodeFactory.Start(ctx.Done())
	stop := func() {
		factory.Shutdown()
		nodeFactory.Shutdown()
	}
	return []cache.InformerSynced{svcInf.HasSynced, sliceInf.HasSynced, nodeInf.HasSynced}, stop, nil
}

// waitForNode waits at most nodeWait for this node's Node object; false
// when ctx ended meanwhile.
func waitForNode(ctx context.Context, tracker *Tracker) (NodeInfo, bool) {
	waitCtx, cancel := context.WithTimeout(ctx, nodeWait)
	defer cancel()
	for !tracker.Node().Seen && waitCtx.Err() == nil {
		select {
		case <-waitCtx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return tracker.Node(), ctx.Err() == nil
}

// backends are the address families' rule writers for the mode: in the
// nftables mode after removing what an iptables-mode run left, in the
// iptables mode through the backend chosen (recorded for RemoveRules).
func (p *Proxy) backends(ctx context.Context, node NodeInfo, log *slog.Logger) ([]Backend, error) {
	o := p.o
	var fams []Backend
	if o.ProxyMode == ModeNFTables {
		// Rules a run in the iptables mode left would take the packets
		// first (they DNAT in the same hooks): remove them.
		if err := cleanupIPTables(ctx, o.IPTablesBackend, log); err != nil {
			log.Warn("removing the iptables mode's rules", "err", err)
		}
		k := &nft.Kernel{}
		for _, f := range Families(node, o.ClusterCIDRs) {
			fams = append(fams, NFTBackend(f, k))
		}
	} else {
		mode, err := iptablesMode(ctx, o.IPTablesBackend, log)
		if err != nil {
			return nil, err
		}
		p.mode.Store(&mode)
		if err := cleanupNFT(); err != nil {
			log.Info("no nftables mode tables removed", "err", err)
		}
		for _, f := range Families(node, o.ClusterCIDRs) {
			r, err := iptables.NewFor(iptables.Family(f), mode)
			if err != nil {
				log.Error("address family left out", "family", f, "err", err)
				continue
			}
			chunks := 0
			if mode == iptables.ModeLegacy {
				chunks = -1 // see iptablesFamily.chunkChains
			}
			fams = append(fams, IPTablesBackend(f, r, chunks))
		}
	}
	if len(fams) == 0 {
		return nil, errors.New("neither iptables nor ip6tables can be used")
	}
	return fams, nil
}

// TuneConntrack writes the conntrack settings in this process's
// network namespace (`herald conntrack`), as the proxy does at start.
func TuneConntrack(t conntrack.Tuning, log *slog.Logger) (written, failed int) {
	return tuneConntrack(t, conntrack.Files{}, log)
}

// tuneConntrack writes the conntrack settings and logs each change. The
// ones it cannot write are one warning: the proxy works with the kernel's
// values too, and in a container that is not privileged /proc/sys is
// read-only, so they all fail for the same reason.
func tuneConntrack(t conntrack.Tuning, s conntrack.Sysctls, log *slog.Logger) (written, failed int) {
	var left []string
	var firstErr error
	for _, o := range conntrack.Apply(t, runtime.NumCPU(), s) {
		name := "/" + o.Path
		switch {
		case o.Err != nil:
			left = append(left, fmt.Sprintf("%s=%d", name, o.Value))
			if firstErr == nil {
				firstErr = o.Err
			}
		case o.Changed:
			written++
			log.Info("conntrack setting written", "setting", name, "was", o.Was, "now", o.Value)
		}
	}
	if len(left) > 0 {
		log.Warn("conntrack settings left as the node has them (the proxy works with them; to have kube-proxy's, run herald conntrack privileged, the chart's proxy.conntrack.privilegedInit, or set them on the node)",
			"wanted", strings.Join(left, " "), "err", firstErr)
	}
	return written, len(left)
}

// conntrackLiberal reads whether conntrack accepts out-of-window TCP
// packets; then the proxy needs no DROP for INVALID ones.
func conntrackLiberal(s conntrack.Sysctls) bool {
	v, err := s.Read(conntrack.SysctlTCPBeLiberal)
	return err == nil && v == 1
}

// RemoveRules removes herald's rules of both families, as --cleanup,
// with the iptables backend Run chose (detected now if it never chose).
func (p *Proxy) RemoveRules(ctx context.Context, log *slog.Logger) error {
	backend := p.o.IPTablesBackend
	if m := p.mode.Load(); m != nil {
		backend = *m
	}
	return runCleanup(ctx, backend, log)
}

// runCleanup removes the rules of both modes: the iptables chains and
// herald's nftables tables.
func runCleanup(ctx context.Context, backend iptables.Mode, log *slog.Logger) error {
	err := cleanupIPTables(ctx, backend, log)
	if terr := (tunnel.Netlink{}).Remove(tunnel.Config{}); terr != nil {
		log.Info("cleanup: the DSR tunnel not removed", "err", terr)
	}
	if nerr := cleanupNFT(); nerr != nil {
		// A kernel without nf_tables has no such table to remove.
		log.Info("cleanup: nftables tables not removed", "err", nerr)
	} else {
		log.Info("cleanup: herald's nftables tables removed")
	}
	return err
}

// cleanupNFT deletes herald's nftables table of both families.
func cleanupNFT() error {
	k := &nft.Kernel{}
	defer k.Close()
	return errors.Join(k.Delete(rules.IPv4), k.Delete(rules.IPv6))
}

func cleanupIPTables(ctx context.Context, backend iptables.Mode, log *slog.Logger) error {
	mode, err := iptablesMode(ctx, backend, log)
	if err != nil {
		return err
	}
	// The families at once: each is a dozen runs of iptables, which on
	// a busy node with a large nftables ruleset (kubelet's, the CNI
	// plugins') took over the 3 s an uninstall had, one after the other.
	families := []rules.Family{rules.IPv4, rules.IPv6}
	errs := make([]error, len(families))
	var wg sync.WaitGroup
	for i, f := range families {
		r, err := iptables.NewFor(iptables.Family(f), mode)
		if err != nil {
			log.Info("cleanup: family skipped", "family", f, "err", err)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := Cleanup(ctx, r); err != nil {
				errs[i] = fmt.Errorf("%s: %w", f, err)
				return
			}
			log.Info("cleanup: herald's rules and chains removed", "family", f)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func serviceEvent(t *Tracker, obj any, warn func(*corev1.Service, string)) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return
	}
	for _, p := range t.UpdateService(svc) {
		warn(svc, p.Error())
	}
}

func sliceEvent(t *Tracker, obj any) {
	if sl, ok := obj.(*discoveryv1.EndpointSlice); ok {
		t.UpdateSlice(sl)
	}
}

func nodeEvent(t *Tracker, obj any, peers bool) {
	if n, ok := obj.(*corev1.Node); ok {
		t.UpdateNode(n)
		if peers {
			t.UpdatePeer(n)
		}
	}
}

// tombstone unwraps what a delete handler gets, which is the object or,
// when the watch missed the deletion, a DeletedFinalStateUnknown.
func tombstone[T any](obj any) (T, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	v, ok := obj.(T)
	return v, ok
}

// serve starts one HTTP server per address.
func serve(log *slog.Logger, handlers map[string]http.Handler) (stop func(), err error) {
	stop, err = daemon.Serve(log, handlers)
	if errors.Is(err, syscall.EADDRINUSE) {
		// Two proxies on one node would fight over the rules; the port is
		// what keeps the second one out.
		return nil, fmt.Errorf("%w: another service proxy (herald proxy, herald speaker with its in-process proxy, kube-proxy) runs on this node; run one per node", err)
	}
	return stop, err
}
