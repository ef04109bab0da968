package speaker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	l2plan "github.com/herald-lb/herald/speaker/layer2/plan"
	"github.com/herald-lb/herald/speaker/members"
	"github.com/herald-lb/herald/speaker/partition"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeCheck is the LAN as takeover checks see it: who answers for what.
type fakeCheck struct {
	mu      sync.Mutex
	answers map[netip.Addr]net.HardwareAddr
	err     error
	calls   map[netip.Addr]int
	// skew moves the takeovers' clock forward (nanoseconds).
	skew atomic.Int64
}

func newFakeCheck() *fakeCheck {
	return &fakeCheck{answers: map[netip.Addr]net.HardwareAddr{}, calls: map[netip.Addr]int{}}
}

func (f *fakeCheck) Answering(ctx context.Context, iface string, a netip.Addr) (net.HardwareAddr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[a]++
	return f.answers[a], f.err
}

func (f *fakeCheck) answer(a netip.Addr, m net.HardwareAddr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m == nil {
		delete(f.answers, a)
	} else {
		f.answers[a] = m
	}
}

func (f *fakeCheck) called(a netip.Addr) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[a]
}

// takeoverLab is node1 of three with the check on, and an IP node2 wins
// among all three and node1 wins once node2 is gone.
func takeoverLab(t *testing.T) (*lab, *fakeCheck, netip.Addr) {
	t.Helper()
	nodes := []string{"node1", "node2", "node3"}
	chk := newFakeCheck()
	l := newLabWith(t, "node1", nodes, func(d *Deps) {
		d.Takeover = chk
		d.TakeoverClock = func() time.Time { return time.Now().Add(time.Duration(chk.skew.Load())) }
	})
	t.Cleanup(l.sp.takeovers.Stop)
	var ip string
	for i := 200; i <= 249 && ip == ""; i++ {
		c := fmt.Sprintf("198.51.100.%d", i)
		if winner(c, nodes...) == "node2" && winner(c, "node1", "node3") == "node1" {
			ip = c
		}
	}
	if ip == "" {
		t.Fatal("no IP in the pool goes from node2 to node1")
	}
	l.service("web", false, ip)
	l.sp.Sync()
	if got, _ := l.sp.State().Lookup(addr(ip)); got.Winner != "node2" {
		t.Fatalf("%s won by %q, want node2", ip, got.Winner)
	}
	l.responders.live("eth0").takeGratuitous()
	return l, chk, addr(ip)
}

// syncUntil syncs until cond holds (the checks run in goroutines and
// trigger a sync when done) or fails after 5 s.
func syncUntil(t *testing.T, l *lab, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not %s after 5s", what)
		}
		time.Sleep(10 * time.Millisecond)
		l.sp.Sync()
	}
}

func answered(l *lab, a netip.Addr) bool { return slices.Contains(l.sp.Announcements().On("eth0"), a) }

// TestTakeoverWaitsForFormerWinner: node2 is declared dead but still
// answers on the LAN (the other side of a memberlist partition); node1
// wins its address and answers only once node2 has stopped, with the
// gratuitous burst then, and nobody else takes it meanwhile.
func TestTakeoverWaitsForFormerWinner(t *testing.T) {
	l, chk, a := takeoverLab(t)
	chk.answer(a, mac(0x22))
	l.cluster.Remove("node2")
	l.sp.Sync()
	ip, _ := l.sp.State().Lookup(a)
	if ip.Winner != "node1" || ip.Reason != l2plan.ReasonContested || !slices.Equal(ip.Checking, []string{"eth0"}) {
		t.Fatalf("right after node2's death: %+v", ip)
	}
	if answered(l, a) {
		t.Fatal("node1 answers while node2 may still")
	}
	l.status.mu.Lock()
	anns := slices.Clone(l.status.anns)
	l.status.mu.Unlock()
	for _, an := range anns {
		if slices.Contains(an.IPs, a) {
			t.Errorf("published as announced while checking: %+v", an)
		}
	}
	syncUntil(t, l, "checked twice", func() bool { return chk.called(a) >= 2 })
	l.sp.Sync()
	if answered(l, a) || len(l.responders.live("eth0").takeGratuitous()) != 0 {
		t.Fatal("node1 answers although node2 still does")
	}
	if v := testutil.ToFloat64(l.sp.d.Metrics.contested); v != 1 {
		t.Errorf("herald_speaker_takeovers_checking %v, want 1", v)
	}
	chk.answer(a, nil) // node2 found itself a minority and stopped
	syncUntil(t, l, "answered after node2 stopped", func() bool { return answered(l, a) })
	if g := l.responders.live("eth0").takeGratuitous(); !slices.Contains(g, a) {
		t.Errorf("no gratuitous announcement of %s on taking it over: %v", a, g)
	}
	if v := takeoverCount(l, "waited"); v != 1 {
		t.Errorf("takeovers waited: %v, want 1", v)
	}
	if v := testutil.ToFloat64(l.sp.d.Metrics.contested); v != 0 {
		t.Errorf("herald_speaker_takeovers_checking %v after the takeover", v)
	}
	// Done: later syncs neither check again nor drop the address.
	n := chk.called(a)
	for range 3 {
		l.sp.Sync()
	}
	if chk.called(a) != n || !answered(l, a) {
		t.Errorf("after the takeover: %d more checks, answered %v", chk.called(a)-n, answered(l, a))
	}
}

