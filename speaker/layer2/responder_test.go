package layer2

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mdlayher/packet"
)

// fakeConn is an in-memory Conn: the test feeds frames (or errors) to
// ReadFrom and collects what is written.
type fakeConn struct {
	in      chan any // []byte or error
	written chan written
	closed  chan struct{}
	once    sync.Mutex
	isShut  bool
	failW   error
}

type written struct {
	frame []byte
	to    net.HardwareAddr
}

func newFakeConn() *fakeConn {
	return &fakeConn{in: make(chan any), written: make(chan written, 100), closed: make(chan struct{})}
}

// syncMarker is taken by ReadFrom without returning: once it is taken,
// the responder has handled everything fed before.
type syncMarker struct{}

func (c *fakeConn) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		select {
		case v := <-c.in:
			switch v := v.(type) {
			case syncMarker:
				continue
			case error:
				return 0, nil, v
			case []byte:
				return copy(b, v), &packet.Addr{HardwareAddr: clientMAC}, nil
			}
			panic(fmt.Sprintf("fed a %T", v))
		case <-c.closed:
			return 0, nil, net.ErrClosed
		}
	}
}

// sync returns once the responder has handled everything fed so far.
func (c *fakeConn) sync(t *testing.T) {
	t.Helper()
	c.feed(t, syncMarker{})
}

func (c *fakeConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	if c.failW != nil {
		return 0, c.failW
	}
	pa, ok := addr.(*packet.Addr)
	if !ok {
		return 0, fmt.Errorf("address %T, want *packet.Addr", addr)
	}
	c.written <- written{slices.Clone(b), slices.Clone(pa.HardwareAddr)}
	return len(b), nil
}

func (c *fakeConn) Close() error {
	c.once.Lock()
	defer c.once.Unlock()
	if !c.isShut {
		c.isShut = true
		close(c.closed)
	}
	return nil
}

func (c *fakeConn) shut() bool {
	c.once.Lock()
	defer c.once.Unlock()
	return c.isShut
}

// feed hands frame to the reader, failing the test if it is not taken.
func (c *fakeConn) feed(t *testing.T, v any) {
	t.Helper()
	select {
	case c.in <- v:
	case <-time.After(5 * time.Second):
		t.Fatal("the responder does not read")
	}
}

func (c *fakeConn) next(t *testing.T) written {
	t.Helper()
	select {
	case w := <-c.written:
		return w
	case <-time.After(5 * time.Second):
		t.Fatal("nothing written")
		return written{}
	}
}

func (c *fakeConn) none(t *testing.T) {
	t.Helper()
	select {
	case w := <-c.written:
		t.Fatalf("unexpected frame written to %s: %x", w.to, w.frame)
	default:
	}
}

// fakeGroups records joins and leaves; fail makes the next call fail.
type fakeGroups struct {
	mu     sync.Mutex
	joined map[netip.Addr]bool
	log    []string
	fail   error
	closed bool
}

func (g *fakeGroups) JoinGroup(a netip.Addr) error  { return g.do("join", a) }
func (g *fakeGroups) LeaveGroup(a netip.Addr) error { return g.do("leave", a) }
func (g *fakeGroups) do(op string, a netip.Addr) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fail != nil {
		err := g.fail
		g.fail = nil
		return err
	}
	if g.joined == nil {
		g.joined = map[netip.Addr]bool{}
	}
	if op == "join" {
		if g.joined[a] {
			return errors.New("already joined") // as the kernel: EADDRINUSE
		}
		g.joined[a] = true
	} else {
		if !g.joined[a] {
			return errors.New("not joined")
		}
		delete(g.joined, a)
	}
	g.log = append(g.log, op+" "+a.String())
	return nil
}
func (g *fakeGroups) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	return nil
}

// fakeClock replaces time.After: each call is announced on calls and
// fires when the test says.
type fakeClock struct{ calls chan fakeTimer }

type fakeTimer struct {
	d time.Duration
	c chan time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{calls: make(chan fakeTimer, 10)} }

func (f *fakeClock) after(d time.Duration) <-chan time.Time {
	c := make(chan time.Time, 1)
	f.calls <- fakeTimer{d, c}
	return c
}

func (f *fakeClock) wait(t *testing.T) fakeTimer {
	t.Helper()
	select {
	case tm := <-f.calls:
		return tm
	case <-time.After(5 * time.Second):
		t.Fatal("no timer started")
		return fakeTimer{}
	}
}

type rig struct {
	r        *Responder
	arp, ndp *fakeConn
	groups   *fakeGroups
	a        *Announcements
	clock    *fakeClock
	cancel   context.CancelFunc
	done     chan error
}

