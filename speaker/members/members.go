package members

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Cluster is the membership the speaker relies on. *Memberlist implements
// it over the network, *Fake in memory for tests of the code above it.
type Cluster interface {
	// Join remembers peers (addresses, "ip" or "ip:port") as the known
	// peers, replacing the previous list, and joins those that are not
	// members yet. It returns how many were joined; the error lists the
	// peers that could not be parsed or reached.
	Join(peers []string) (int, error)
	// Members returns the live (alive or suspect) members, this node
	// included, sorted by name.
	Members() []Member
	// UpdateMeta publishes new metadata; on error the old one stays.
	UpdateMeta(Meta) error
	// SetKeys makes primary the key messages are sent with and accepts
	// extra ones too (a key rotation); on error the keys in use stay.
	SetKeys(primary Secret, extra []Secret) error
	// Close leaves the cluster gracefully and stops.
	Close() error
	// Restart leaves as Close does, telling the others that a new
	// speaker takes this one's place on the same node (Meta.Restarting).
	Restart() error
	// Send sends msg to the live member named to over a stream (TCP),
	// encrypted as the gossip is; it returns once the message is written.
	Send(to string, msg []byte) error
}

// Member is one speaker in the cluster. memberlist does not expose a
// member's state (its Node.State field is never filled in), so there is
// none here: Members lists the alive and the suspect ones, and a leave
// event does not tell a graceful leave from a death.
type Member struct {
	Name string
	Addr netip.AddrPort
	Meta Meta
	// MetaErr is set when the member's metadata did not decode; Meta is
	// then empty, so the member wins no IP until it publishes valid data.
	MetaErr error
}

// EventType is what happened to a member.
type EventType int

// The event types.
const (
	EventJoin EventType = iota
	EventLeave
	EventUpdate
)

