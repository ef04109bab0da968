package proxy

import (
	"context"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/herald-lb/herald/proxy/conntrack"
	"github.com/herald-lb/herald/proxy/healthcheck"
	"github.com/herald-lb/herald/proxy/nft"
	"github.com/herald-lb/herald/proxy/rules"
)

// Config is the node-level configuration that comes from flags.
type Config struct {
	// NodeName is this node's name; endpoints there are local.
	NodeName string
	// ClusterCIDRs is --cluster-cidr. When empty, the Node's
	// spec.podCIDRs stand in for it (kube-proxy's NodeCIDR local
	// detection), which tells pods of this node apart just as well: pod
	// traffic reaches the service rules on its own node.
	ClusterCIDRs []netip.Prefix
	// NodeCIDR: the Node's spec.podCIDRs tell pod traffic even with
	// ClusterCIDRs (--detect-local-mode=NodeCIDR).
	NodeCIDR bool
	// PodInterface, when named, tells pod traffic by the interface it
	// arrives on, and no CIDR is used (the interface modes).
	PodInterface rules.Interface
	// BindAddress, when valid and specified, is the node's primary IP of
	// its family (--bind-address).
	BindAddress netip.Addr
	// MasqueradeAll SNATs everything sent to a cluster IP.
	MasqueradeAll bool
	// MasqueradeBit is the fwmark bit meaning "masquerade" (0-31).
	MasqueradeBit int
	// ConntrackLiberal reflects net.netfilter.nf_conntrack_tcp_be_liberal.
	ConntrackLiberal bool
	// NoRandomFully leaves --random-fully off MASQUERADE.
	NoRandomFully bool
	// NodePortAddresses is --nodeport-addresses.
	NodePortAddresses NodePortAddresses
	// DSR, when set, is direct server return's tunnel and seed (--dsr).
	DSR *DSRSetup
	// FullSyncPeriod is how long a family may go without a full sync;
	// periodic syncs in between are partial (after the canary check), as
	// kube-proxy's are: a full restore of a large ruleset costs seconds
	// of CPU on every node. 0 means DefaultFullSyncPeriod.
	FullSyncPeriod time.Duration
}

// DSRSetup is what direct server return needs besides the Services.
type DSRSetup struct {
	Tunnel DSRTunnel
	// Device is the tunnel interface, Seed the cluster-wide jhash seed,
	// MarkMask the mark bits of the peers' routes.
	Device   string
	Seed     uint32
	MarkMask uint32
	// Prober, when set, takes out the peers that do not answer.
	Prober DSRProber
}

// DSRTunnel is the kernel side of the tunnel (tunnel.Manager; a fake in
// tests): it reaches the peers from local and returns each reachable
// peer's mark; Probes are the addresses its prober asks.
type DSRTunnel interface {
	Sync(local netip.Addr, peers map[string][]netip.Addr) (map[string]uint32, error)
	Probes() (self netip.Addr, peers map[string]netip.Addr)
}

// DSRProber tells which peers do not answer over the tunnel, each with
// whether it answered before (tunnel.Prober; a fake in tests).
type DSRProber interface {
	SetPeers(self netip.Addr, peers map[string]netip.Addr)
	Down() map[string]bool
}

// DefaultFullSyncPeriod is kube-proxy's interval between full syncs.
const DefaultFullSyncPeriod = time.Hour

// Backend is one address family the proxy programs, in one mode: made
// by IPTablesBackend or NFTBackend.
type Backend struct {
	Family rules.Family
	w      familySync
}

// familySync writes one address family's rules in one mode and keeps
// what that mode remembers between syncs: the iptables mode's
// (synciptables.go) or the nftables mode's (syncnft.go). The syncer
// keeps what both share (famState) and decides when a sync is full.
type familySync interface {
	mode() Mode
	// present is the periodic sync's canary: false, with what is gone,
	// makes the sync full.
	present() (bool, string)
	// sync renders snap for the family and writes it, every Service when
	// fr.Full, else those snap.Changed names; it fills in fr.
	sync(ctx context.Context, now func() time.Time, fr *FamilyResult, snap Snapshot, node rules.NodeConfig) error
}

// NFTProgrammer is the kernel side of the nftables mode (nft.Kernel; a
// fake in tests).
type NFTProgrammer interface {
	Apply(f rules.Family, want *nft.Table, ch nft.Changes) error
	Exists(f rules.Family) (bool, error)
}

