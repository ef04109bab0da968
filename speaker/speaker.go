package speaker

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/internal/daemon"
	"github.com/herald-lb/herald/speaker/bgp"
	"github.com/herald-lb/herald/speaker/layer2"
	l2plan "github.com/herald-lb/herald/speaker/layer2/plan"
	"github.com/herald-lb/herald/speaker/members"
	"github.com/herald-lb/herald/speaker/partition"
	"github.com/herald-lb/herald/speaker/view"
)

// Snapshot is the Kubernetes side of one sync.
type Snapshot struct {
	// Config is the parsed configuration; nil when none is readable.
	Config   *config.Config
	Services []view.Service
	Nodes    []view.Node
	// PodCIDRs are this node's, to tell pod interfaces apart.
	PodCIDRs []netip.Prefix
	// Peers are the memberlist addresses of the other nodes.
	Peers []string
	// NodeIPs are this node's InternalIPs (the default BGP router ID).
	NodeIPs []netip.Addr
}

// Source gives the speaker its view of the cluster; the informers
// implement it in Run, a fake in the tests.
type Source interface {
	Snapshot() Snapshot
	// Service returns the Service for events, or nil when it is gone.
	Service(ref view.ServiceRef) runtime.Object
	// BGPPeer returns the BGPPeer for events, or nil when it is gone.
	BGPPeer(name string) runtime.Object
}

// StatusSink keeps the ServiceAnnouncement and NodeAnnouncement objects; writes are
// asynchronous, so a slow API server never delays an ARP answer.
type StatusSink interface {
	// Set replaces this node's ServiceAnnouncements.
	Set(anns []view.Announcement)
	// SetNode replaces this node's NodeAnnouncement; nil: none.
	SetNode(sum *view.NodeSummary)
	// Nodes lists the nodes that have announcements of either kind.
	Nodes() []string
	// Sweep deletes the announcements of a node whose speaker left.
	Sweep(node string)
}

// Event reasons on Services.
const (
	EventAnnouncing        = "Announcing"
	EventStoppedAnnouncing = "StoppedAnnouncing"
)

// Deps are the speaker's collaborators; everything that touches the
// kernel, the network or the API server is one of them.
type Deps struct {
	Node    string
	Options view.Options
	Source  Source
	Links   Links
	// NewResponder starts the ARP/NDP responder of an interface.
	NewResponder ResponderFactory
	Status       StatusSink
	Events       record.EventRecorder
	Metrics      *Metrics
	Log          *slog.Logger
	// BGP applies what this node advertises over BGP; nil: layer 2 only.
	BGP *bgp.Manager
	// SessionPoll is how often the BGP session states are read (1s).
	SessionPoll time.Duration
	// Resync is the period of a sync without any trigger (default 30s),
	// a safety net for a missed notification.
	Resync time.Duration
	// Partition is this speaker's partition safety (isolation, recovery,
	// restart holds); nil: a Guard that never isolates nor recovers.
	Partition *partition.Guard
	// Proxy is the service proxy in this process; nil when another
	// proxy serves the node. An address won here is announced once its
	// rules are in (or after partition.MaxProxyWait).
	Proxy partition.ProxyGate
	// ProxyWait bounds the wait for Proxy per address (MaxProxyWait).
	ProxyWait time.Duration
	// Takeover checks, before this node answers for an address it won
	// from a member declared dead, that the member no longer answers
	// for it on the LAN (partition.Takeovers); nil: answer at once.
	Takeover partition.Check
	// TakeoverClock is the takeovers' clock (tests); nil: time.Now.
	TakeoverClock func() time.Time
	// BGPDrainWait is how long a drained node advertises its routes with
	// GRACEFUL_SHUTDOWN before it withdraws them (drain.go).
	BGPDrainWait time.Duration
}

// ProxyRules is the in-process proxy as the speaker's command wires it:
// a ProxyGate that says when its VIPs change.
type ProxyRules interface {
	partition.ProxyGate
	// SetOnProgrammed sets what is called (without blocking) when the
	// programmed VIPs change.
	SetOnProgrammed(func())
}