func (t EventType) String() string {
	switch t {
	case EventJoin:
		return "join"
	case EventLeave:
		return "leave"
	case EventUpdate:
		return "update"
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// Event is a membership change.
type Event struct {
	Type   EventType
	Member Member
}

// Memberlist is a Cluster over hashicorp/memberlist.
type Memberlist struct {
	cfg Config
	ml  *memberlist.Memberlist
	log *slog.Logger
	ev  *eventQueue

	meta atomic.Pointer[[]byte] // encoded, at most MaxMetaSize
	self netip.AddrPort

	mu    sync.Mutex
	peers []netip.AddrPort
	// table mirrors memberlist's live members from its events:
	// memberlist.Members returns pointers into its own state that it
	// keeps writing, so reading them is a data race.
	table map[string]Member

	keyring *memberlist.Keyring

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	stop      chan struct{}
	loops     sync.WaitGroup
}

var _ Cluster = (*Memberlist)(nil)

// label is put on every packet and stream (and authenticated with the
// key), so another memberlist cluster on the same port — MetalLB's uses
// 7946 too — is refused with a clear log line instead of garbage.
const label = "herald"

// New starts a member listening on cfg's address. It joins nobody yet:
// call Join with the peers.
func New(cfg Config) (*Memberlist, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("memberlist config: %w", err)
	}
	keys, err := deriveKeys(cfg.Secret, cfg.Extra)
	if err != nil {
		return nil, err
	}
	keyring, err := memberlist.NewKeyring(keys[1:], keys[0])
	if err != nil {
		return nil, fmt.Errorf("memberlist keyring: %w", err)
	}
	meta, err := EncodeMeta(cfg.Meta)
	if err != nil {
		return nil, err
	}
	lg := cfg.Log
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	m := &Memberlist{cfg: cfg, log: lg, ev: newEventQueue(cfg.OnEvent), stop: make(chan struct{}), table: map[string]Member{}, keyring: keyring}
	m.meta.Store(&meta)

	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.NodeName
	mc.BindAddr = bindAddr(cfg)
	mc.BindPort = cfg.BindPort
	mc.AdvertisePort = cfg.BindPort
	if cfg.AdvertiseAddr.IsValid() {
		mc.AdvertiseAddr = cfg.AdvertiseAddr.Unmap().String()
	}
	t := cfg.Timers
	mc.ProbeInterval, mc.ProbeTimeout = t.ProbeInterval, t.ProbeTimeout
	mc.IndirectChecks = t.IndirectChecks
	mc.SuspicionMult, mc.SuspicionMaxTimeoutMult = t.SuspicionMult, t.SuspicionMaxTimeoutMult
	mc.GossipInterval, mc.GossipNodes = t.GossipInterval, t.GossipNodes
	mc.RetransmitMult = t.RetransmitMult
	mc.PushPullInterval = t.PushPullInterval
	mc.GossipToTheDeadTime = t.GossipToTheDeadTime
	mc.TCPTimeout = t.TCPTimeout
	mc.DeadNodeReclaimTime = t.DeadNodeReclaimTime
	mc.Keyring = keyring
	mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	// LZW on packets of a few hundred bytes saves little and costs a
	// fresh compression table per message: garbage a CPU-starved speaker
	// pays for in collections (see transport). Members still read
	// compressed messages from older speakers.
	mc.EnableCompression = false
	mc.Label = label
	mc.Delegate = delegate{m}
	mc.Events = eventDelegate{m}
	mc.Logger = log.New(logWriter{l: lg, declaredDead: cfg.OnDeclaredDead}, "", 0)

	tr, err := newTransport(mc.BindAddr, mc.BindPort, mc.Logger)
	if err != nil {
		m.ev.close()
		return nil, fmt.Errorf("starting memberlist's transport: %w", err)
	}
	mc.Transport = tr
	if cfg.wrapTransport != nil {
		mc.Transport = cfg.wrapTransport(tr)
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = tr.Shutdown()
		m.ev.close()
		return nil, fmt.Errorf("starting memberlist on %s:%d: %w", mc.BindAddr, mc.BindPort, err)
	}
	m.ml = ml
	m.mu.Lock()
	m.self = m.table[cfg.NodeName].Addr // Create announced this node to the delegate
	m.mu.Unlock()
	m.loops.Add(1)
	go m.rejoinLoop()
	return m, nil
}

func bindAddr(cfg Config) string {
	switch {
	case cfg.BindAddr.IsValid():
		return cfg.BindAddr.Unmap().String()
	case cfg.AdvertiseAddr.IsValid() && cfg.AdvertiseAddr.Unmap().Is6():
		return "::"
	}
	return "0.0.0.0"
}

// LocalAddr is the address and port peers reach this member at.
func (m *Memberlist) LocalAddr() netip.AddrPort { return m.self }

// Join implements Cluster.
func (m *Memberlist) Join(peers []string) (int, error) {
	if m.closed.Load() {
		return 0, errors.New("memberlist is closed")
	}
	parsed, errs := parsePeers(peers, m.cfg.BindPort)
	m.mu.Lock()
	m.peers = parsed
	m.mu.Unlock()
	n, err := m.joinMissing()
	return n, errors.Join(append(errs, err)...)
}

// parsePeers reads addresses, dropping (and reporting) bad entries and
// duplicates. Host names are refused: peers come from the API as IPs,
// and a DNS lookup inside a failover path is a delay nobody asked for.
func parsePeers(peers []string, port int) ([]netip.AddrPort, []error) {
	var out []netip.AddrPort
	var errs []error
	for _, p := range peers {
		s := strings.TrimSpace(p)
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			a, err2 := netip.ParseAddr(strings.Trim(s, "[]"))
			if err2 != nil {
				errs = append(errs, fmt.Errorf("peer %q is not an IP address or IP:port", p))
				continue
			}
			ap = netip.AddrPortFrom(a, uint16(port))
		}
		ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		if ap.Port() == 0 || ap.Addr().IsUnspecified() {
			errs = append(errs, fmt.Errorf("peer %q has no usable address or port", p))
			continue
		}
		if !slices.Contains(out, ap) {
			out = append(out, ap)
		}
	}
	return out, errs
}

// joinParallel bounds concurrent joins: each can take TCPTimeout when a
// listed peer is powered off, and they must not delay the live ones.
const joinParallel = 8

