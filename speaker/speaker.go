package speaker

import (
	"cmp"
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

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/internal/daemon"
	"github.com/herald-lb/herald/speaker/bgp"
	"github.com/herald-lb/herald/speaker/heartbeat"
	"github.com/herald-lb/herald/speaker/layer2"
	l2plan "github.com/herald-lb/herald/speaker/layer2/plan"
	"github.com/herald-lb/herald/speaker/members"
	"github.com/herald-lb/herald/speaker/recovery"
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
	// Isolated tells whether this speaker, when its memberlist view is a
	// minority of the speakers it knows of (alone, or one side of a
	// partition), must hold back because speakers outside its view are
	// alive without it (heartbeat.Tracker.Isolated); nil: never.
	Isolated func(heartbeat.Standing) bool
	// Recovery remembers when the cluster last counted this speaker out
	// (declared dead, or isolated); nil: never recovering.
	Recovery *recovery.Tracker
	// Proxy is the service proxy in this process; nil when another
	// proxy serves the node. An address won here is announced once its
	// rules are in (or after MaxProxyWait).
	Proxy ProxyGate
	// ProxyWait bounds the wait for Proxy per address (MaxProxyWait).
	ProxyWait time.Duration
	// Takeover checks, before this node answers for an address it won
	// from a member declared dead, that the member no longer answers
	// for it on the LAN (see takeover.go); nil: answer at once.
	Takeover TakeoverCheck
	// RestartHold is how long a member that left restarting in place
	// stays elected (restart.go); 0: its addresses move at once.
	RestartHold time.Duration
	// BGPDrainWait is how long a drained node advertises its routes with
	// GRACEFUL_SHUTDOWN before it withdraws them (drain.go).
	BGPDrainWait time.Duration
}

// ProxyGate tells whether this node's proxy has the rules for a
// LoadBalancer VIP (proxy.Proxy.Programmed).
type ProxyGate interface {
	Programmed(ip netip.Addr) (handled, ok bool)
}

// ProxyRules is the in-process proxy as the speaker's command wires it:
// a ProxyGate that says when its VIPs change.
type ProxyRules interface {
	ProxyGate
	// SetOnProgrammed sets what is called (without blocking) when the
	// programmed VIPs change.
	SetOnProgrammed(func())
}

// ReannounceAfterDeath is when, after a member died, this node announces
// its addresses a second time: after the other side of a partition has
// found itself a minority (memberlist declares the members of one side
// dead within a second or two of each other).
const ReannounceAfterDeath = 3 * time.Second

// MaxProxyWait bounds how long an address waits for this node's proxy:
// a proxy that never lists it (a filter it applies that the speaker does
// not know of) must not keep it dark for good.
const MaxProxyWait = 5 * time.Second

// labelServiceProxyName marks a Service another proxy programs; herald's
// proxy leaves it out, so its addresses are not waited for.
const labelServiceProxyName = "service.kubernetes.io/service-proxy-name"

type responderEntry struct {
	r    Responder
	link Link
}