// ReannounceAfterDeath is when, after a member died, this node announces
// its addresses a second time: after the other side of a partition has
// found itself a minority (memberlist declares the members of one side
// dead within a second or two of each other).
const ReannounceAfterDeath = 3 * time.Second

// Speaker is the loop: on every change it runs one round, in which
// partition safety decides how far this node may go and each protocol
// (layer 2, then BGP) brings the node in line with its own plan; then
// the one status writer gets what they announce.
type Speaker struct {
	d       Deps
	cluster members.Cluster

	// partition is the safety state machine; takeovers and proxyWait
	// are its per-address holds (nil when off).
	partition *partition.Guard
	takeovers *partition.Takeovers
	proxyWait *partition.ProxyWait

	l2        *layer2Protocol
	bgp       *bgpProtocol // nil without BGP
	protocols []protocol

	loop  loopState
	node  nodeState
	drain drainState
	logs  onceLog // owned by the loop
	swept map[string]bool
}

// loopState is what Live, Ready and the memberlist callback read of
// the loop.
type loopState struct {
	trigger chan struct{}
	// lastSync is when the last sync finished (UnixNano), for Live.
	lastSync atomic.Int64
	ready    atomic.Bool
	// rejoined: a member joined or died since the last sync; the
	// announced IPs are announced again, which heals a partition's stale
	// ARP caches.
	rejoined atomic.Bool
	// ctx ends when Run returns.
	ctx    context.Context
	cancel context.CancelFunc
}

// nodeState is this node as the others see it: its interfaces and the
// memberlist metadata published from them.
type nodeState struct {
	ifs     Interfaces
	meta    members.Meta
	metaSet bool
	metaCh  chan members.Meta
	// publishedRecovering is the Recovering flag of the metadata last
	// handed to memberlist. This node counts itself recovering while
	// either it or the published flag is set, so on leaving recovery it
	// claims addresses back only once the others can know.
	publishedRecovering atomic.Bool
	// publishedDrained is the Drained flag of the metadata last handed
	// to memberlist. This node counts itself drained only once it is
	// published, both ways: drained, it answers until the others can
	// know to take its addresses; undone, it claims them back only once
	// they can know to let them go.
	publishedDrained atomic.Bool
	// recoveryTimer runs a sync when recovery ends.
	recoveryTimer *time.Timer
}

// New builds a Speaker; SetCluster must be called before Run.
func New(d Deps) *Speaker {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Metrics == nil {
		d.Metrics = NewMetrics()
	}
	if d.Resync <= 0 {
		d.Resync = 30 * time.Second
	}
	if d.SessionPoll <= 0 {
		d.SessionPoll = time.Second
	}
	if d.Partition == nil {
		d.Partition = partition.New(partition.Config{Self: d.Node})
	}
	s := &Speaker{
		d:         d,
		partition: d.Partition,
		logs:      onceLog{},
		swept:     map[string]bool{},
	}
	s.loop.trigger = make(chan struct{}, 1)
	s.loop.ctx, s.loop.cancel = context.WithCancel(context.Background())
	s.node.metaCh = make(chan members.Meta, 1)
	s.takeovers = partition.NewTakeovers(partition.TakeoverConfig{
		Self: d.Node, Check: d.Takeover, Log: d.Log, Trigger: s.Trigger, Now: d.TakeoverClock,
		Ended: func(o partition.Outcome) { d.Metrics.takeovers.WithLabelValues(string(o)).Inc() },
	})
	s.proxyWait = partition.NewProxyWait(d.Proxy, d.ProxyWait, s.Trigger, d.Log)
	env := &env{d: &s.d, logs: s.logs, trigger: s.Trigger}
	s.l2 = newLayer2Protocol(env, s.takeovers, &s.node.ifs, &s.loop.rejoined)
	s.protocols = []protocol{s.l2}
	if d.BGP != nil {
		s.bgp = newBGPProtocol(env)
		s.protocols = append(s.protocols, s.bgp)
	}
	d.Metrics.attach(s)
	return s
}