// HealthServer is what the syncer feeds: the healthCheckNodePort servers.
type HealthServer interface {
	SyncServices(ports map[healthcheck.ServiceKey]int, binds []healthcheck.Bind) error
	SyncEndpoints(counts map[healthcheck.ServiceKey]int)
}

// famState is what the syncer remembers about one family between syncs,
// in either mode; the mode's own memory is behind Backend.
type famState struct {
	Backend
	// needFull is set at start, after a failed sync and when the node
	// changed: the kernel may not hold what the last render assumed.
	needFull bool
	// udp are the UDP frontends programmed by the last successful sync,
	// so the entries of a frontend that went away can be found; after a
	// failed cleanup, also those it still has to clean (udpRetry).
	udp      udpFrontends
	udpRetry bool
	// lastFull is when the last full sync succeeded.
	lastFull time.Time
	// everSynced: a sync of this family has succeeded since the start.
	everSynced bool
	// triggers are the trigger times of the changes not yet programmed
	// in this family (programming.go).
	triggers []Trigger
}

// Syncer turns the Tracker's model into each family's rules through its
// Backend (iptables-restore, or one nftables transaction), decides which
// syncs are full, and keeps what hangs off the rules (health-check
// servers, proxy health, conntrack, metrics) in step.
// Sync is not safe for concurrent use; the Loop calls it.
type Syncer struct {
	cfg      Config
	tracker  *Tracker
	fams     []*famState
	hc       HealthServer
	health   *healthcheck.ProxyHealth
	ct       conntrack.Interface
	metrics  *Metrics
	log      *slog.Logger
	now      func() time.Time
	reported map[string]bool
	// addrs lists the node's interface addresses for
	// --nodeport-addresses; local are the last ones read, npLast the
	// NodePort addresses the last sync rendered.
	addrs   LocalAddrs
	local   []netip.Addr
	npLast  map[rules.Family][]netip.Addr
	npKnown bool
	// dsrMarks are the tunnel's peers as last synced (nil before the
	// first success), from dsrLocal; dsrRetry after a failure.
	dsrMarks map[string]uint32
	dsrLocal netip.Addr
	dsrRetry bool
	// dsrPeers are the peers the rules tunnel to: dsrMarks less those
	// that never answered the prober; dsrLost those that stopped.
	dsrPeers map[string]uint32
	dsrLost  map[string]bool
	// Report is told about each problem in the input once, when it first
	// shows; Run adds an event on the Service. It must not block.
	Report func(rules.Problem)

	synced atomic.Bool
	// programmed is published after each successful family sync, for
	// Programmed; OnProgrammed, when set, is called when it changed.
	programmed   atomic.Pointer[programmed]
	OnProgrammed func()
}