// Speaker is the layer-2 speaker loop: it recomputes the election on
// every change and brings the responders, the announcements and the
// status objects in line with it.
type Speaker struct {
	d       Deps
	cluster members.Cluster
	ann     layer2.Announcements

	trigger chan struct{}
	// lastSync is when the last sync finished (UnixNano), for Live.
	lastSync atomic.Int64
	// rejoined: a member joined or died since the last sync; the
	// announced IPs are announced again, which heals a partition's stale
	// ARP caches.
	rejoined atomic.Bool
	ready    atomic.Bool

	mu         sync.Mutex // responders, for the metrics collector
	responders map[string]*responderEntry
	// retired accumulates the counters of stopped responders.
	retired map[string]layer2.Stats

	metaCh chan members.Meta
	// publishedRecovering is the Recovering flag of the metadata last
	// handed to memberlist. This node counts itself recovering while
	// either it or the published flag is set, so on leaving recovery it
	// claims addresses back only once the others can know.
	publishedRecovering atomic.Bool
	// recoveryTimer runs a sync when recovery ends.
	recoveryTimer *time.Timer
	// publishedDrained is the Drained flag of the metadata last handed
	// to memberlist. This node counts itself drained only once it is
	// published, both ways: drained, it answers until the others can
	// know to take its addresses; undone, it claims them back only once
	// they can know to let them go.
	publishedDrained atomic.Bool

	// joined: some sync saw another live member; until then being alone
	// is the start-up join, not an isolation that counts this node out,
	// and a refuted death concerns the previous process on this node.
	// Written by the loop, read by the memberlist callback too.
	joined atomic.Bool

	knownMu sync.Mutex
	// known are the speakers this one has seen live and that did not
	// leave gracefully since: the others a partition may hide. Written
	// by the loop and the memberlist callback.
	known map[string]bool
	// held are the members that left restarting in place, still elected
	// until their hold ends (restart.go).
	held map[string]heldMember

	// Owned by the loop.
	state   l2plan.State
	meta    members.Meta
	metaSet bool
	ifs     Interfaces
	swept   map[string]bool
	logged  map[string]string
	// proxyWait: when each address still waiting for the proxy was
	// first seen waiting.
	proxyWait map[netip.Addr]time.Time
	bgpAnns   []view.Announcement
	drain     drainState

	bgp bgpState

	// ctx ends when Run returns; takeover checks run under it.
	ctx    context.Context
	cancel context.CancelFunc
	tkMu   sync.Mutex
	// takeovers are the addresses won from a member declared dead that
	// are not answered yet (takeover.go). Written by the loop and the
	// checks.
	takeovers map[netip.Addr]*takeover
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
	s := &Speaker{
		d:          d,
		trigger:    make(chan struct{}, 1),
		responders: map[string]*responderEntry{},
		retired:    map[string]layer2.Stats{},
		metaCh:     make(chan members.Meta, 1),
		swept:      map[string]bool{},
		logged:     map[string]string{},
		proxyWait:  map[netip.Addr]time.Time{},
		known:      map[string]bool{},
		held:       map[string]heldMember{},
		takeovers:  map[netip.Addr]*takeover{},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	d.Metrics.attach(s)
	return s
}

// SetCluster sets the memberlist membership. It is separate from New
// because the membership's event callback is the speaker's MemberEvent.
func (s *Speaker) SetCluster(c members.Cluster) { s.cluster = c }

// Trigger asks for a sync; calls while one is pending are merged.
func (s *Speaker) Trigger() {
	select {
	case s.trigger <- struct{}{}:
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
		s.rejoined.Store(true)
		s.knownMu.Lock()
		s.known[ev.Member.Name] = true
		s.knownMu.Unlock()
	case ev.Type == members.EventLeave && ev.Member.Meta.Leaving:
		// A graceful stop: gone, not hidden behind a partition.
		s.knownMu.Lock()
		delete(s.known, ev.Member.Name)
		s.knownMu.Unlock()
		if ev.Member.Meta.Restarting {
			s.holdRestarting(ev.Member)
		}
	case ev.Type == members.EventLeave:
		// A death may be a partition. Its other side declares this side's
		// members dead one by one, and between two deaths it is briefly
		// a majority that claims some of this node's addresses, with
		// gratuitous ARP, before it finds itself a minority and stops:
		// clients that followed it must be told again, now and once it
		// has surely stopped.
		s.rejoined.Store(true)
		time.AfterFunc(ReannounceAfterDeath, func() {
			s.rejoined.Store(true)
			s.Trigger()
		})
	}
	s.Trigger()
}

// Live fails when the loop is stuck: it syncs at least every Resync,
// so no sync finished for three Resync periods means it no longer runs
// (a deadlock, an API call that never returns). Before the first sync it
// is live: start-up waits are for readiness to report.
func (s *Speaker) Live(now time.Time) error {
	last := s.lastSync.Load()
	if last == 0 {
		return nil
	}
	if d := now.Sub(time.Unix(0, last)); d > 3*s.d.Resync {
		return fmt.Errorf("no sync finished for %s (they run at least every %s)", d.Round(time.Second), s.d.Resync)
	}
	return nil
}

// Ready tells whether the first sync is done.
func (s *Speaker) Ready() bool { return s.ready.Load() }

// Announcements is what the responders answer for.
func (s *Speaker) Announcements() *layer2.Announcements { return &s.ann }

// State is the last election result (for tests).
func (s *Speaker) State() l2plan.State { return s.state }

// Run syncs on every trigger until ctx ends, then stops the responders.
// The caller closes the membership first on a graceful stop, so peers
// take the IPs over while this node still answers.
func (s *Speaker) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.watchLinks(ctx) }()
	go func() { defer wg.Done(); s.publishMeta(ctx) }()
	if s.d.BGP != nil {
		wg.Add(1)
		go func() { defer wg.Done(); s.watchSessions(ctx, s.d.SessionPoll) }()
	}
	tick := time.NewTicker(s.d.Resync)
	defer tick.Stop()
	s.Sync()
	for {
		select {
		case <-ctx.Done():
			s.stopTakeovers()
			s.cancel()
			wg.Wait()
			return
		case <-s.trigger:
		case <-tick.C:
		}
		s.Sync()
	}
}