// SetCluster sets the memberlist membership. It is separate from New
// because the membership's event callback is the speaker's MemberEvent.
func (s *Speaker) SetCluster(c members.Cluster) { s.cluster = c }

// Trigger asks for a sync; calls while one is pending are merged.
func (s *Speaker) Trigger() {
	select {
	case s.loop.trigger <- struct{}{}:
	default:
	}
}

// MemberEvent is the memberlist callback: any change re-runs the
// election at once (this is the failover path); a join also makes this
// node announce its IPs again.
func (s *Speaker) MemberEvent(ev members.Event) {
	s.d.Log.Info("memberlist", "event", ev.Type.String(), "member", ev.Member.Name, "addr", ev.Member.Addr.String())
	switch {
	case ev.Type == members.EventJoin:
		s.loop.rejoined.Store(true)
		s.partition.MemberJoined(ev.Member.Name)
	case ev.Type == members.EventLeave && ev.Member.Meta.Leaving:
		// A graceful stop: gone, not hidden behind a partition.
		s.partition.MemberLeft(ev.Member.Name)
		m := ev.Member.Meta
		if m.Restarting && s.partition.HoldRestarting(l2plan.Member{Name: ev.Member.Name, Interfaces: m.Interfaces, DownInterfaces: m.DownInterfaces, Recovering: m.Recovering}) {
			s.heldRestarting(ev.Member.Name)
		}
	case ev.Type == members.EventLeave:
		// A death may be a partition. Its other side declares this side's
		// members dead one by one, and between two deaths it is briefly
		// a majority that claims some of this node's addresses, with
		// gratuitous ARP, before it finds itself a minority and stops:
		// clients that followed it must be told again, now and once it
		// has surely stopped.
		s.loop.rejoined.Store(true)
		time.AfterFunc(ReannounceAfterDeath, func() {
			s.loop.rejoined.Store(true)
			s.Trigger()
		})
	}
	s.Trigger()
}

// DeclaredDead is the memberlist callback for a refuted death (from is
// the member that declared it): the others moved this node's addresses
// away, so it recovers before it claims them back.
//
// Not when the death is the previous process's on this node, which the
// others still remember when a speaker restarts: a leave it announced
// itself (from is this node), or anything refuted before this speaker
// first saw another member, which is during its start-up join, when
// the others hand it their state. A restart is no flap; counting it
// would make every speaker recovering after a rolling update, and the
// addresses would move as their holds end one by one.
func (s *Speaker) DeclaredDead(from string) {
	if s.partition.Refuted(from).Ignored {
		s.d.Log.Info("refuted the death of this node's previous speaker process, which the others remembered; this one is not counted out", "from", from)
		return
	}
	s.Trigger()
}

// Live fails when the loop is stuck: it syncs at least every Resync,
// so no sync finished for three Resync periods means it no longer runs
// (a deadlock, an API call that never returns). Before the first sync it
// is live: start-up waits are for readiness to report.
func (s *Speaker) Live(now time.Time) error {
	last := s.loop.lastSync.Load()
	if last == 0 {
		return nil
	}
	if d := now.Sub(time.Unix(0, last)); d > 3*s.d.Resync {
		return fmt.Errorf("no sync finished for %s (they run at least every %s)", d.Round(time.Second), s.d.Resync)
	}
	return nil
}

// Ready tells whether the first sync is done.
func (s *Speaker) Ready() bool { return s.loop.ready.Load() }

// Announcements is what the responders answer for.
func (s *Speaker) Announcements() *layer2.Announcements { return &s.l2.ann }

// State is the last election result (for tests).
func (s *Speaker) State() l2plan.State { return s.l2.state }

// Standing is this speaker's memberlist view and the speakers it knows
// of, for the heartbeat; safe from any goroutine.
func (s *Speaker) Standing() partition.Standing {
	return s.partition.Standing(names(s.cluster.Members()))
}

