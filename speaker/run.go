package speaker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/herald-lb/herald/config/informer"
	"github.com/herald-lb/herald/internal/daemon"
	"github.com/herald-lb/herald/internal/lbapi"
	"github.com/herald-lb/herald/internal/version"
	"github.com/herald-lb/herald/speaker/bgp"
	"github.com/herald-lb/herald/speaker/bgp/gobgp"
	"github.com/herald-lb/herald/speaker/handover"
	"github.com/herald-lb/herald/speaker/heartbeat"
	"github.com/herald-lb/herald/speaker/members"
	"github.com/herald-lb/herald/speaker/partition"
	"github.com/herald-lb/herald/speaker/view"
)

// Run runs `herald speaker` until ctx ends: the in-process proxy (unless
// disabled), the membership, the informers, the election loop and the
// responders. On a graceful stop it leaves the cluster first, so the
// other speakers take this node's IPs over at once, and only then stops
// answering.
func Run(ctx context.Context, o Options, log *slog.Logger) error {
	cl, err := o.APIFlags.Connect("speaker")
	if err != nil {
		return err
	}
	kube, dyn := cl.Kube, cl.Dynamic
	log.Info("herald speaker starting", "version", version.String(), "node", o.NodeName, "namespace", o.Namespace,
		"lbClass", o.LBClass, "memberlistPort", o.Port, "proxy", o.Proxy, "metrics", o.MetricsAddr)

	var wg sync.WaitGroup
	defer wg.Wait()

	m, err := NewMetricsFor(o)
	if err != nil {
		return err
	}
	var current currentSpeaker
	stopServer, err := serveMetrics(log, o.MetricsAddr, m, readiness(current.get, o.Ready), liveness(current.get))
	if err != nil {
		return err
	}
	defer stopServer()

	advertise, bind, err := addresses(ctx, kube, o, log)
	if err != nil {
		return err
	}
	secret, extraKeys, err := waitSecret(ctx, kube, o.Namespace, o.SecretName, log)
	if err != nil {
		return err
	}
	w, err := newWatches(kube, dyn, o, advertise.Is6(), log)
	if err != nil {
		return err
	}
	status := w.statusWriter(o, dyn, log)
	rec, stopEvents := daemon.Recorder(ctx, kube, clientscheme.Scheme, "speaker", o.NodeName)
	defer stopEvents()

	guard := partition.New(partition.Config{Self: o.NodeName, Window: 3 * o.HeartbeatPeriod, RecoveryHold: o.RecoveryHold, RestartHold: o.RestartHold})
	sp := New(Deps{
		Node: o.NodeName, Options: view.Options{IgnoreExcludeLabel: o.IgnoreExcludeLB},
		Source: w.src, Links: NetlinkLinks{}, Neighbors: NetlinkNeighbors{}, NewResponder: PacketResponders(log.With("component", "layer2")),
		Status: status, Events: rec, Metrics: m, Log: log, BGP: w.bgpMgr,
		Partition: guard, BGPDrainWait: o.BGPDrainWait,
		Handover: handover.Netlink{}, HandoverKeep: o.HandoverKeep,
	}.withProxy(o.ProxyRules).withTakeoverCheck(o.TakeoverCheck))
	current.set(sp)
	if o.ProxyRules != nil {
		o.ProxyRules.SetOnProgrammed(sp.Trigger)
	}

	// Informers stop with their own context, after the loop, so the
	// final cleanup still reads a live cache.
	infCtx, stopInformers := context.WithCancel(context.Background())
	defer stopInformers()
	if err := w.start(infCtx, sp.Trigger); err != nil {
		return err
	}
	if !cache.WaitForCacheSync(ctx.Done(), w.synced...) {
		return ctx.Err()
	}
	cluster, peers, err := joinCluster(o, w.src, sp, bind, advertise, secret, extraKeys, log)
	if err != nil {
		return err
	}

	loopCtx, stopLoop := context.WithCancel(ctx)
	defer stopLoop()
	m.keys.Set(float64(1 + len(extraKeys)))
	heartbeatView := func() (first bool, st partition.Standing) {
		ms := cluster.Members()
		return len(ms) == 0 || ms[0].Name == o.NodeName, sp.Standing()
	}
	goAll(&wg,
		func() {
			watchKeys(loopCtx, kube, o.Namespace, o.SecretName, cluster, m, log.With("component", "memberlist"))
		},
		func() {
			heartbeat.Run(loopCtx, kube, o.Namespace, guard, heartbeatView, o.HeartbeatPeriod, sp.Trigger, log.With("component", "heartbeat"))
		},
		func() { status.Run(infCtx) },
		func() { rejoinOnNodeChanges(loopCtx, w.src, cluster, peers, log) },
	)
	loopDone := make(chan struct{})
	go func() { defer close(loopDone); sp.Run(loopCtx) }()
	log.Info("speaking", "advertise", advertise.String(), "bind", bind.String(), "members", len(cluster.Members()))

	<-ctx.Done()
	stopLoop()
	<-loopDone
	rctx, cancelFacts := context.WithTimeout(context.Background(), restartFactsTimeout)
	restart := DecideRestart(gatherRestartFacts(rctx, kube, o, w.nodeInf.Lister()))
	cancelFacts()
	leave(log, o, restart, w.bgpMgr, cluster)
	sp.StopResponders()
	if !restart.InPlace {
		sp.StopHandover()
	}
	removeOwnAnnouncements(log, status)
	stopInformers()
	return nil
}