// StopResponders stops every responder; after it nothing answers.
func (s *Speaker) StopResponders() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, e := range s.responders {
		s.retire(name, e)
	}
}

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
		case m := <-s.metaCh:
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
	if s.publishedRecovering.Swap(m.Recovering) && !m.Recovering {
		s.Trigger() // this node may claim addresses again
	}
	if s.publishedDrained.Swap(m.Drained) != m.Drained {
		s.Trigger() // the others know: this node acts on its drain now
	}
}

func (s *Speaker) setMeta(m members.Meta) {
	for {
		select {
		case s.metaCh <- m:
			return
		default:
			// Replace an unsent older value.
			select {
			case <-s.metaCh:
			default:
			}
		}
	}
}

// Sync runs the election on the current inputs and applies the result.
func (s *Speaker) Sync() {
	start := time.Now()
	snap := s.d.Source.Snapshot()
	s.readDrain(snap.Nodes, start)
	links, err := s.d.Links.List()
	if err != nil {
		// Keep the last known interfaces: announcing on them is better
		// than dropping every IP over a failed netlink dump.
		s.d.Log.Error("listing interfaces; keeping the last known", "err", err)
	} else {
		s.ifs = SelectInterfaces(links, snap.PodCIDRs, namedInterfaces(snap.Config))
	}
	meta, dropped := fitMeta(s.ifs.Meta())
	if len(dropped) > 0 {
		s.logOnce("meta-dropped", strings.Join(dropped, ","), func() {
			s.d.Log.Warn("too many interfaces for the memberlist metadata; these are not announced on", "interfaces", dropped)
		})
	}
	s.syncResponders()

	live := s.cluster.Members()
	s.forgetRemoved(snap.Nodes)
	standing := s.standing(live)
	lonely := standing.Lonely()
	isolated := s.d.Isolated != nil && s.d.Isolated(standing)
	if s.joined.Load() {
		// A speaker still joining after its start is alone too, but
		// the others never counted it out and moved nothing away from
		// it: a hold then would only move addresses assigned meanwhile
		// to it once it ends.
		s.d.Recovery.Isolation(isolated)
	}
	if !lonely {
		s.joined.Store(true)
	}
	meta.Recovering = s.recovering()
	// Truncated as the metadata carries it, so the election reads this
	// node's own count-out as the others do.
	meta.CountedOutAt = s.d.Recovery.LastCountedOut().Truncate(time.Millisecond)
	meta.Drained = s.drain.wanted
	if !s.metaSet || !slices.Equal(meta.Interfaces, s.meta.Interfaces) || !slices.Equal(meta.DownInterfaces, s.meta.DownInterfaces) {
		s.d.Log.Info("interfaces", "announceable", meta.Interfaces, "down", meta.DownInterfaces, "skipped", s.ifs.Skipped)
	}
	if !s.metaSet || !slices.Equal(meta.Interfaces, s.meta.Interfaces) || !slices.Equal(meta.DownInterfaces, s.meta.DownInterfaces) ||
		meta.Recovering != s.meta.Recovering || !meta.CountedOutAt.Equal(s.meta.CountedOutAt) || meta.Drained != s.meta.Drained {
		s.meta, s.metaSet = meta, true
		s.setMeta(meta)
	}
	ownRecovering := meta.Recovering || s.publishedRecovering.Load()
	ownDrained := s.publishedDrained.Load()
	in := l2plan.Input{
		Config:   snap.Config,
		Services: snap.Services,
		Nodes:    snap.Nodes,
		Local:    l2plan.Local{Name: s.d.Node, Interfaces: meta.Interfaces, DownInterfaces: meta.DownInterfaces},
		Options:  s.d.Options,
	}
	liveNames := map[string]bool{}
	for _, m := range live {
		liveNames[m.Name] = true
		am := l2plan.Member{Name: m.Name, Interfaces: m.Meta.Interfaces, DownInterfaces: m.Meta.DownInterfaces, Recovering: m.Meta.Recovering, CountedOutAt: m.Meta.CountedOutAt, Drained: m.Meta.Drained}
		if m.Name == s.d.Node {
			// This node's own view is fresher than what gossip carries.
			am.Interfaces, am.DownInterfaces, am.Recovering, am.CountedOutAt, am.Drained = meta.Interfaces, meta.DownInterfaces, ownRecovering, meta.CountedOutAt, ownDrained
		}
		in.Members = append(in.Members, am)
	}
	if !liveNames[s.d.Node] {
		in.Members = append(in.Members, l2plan.Member{Name: s.d.Node, Interfaces: meta.Interfaces, DownInterfaces: meta.DownInterfaces, Recovering: ownRecovering, CountedOutAt: meta.CountedOutAt, Drained: ownDrained})
	}
	// Members restarting in place keep their addresses; their status
	// objects stay as well.
	held := s.heldMembers(liveNames, time.Now())
	in.Members = append(in.Members, held...)
	present := maps.Clone(liveNames)
	for _, h := range held {
		present[h.Name] = true
	}
	in.Isolated = isolated
	in.Unprogrammed = s.unprogrammed(snap.Services, time.Now())
	in.Contested = s.contested(standing.Known, liveNames, time.Now())
	// One speaker publishes the reasons every node computes alike: the
	// first live member by name, as for sweeping, unless isolated (the
	// others then have a reporter of their own).
	in.Reporter = !isolated && firstLive(liveNames) == s.d.Node
	if in.Isolated != s.state.Isolated {
		if in.Isolated {
			s.d.Log.Warn("isolated: this speaker's memberlist view is a minority of the speakers it knows of, and the API shows speakers outside it alive; announcing only addresses no other node may announce (check that the memberlist port, TCP and UDP, is open between the nodes and that every speaker has the key)",
				"view", len(standing.Live), "known", len(standing.Known), "unreachable", unreachable(standing))
		} else if s.ready.Load() {
			s.d.Log.Info("no longer isolated")
		}
	}
	in.Previous = &s.state
	st := l2plan.Compute(in)
	s.startTakeovers(st, time.Now())
	ch := l2plan.Diff(s.state, st)
	s.ann.Set(st.Announced())
	s.syncGroups()

	again := s.rejoined.Swap(false)
	if again {
		s.announceAll(st)
	} else {
		for _, g := range ch.Gained {
			for _, i := range g.Interfaces {
				s.gratuitous(i, g.Addr)
			}
		}
	}
	bgpAnns, summary := s.syncBGP(snap, in.Reporter, in.Unprogrammed, s.bgpDrainPhase(time.Now()))
	s.d.Status.Set(append(slices.Clone(st.Announcements), bgpAnns...))
	s.d.Status.SetNode(summary)
	s.events(ch)
	s.sweep(present)
	s.logChanges(st, ch)
	s.d.Metrics.observe(st, ch, len(live), in.Isolated, ownRecovering)
	s.d.Metrics.drained.Set(boolGauge(s.drain.wanted))
	s.d.Metrics.known.Set(float64(len(standing.Known)))
	s.state = st
	s.lastSync.Store(time.Now().UnixNano())
	if !s.ready.Load() {
		s.ready.Store(true)
		s.d.Log.Info("first sync done", "announcing", len(st.Announced()), "ips", len(st.IPs), "members", len(live), "took", time.Since(start).Round(time.Microsecond))
	}
}