// joinMissing joins the known peers that are neither members nor this
// node.
func (m *Memberlist) joinMissing() (int, error) {
	present := map[netip.AddrPort]bool{m.LocalAddr(): true}
	for _, mem := range m.Members() {
		present[mem.Addr] = true
	}
	m.mu.Lock()
	var todo []netip.AddrPort
	for _, p := range m.peers {
		if !present[p] {
			todo = append(todo, p)
		}
	}
	m.mu.Unlock()

	var (
		wg     sync.WaitGroup
		sem    = make(chan struct{}, joinParallel)
		mu     sync.Mutex
		joined int
		errs   []error
	)
	for _, p := range todo {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			_, err := m.ml.Join([]string{p.String()})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				// memberlist's multi-line multierror, flattened for logs.
				errs = append(errs, fmt.Errorf("joining %s: %s", p, strings.Join(strings.Fields(err.Error()), " ")))
				return
			}
			joined++
		}()
	}
	wg.Wait()
	return joined, errors.Join(errs...)
}

// rejoinLoop heals partitions: after one, each side has marked the other
// dead and stops probing it, so only a new join merges them again.
func (m *Memberlist) rejoinLoop() {
	defer m.loops.Done()
	t := time.NewTicker(m.cfg.RejoinInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		n, err := m.joinMissing()
		if n > 0 {
			m.log.Info("rejoined memberlist peers", "count", n)
		}
		if err != nil {
			m.log.Debug("memberlist peers not reachable", "err", err)
		}
	}
}