// currentSpeaker is the Speaker once built, for the probes served
// before it is.
type currentSpeaker struct {
	mu sync.Mutex
	sp *Speaker
}

func (c *currentSpeaker) get() *Speaker { c.mu.Lock(); defer c.mu.Unlock(); return c.sp }

func (c *currentSpeaker) set(sp *Speaker) { c.mu.Lock(); c.sp = sp; c.mu.Unlock() }

// goAll runs each function in a goroutine counted by wg.
func goAll(wg *sync.WaitGroup, fns ...func()) {
	for _, f := range fns {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
}

// addresses are the memberlist advertise address (the flag, or this
// node's InternalIP) and bind address (the flag, or the advertised one).
func addresses(ctx context.Context, kube kubernetes.Interface, o Options, log *slog.Logger) (advertise, bind netip.Addr, err error) {
	advertise = o.AdvertiseAddr
	if !advertise.IsValid() {
		if advertise, err = waitNodeIP(ctx, kube, o.NodeName, log); err != nil {
			return advertise, bind, err
		}
	}
	bind = o.BindAddr
	if !bind.IsValid() {
		bind = advertise
	}
	return advertise, bind, nil
}

// joinCluster creates this node's memberlist member, with metadata from
// its interfaces now, and joins the other nodes. The first election
// waits for the first join: alone, this node would win every IP and
// announce it over the real winners.
func joinCluster(o Options, src *kubeSource, sp *Speaker, bind, advertise netip.Addr, secret members.Secret, extra []members.Secret, log *slog.Logger) (members.Cluster, []string, error) {
	snap := src.Snapshot()
	first, err := NetlinkLinks{}.List()
	if err != nil {
		return nil, nil, err
	}
	meta, _ := fitMeta(SelectInterfaces(first, snap.PodCIDRs, namedInterfaces(snap.Config)).Meta())
	cluster, err := members.New(members.Config{
		NodeName: o.NodeName, BindAddr: bind, BindPort: o.Port, AdvertiseAddr: advertise,
		Secret: secret, Extra: extra, Meta: meta, Timers: o.Timers,
		OnEvent: sp.MemberEvent, OnDeclaredDead: sp.DeclaredDead, OnMessage: sp.Message, Log: log.With("component", "memberlist"),
	})
	if err != nil {
		return nil, nil, err
	}
	sp.SetCluster(cluster)
	return cluster, join(cluster, snap.Peers, log), nil
}

// readiness is /readyz: ready once the speaker has its caches, its
// memberlist Secret and a first election, and extra (the in-process
// proxy's first sync) says so too.
func readiness(current func() *Speaker, extra func() error) func() error {
	return func() error {
		if sp := current(); sp == nil || !sp.Ready() {
			return errors.New("starting: waiting for the caches, the memberlist Secret or the first election")
		}
		if extra != nil {
			return extra()
		}
		return nil
	}
}

// liveness is /livez: live while the loop keeps syncing; the kubelet
// restarts a speaker whose loop is stuck.
func liveness(current func() *Speaker) func() error {
	return func() error {
		sp := current()
		if sp == nil {
			return nil
		}
		return sp.Live(time.Now())
	}
}

// watches are the speaker's informers and what reads them: the
// Services, Nodes and EndpointSlices, its own ServiceAnnouncements, the
// configuration kinds (those only BGP needs with BGP), and with BGP the
// controller's copy of the passwords.
type watches struct {
	factory, secretFactory informers.SharedInformerFactory
	dynFactory             dynamicinformer.DynamicSharedInformerFactory
	nodeInf                interface{ Lister() corelisters.NodeLister }
	saInf                  informers.GenericInformer
	// watched trigger a sync on change; config ones also mark the
	// configuration changed.
	watched, configInfs []cache.SharedIndexInformer
	synced              []cache.InformerSynced
	src                 *kubeSource
	bgpMgr              *bgp.Manager
}

func newWatches(kube kubernetes.Interface, dyn dynamic.Interface, o Options, v6 bool, log *slog.Logger) (*watches, error) {
	w := &watches{factory: informers.NewSharedInformerFactory(kube, 0)}
	svcInf := w.factory.Core().V1().Services()
	nodeInf := w.factory.Core().V1().Nodes()
	w.nodeInf = nodeInf
	sliceInf := w.factory.Discovery().V1().EndpointSlices()
	if err := sliceInf.Informer().AddIndexers(cache.Indexers{sliceByService: sliceServiceKey}); err != nil {
		return nil, err
	}
	w.dynFactory = dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, o.Namespace, nil)
	w.saInf = w.dynFactory.ForResource(AnnouncementGVR)
	w.watched = []cache.SharedIndexInformer{svcInf.Informer(), nodeInf.Informer(), sliceInf.Informer()}
	w.synced = []cache.InformerSynced{svcInf.Informer().HasSynced, nodeInf.Informer().HasSynced,
		sliceInf.Informer().HasSynced, w.saInf.Informer().HasSynced}
	listers := informer.Listers{}
	for _, k := range informer.Kinds {
		if informer.BGPKinds[k.Kind] && !o.BGP {
			continue
		}
		inf := w.dynFactory.ForResource(informer.GVR(k.Resource))
		listers[k.Kind] = inf.Lister()
		w.configInfs = append(w.configInfs, inf.Informer())
		w.synced = append(w.synced, inf.Informer().HasSynced)
	}
	w.src = &kubeSource{
		node: o.NodeName, ns: o.Namespace, lbClass: o.LBClass, v6: v6, log: log,
		services: svcInf.Lister(), slices: sliceInf.Informer().GetIndexer(), nodes: nodeInf.Lister(),
		listers: listers,
	}
	if o.BGP {
		// The speaker reads one Secret for BGP: the controller's copy of
		// the passwords in force, never the users' Secrets.
		w.secretFactory = daemon.OneObject(kube, o.Namespace, lbapi.PasswordsSecretName)
		secInf := w.secretFactory.Core().V1().Secrets()
		w.src.secrets = secInf.Lister()
		w.configInfs = append(w.configInfs, secInf.Informer())
		w.synced = append(w.synced, secInf.Informer().HasSynced)
		w.bgpMgr = bgp.NewManager(gobgp.New(log.With("component", "gobgp")), log.With("component", "bgp"))
	}
	return w, nil
}