// Run syncs on every trigger until ctx ends, then stops the responders.
// The caller closes the membership first on a graceful stop, so peers
// take the IPs over while this node still answers.
func (s *Speaker) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.watchLinks(ctx) }()
	go func() { defer wg.Done(); s.publishMeta(ctx) }()
	if s.bgp != nil {
		wg.Add(1)
		go func() { defer wg.Done(); s.bgp.watchSessions(ctx, s.d.SessionPoll) }()
	}
	tick := time.NewTicker(s.d.Resync)
	defer tick.Stop()
	s.Sync()
	for {
		select {
		case <-ctx.Done():
			s.takeovers.Stop()
			s.loop.cancel()
			wg.Wait()
			return
		case <-s.loop.trigger:
		case <-tick.C:
		}
		s.Sync()
	}
}

// StopResponders stops every responder; after it nothing answers.
func (s *Speaker) StopResponders() { s.l2.responders.stopAll() }

func (s *Speaker) watchLinks(ctx context.Context) {
	_ = daemon.Retry(ctx, time.Second, 30*time.Second, func(next time.Duration) bool {
		err := s.d.Links.Watch(ctx, s.Trigger)
		if ctx.Err() != nil {
			return true
		}
		s.d.Log.Warn("watching links failed; resubscribing", "err", err, "in", next)
		s.Trigger()
		return false
	})
}

// publishMeta sends the latest metadata to the cluster. It runs apart
// from the loop because UpdateMeta waits for the broadcast, up to a
// second when this node's link is down, and the loop must not wait.
func (s *Speaker) publishMeta(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-s.node.metaCh:
			s.publish(m)
		}
	}
}

func (s *Speaker) publish(m members.Meta) {
	// memberlist applies the metadata to this member before it waits
	// for the broadcast, so even a timeout publishes it.
	if err := s.cluster.UpdateMeta(m); err != nil {
		s.d.Log.Warn("publishing metadata to the cluster", "err", err)
	}
	if s.node.publishedRecovering.Swap(m.Recovering) && !m.Recovering {
		s.Trigger() // this node may claim addresses again
	}
	if s.node.publishedDrained.Swap(m.Drained) != m.Drained {
		s.Trigger() // the others know: this node acts on its drain now
	}
}

func (s *Speaker) setMeta(m members.Meta) {
	for {
		select {
		case s.node.metaCh <- m:
			return
		default:
			// Replace an unsent older value.
			select {
			case <-s.node.metaCh:
			default:
			}
		}
	}
}

// Sync runs one round on the current inputs: partition safety first,
// then every protocol, then the status of what they announce.
func (s *Speaker) Sync() {
	start := time.Now()
	snap := s.d.Source.Snapshot()
	s.readDrain(snap.Nodes, start)
	s.listInterfaces(snap)
	r := s.round(snap, start)
	var anns []view.Announcement
	var summary *view.NodeSummary
	for _, p := range s.protocols {
		res := p.sync(r)
		anns = append(anns, res.anns...)
		if res.node != nil {
			summary = res.node
		}
	}
	s.d.Status.Set(anns)
	s.d.Status.SetNode(summary)
	s.sweep(r.present)
	s.d.Metrics.observeRound(r)
	s.loop.lastSync.Store(time.Now().UnixNano())
	if !s.loop.ready.Load() {
		s.loop.ready.Store(true)
		st := s.l2.state
		s.d.Log.Info("first sync done", "announcing", len(st.Announced()), "ips", len(st.IPs), "members", r.live, "took", time.Since(start).Round(time.Microsecond))
	}
}

// listInterfaces selects the interfaces this node announces on.
func (s *Speaker) listInterfaces(snap Snapshot) {
	links, err := s.d.Links.List()
	if err != nil {
		// Keep the last known interfaces: announcing on them is better
		// than dropping every IP over a failed netlink dump.
		s.d.Log.Error("listing interfaces; keeping the last known", "err", err)
		return
	}
	s.node.ifs = SelectInterfaces(links, snap.PodCIDRs, namedInterfaces(snap.Config))
}

