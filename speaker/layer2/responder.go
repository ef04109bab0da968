package layer2

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/mdlayher/packet"
)

// Conn sends and receives whole Ethernet frames on one interface, for one
// EtherType. *packet.Conn (ListenARP, ListenNDP) implements it; so does
// the tests' fake.
type Conn interface {
	ReadFrom(b []byte) (n int, addr net.Addr, err error)
	// WriteTo sends frame b; addr carries its Ethernet destination as a
	// *packet.Addr.
	WriteTo(b []byte, addr net.Addr) (n int, err error)
	Close() error
}

// Groups makes an interface receive IPv6 multicast groups; *GroupSocket
// (ListenGroups) implements it.
type Groups interface {
	JoinGroup(group netip.Addr) error
	LeaveGroup(group netip.Addr) error
	Close() error
}

// Sockets are a Responder's connections on its interface.
type Sockets struct {
	ARP Conn // nil: IPv4 is not served
	NDP Conn // nil: IPv6 is not served
	// Groups joins the solicited-node groups for NDP (SyncGroups).
	Groups Groups
}

func (s Sockets) close() error {
	var errs []error
	for _, c := range []interface{ Close() error }{s.ARP, s.NDP, s.Groups} {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// DefaultBurst is when Gratuitous sends, from the takeover: at once for
// fast failover, then twice more because a single frame is easily lost
// while a link or a switch port is still settling (the complaint about
// peer projects is exactly "sent once and lost"); the gaps widen so one
// short disturbance cannot eat them all, and the last lands while a
// client that missed the first still has a stale entry to correct.
func DefaultBurst() []time.Duration {
	return []time.Duration{0, 500 * time.Millisecond, 2 * time.Second}
}

// Options tune a Responder.
type Options struct {
	// Burst is when Gratuitous sends, as ascending offsets from the call
	// (0 = before it returns); nil means DefaultBurst().
	Burst []time.Duration
	// Log receives conflicts, I/O errors and, at debug level, dropped
	// frames; nil discards.
	Log *slog.Logger
	// Wake, when set, silences replies and gratuitous announcements
	// while it says the process was just paused.
	Wake *Wake
}

// Stats counts a Responder's traffic, for metrics.
type Stats struct {
	// Requests decoded: ARP requests and neighbor solicitations, answered
	// or not.
	ARPRequests, NSRequests uint64
	// Replies sent: ARP replies and solicited neighbor advertisements.
	ARPReplies, NAReplies uint64
	// Gratuitous frames sent: both ARP forms count, and unsolicited NAs.
	GratuitousARP, UnsolicitedNA uint64
	// Ignored counts frames not answered, by reason.
	Ignored                 map[Reason]uint64
	ReadErrors, WriteErrors uint64
}

// Responder answers ARP and NDP on one interface for the IPs its
// Announcer says this node announces there, and sends gratuitous
// announcements on request.
type Responder struct {
	ifi   Interface
	arp   Conn // nil: no IPv4
	ndp   Conn // nil: no IPv6
	grp   Groups
	a     Announcer
	log   *slog.Logger
	wake  *Wake // nil: always awake
	burst []time.Duration
	// after is time.After; the tests replace it with a fake clock.
	after func(time.Duration) <-chan time.Time

	stop   chan struct{} // closed when Run returns
	bursts sync.WaitGroup

	mu      sync.Mutex
	stopped bool
	pending map[netip.Addr]chan struct{} // closing one cancels that IP's burst
	joined  map[netip.Addr]bool          // solicited-node groups joined
	warned  map[netip.Addr]time.Time     // last conflict logged per IP
	stats   Stats
}

// conflictLogEvery limits conflict warnings per IP: a host that keeps
// announcing our IP would otherwise flood the log.
const conflictLogEvery = time.Minute

// readRetry is the pause after a read error that does not end Run, such
// as ENETDOWN while the link is down.
const readRetry = 100 * time.Millisecond

// NewResponder returns a Responder for ifi over s (ARP or NDP may be nil
// when that family is not served). The Responder owns s and closes it
// when Run returns.
func NewResponder(ifi Interface, s Sockets, a Announcer, opts Options) (*Responder, error) {
	switch {
	case !unicastMAC(ifi.MAC):
		return nil, fmt.Errorf("interface %q: MAC %q is not a unicast Ethernet address", ifi.Name, ifi.MAC)
	case s.ARP == nil && s.NDP == nil:
		return nil, fmt.Errorf("interface %q: no connection for either ARP or NDP", ifi.Name)
	case a == nil:
		return nil, errors.New("no Announcer")
	}
	burst := opts.Burst
	if burst == nil {
		burst = DefaultBurst()
	}
	if len(burst) == 0 || burst[0] < 0 || !slices.IsSorted(burst) {
		return nil, fmt.Errorf("burst %v: want ascending non-negative offsets", burst)
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Responder{
		ifi:     ifi,
		arp:     s.ARP,
		ndp:     s.NDP,
		grp:     s.Groups,
		a:       a,
		log:     log.With("interface", ifi.Name),
		wake:    opts.Wake,
		burst:   slices.Clone(burst),
		after:   time.After,
		stop:    make(chan struct{}),
		pending: map[netip.Addr]chan struct{}{},
		joined:  map[netip.Addr]bool{},
		warned:  map[netip.Addr]time.Time{},
		stats:   Stats{Ignored: map[Reason]uint64{}},
	}, nil
}

// Run answers requests until ctx ends or a Conn fails for good (it is
// closed under us); then it closes the Conns, stops pending bursts and
// returns, nil when ctx ended. Transient read errors (the link going down)
// are logged and retried. Run may be called once.
func (r *Responder) Run(ctx context.Context) error {
	r.mu.Lock()
	stopped := r.stopped
	r.mu.Unlock()
	if stopped {
		return fmt.Errorf("interface %s: responder already stopped", r.ifi.Name)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var conns []Conn
	for _, c := range []Conn{r.arp, r.ndp} {
		if c != nil {
			conns = append(conns, c)
		}
	}
	errc := make(chan error, len(conns))
	for _, c := range conns {
		go func() { errc <- r.read(ctx, c) }()
	}
	var err error
	pending := len(conns)
	select {
	case <-ctx.Done():
	case err = <-errc:
		pending--
	}
	cancel()
	r.mu.Lock()
	r.stopped = true
	close(r.stop)
	r.mu.Unlock()
	if cerr := (Sockets{ARP: r.arp, NDP: r.ndp, Groups: r.grp}).close(); cerr != nil {
		r.log.Warn("closing sockets", "error", cerr)
	}
	for ; pending > 0; pending-- {
		<-errc
	}
	r.bursts.Wait()
	return err
}

func (r *Responder) read(ctx context.Context, c Conn) error {
	buf := make([]byte, 1<<16)
	var lastErr string
	for {
		n, _, err := c.ReadFrom(buf)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			lastErr = ""
			r.handle(c, buf[:n])
			continue
		}
		if closed(err) {
			return fmt.Errorf("interface %s: reading: %w", r.ifi.Name, err)
		}
		r.mu.Lock()
		r.stats.ReadErrors++
		r.mu.Unlock()
		if err.Error() != lastErr { // once per spell of the same error
			lastErr = err.Error()
			r.log.Warn("reading frames; retrying", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(readRetry):
		}
	}
}

// closed: the socket is gone, so reading again cannot succeed.
func closed(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrClosed) || errors.Is(err, syscall.EBADF)
}

func (r *Responder) handle(c Conn, frame []byte) {
	d := Decide(frame, r.ifi, r.a)
	if d.Reason == ReasonReplied && !r.awake() {
		d.Reason = ReasonPaused
	}
	r.mu.Lock()
	switch d.Family {
	case IPv4:
		r.stats.ARPRequests++
	case IPv6:
		r.stats.NSRequests++
	}
	if d.Reason != ReasonReplied {
		r.stats.Ignored[d.Reason]++
	}
	warn := false
	if d.Reason == ReasonConflict {
		if now := time.Now(); now.Sub(r.warned[d.Target]) >= conflictLogEvery {
			r.warned[d.Target], warn = now, true
		}
	}
	r.mu.Unlock()

	switch d.Reason {
	case ReasonReplied:
	case ReasonConflict:
		if warn {
			r.log.Warn("another host announces an IP this node announces (gratuitous ARP)",
				"ip", d.Target, "from", net.HardwareAddr(frame[6:12]))
		}
		return
	case ReasonEncode:
		r.log.Error("cannot encode a reply", "ip", d.Target, "error", d.Err)
		return
	default:
		if r.log.Enabled(context.Background(), slog.LevelDebug) {
			if d.Err != nil {
				r.log.Debug("not answering", "reason", d.Reason, "error", d.Err)
			} else {
				r.log.Debug("not answering", "reason", d.Reason, "ip", d.Target)
			}
		}
		return
	}
	if err := r.write(c, d.Reply); err != nil {
		r.log.Warn("sending a reply", "ip", d.Target, "error", err)
		return
	}
	r.mu.Lock()
	if d.Family == IPv4 {
		r.stats.ARPReplies++
	} else {
		r.stats.NAReplies++
	}
	r.mu.Unlock()
}

// awake: no pause of this process just ended (Options.Wake).
func (r *Responder) awake() bool {
	return r.wake == nil || r.wake.Awake(time.Now())
}

// write sends frame to the Ethernet destination it carries.
func (r *Responder) write(c Conn, frame []byte) error {
	_, err := c.WriteTo(frame, &packet.Addr{HardwareAddr: net.HardwareAddr(frame[:6])})
	if err != nil {
		r.mu.Lock()
		r.stats.WriteErrors++
		r.mu.Unlock()
	}
	return err
}

// Gratuitous announces that ip is at this interface's MAC — gratuitous
// ARP in both forms for IPv4, an unsolicited neighbor advertisement for
// IPv6 — at each of the burst's offsets. Call it on takeover, when the
// link comes back and after a partition heals. The frames due at once are
// sent before it returns (their error is returned); the rest follow in
// the background and stop early when ip is no longer announced here, when
// Gratuitous is called again for ip, or when Run returns. It refuses an
// IP the Announcer does not announce on this interface.
func (r *Responder) Gratuitous(ip netip.Addr) error {
	ip = ip.Unmap()
	c, frames, err := r.gratuitousFrames(ip)
	if err != nil {
		return err
	}
	if !r.a.Announcing(ip, r.ifi.Name) {
		return fmt.Errorf("interface %s: %s is not announced here", r.ifi.Name, ip)
	}
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return fmt.Errorf("interface %s: responder stopped", r.ifi.Name)
	}
	if prev := r.pending[ip]; prev != nil {
		close(prev)
	}
	cancel := make(chan struct{})
	r.pending[ip] = cancel
	r.bursts.Add(1)
	r.mu.Unlock()

	i := 0
	var first error
	for ; i < len(r.burst) && r.burst[i] == 0; i++ {
		if err := r.sendGratuitous(c, ip, frames); err != nil && first == nil {
			first = err
		}
	}
	go r.repeat(ip, cancel, c, frames, r.burst[i:])
	return first
}

// repeat sends the rest of a burst, whose offsets count from the call.
func (r *Responder) repeat(ip netip.Addr, cancel chan struct{}, c Conn, frames [][]byte, rest []time.Duration) {
	var prev time.Duration
	defer r.bursts.Done()
	defer func() {
		r.mu.Lock()
		if r.pending[ip] == cancel {
			delete(r.pending, ip)
		}
		r.mu.Unlock()
	}()
	for _, off := range rest {
		select {
		case <-r.after(off - prev):
		case <-cancel:
			return
		case <-r.stop:
			return
		}
		select { // a timer and a cancel both ready: the cancel wins
		case <-cancel:
			return
		case <-r.stop:
			return
		default:
		}
		prev = off
		if !r.a.Announcing(ip, r.ifi.Name) {
			// Lost the election meanwhile: announcing now would pull
			// traffic away from the new owner.
			r.log.Debug("burst stopped: no longer announced", "ip", ip)
			return
		}
		if err := r.sendGratuitous(c, ip, frames); err != nil {
			r.log.Warn("sending gratuitous announcement", "ip", ip, "error", err)
		}
	}
}

func (r *Responder) gratuitousFrames(ip netip.Addr) (Conn, [][]byte, error) {
	if ip.Is4() {
		if r.arp == nil {
			return nil, nil, fmt.Errorf("interface %s: %s is IPv4 but ARP is not served", r.ifi.Name, ip)
		}
		req, err := GratuitousARPRequest(ip, r.ifi.MAC)
		if err != nil {
			return nil, nil, err
		}
		rep, err := GratuitousARPReply(ip, r.ifi.MAC)
		if err != nil {
			return nil, nil, err
		}
		return r.arp, [][]byte{req, rep}, nil
	}
	if r.ndp == nil {
		return nil, nil, fmt.Errorf("interface %s: %s is IPv6 but NDP is not served", r.ifi.Name, ip)
	}
	na, err := UnsolicitedNA(ip, r.ifi.MAC)
	if err != nil {
		return nil, nil, err
	}
	return r.ndp, [][]byte{na}, nil
}

func (r *Responder) sendGratuitous(c Conn, ip netip.Addr, frames [][]byte) error {
	if !r.awake() {
		r.log.Debug("gratuitous announcement not sent: this process was just paused", "ip", ip)
		return nil
	}
	var errs []error
	for _, f := range frames {
		if err := r.write(c, f); err != nil {
			errs = append(errs, err)
			continue
		}
		r.mu.Lock()
		if ip.Is4() {
			r.stats.GratuitousARP++
		} else {
			r.stats.UnsolicitedNA++
		}
		r.mu.Unlock()
	}
	return errors.Join(errs...)
}

// SyncGroups makes the interface receive the neighbor solicitations for
// the IPv6 addresses among ips by joining their solicited-node multicast
// groups, and leaves the groups no longer needed. Several IPs can share a
// group; each group is joined once. A failed join or leave is returned
// and retried on the next call.
func (r *Responder) SyncGroups(ips []netip.Addr) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	join, leave := groupChanges(r.joined, ips)
	if len(join)+len(leave) == 0 {
		return nil
	}
	if r.grp == nil {
		return fmt.Errorf("interface %s: no socket to join multicast groups with", r.ifi.Name)
	}
	var errs []error
	for _, g := range join {
		if err := r.grp.JoinGroup(g); err != nil {
			errs = append(errs, err)
			continue
		}
		r.joined[g] = true
	}
	for _, g := range leave {
		if err := r.grp.LeaveGroup(g); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(r.joined, g)
	}
	return errors.Join(errs...)
}

// groupChanges is what to join and leave, sorted, to go from the groups
// in have to the solicited-node groups of the IPv6 addresses among ips.
func groupChanges(have map[netip.Addr]bool, ips []netip.Addr) (join, leave []netip.Addr) {
	want := map[netip.Addr]bool{}
	for _, ip := range ips {
		if ip.Is6() && !ip.Is4In6() {
			want[SolicitedNodeMulticast(ip)] = true
		}
	}
	for g := range want {
		if !have[g] {
			join = append(join, g)
		}
	}
	for g := range have {
		if !want[g] {
			leave = append(leave, g)
		}
	}
	slices.SortFunc(join, netip.Addr.Compare)
	slices.SortFunc(leave, netip.Addr.Compare)
	return join, leave
}

// Stats returns a snapshot of the counters.
func (r *Responder) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Ignored = maps.Clone(r.stats.Ignored)
	return s
}