// Members implements Cluster.
func (m *Memberlist) Members() []Member {
	m.mu.Lock()
	out := make([]Member, 0, len(m.table))
	for _, mem := range m.table {
		out = append(out, mem)
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// UpdateMeta implements Cluster. It returns once the update is broadcast,
// or with an error after UpdateTimeout (the update still spreads).
func (m *Memberlist) UpdateMeta(meta Meta) error {
	if m.closed.Load() {
		return errors.New("memberlist is closed")
	}
	b, err := EncodeMeta(meta)
	if err != nil {
		return err
	}
	m.meta.Store(&b)
	if err := m.ml.UpdateNode(m.cfg.UpdateTimeout); err != nil {
		return fmt.Errorf("broadcasting node metadata: %w", err)
	}
	return nil
}

// Send implements Cluster.
func (m *Memberlist) Send(to string, msg []byte) error {
	if m.closed.Load() {
		return errors.New("memberlist is closed")
	}
	m.mu.Lock()
	mem, ok := m.table[to]
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("%s is not a live member", to)
	}
	// A Node of our own: memberlist's are written under its lock.
	n := &memberlist.Node{Name: mem.Name, Addr: mem.Addr.Addr().Unmap().AsSlice(), Port: mem.Addr.Port()}
	if err := m.ml.SendReliable(n, msg); err != nil {
		return fmt.Errorf("sending to %s: %w", to, err)
	}
	return nil
}

// Close implements Cluster: it broadcasts the leave so peers move this
// node's IPs at once rather than after failure detection, waits at most
// LeaveTimeout for it, shuts down, and delivers the pending events.
func (m *Memberlist) Close() error { return m.leave(false) }

// Restart implements Cluster: Close, with Restarting in the last
// metadata the others receive.
func (m *Memberlist) Restart() error { return m.leave(true) }

func (m *Memberlist) leave(restarting bool) error {
	m.closeOnce.Do(func() {
		m.closed.Store(true)
		close(m.stop)
		m.loops.Wait()
		var errs []error
		if err := m.announceLeaving(restarting); err != nil {
			errs = append(errs, err)
		}
		if err := m.ml.Leave(m.cfg.LeaveTimeout); err != nil {
			errs = append(errs, fmt.Errorf("leaving memberlist: %w", err))
		}
		if err := m.ml.Shutdown(); err != nil {
			errs = append(errs, fmt.Errorf("shutting memberlist down: %w", err))
		}
		m.ev.close()
		m.closeErr = errors.Join(errs...)
	})
	return m.closeErr
}

// announceLeaving publishes Leaving in this member's metadata and waits
// (at most half the leave timeout) for it to go out: memberlist's leave
// itself looks like a death to the others, and its broadcast replaces
// an unsent metadata update of the same member.
func (m *Memberlist) announceLeaving(restarting bool) error {
	meta, err := DecodeMeta(*m.meta.Load())
	if err != nil {
		return err
	}
	meta.Leaving, meta.Restarting = true, restarting
	b, err := EncodeMeta(meta)
	if err != nil {
		return err
	}
	m.meta.Store(&b)
	if err := m.ml.UpdateNode(m.cfg.LeaveTimeout / 2); err != nil {
		return fmt.Errorf("announcing the leave: %w", err)
	}
	return nil
}

// kill stops without leaving, as a crash would; for tests.
func (m *Memberlist) kill() {
	m.closeOnce.Do(func() {
		m.closed.Store(true)
		close(m.stop)
		m.loops.Wait()
		m.closeErr = m.ml.Shutdown()
		m.ev.close()
	})
}

func toMember(n *memberlist.Node) Member {
	mem := Member{Name: n.Name}
	if a, ok := netip.AddrFromSlice(n.Addr); ok {
		mem.Addr = netip.AddrPortFrom(a.Unmap(), n.Port)
	}
	mem.Meta, mem.MetaErr = DecodeMeta(n.Meta)
	return mem
}

// delegate hands memberlist our metadata and the messages of Send.
type delegate struct{ m *Memberlist }

func (d delegate) NodeMeta(limit int) []byte {
	b := *d.m.meta.Load()
	if len(b) > limit {
		// Unreachable (EncodeMeta enforces MaxMetaSize), but memberlist
		// panics on oversized metadata, so never hand it any.
		return nil
	}
	return b
}

// NotifyMsg hands a message of another member's Send on; memberlist
// reuses the buffer after the call.
func (d delegate) NotifyMsg(b []byte) {
	if d.m.cfg.OnMessage != nil && len(b) > 0 {
		d.m.cfg.OnMessage(bytes.Clone(b))
	}
}
func (delegate) GetBroadcasts(_, _ int) [][]byte      { return nil }
func (delegate) LocalState(bool) []byte               { return nil }
func (delegate) MergeRemoteState(_ []byte, join bool) {}

// eventDelegate keeps the member table and queues events. memberlist
// calls it holding its node lock, which makes reading the node safe here,
// and is why the callback must not run here.
type eventDelegate struct{ m *Memberlist }

func (e eventDelegate) NotifyJoin(n *memberlist.Node)   { e.m.record(EventJoin, n) }
func (e eventDelegate) NotifyLeave(n *memberlist.Node)  { e.m.record(EventLeave, n) }
func (e eventDelegate) NotifyUpdate(n *memberlist.Node) { e.m.record(EventUpdate, n) }

func (m *Memberlist) record(t EventType, n *memberlist.Node) {
	mem := toMember(n)
	m.mu.Lock()
	if t == EventLeave {
		delete(m.table, mem.Name)
	} else {
		m.table[mem.Name] = mem
	}
	m.mu.Unlock()
	m.ev.push(Event{Type: t, Member: mem})
}

// eventQueue delivers events in order from one goroutine. It is unbounded
// so a slow consumer never blocks memberlist (which would stall failure
// detection) and no event is dropped; membership changes are few.
type eventQueue struct {
	fn   func(Event)
	mu   sync.Mutex
	q    []Event
	wake chan struct{}
	done chan struct{}
	stop chan struct{}
	once sync.Once
}

func newEventQueue(fn func(Event)) *eventQueue {
	e := &eventQueue{fn: fn, wake: make(chan struct{}, 1), done: make(chan struct{}), stop: make(chan struct{})}
	go e.run()
	return e
}

func (e *eventQueue) push(ev Event) {
	if e.fn == nil {
		return
	}
	e.mu.Lock()
	e.q = append(e.q, ev)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *eventQueue) run() {
	defer close(e.done)
	for {
		stopping := false
		select {
		case <-e.wake:
		case <-e.stop:
			stopping = true
		}
		for {
			e.mu.Lock()
			q := e.q
			e.q = nil
			e.mu.Unlock()
			if len(q) == 0 {
				break
			}
			for _, ev := range q {
				e.fn(ev)
			}
		}
		if stopping {
			return
		}
	}
}

// close delivers what is queued and stops.
func (e *eventQueue) close() {
	e.once.Do(func() { close(e.stop) })
	<-e.done
}

// logWriter forwards memberlist's "[LEVEL] memberlist: message" lines to
// slog at that level, and calls declaredDead (if set) for the line
// memberlist logs when it refutes a message declaring this member dead:
// memberlist has no other way to tell a member that the cluster counted
// it out.
type logWriter struct {
	l            *slog.Logger
	declaredDead func(from string)
}

// refutingDead starts the line memberlist (state.go, deadNode) logs when
// another member declared this one dead: "Refuting a dead message (from:
// NAME)", NAME being the member that sent the dead message.
const refutingDead = "Refuting a dead message"

// refutedFrom is the sender named in a refutingDead line, "" when the
// line has none.
func refutedFrom(line string) string {
	_, rest, ok := strings.Cut(line, "(from: ")
	if !ok {
		return ""
	}
	from, _, ok := strings.Cut(rest, ")")
	if !ok {
		return ""
	}
	return strings.TrimSpace(from)
}

func (w logWriter) Write(p []byte) (int, error) {
	line := strings.TrimRight(string(p), "\n")
	level := slog.LevelInfo
	for prefix, l := range map[string]slog.Level{"[DEBUG]": slog.LevelDebug, "[INFO]": slog.LevelInfo, "[WARN]": slog.LevelWarn, "[ERR]": slog.LevelError} {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			level, line = l, strings.TrimSpace(rest)
			break
		}
	}
	line = strings.TrimPrefix(line, "memberlist: ")
	w.l.Log(context.Background(), level, line, "component", "memberlist")
	if w.declaredDead != nil && strings.HasPrefix(line, refutingDead) {
		w.declaredDead(refutedFrom(line))
	}
	return len(p), nil
}