// Standing is this speaker's memberlist view and the speakers it knows
// of, for the heartbeat; safe from any goroutine.
func (s *Speaker) Standing() heartbeat.Standing { return s.standing(s.cluster.Members()) }

// standing records the live members as known and returns the standing.
func (s *Speaker) standing(live []members.Member) heartbeat.Standing {
	st := heartbeat.Standing{Self: s.d.Node, Joined: s.joined.Load()}
	s.knownMu.Lock()
	defer s.knownMu.Unlock()
	s.known[s.d.Node] = true
	liveNames := map[string]bool{}
	for _, m := range live {
		st.Live = append(st.Live, m.Name)
		s.known[m.Name] = true
		liveNames[m.Name] = true
	}
	st.Known = slices.Sorted(maps.Keys(s.known))
	now := time.Now()
	for _, name := range slices.Sorted(maps.Keys(s.held)) {
		if !liveNames[name] && now.Before(s.held[name].until) {
			st.Held = append(st.Held, name)
		}
	}
	return st
}

// forgetRemoved drops the known speakers whose Node was deleted: a node
// removed from the cluster hides behind no partition.
func (s *Speaker) forgetRemoved(nodes []view.Node) {
	if len(nodes) == 0 {
		return // no Nodes read yet: keep what is known
	}
	exists := map[string]bool{}
	for _, n := range nodes {
		exists[n.Name] = true
	}
	s.knownMu.Lock()
	defer s.knownMu.Unlock()
	for n := range s.known {
		if !exists[n] && n != s.d.Node {
			delete(s.known, n)
		}
	}
}