// newRig starts a Responder on eth0 over fakes; run false leaves Run to
// the test.
func newRig(t *testing.T, run bool) *rig {
	t.Helper()
	g := &rig{arp: newFakeConn(), ndp: newFakeConn(), groups: &fakeGroups{}, a: announced(), clock: newFakeClock()}
	r, err := NewResponder(ourIf, Sockets{ARP: g.arp, NDP: g.ndp, Groups: g.groups}, g.a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.after = g.clock.after
	g.r = r
	if run {
		ctx, cancel := context.WithCancel(context.Background())
		g.cancel, g.done = cancel, make(chan error, 1)
		go func() { g.done <- r.Run(ctx) }()
		t.Cleanup(func() { g.stop(t) })
	}
	return g
}

func (g *rig) stop(t *testing.T) error {
	t.Helper()
	if g.cancel == nil {
		return nil
	}
	g.cancel()
	g.cancel = nil
	select {
	case err := <-g.done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("Run does not return")
		return nil
	}
}

func TestResponderReplies(t *testing.T) {
	g := newRig(t, true)

	// An ARP request for our IP is answered to the asker.
	g.arp.feed(t, arpReq().bytes())
	w := g.arp.next(t)
	if !slices.Equal(w.to, clientMAC) || !slices.Equal(w.frame[:6], clientMAC) {
		t.Errorf("ARP reply sent to %s (frame to %x)", w.to, w.frame[:6])
	}
	if r, err := decodeARP(w.frame); err != nil || r.op != arpReply || r.spa != vip4 || !slices.Equal(r.sha, ourMAC) {
		t.Errorf("ARP reply %+v, %v", r, err)
	}

	// Requests for others' IPs, garbage and a conflict get nothing; the
	// request after them is answered, so they were all processed first.
	other := arpReq()
	other.tpa = netip.MustParseAddr("198.51.100.99")
	conflict := arpReq()
	conflict.spa = vip4
	g.arp.feed(t, other.bytes())
	g.arp.feed(t, []byte{1, 2, 3})
	g.arp.feed(t, conflict.bytes())
	g.arp.feed(t, conflict.bytes())
	g.arp.feed(t, arpReq().bytes())
	g.arp.next(t)
	g.arp.sync(t)
	g.arp.none(t)

	// A solicitation on the NDP socket is answered there.
	g.ndp.feed(t, nsReq().bytes())
	w = g.ndp.next(t)
	if !slices.Equal(w.to, clientMAC) {
		t.Errorf("NA sent to %s", w.to)
	}
	if m, err := decodeND(w.frame, icmpv6NA); err != nil || m.target != vip6 || m.dst != client6 {
		t.Errorf("NA %+v, %v", m, err)
	}
	notOurs := nsReq()
	notOurs.target = netip.MustParseAddr("2001:db8::20") // announced on eth1
	g.ndp.feed(t, notOurs.bytes())
	g.ndp.feed(t, nsReq().bytes())
	g.ndp.next(t)
	g.ndp.sync(t)
	g.ndp.none(t)

	// The announcer changes: vip4 moved away, so it is no longer
	// answered.
	g.a.Set(map[netip.Addr][]string{vip6: {"eth0"}})
	g.arp.feed(t, arpReq().bytes())
	g.ndp.feed(t, nsReq().bytes())
	g.ndp.next(t)
	g.arp.sync(t)
	g.ndp.sync(t)
	g.arp.none(t)

	if err := g.stop(t); err != nil {
		t.Errorf("Run: %v", err)
	}
	want := Stats{
		ARPRequests: 6, NSRequests: 4, ARPReplies: 2, NAReplies: 3,
		Ignored: map[Reason]uint64{ReasonNotAnnounced: 2, ReasonMalformed: 1, ReasonConflict: 2, ReasonOtherInterface: 1},
	}
	if got := g.r.Stats(); !reflect.DeepEqual(got, want) {
		t.Errorf("stats %+v, want %+v", got, want)
	}
	if !g.arp.shut() || !g.ndp.shut() || !g.groups.closed {
		t.Error("Run did not close its sockets")
	}
}

func TestResponderReadErrors(t *testing.T) {
	g := newRig(t, true)
	// A transient error (the link went down) does not stop the loop.
	g.arp.feed(t, syscall.ENETDOWN)
	g.arp.feed(t, arpReq().bytes())
	g.arp.next(t)
	g.arp.sync(t)
	if s := g.r.Stats(); s.ReadErrors != 1 || s.ARPReplies != 1 {
		t.Errorf("stats %+v", s)
	}

	// A socket closed under it ends Run with an error, and closes the
	// other socket too.
	g.arp.feed(t, fmt.Errorf("read: %w", syscall.EBADF))
	select {
	case err := <-g.done:
		if !errors.Is(err, syscall.EBADF) {
			t.Errorf("Run: %v, want EBADF", err)
		}
		g.cancel = nil
	case <-time.After(5 * time.Second):
		t.Fatal("Run goes on after its socket failed")
	}
	if !g.ndp.shut() {
		t.Error("the NDP socket is still open")
	}
}

func TestResponderWriteError(t *testing.T) {
	g := newRig(t, true)
	g.arp.failW = errors.New("no buffer space")
	g.arp.feed(t, arpReq().bytes())
	g.arp.sync(t)
	if s := g.r.Stats(); s.WriteErrors != 1 || s.ARPReplies != 0 || s.ARPRequests != 1 {
		t.Errorf("stats %+v", s)
	}
}

func TestResponderOneFamily(t *testing.T) {
	arp := newFakeConn()
	r, err := NewResponder(ourIf, Sockets{ARP: arp}, announced(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	arp.feed(t, arpReq().bytes())
	arp.next(t)
	if err := r.Gratuitous(vip6); err == nil {
		t.Error("Gratuitous for IPv6 without an NDP socket succeeded")
	}
	if err := r.SyncGroups([]netip.Addr{vip6}); err == nil {
		t.Error("SyncGroups without a group socket succeeded")
	}
	if err := r.SyncGroups([]netip.Addr{vip4}); err != nil {
		t.Errorf("SyncGroups with IPv4 only: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

func TestGratuitousBurst(t *testing.T) {
	g := newRig(t, true)

	if err := g.r.Gratuitous(vip4); err != nil {
		t.Fatal(err)
	}
	// The request and reply forms go out before Gratuitous returns.
	checkGratuitousARP(t, g.arp)
	g.arp.none(t)
	// Then at 500 ms and 2 s.
	for _, want := range []time.Duration{500 * time.Millisecond, 1500 * time.Millisecond} {
		tm := g.clock.wait(t)
		if tm.d != want {
			t.Errorf("waits %v, want %v", tm.d, want)
		}
		g.arp.none(t)
		tm.c <- time.Now()
		checkGratuitousARP(t, g.arp)
	}
	g.r.bursts.Wait()
	g.arp.none(t)

	if err := g.r.Gratuitous(vip6); err != nil {
		t.Fatal(err)
	}
	w := g.ndp.next(t)
	if !slices.Equal(w.to, MulticastMAC(allNodes)) {
		t.Errorf("NA to %s", w.to)
	}
	if m, err := decodeND(w.frame, icmpv6NA); err != nil || m.target != vip6 || m.flags != naOverride || m.dst != allNodes {
		t.Errorf("unsolicited NA %+v, %v", m, err)
	}
	g.ndp.none(t)
	g.clock.wait(t).c <- time.Now()
	g.ndp.next(t)
	g.clock.wait(t).c <- time.Now()
	g.ndp.next(t)
	g.r.bursts.Wait()

	if s := g.r.Stats(); s.GratuitousARP != 6 || s.UnsolicitedNA != 3 {
		t.Errorf("stats %+v", s)
	}
}

func checkGratuitousARP(t *testing.T, c *fakeConn) {
	t.Helper()
	for _, op := range []uint16{arpRequest, arpReply} {
		w := c.next(t)
		r, err := decodeARP(w.frame)
		if err != nil || r.op != op || r.spa != vip4 || r.tpa != vip4 || !slices.Equal(w.to, ethBroadcast) {
			t.Errorf("gratuitous ARP (op %d) %+v to %s, %v", op, r, w.to, err)
		}
	}
}

func TestGratuitousStops(t *testing.T) {
	g := newRig(t, true)

	// Not announced here: refused.
	if err := g.r.Gratuitous(netip.MustParseAddr("198.51.100.20")); err == nil {
		t.Error("Gratuitous for an IP announced on eth1 succeeded")
	}
	g.arp.none(t)

	// Lost the election mid-burst: the burst stops.
	if err := g.r.Gratuitous(vip4); err != nil {
		t.Fatal(err)
	}
	checkGratuitousARP(t, g.arp)
	g.a.Set(nil)
	g.clock.wait(t).c <- time.Now()
	g.r.bursts.Wait()
	g.arp.none(t)

	// A second takeover restarts the burst; the first stops.
	g.a.Set(map[netip.Addr][]string{vip4: {"eth0"}})
	if err := g.r.Gratuitous(vip4); err != nil {
		t.Fatal(err)
	}
	checkGratuitousARP(t, g.arp)
	first := g.clock.wait(t)
	if err := g.r.Gratuitous(vip4); err != nil {
		t.Fatal(err)
	}
	checkGratuitousARP(t, g.arp)
	second := g.clock.wait(t)
	first.c <- time.Now() // the cancelled burst has gone; nobody reads this
	second.c <- time.Now()
	checkGratuitousARP(t, g.arp)
	g.clock.wait(t) // the 2 s timer of the second burst

	// Run returning ends the pending burst.
	if err := g.stop(t); err != nil {
		t.Fatal(err)
	}
	g.r.bursts.Wait()
	g.arp.none(t)
	if err := g.r.Gratuitous(vip4); err == nil {
		t.Error("Gratuitous after Run returned succeeded")
	}
	if err := g.r.Run(context.Background()); err == nil {
		t.Error("a second Run succeeded")
	}
}

func TestGratuitousWriteError(t *testing.T) {
	g := newRig(t, true)
	g.arp.failW = errors.New("network is down")
	if err := g.r.Gratuitous(vip4); err == nil {
		t.Error("no error for failed sends")
	}
	// The burst goes on: the link may come back before the next frame.
	g.arp.failW = nil
	g.clock.wait(t).c <- time.Now()
	checkGratuitousARP(t, g.arp)
}

func TestSyncGroups(t *testing.T) {
	g := newRig(t, false)
	shared := netip.MustParseAddr("2001:db8:1::10") // same low 24 bits as vip6
	other := netip.MustParseAddr("2001:db8::1:2345")
	step := func(ips []netip.Addr, wantErr bool, wantLog ...string) {
		t.Helper()
		g.groups.log = nil
		err := g.r.SyncGroups(ips)
		if (err != nil) != wantErr {
			t.Errorf("SyncGroups(%v): %v", ips, err)
		}
		if !slices.Equal(g.groups.log, wantLog) {
			t.Errorf("SyncGroups(%v) did %q, want %q", ips, g.groups.log, wantLog)
		}
	}
	step([]netip.Addr{vip4, vip6, shared}, false, "join ff02::1:ff00:10")
	step([]netip.Addr{vip6, shared, other}, false, "join ff02::1:ff01:2345")
	step([]netip.Addr{shared, other}, false) // the group still serves shared
	step([]netip.Addr{other}, false, "leave ff02::1:ff00:10")
	g.groups.fail = errors.New("ENODEV")
	step([]netip.Addr{vip6}, true, "leave ff02::1:ff01:2345") // the join failed...
	step([]netip.Addr{vip6}, false, "join ff02::1:ff00:10")   // ...and is retried
	step(nil, false, "leave ff02::1:ff00:10")
}

func TestGroupChanges(t *testing.T) {
	g := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	join, leave := groupChanges(map[netip.Addr]bool{g("ff02::1:ff00:1"): true, g("ff02::1:ff00:2"): true},
		[]netip.Addr{g("2001:db8::3"), g("2001:db8::2"), g("198.51.100.1"), g("::ffff:198.51.100.4")})
	if !slices.Equal(join, []netip.Addr{g("ff02::1:ff00:3")}) || !slices.Equal(leave, []netip.Addr{g("ff02::1:ff00:1")}) {
		t.Errorf("join %v leave %v", join, leave)
	}
}

func TestNewResponderErrors(t *testing.T) {
	c := newFakeConn()
	for _, tt := range []struct {
		name string
		ifi  Interface
		s    Sockets
		a    Announcer
		opts Options
	}{
		{"multicast MAC", Interface{Name: "eth0", MAC: ethBroadcast}, Sockets{ARP: c}, announced(), Options{}},
		{"no MAC", Interface{Name: "eth0"}, Sockets{ARP: c}, announced(), Options{}},
		{"no sockets", ourIf, Sockets{}, announced(), Options{}},
		{"no announcer", ourIf, Sockets{ARP: c}, nil, Options{}},
		{"empty burst", ourIf, Sockets{ARP: c}, announced(), Options{Burst: []time.Duration{}}},
		{"unsorted burst", ourIf, Sockets{ARP: c}, announced(), Options{Burst: []time.Duration{0, time.Second, time.Millisecond}}},
		{"negative burst", ourIf, Sockets{ARP: c}, announced(), Options{Burst: []time.Duration{-time.Second}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewResponder(tt.ifi, tt.s, tt.a, tt.opts); err == nil {
				t.Error("no error")
			}
		})
	}
}

// A burst without a frame at 0 sends nothing before Gratuitous returns.
func TestGratuitousDelayedStart(t *testing.T) {
	arp := newFakeConn()
	r, err := NewResponder(ourIf, Sockets{ARP: arp}, announced(), Options{Burst: []time.Duration{time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock()
	r.after = clock.after
	if err := r.Gratuitous(vip4); err != nil {
		t.Fatal(err)
	}
	arp.none(t)
	tm := clock.wait(t)
	if tm.d != time.Second {
		t.Errorf("waits %v", tm.d)
	}
	tm.c <- time.Now()
	checkGratuitousARP(t, arp)
	r.bursts.Wait()
}