// TestTakeoverAfterOneCheck: a node that really died answers nothing, so
// the address is answered after one check; so it is when the check
// cannot run (no socket), which must not keep the address dark.
func TestTakeoverAfterOneCheck(t *testing.T) {
	for _, tt := range []struct {
		outcome string
		err     error
	}{{"clear", nil}, {"unchecked", errors.New("no socket")}} {
		t.Run(tt.outcome, func(t *testing.T) {
			l, chk, a := takeoverLab(t)
			chk.err = tt.err
			l.cluster.Remove("node2")
			l.sp.Sync()
			syncUntil(t, l, "answered", func() bool { return answered(l, a) })
			if n := chk.called(a); n != 1 {
				t.Errorf("%d checks, want 1", n)
			}
			if v := takeoverCount(l, tt.outcome); v != 1 {
				t.Errorf("takeovers %s: %v, want 1", tt.outcome, v)
			}
		})
	}
}

// TestTakeoverAfterGracefulLeaveIsImmediate: a speaker that left said so
// and stopped answering first; nothing to check.
func TestTakeoverAfterGracefulLeaveIsImmediate(t *testing.T) {
	l, chk, a := takeoverLab(t)
	chk.answer(a, mac(0x22))
	l.cluster.Leave("node2")
	l.sp.Sync()
	if !answered(l, a) || chk.called(a) != 0 {
		t.Errorf("after a graceful leave: answered %v, %d checks", answered(l, a), chk.called(a))
	}
}

// TestTakeoverForcedAfterLongestWait: an answer that outlasts
// partition.MaxTakeoverHold does not keep the address dark here for good.
func TestTakeoverForcedAfterLongestWait(t *testing.T) {
	l, chk, a := takeoverLab(t)
	chk.answer(a, mac(0x22))
	l.cluster.Remove("node2")
	l.sp.Sync()
	syncUntil(t, l, "checked", func() bool { return chk.called(a) >= 1 })
	chk.skew.Store(int64(partition.MaxTakeoverHold))
	l.sp.Sync()
	if !answered(l, a) {
		t.Fatal("still not answered after the longest wait")
	}
	if v := takeoverCount(l, "forced"); v != 1 {
		t.Errorf("takeovers forced: %v, want 1", v)
	}
}

// TestTakeoverDroppedWhenLost: node2 comes back while node1 checks, and
// wins again: the check stops and node1 answers nothing.
func TestTakeoverDroppedWhenLost(t *testing.T) {
	l, chk, a := takeoverLab(t)
	chk.answer(a, mac(0x22))
	l.cluster.Remove("node2")
	l.sp.Sync()
	l.cluster.Set(members.Member{Name: "node2", Meta: members.Meta{Interfaces: []string{"eth0"}}})
	l.sp.Sync()
	if ip, _ := l.sp.State().Lookup(a); ip.Winner != "node2" || answered(l, a) {
		t.Fatalf("node2 back: %+v, answered here %v", ip, answered(l, a))
	}
	n := l.sp.takeovers.Len()
	if n != 0 {
		t.Errorf("%d takeovers left after node2 won the address back", n)
	}
}

func takeoverCount(l *lab, outcome string) float64 {
	return testutil.ToFloat64(l.sp.d.Metrics.takeovers.WithLabelValues(outcome))
}
