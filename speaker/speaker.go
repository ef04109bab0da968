package speaker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/internal/daemon"
	"github.com/herald-lb/herald/speaker/bgp"
	"github.com/herald-lb/herald/speaker/handover"
	"github.com/herald-lb/herald/speaker/layer2"
	l2plan "github.com/herald-lb/herald/speaker/layer2/plan"
	"github.com/herald-lb/herald/speaker/layer2/release"
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
	// Neighbors finds the new holder's MAC when this node hands an
	// address over (it answers for it with that MAC meanwhile); nil:
	// it stops answering at once.
	Neighbors Neighbors
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
	// ProxyWait bounds the wait for Proxy per address (0:
	// partition.MaxProxyWait).
	ProxyWait time.Duration
	// Takeover checks, before this node answers for an address it won
	// from a member declared dead, that the member no longer answers
	// for it on the LAN (partition.Takeovers); nil: answer at once.
	Takeover partition.Check
	// TakeoverClock is the clock of the takeovers and of the waits for
	// releases (tests); nil: time.Now.
	TakeoverClock func() time.Time
	// BGPDrainWait is how long a drained node advertises its routes with
	// GRACEFUL_SHUTDOWN before it withdraws them (drain.go).
	BGPDrainWait time.Duration
	// Handover keeps the connections of an address this node took over
	// from a live member going to that member for HandoverKeep
	// (speaker/handover); nil or a zero HandoverKeep: it does not.
	Handover     handover.Kernel
	HandoverKeep time.Duration
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
	// badMessage is when a malformed message was last logged (UnixNano).
	badMessage atomic.Int64
	logs       onceLog // owned by the loop
	swept      map[string]bool
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
	// handed to memberlist. While a live member does not release what
	// it loses (an older speaker), this node counts itself recovering
	// while either it or the published flag is set, so on leaving
	// recovery it claims addresses back only once the others can know;
	// otherwise it claims them at once and waits for their releases
	// (round).
	publishedRecovering atomic.Bool
	// publishedDrained is the Drained flag of the metadata last handed
	// to memberlist. Drained, this node counts itself so only once it is
	// published: it answers until the others can know to take its
	// addresses. Undone, it claims them back only once the others can
	// know to let them go while a live member does not release what it
	// loses, and at once otherwise, waiting for the releases.
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
	env := &env{d: &s.d, logs: s.logs, trigger: s.Trigger, send: s.send}
	s.l2 = newLayer2Protocol(env, s.takeovers, &s.node.ifs, &s.loop.rejoined)
	s.protocols = []protocol{s.l2}
	if d.BGP != nil {
		s.bgp = newBGPProtocol(env)
		s.protocols = append(s.protocols, s.bgp)
	}
	d.Metrics.attach(s)
	return s
}

// send sends msg to the member to.
func (s *Speaker) send(to string, msg []byte) error {
	if s.cluster == nil {
		return errors.New("no cluster")
	}
	return s.cluster.Send(to, msg)
}

// Message takes a message another speaker sent (members.Config.OnMessage):
// a release of addresses this node waits for (speaker/layer2/release). A
// malformed one is logged and dropped.
func (s *Speaker) Message(b []byte) {
	m, err := release.Decode(b)
	if err != nil {
		if now := time.Now().UnixNano(); now-s.badMessage.Load() > int64(time.Minute) {
			s.badMessage.Store(now)
			s.d.Log.Warn("dropping a memberlist message that is not a release (logged once a minute)", "err", err, "bytes", len(b))
		}
		return
	}
	if s.l2.releases.Received(m) {
		s.Trigger()
	}
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
		if m.Restarting && s.partition.HoldRestarting(l2plan.Member{Name: ev.Member.Name, Interfaces: m.Interfaces, DownInterfaces: m.DownInterfaces, Recovering: m.Recovering, CountedOutAt: m.CountedOutAt, HoldsTogether: m.Releases}) {
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
