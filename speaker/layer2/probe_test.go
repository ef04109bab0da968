package layer2

import (
	"context"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"
)

// A probe must be a frame herald's own responder answers, and the
// answer must be recognised as one: the two ends are checked together.
func TestProbeFrameIsAnsweredAndRecognised(t *testing.T) {
	t.Run("IPv4", func(t *testing.T) {
		f, err := ProbeFrame(vip4, ourMAC)
		if err != nil {
			t.Fatal(err)
		}
		req, err := DecodeARP(f)
		if err != nil {
			t.Fatalf("the probe does not decode as an ARP request: %v", err)
		}
		if !req.SenderIP.IsUnspecified() || req.TargetIP != vip4 || req.SenderMAC.String() != ourMAC.String() || req.Gratuitous() {
			t.Fatalf("not an RFC 5227 probe for %s: %+v", vip4, req)
		}
		ans, err := ARPReply(req, otherMAC)
		if err != nil {
			t.Fatal(err)
		}
		if mac, ok := AnswerFor(ans, vip4, ourMAC); !ok || mac.String() != otherMAC.String() {
			t.Errorf("the reply is not seen as %s's answer: %v %v", otherMAC, mac, ok)
		}
		garp, _ := GratuitousARPRequest(vip4, otherMAC)
		if mac, ok := AnswerFor(garp, vip4, ourMAC); !ok || mac.String() != otherMAC.String() {
			t.Errorf("another node's gratuitous ARP is not seen as an answer: %v %v", mac, ok)
		}
	})
	t.Run("IPv6", func(t *testing.T) {
		f, err := ProbeFrame(vip6, ourMAC)
		if err != nil {
			t.Fatal(err)
		}
		ns, err := DecodeNDP(f)
		if err != nil {
			t.Fatalf("the probe does not decode as a valid neighbor solicitation: %v", err)
		}
		if !ns.DAD() || ns.Target != vip6 || ns.SourceLinkLayer != nil || ns.Destination != SolicitedNodeMulticast(vip6) {
			t.Fatalf("not a DAD probe for %s: %+v", vip6, ns)
		}
		msg := f[ethLen+ipv6Len:]
		if got, want := uint16(msg[2])<<8|uint16(msg[3]), refChecksum(ns.Source, ns.Destination, msg); got != want {
			t.Errorf("ICMPv6 checksum %#x, want %#x", got, want)
		}
		ans, err := NeighborAdvertisement(ns, otherMAC)
		if err != nil {
			t.Fatal(err)
		}
		if mac, ok := AnswerFor(ans, vip6, ourMAC); !ok || mac.String() != otherMAC.String() {
			t.Errorf("the advertisement is not seen as %s's answer: %v %v", otherMAC, mac, ok)
		}
	})
}

func TestAnswerForIgnoresTheRest(t *testing.T) {
	mine, _ := GratuitousARPReply(vip4, ourMAC)
	otherIP, _ := GratuitousARPReply(netip.MustParseAddr("198.51.100.99"), otherMAC)
	probe, _ := ProbeFrame(vip4, otherMAC) // someone else probing, not answering
	na6, _ := UnsolicitedNA(vip6, otherMAC)
	for _, tt := range []struct {
		name  string
		frame []byte
		addr  netip.Addr
	}{
		{"our own answer", mine, vip4},
		{"an answer for another address", otherIP, vip4},
		{"a client asking for the address", arpReq().bytes(), vip4},
		{"another node's probe", probe, vip4},
		{"an IPv6 answer while asking for IPv4", na6, vip4},
		{"an IPv4 answer while asking for IPv6", otherIP, vip6},
		{"a solicitation", nsReq().bytes(), vip6},
		{"garbage", []byte{1, 2, 3}, vip4},
		{"empty", nil, vip6},
	} {
		if mac, ok := AnswerFor(tt.frame, tt.addr, ourMAC); ok {
			t.Errorf("%s taken for an answer from %s", tt.name, mac)
		}
	}
}

// probeConn is a ProbeConn whose LAN is answer: it gets every frame sent
// and returns the frames that come back, each after its delay.
type probeConn struct {
	answer func(sent int, frame []byte) (frames [][]byte, after time.Duration)

	mu       sync.Mutex
	sent     int
	inbox    chan []byte
	deadline time.Time
	// stall makes the first read return only after it, past any
	// deadline: the process descheduled on a loaded node.
	stall time.Duration
	reads int
}

func newProbeConn(answer func(int, []byte) ([][]byte, time.Duration)) *probeConn {
	return &probeConn{answer: answer, inbox: make(chan []byte, 16)}
}

func (c *probeConn) WriteTo(b []byte, _ net.Addr) (int, error) {
	c.mu.Lock()
	c.sent++
	n := c.sent
	c.mu.Unlock()
	frames, after := c.answer(n, append([]byte(nil), b...))
	time.AfterFunc(after, func() {
		for _, f := range frames {
			c.inbox <- f
		}
	})
	return len(b), nil
}