// round steps partition safety and gathers what every protocol reads:
// the members with this node's fresh metadata, whether it holds back,
// and the addresses its proxy has not programmed yet.
func (s *Speaker) round(snap Snapshot, now time.Time) *round {
	meta, dropped := fitMeta(s.node.ifs.Meta())
	if len(dropped) > 0 {
		s.logs.once("meta-dropped", strings.Join(dropped, ","), func() {
			s.d.Log.Warn("too many interfaces for the memberlist metadata; these are not announced on", "interfaces", dropped)
		})
	}
	live := s.cluster.Members()
	s.partition.ForgetRemoved(nodeNames(snap.Nodes))
	standing, dec := s.partition.Sync(names(live))
	meta.Recovering = s.recovering(dec)
	meta.Drained = s.drain.wanted
	s.publishIfChanged(meta)
	r := &round{
		now: now, snap: snap, standing: standing, live: len(live),
		holdBack:     dec.HoldBack,
		recovering:   meta.Recovering || s.node.publishedRecovering.Load(),
		drained:      s.node.publishedDrained.Load(),
		drainMarked:  s.drain.wanted,
		meta:         meta,
		unprogrammed: s.proxyWait.Unprogrammed(snap.Services, now),
		bgpDrain:     s.bgpDrainPhase(now),
	}
	r.members, r.present = s.members(live, r)
	// One speaker publishes the reasons every node computes alike: the
	// first live member by name, as for sweeping, unless isolated (the
	// others then have a reporter of their own).
	r.liveNames = map[string]bool{}
	for _, m := range live {
		r.liveNames[m.Name] = true
	}
	r.reporter = !r.holdBack && firstLive(r.liveNames) == s.d.Node
	if r.holdBack != s.l2.state.Isolated {
		if r.holdBack {
			s.d.Log.Warn("isolated: this speaker's memberlist view is a minority of the speakers it knows of, and the API shows speakers outside it alive; announcing only addresses no other node may announce (check that the memberlist port, TCP and UDP, is open between the nodes and that every speaker has the key)",
				"view", len(standing.Live), "known", len(standing.Known), "unreachable", unreachable(standing), "phase", dec.View.String())
		} else if s.loop.ready.Load() {
			s.d.Log.Info("no longer isolated", "phase", dec.View.String())
		}
	}
	return r
}

// publishIfChanged hands changed metadata to the publisher.
func (s *Speaker) publishIfChanged(meta members.Meta) {
	ifsChanged := !s.node.metaSet || !slices.Equal(meta.Interfaces, s.node.meta.Interfaces) || !slices.Equal(meta.DownInterfaces, s.node.meta.DownInterfaces)
	if ifsChanged {
		s.d.Log.Info("interfaces", "announceable", meta.Interfaces, "down", meta.DownInterfaces, "skipped", s.node.ifs.Skipped)
	}
	if ifsChanged || meta.Recovering != s.node.meta.Recovering || meta.Drained != s.node.meta.Drained {
		s.node.meta, s.node.metaSet = meta, true
		s.setMeta(meta)
	}
}

// members are the election's candidates: the live members (this node
// with its own fresher view) and those held for a restart in place;
// present are their names, whose status objects stay.
func (s *Speaker) members(live []members.Member, r *round) ([]l2plan.Member, map[string]bool) {
	var out []l2plan.Member
	present := map[string]bool{}
	own := l2plan.Member{Name: s.d.Node, Interfaces: r.meta.Interfaces, DownInterfaces: r.meta.DownInterfaces, Recovering: r.recovering, Drained: r.drained}
	for _, m := range live {
		present[m.Name] = true
		if m.Name == s.d.Node {
			out = append(out, own)
			continue
		}
		out = append(out, l2plan.Member{Name: m.Name, Interfaces: m.Meta.Interfaces, DownInterfaces: m.Meta.DownInterfaces, Recovering: m.Meta.Recovering, Drained: m.Meta.Drained})
	}
	if !present[s.d.Node] {
		out = append(out, own)
	}
	liveOnly := maps.Clone(present)
	for _, h := range s.heldMembers(liveOnly) {
		out = append(out, h)
		present[h.Name] = true
	}
	return out, present
}