// unreachable are the known speakers outside the view.
func unreachable(st heartbeat.Standing) []string {
	var out []string
	for _, n := range st.Known {
		if st.Outside(n) {
			out = append(out, n)
		}
	}
	return out
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
	if from == s.d.Node || !s.joined.Load() {
		s.d.Log.Info("refuted the death of this node's previous speaker process, which the others remembered; this one is not counted out", "from", from)
		return
	}
	s.d.Recovery.CountedOut()
	s.Trigger()
}

// recovering reads the recovery tracker, logs a change, and arms a sync
// for when recovery ends. Owned by the loop.
func (s *Speaker) recovering() bool {
	r, left := s.d.Recovery.Recovering()
	switch {
	case r && !s.meta.Recovering:
		s.d.Log.Warn("recovering: the cluster counted this speaker out (memberlist declared it dead, or it was isolated); other nodes keep its addresses until it stays in for the hold", "for", left.Round(time.Millisecond))
	case !r && s.meta.Recovering:
		s.d.Log.Info("recovered: this speaker claims addresses again")
	}
	if r {
		if s.recoveryTimer == nil {
			s.recoveryTimer = time.AfterFunc(left+10*time.Millisecond, s.Trigger)
		} else {
			s.recoveryTimer.Reset(left + 10*time.Millisecond)
		}
	}
	return r
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

// syncResponders runs one responder per announceable interface with
// carrier, and restarts one whose interface changed (a new index or MAC
// after the link was re-created) or whose socket failed.
func (s *Speaker) syncResponders() {
	s.mu.Lock()
	defer s.mu.Unlock()
	want := map[string]Link{}
	for _, name := range s.ifs.Names {
		if !slices.Contains(s.ifs.Down, name) {
			want[name] = s.ifs.Links[name]
		}
	}
	for name, e := range s.responders {
		l, ok := want[name]
		dead := false
		select {
		case <-e.r.Done():
			dead = true
		default:
		}
		if !ok || dead || l.Index != e.link.Index || l.MAC.String() != e.link.MAC.String() {
			if dead {
				s.d.Log.Warn("responder died; restarting", "interface", name)
			}
			s.retire(name, e)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if _, ok := s.responders[name]; ok {
			continue
		}
		l := want[name]
		r, err := s.d.NewResponder(layer2.Interface{Name: l.Name, Index: l.Index, MAC: l.MAC}, &s.ann)
		if err != nil {
			s.logOnce("responder/"+name, err.Error(), func() {
				s.d.Log.Error("cannot answer ARP/NDP on an interface; retrying at the next sync", "interface", name, "err", err)
			})
			continue
		}
		delete(s.logged, "responder/"+name)
		s.responders[name] = &responderEntry{r: r, link: l}
		// A responder whose socket fails for good stops; the sync that
		// follows starts a new one. (Stop also ends this goroutine, at
		// the cost of one needless sync.)
		go func() { <-r.Done(); s.Trigger() }()
		s.d.Log.Info("answering ARP/NDP", "interface", name, "mac", l.MAC.String(), "index", l.Index)
		// A responder that starts late (the link came back, or was
		// re-created) announces what it holds: caches may still point
		// elsewhere.
		for _, ip := range s.ann.On(name) {
			if err := r.Gratuitous(ip); err != nil {
				s.d.Log.Warn("gratuitous announcement failed", "interface", name, "ip", ip, "err", err)
			}
		}
	}
}

// retire stops a responder and keeps its counters; s.mu is held.
func (s *Speaker) retire(name string, e *responderEntry) {
	e.r.Stop()
	s.retired[name] = addStats(s.retired[name], e.r.Stats())
	delete(s.responders, name)
	s.d.Log.Info("stopped answering ARP/NDP", "interface", name)
}

func (s *Speaker) syncGroups() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, e := range s.responders {
		if err := e.r.SyncGroups(s.ann.On(name)); err != nil {
			s.d.Log.Warn("joining solicited-node multicast groups", "interface", name, "err", err)
		}
	}
}

func (s *Speaker) gratuitous(iface string, ip netip.Addr) {
	s.mu.Lock()
	e := s.responders[iface]
	s.mu.Unlock()
	if e == nil {
		return // its responder starts at the next sync and announces then
	}
	if err := e.r.Gratuitous(ip); err != nil {
		s.d.Log.Warn("gratuitous announcement failed", "interface", iface, "ip", ip, "err", err)
	}
}

// announceAll announces every held IP again, after a member joined: if
// it was a partition healing, the other side may have announced the
// same IPs, and clients must learn the winner's MAC again.
func (s *Speaker) announceAll(st l2plan.State) {
	for ip, ifaces := range st.Announced() {
		for _, i := range ifaces {
			s.gratuitous(i, ip)
		}
	}
}

// events records an event on each Service whose announcement by this
// node started, changed or stopped.
func (s *Speaker) events(ch l2plan.Changes) {
	if s.d.Events == nil {
		return
	}
	for _, a := range append(slices.Clone(ch.Create), ch.Update...) {
		obj := s.d.Source.Service(a.Service)
		if obj == nil {
			continue
		}
		s.d.Events.Eventf(obj, corev1.EventTypeNormal, EventAnnouncing, "announcing %s from node %s on %s",
			ipList(a.IPs), a.Node, strings.Join(a.Interfaces, ", "))
	}
	for _, a := range ch.Delete {
		obj := s.d.Source.Service(a.Service)
		if obj == nil {
			continue // the Service is gone: nobody reads its events
		}
		s.d.Events.Eventf(obj, corev1.EventTypeNormal, EventStoppedAnnouncing, "stopped announcing %s from node %s",
			ipList(a.IPs), a.Node)
	}
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

// unprogrammed is the addresses this node's proxy has no rules for yet,
// each for at most MaxProxyWait from when this speaker first saw it so.
func (s *Speaker) unprogrammed(svcs []view.Service, now time.Time) map[netip.Addr]bool {
	if s.d.Proxy == nil {
		return nil
	}
	out := map[netip.Addr]bool{}
	for _, svc := range svcs {
		if _, other := svc.Labels[labelServiceProxyName]; other {
			continue
		}
		for _, a := range svc.IPs {
			handled, ok := s.d.Proxy.Programmed(a)
			if !handled || ok || out[a] {
				continue
			}
			wait := cmp.Or(s.d.ProxyWait, MaxProxyWait)
			first, seen := s.proxyWait[a]
			if !seen {
				first = now
				s.proxyWait[a] = now
				// Sync again when the wait runs out, should the proxy
				// never say.
				time.AfterFunc(wait, s.Trigger)
			}
			if now.Sub(first) < wait {
				out[a] = true
			} else {
				s.logOnce("proxywait/"+a.String(), "waited", func() {
					s.d.Log.Warn("announcing an address this node's proxy has not programmed after waiting", "ip", a, "waited", wait)
				})
			}
		}
	}
	for a := range s.proxyWait {
		if handled, ok := s.d.Proxy.Programmed(a); !handled || ok {
			delete(s.proxyWait, a)
			delete(s.logged, "proxywait/"+a.String())
		}
	}
	return out
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

// logChanges logs what moved and, once per change, why IPs are not
// announced, so `kubectl logs` explains a missing announcement.
func (s *Speaker) logChanges(st l2plan.State, ch l2plan.Changes) {
	for _, m := range ch.Moved {
		ip, _ := st.Lookup(m.Addr)
		s.d.Log.Info("winner changed", "ip", m.Addr, "from", orNone(m.From), "to", orNone(m.To), "services", refs(ip.Services))
	}
	for _, g := range ch.Gained {
		s.d.Log.Info("announcing", "ip", g.Addr, "interfaces", g.Interfaces)
	}
	for _, l := range ch.Lost {
		s.d.Log.Info("stopped announcing", "ip", l.Addr, "interfaces", l.Interfaces)
	}
	seen := map[string]bool{}
	for _, ip := range st.IPs {
		if ip.Reason == "" {
			continue
		}
		key := "ip/" + ip.Addr.String()
		seen[key] = true
		why := ip.Reason + " " + fmt.Sprint(ip.Excluded.Map())
		s.logOnce(key, why, func() {
			s.d.Log.Info("not announced", "ip", ip.Addr, "services", refs(ip.Services), "reason", ip.Reason, "nodes", ip.Excluded.Map())
		})
	}
	for _, ig := range st.Ignored {
		key := "ignored/" + ig.Service.String() + "/" + ig.Addr.String()
		seen[key] = true
		s.logOnce(key, ig.Reason+ig.Detail, func() {
			s.d.Log.Info("not announced", "service", ig.Service.String(), "ip", ig.Addr, "reason", ig.Reason, "detail", ig.Detail)
		})
	}
	for k := range s.logged {
		if (strings.HasPrefix(k, "ip/") || strings.HasPrefix(k, "ignored/")) && !seen[k] {
			delete(s.logged, k)
		}
	}
}

// logOnce calls log when key's value changed since the last call.
func (s *Speaker) logOnce(key, value string, log func()) {
	if s.logged[key] == value {
		return
	}
	s.logged[key] = value
	log()
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

func addStats(a, b layer2.Stats) layer2.Stats {
	a.ARPRequests += b.ARPRequests
	a.NSRequests += b.NSRequests
	a.ARPReplies += b.ARPReplies
	a.NAReplies += b.NAReplies
	a.GratuitousARP += b.GratuitousARP
	a.UnsolicitedNA += b.UnsolicitedNA
	a.ReadErrors += b.ReadErrors
	a.WriteErrors += b.WriteErrors
	if len(b.Ignored) > 0 && a.Ignored == nil {
		a.Ignored = map[layer2.Reason]uint64{}
	}
	for k, v := range b.Ignored {
		a.Ignored[k] += v
	}
	return a
}

// withProxy sets Proxy unless p is nil (a nil interface, not a nil
// pointer in one).
func (d Deps) withProxy(p ProxyRules) Deps {
	if p != nil {
		d.Proxy = p
	}
	return d
}