// statusWriter is the writer of this node's ServiceAnnouncements and,
// with BGP, its NodeAnnouncement, owned by the speaker's pod when it
// runs in herald's namespace.
func (w *watches) statusWriter(o Options, dyn dynamic.Interface, log *slog.Logger) *StatusWriter {
	c := StatusConfig{
		Node: o.NodeName, Namespace: o.Namespace, Dynamic: dyn,
		Services: w.saInf.Informer(), Owner: w.src.ownerUID, Log: log.With("component", "status"),
	}
	if o.BGP {
		// Not in synced: see nodeAnnouncements.
		c.Nodes = w.dynFactory.ForResource(NodeAnnouncementGVR).Informer()
	}
	sw := NewStatusWriter(c)
	// Owner references cannot cross namespaces: one would make the
	// garbage collector delete the objects at once.
	if o.PodName != "" && o.PodUID != "" && o.PodNamespace == o.Namespace {
		sw.OwnedByPod(o.PodName, types.UID(o.PodUID))
	}
	return sw
}

// start makes every change trigger a sync and starts the informers
// until ctx ends.
func (w *watches) start(ctx context.Context, trigger func()) error {
	onChange := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { trigger() },
		UpdateFunc: func(_, _ any) { trigger() },
		DeleteFunc: func(any) { trigger() },
	}
	onConfig := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.src.configChanged(); trigger() },
		UpdateFunc: func(_, _ any) { w.src.configChanged(); trigger() },
		DeleteFunc: func(any) { w.src.configChanged(); trigger() },
	}
	for _, inf := range w.watched {
		if _, err := inf.AddEventHandler(onChange); err != nil {
			return err
		}
	}
	for _, inf := range w.configInfs {
		if _, err := inf.AddEventHandler(onConfig); err != nil {
			return err
		}
	}
	w.factory.Start(ctx.Done())
	w.dynFactory.Start(ctx.Done())
	if w.secretFactory != nil {
		w.secretFactory.Start(ctx.Done())
	}
	return nil
}