func (c *probeConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline = t
	return nil
}

func (c *probeConn) ReadFrom(b []byte) (int, net.Addr, error) {
	c.mu.Lock()
	d := time.Until(c.deadline)
	c.reads++
	if c.reads == 1 && c.stall > 0 {
		d = c.stall
	}
	c.mu.Unlock()
	select {
	case f := <-c.inbox:
		return copy(b, f), nil, nil
	case <-time.After(d):
		return 0, nil, os.ErrDeadlineExceeded
	}
}

func (c *probeConn) Close() error { return nil }

func (c *probeConn) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent
}

// answeredBy answers the probes numbered in which (all when empty) as
// herald's responder on mac would.
func answeredBy(t *testing.T, mac net.HardwareAddr, after time.Duration, which ...int) func(int, []byte) ([][]byte, time.Duration) {
	return func(n int, f []byte) ([][]byte, time.Duration) {
		if len(which) > 0 && !contains(which, n) {
			return nil, 0
		}
		req, err := DecodeARP(f)
		if err != nil {
			t.Errorf("probe %d: %v", n, err)
			return nil, 0
		}
		ans, err := ARPReply(req, mac)
		if err != nil {
			t.Error(err)
		}
		return [][]byte{ans}, after
	}
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestProbe(t *testing.T) {
	ctx := context.Background()
	const wait = 200 * time.Millisecond
	noise := func(int, []byte) ([][]byte, time.Duration) {
		mine, _ := GratuitousARPReply(vip4, ourMAC)
		return [][]byte{arpReq().bytes(), mine}, 0
	}
	for _, tt := range []struct {
		name   string
		answer func(int, []byte) ([][]byte, time.Duration)
		want   net.HardwareAddr
		sends  int
	}{
		{"answered at once", answeredBy(t, otherMAC, 0), otherMAC, 1},
		{"answered late in the wait", answeredBy(t, otherMAC, 140*time.Millisecond), otherMAC, 2},
		{"first probe lost, second answered", answeredBy(t, otherMAC, 0, 2), otherMAC, 2},
		{"silence", func(int, []byte) ([][]byte, time.Duration) { return nil, 0 }, nil, 2},
		{"only noise and our own frames", noise, nil, 2},
		{"answered after the wait", answeredBy(t, otherMAC, 2*wait), nil, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newProbeConn(tt.answer)
			start := time.Now()
			got, err := Probe(ctx, c, ourMAC, vip4, wait)
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != tt.want.String() {
				t.Errorf("answered by %v, want %v", got, tt.want)
			}
			if tt.want == nil && took < wait {
				t.Errorf("gave up after %s, before the %s wait", took, wait)
			}
			if c.count() != tt.sends {
				t.Errorf("sent %d probes, want %d", c.count(), tt.sends)
			}
		})
	}
	t.Run("context cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		c := newProbeConn(func(int, []byte) ([][]byte, time.Duration) { return nil, 0 })
		if _, err := Probe(ctx, c, ourMAC, vip4, time.Hour); err == nil {
			t.Error("a cancelled probe returned no error")
		}
	})
	t.Run("bad address", func(t *testing.T) {
		c := newProbeConn(func(int, []byte) ([][]byte, time.Duration) { return nil, 0 })
		if _, err := Probe(ctx, c, ourMAC, netip.MustParseAddr("ff02::1"), wait); err == nil || c.count() != 0 {
			t.Errorf("a multicast target: err %v, %d frames sent", err, c.count())
		}
	})
}

// TestProbeAfterAStall: when the prober is held up past its whole wait
// before its second probe (a loaded node), the second probe still goes
// out and still gets half the wait for its answer; before, one lost
// frame then decided that nobody answered.
func TestProbeAfterAStall(t *testing.T) {
	const wait = 100 * time.Millisecond
	for _, tt := range []struct {
		name   string
		answer func(int, []byte) ([][]byte, time.Duration)
		want   net.HardwareAddr
	}{
		{"first probe lost, second answered", answeredBy(t, otherMAC, 0, 2), otherMAC},
		{"silence", func(int, []byte) ([][]byte, time.Duration) { return nil, 0 }, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newProbeConn(tt.answer)
			c.stall = 2 * wait
			start := time.Now()
			got, err := Probe(context.Background(), c, ourMAC, vip4, wait)
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != tt.want.String() {
				t.Errorf("answered by %v, want %v", got, tt.want)
			}
			if c.count() != 2 {
				t.Errorf("sent %d probes, want 2", c.count())
			}
			if tt.want == nil && took < c.stall+wait/2 {
				t.Errorf("gave up %s after the start, before the second probe's %s", took, wait/2)
			}
		})
	}
}