var _ io.Writer = logWriter{}

// deriveKeys derives the primary key (first) and the extra ones, without
// duplicates. The primary must be valid; so must every extra one, so a
// rotation step with a bad key is refused whole.
func deriveKeys(primary Secret, extra []Secret) ([][]byte, error) {
	k, err := DeriveKey(primary)
	if err != nil {
		return nil, err
	}
	out := [][]byte{slices.Clone(k[:])}
	for i, e := range extra {
		k, err := DeriveKey(e)
		if err != nil {
			return nil, fmt.Errorf("extra key %d: %w", i+1, err)
		}
		if !slices.ContainsFunc(out, func(b []byte) bool { return string(b) == string(k[:]) }) {
			out = append(out, slices.Clone(k[:]))
		}
	}
	return out, nil
}

// SetKeys implements Cluster: the keyring is changed in place, new keys
// first, then the primary, then the keys no longer wanted are removed, so
// no message in flight finds its key missing.
func (m *Memberlist) SetKeys(primary Secret, extra []Secret) error {
	keys, err := deriveKeys(primary, extra)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := m.keyring.AddKey(k); err != nil {
			return fmt.Errorf("adding a memberlist key: %w", err)
		}
	}
	if err := m.keyring.UseKey(keys[0]); err != nil {
		return fmt.Errorf("switching the memberlist primary key: %w", err)
	}
	for _, have := range m.keyring.GetKeys() {
		if !slices.ContainsFunc(keys, func(k []byte) bool { return string(k) == string(have) }) {
			if err := m.keyring.RemoveKey(have); err != nil {
				return fmt.Errorf("removing a memberlist key: %w", err)
			}
		}
	}
	return nil
}

// Keys is how many keys the keyring holds (the primary included).
func (m *Memberlist) Keys() int { return len(m.keyring.GetKeys()) }