// removeOwnAnnouncements deletes this node's status objects at a stop.
// Nothing is announced any more; emptying the writer's wishes first
// keeps it from writing back what DeleteOwn removes.
func removeOwnAnnouncements(log *slog.Logger, status *StatusWriter) {
	status.Set(nil)
	status.SetNode(nil)
	dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := status.DeleteOwn(dctx); err != nil {
		log.Warn("removing this node's status objects", "err", err)
	}
}

// leave takes this speaker out of BGP and of the memberlist cluster, as
// the restart decision says: handing its addresses over, or keeping them
// with it while its replacement starts on this node.
func leave(log *slog.Logger, o Options, restart RestartDecision, bgpMgr *bgp.Manager, cluster members.Cluster) {
	if bgpMgr != nil {
		// Withdraw first: routers move the traffic to the other nodes
		// while this one still forwards it. A restart in place leaves
		// the sessions with graceful restart to the routers' helper.
		if restart.InPlace {
			log.Info("stopping: withdrawing the BGP routes from the peers without graceful restart; the others keep this node's routes until the new speaker sends them", "wait", o.BGPShutdownWait)
		} else {
			log.Info("stopping: withdrawing the BGP routes, then closing the sessions", "wait", o.BGPShutdownWait)
		}
		bctx, cancel := context.WithTimeout(context.Background(), o.BGPShutdownWait+5*time.Second)
		if err := bgpMgr.Shutdown(bctx, o.BGPShutdownWait, restart.InPlace); err != nil {
			log.Warn("stopping BGP", "err", err)
		}
		cancel()
	}
	leaveFn, msg := cluster.Close, "stopping: leaving the memberlist cluster so the others take this node's IPs over"
	if restart.InPlace {
		leaveFn, msg = cluster.Restart, "stopping: restarting in place, the others keep this node's IPs with it"
	}
	log.Info(msg, "reason", restart.Reason, "theirHold", o.RestartHold)
	if err := leaveFn(); err != nil {
		log.Warn("leaving the cluster", "err", err)
	}
}

// join joins peers and logs the outcome; peers without a speaker (yet)
// are expected, so failures are information, not errors.
func join(c members.Cluster, peers []string, log *slog.Logger) []string {
	n, err := c.Join(peers)
	switch {
	case len(peers) == 0:
		log.Info("no other nodes to join: alone in the memberlist cluster")
	case err != nil:
		log.Info("joined the memberlist cluster", "peers", len(peers), "joined", n, "unreachable", err.Error())
	default:
		log.Info("joined the memberlist cluster", "peers", len(peers), "joined", n)
	}
	return peers
}