// NewSyncer makes a syncer. hc, health and ct may be nil (nothing to
// feed); metrics nil means a private registry.
func NewSyncer(cfg Config, t *Tracker, fams []Backend, hc HealthServer, health *healthcheck.ProxyHealth, ct conntrack.Interface, m *Metrics, log *slog.Logger) *Syncer {
	if m == nil {
		m = NewMetrics()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Syncer{cfg: cfg, tracker: t, hc: hc, health: health, ct: ct, metrics: m, log: log, now: time.Now, reported: map[string]bool{}, addrs: InterfaceAddrs{}}
	for _, f := range fams {
		s.fams = append(s.fams, &famState{Backend: f, needFull: true})
	}
	return s
}

// Synced reports whether a sync has succeeded for every family at least
// once: before that the node's rules are not the cluster's.
func (s *Syncer) Synced() bool { return s.synced.Load() }

// FamilyResult is what one sync did in one family.
type FamilyResult struct {
	Family rules.Family
	// Full: every Service's chains were written; Reason says why.
	Full   bool
	Reason string
	Err    error
	Stats  rules.Stats
	// Bytes is the size of the restore input (nftables: the map elements
	// written); Chunks how many iptables-restore runs it took
	// (rules.Ruleset.Inputs; none in the nftables mode).
	Bytes, Chunks int
	// Where the time went: housekeeping (full syncs), iptables-save
	// (first sync), rendering, writing (every iptables-restore chunk's,
	// or the nftables transaction).
	Housekeeping, Save, Render, Restore time.Duration

	health   []rules.ServiceHealth
	problems []rules.Problem
}

// SyncResult is what one sync did.
type SyncResult struct {
	Families []FamilyResult
	// Idle: nothing changed and no family needed a full sync, so nothing
	// was written.
	Idle bool
	// Retry: something failed; the caller should sync again soon.
	Retry bool
	// ConntrackDeleted counts stale UDP entries removed.
	ConntrackDeleted int
	Duration         time.Duration
}

// Sync brings the rules up to date. periodic marks the --sync-period
// resync: it checks the canary (repairing flushed tables with a full
// sync) and does a full sync when the last one is FullSyncPeriod old.
func (s *Syncer) Sync(ctx context.Context, periodic bool) SyncResult {
	start := s.now()
	snap := s.tracker.Snapshot()
	var res SyncResult
	dsrChanged := s.syncTunnel(snap, periodic, &res)
	node := s.nodeConfig(snap.Node)
	npChanged := s.nodePorts(&node, snap.Node)

	anyFull := false
	for _, f := range s.fams {
		f.awaitTriggers(snap)
		full, reason := f.needFull, ""
		switch {
		case f.needFull && !f.everSynced:
			reason = "first sync"
		case f.needFull:
			reason = "the previous restore failed"
		case snap.NodeChanged:
			full, reason = true, "the node's addresses, pod CIDRs or zone changed"
		case dsrChanged:
			full, reason = true, "the nodes the DSR tunnel reaches changed"
		case periodic && s.now().Sub(f.lastFull) >= s.fullSyncPeriod():
			full, reason = true, "periodic full resync"
		default:
			if ok, gone := f.w.present(); !ok {
				full, reason = true, gone
			}
		}
		f.needFull, anyFull = full, anyFull || full
		if full {
			s.log.Debug("full sync", "family", f.Family, "reason", reason)
		}
		res.Families = append(res.Families, FamilyResult{Family: f.Family, Full: full, Reason: reason})
	}
	if !anyFull && len(snap.Changed) == 0 && !npChanged {
		res.Idle = true
		res.Families = nil
		s.finish(&res, start, nil, true)
		return res
	}

	var health [][]rules.ServiceHealth
	var stats rules.Stats
	var problems []rules.Problem
	var synced []rules.Family
	allOK := true
	for i, f := range s.fams {
		fr := &res.Families[i]
		fr.Err = f.w.sync(ctx, s.now, fr, snap, node)
		problems = append(problems, fr.problems...)
		if fr.Err != nil {
			allOK = false
			res.Retry = true
			s.metrics.syncFailed(f.w.mode() == ModeNFTables, fr.Full)
			// Each restore is atomic, so the kernel holds the previous
			// rules, or with chunks the previous dispatch chains over
			// complete Service chains (syncFamily); a full sync rewrites
			// everything next time.
			f.needFull = true
			s.log.Error("sync failed; a full sync follows", "family", f.Family, "full", fr.Full, "err", fr.Err)
			continue
		}
		f.needFull, f.everSynced = false, true
		s.observeProgrammed(f)
		synced = append(synced, f.Family)
		if fr.Full {
			f.lastFull = s.now()
		}
		health = append(health, fr.health)
		addStats(&stats, fr.Stats)
		res.ConntrackDeleted += s.reconcileConntrack(f, snap, node, fr.Full)
	}
	s.reportProblems(problems)
	if len(synced) > 0 && s.recordProgrammed(snap, synced) && s.OnProgrammed != nil {
		s.OnProgrammed()
	}
	if len(health) > 0 {
		s.feedHealth(health)
		s.metrics.rules.WithLabelValues("filter").Set(float64(stats.FilterRules))
		s.metrics.rules.WithLabelValues("nat").Set(float64(stats.NATRulesTotal))
		s.metrics.noLocalEndpoints.WithLabelValues("internal").Set(float64(stats.NoLocalEndpointsInternal))
		s.metrics.noLocalEndpoints.WithLabelValues("external").Set(float64(stats.NoLocalEndpointsExternal))
	}
	s.finish(&res, start, res.Families, allOK)
	return res
}

func addStats(dst *rules.Stats, s rules.Stats) {
	dst.Services += s.Services
	dst.FilterRules += s.FilterRules
	dst.NATRules += s.NATRules
	dst.NATRulesTotal += s.NATRulesTotal
	dst.NATChains += s.NATChains
	dst.NoLocalEndpointsInternal += s.NoLocalEndpointsInternal
	dst.NoLocalEndpointsExternal += s.NoLocalEndpointsExternal
}

func (s *Syncer) finish(res *SyncResult, start time.Time, fams []FamilyResult, ok bool) {
	res.Duration = s.now().Sub(start)
	if !ok {
		return
	}
	d := res.Duration.Seconds()
	if !res.Idle {
		s.metrics.syncDuration.Observe(d)
		full := false
		for _, f := range fams {
			full = full || f.Full
		}
		if full {
			s.metrics.syncFullDuration.Observe(d)
		} else {
			s.metrics.syncPartialDuration.Observe(d)
		}
	}
	s.metrics.lastSync.Set(float64(s.now().UnixNano()) / 1e9)
	s.synced.Store(true)
	if s.health != nil {
		s.health.Updated()
	}
}

// nodeConfig is the renderer's view of this node.
func (s *Syncer) nodeConfig(n NodeInfo) rules.NodeConfig {
	nc := rules.NodeConfig{
		Name:             s.cfg.NodeName,
		Zone:             n.Zone,
		IPs:              withAddr(n.IPs, s.cfg.BindAddress),
		ClusterCIDRs:     s.cfg.ClusterCIDRs,
		PodInterface:     s.cfg.PodInterface,
		MasqueradeAll:    s.cfg.MasqueradeAll,
		ConntrackLiberal: s.cfg.ConntrackLiberal,
		NoRandomFully:    s.cfg.NoRandomFully,
	}
	if len(nc.ClusterCIDRs) == 0 || s.cfg.NodeCIDR {
		nc.ClusterCIDRs = n.PodCIDRs
	}
	if nc.PodInterface.Name != "" {
		nc.ClusterCIDRs = nil
	}
	if s.cfg.MasqueradeBit >= 0 && s.cfg.MasqueradeBit < 32 {
		nc.MasqueradeMark = 1 << uint(s.cfg.MasqueradeBit)
	}
	if d := s.cfg.DSR; d != nil && s.dsrPeers != nil {
		nc.DSR = rules.DSRConfig{Seed: d.Seed, Tunnel: d.Device, MarkMask: d.MarkMask,
			Peers: map[rules.Family]map[string]uint32{rules.IPv4: s.dsrPeers, rules.IPv6: s.dsrPeers}, Lost: s.dsrLost}
	}
	return nc
}

// syncTunnel brings the DSR tunnel up to date with the peers when they,
// or this node's address, changed, when the last try failed, and on the
// periodic sync (which repairs a device deleted behind herald's back).
// The peers the rules may tunnel to are those with a route in place
// that the prober has not found down; it reports whether they changed.
func (s *Syncer) syncTunnel(snap Snapshot, periodic bool, res *SyncResult) bool {
	d := s.cfg.DSR
	if d == nil {
		return false
	}
	local := underlayAddr(withPrimary(snap.Node.PrimaryIPs, s.cfg.BindAddress))
	if s.dsrMarks == nil || snap.PeersChanged || s.dsrRetry || local != s.dsrLocal || periodic {
		marks, err := d.Tunnel.Sync(local, snap.Peers)
		s.dsrRetry = err != nil
		if err != nil {
			res.Retry = true
			s.log.Error("DSR tunnel: some peers are not reachable; their Services keep SNAT forwarding", "err", err)
		}
		if marks != nil || s.dsrMarks != nil {
			if marks == nil {
				marks = map[string]uint32{}
			}
			if s.dsrMarks == nil || !maps.Equal(marks, s.dsrMarks) {
				s.log.Info("DSR tunnel", "device", d.Device, "from", local, "peers", len(marks))
			}
			s.dsrMarks, s.dsrLocal = marks, local
			if d.Prober != nil {
				d.Prober.SetPeers(d.Tunnel.Probes())
			}
		}
	}
	if s.dsrMarks == nil {
		return false
	}
	eff, lost := maps.Clone(s.dsrMarks), map[string]bool{}
	if d.Prober != nil {
		for n, answeredBefore := range d.Prober.Down() {
			if answeredBefore {
				lost[n] = true
			} else {
				delete(eff, n)
			}
		}
	}
	changed := s.dsrPeers == nil || !maps.Equal(eff, s.dsrPeers) || !maps.Equal(lost, s.dsrLost)
	s.dsrPeers, s.dsrLost = eff, lost
	return changed
}

// underlayAddr is the address the tunnel runs from: the node's primary
// IPv4 address, else its IPv6 one. Every node picks alike, so peers agree
// on the family.
func underlayAddr(primary []netip.Addr) netip.Addr {
	var v6 netip.Addr
	for _, a := range primary {
		if a.Is4() {
			return a
		}
		if !v6.IsValid() {
			v6 = a
		}
	}
	return v6
}

// nodePorts fills node.NodePortAddresses from --nodeport-addresses and
// the node's interface addresses, read again on every sync (the periodic
// one included), so an address added or removed later counts from the
// next sync on, at the latest after --sync-period. It reports whether
// they differ from the last sync's: then the sync is not idle, though
// partial (the rules using them are rewritten by every sync).
func (s *Syncer) nodePorts(node *rules.NodeConfig, n NodeInfo) bool {
	if !s.cfg.NodePortAddresses.IsSet() {
		return false
	}
	if local, err := s.addrs.LocalAddrs(); err != nil {
		s.log.Error("reading the node's addresses for --nodeport-addresses; using the last ones read", "err", err)
	} else {
		s.local = local
	}
	node.NodePortAddresses = s.cfg.NodePortAddresses.allowed(withPrimary(n.PrimaryIPs, s.cfg.BindAddress), s.local)
	if s.npKnown && maps.EqualFunc(node.NodePortAddresses, s.npLast, slices.Equal[[]netip.Addr]) {
		return false
	}
	s.npKnown, s.npLast = true, node.NodePortAddresses
	var attrs []any
	for _, f := range []rules.Family{rules.IPv4, rules.IPv6} {
		if ips, ok := node.NodePortAddresses[f]; ok {
			attrs = append(attrs, f.String(), ips)
		} else {
			attrs = append(attrs, f.String(), "every local address")
		}
	}
	s.log.Info("NodePorts served on", attrs...)
	return true
}

// reportProblems tells about problems not seen in the previous sync, given
// those of every family: a dual-stack Service's problem shows once, and
// one of a single family is not taken for new in every sync.
func (s *Syncer) reportProblems(probs []rules.Problem) {
	now := make(map[string]bool, len(probs))
	for _, p := range probs {
		msg := p.Error()
		if now[msg] {
			continue
		}
		now[msg] = true
		if !s.reported[msg] {
			s.log.Warn("input the proxy cannot use", "problem", msg)
			if s.Report != nil {
				s.Report(p)
			}
		}
	}
	for msg := range s.reported {
		if !now[msg] {
			delete(s.reported, msg)
		}
	}
	for msg := range now {
		s.reported[msg] = true
	}
}

// feedHealth hands the healthCheckNodePorts and local endpoint counts to
// the servers. Dual-stack Services appear once per family; a Service's
// count is the most any family saw, so one pod is not counted twice.
func (s *Syncer) feedHealth(perFamily [][]rules.ServiceHealth) {
	if s.hc == nil {
		return
	}
	ports := map[healthcheck.ServiceKey]int{}
	counts := map[healthcheck.ServiceKey]int{}
	for _, list := range perFamily {
		for _, h := range list {
			k := healthcheck.ServiceKey{Namespace: h.Service.Namespace, Name: h.Service.Name}
			ports[k] = h.HealthCheckNodePort
			counts[k] = max(counts[k], h.LocalEndpoints)
		}
	}
	binds := healthcheck.AllAddresses
	if s.cfg.NodePortAddresses.IsSet() && s.npKnown {
		binds = healthBinds(s.npLast, s.local)
	}
	if err := s.hc.SyncServices(ports, binds); err != nil {
		s.log.Error("healthCheckNodePort servers", "err", err)
	}
	s.hc.SyncEndpoints(counts)
}

// healthBinds are the addresses the healthCheckNodePort servers listen
// on under --nodeport-addresses, as kube-proxy binds them: a family the
// flag restricts on its allowed addresses only, another on all of its
// addresses when the node has any of that family.
func healthBinds(allowed map[rules.Family][]netip.Addr, local []netip.Addr) []healthcheck.Bind {
	if allowed == nil {
		return healthcheck.AllAddresses
	}
	var out []healthcheck.Bind
	for _, f := range []rules.Family{rules.IPv4, rules.IPv6} {
		network, any := "tcp4", "0.0.0.0"
		if f == rules.IPv6 {
			network, any = "tcp6", "::"
		}
		ips, restricted := allowed[f]
		if !restricted {
			if slices.ContainsFunc(local, f.Has) {
				out = append(out, healthcheck.Bind{Network: network, Host: any})
			}
			continue
		}
		for _, ip := range ips {
			out = append(out, healthcheck.Bind{Network: network, Host: ip.String()})
		}
	}
	return out
}

func (s *Syncer) fullSyncPeriod() time.Duration {
	if s.cfg.FullSyncPeriod > 0 {
		return s.cfg.FullSyncPeriod
	}
	return DefaultFullSyncPeriod
}