// recovering logs a change of the recovery region and arms a sync for
// when recovery ends. Owned by the loop.
func (s *Speaker) recovering(d partition.Decision) bool {
	switch {
	case d.Recovering && !s.node.meta.Recovering:
		s.d.Log.Warn("recovering: the cluster counted this speaker out (memberlist declared it dead, or it was isolated); other nodes keep its addresses until it stays in for the hold", "for", d.RecoveryLeft.Round(time.Millisecond))
	case !d.Recovering && s.node.meta.Recovering:
		s.d.Log.Info("recovered: this speaker claims addresses again")
	}
	if d.Recovering {
		if s.node.recoveryTimer == nil {
			s.node.recoveryTimer = time.AfterFunc(d.RecoveryLeft+10*time.Millisecond, s.Trigger)
		} else {
			s.node.recoveryTimer.Reset(d.RecoveryLeft + 10*time.Millisecond)
		}
	}
	return d.Recovering
}

// unreachable are the known speakers outside the view.
func unreachable(st partition.Standing) []string {
	var out []string
	for _, n := range st.Known {
		if st.Outside(n) {
			out = append(out, n)
		}
	}
	return out
}

func names(ms []members.Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}

func nodeNames(nodes []view.Node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Name
	}
	return out
}

// namedInterfaces are the interfaces some L2Advertisement names.
func namedInterfaces(c *config.Config) map[string]bool {
	out := map[string]bool{}
	if c == nil {
		return out
	}
	for _, ad := range c.L2Advertisements {
		if ad == nil {
			continue
		}
		for _, i := range ad.Interfaces {
			out[i] = true
		}
	}
	return out
}

// sweep deletes the ServiceAnnouncements of nodes whose speaker is not in
// the cluster (it died without cleaning up), once per departure. Only
// the first live member by name does it, so N speakers do not race.
func (s *Speaker) sweep(live map[string]bool) {
	for n := range s.swept {
		if live[n] {
			delete(s.swept, n)
		}
	}
	if firstLive(live) != s.d.Node {
		return
	}
	for _, n := range s.d.Status.Nodes() {
		if n == s.d.Node || live[n] || s.swept[n] {
			continue
		}
		s.swept[n] = true
		s.d.Log.Info("removing the ServiceAnnouncements of a speaker that left", "node", n)
		s.d.Status.Sweep(n)
	}
}

// firstLive is the first live member by name, "" when there is none.
func firstLive(live map[string]bool) string {
	first := ""
	for n := range live {
		if first == "" || n < first {
			first = n
		}
	}
	return first
}

// onceLog remembers the last value logged per key, so a condition that
// lasts is logged when it starts or changes, not on every sync.
type onceLog map[string]string

// once calls log when key's value changed since the last call.
func (l onceLog) once(key, value string, log func()) {
	if l[key] == value {
		return
	}
	l[key] = value
	log()
}

// forget drops key, so its next value is logged.
func (l onceLog) forget(key string) { delete(l, key) }

// forgetUnseen drops the keys with one of prefixes that are not in seen.
func (l onceLog) forgetUnseen(seen map[string]bool, prefixes ...string) {
	for k := range l {
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) && !seen[k] {
				delete(l, k)
			}
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func refs(rs []view.ServiceRef) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.String()
	}
	return out
}

func ipList(ips []netip.Addr) string {
	s := make([]string, len(ips))
	for i, ip := range ips {
		s[i] = ip.String()
	}
	return strings.Join(s, ", ")
}

// withProxy sets Proxy unless p is nil (a nil interface, not a nil
// pointer in one).
func (d Deps) withProxy(p ProxyRules) Deps {
	if p != nil {
		d.Proxy = p
	}
	return d
}