// rejoinOnNodeChanges joins the peer list again when the Nodes change
// (memberlist itself rejoins known peers that dropped out).
func rejoinOnNodeChanges(ctx context.Context, src *kubeSource, c members.Cluster, last []string, log *slog.Logger) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		peers := src.peers(nil)
		if !slices.Equal(peers, last) {
			last = join(c, peers, log)
		}
	}
}

// waitSecret reads the memberlist key materials, waiting for the
// controller to create the Secret. The values are never logged.
func waitSecret(ctx context.Context, kube kubernetes.Interface, ns, name string, log *slog.Logger) (primary members.Secret, extra []members.Secret, err error) {
	err = daemon.Retry(ctx, time.Second, 30*time.Second, func(next time.Duration) bool {
		s, gerr := kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		var why string
		if gerr == nil {
			var kerr error
			if primary, extra, kerr = members.KeysFromSecret(s.Data, lbapi.MemberlistSecretKey); kerr == nil {
				return true
			}
			why = kerr.Error()
		} else if apierrors.IsNotFound(gerr) {
			why = "not found (herald controller creates it)"
		} else {
			why = gerr.Error()
		}
		log.Warn("waiting for the memberlist Secret", "secret", ns+"/"+name, "problem", why, "retryIn", next)
		return false
	})
	return primary, extra, err
}

// watchKeys follows the memberlist Secret and changes the keyring in place
// when its keys change (a rotation step); a Secret with a bad key keeps
// the keys in use, with an error naming the Secret and the key.
func watchKeys(ctx context.Context, kube kubernetes.Interface, ns, name string, c members.Cluster, m *Metrics, log *slog.Logger) {
	f := daemon.OneObject(kube, ns, name)
	inf := f.Core().V1().Secrets().Informer()
	var last string
	apply := func(obj any) {
		s, ok := obj.(*corev1.Secret)
		if !ok {
			return
		}
		primary, extra, err := members.KeysFromSecret(s.Data, lbapi.MemberlistSecretKey)
		if err != nil {
			log.Error("memberlist Secret not usable; keeping the keys in use", "secret", ns+"/"+name, "err", err)
			return
		}
		if s.ResourceVersion == last {
			return
		}
		last = s.ResourceVersion
		if err := c.SetKeys(primary, extra); err != nil {
			log.Error("memberlist keys not changed", "secret", ns+"/"+name, "err", err)
			return
		}
		m.keys.Set(float64(1 + len(extra)))
		log.Info("memberlist keys in use", "secret", ns+"/"+name, "keys", 1+len(extra))
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: apply, UpdateFunc: func(_, obj any) { apply(obj) }})
	f.Start(ctx.Done())
	<-ctx.Done()
	f.Shutdown()
}

// waitNodeIP reads this node's InternalIP (IPv4 first) from its Node.
func waitNodeIP(ctx context.Context, kube kubernetes.Interface, node string, log *slog.Logger) (ip netip.Addr, err error) {
	err = daemon.Retry(ctx, time.Second, 10*time.Second, func(next time.Duration) bool {
		n, gerr := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if gerr == nil {
			if ip = nodeIP(n, false); ip.IsValid() {
				return true
			}
			if ip = nodeIP(n, true); ip.IsValid() {
				return true
			}
			gerr = errors.New("the Node has no InternalIP or ExternalIP")
		}
		log.Warn("waiting for this node's IP (set NODE_IP or --memberlist-advertise-address to skip)", "node", node, "err", gerr, "retryIn", next)
		return false
	})
	return ip, err
}

// serveMetrics serves /metrics, /healthz (the process runs) and /readyz.
func serveMetrics(log *slog.Logger, addr string, m *Metrics, ready, live func() error) (stop func(), err error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := live(); err != nil {
			http.Error(w, "unhealthy: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	stop, err = daemon.Serve(log, map[string]http.Handler{addr: mux})
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	return stop, nil
}
