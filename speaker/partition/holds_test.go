package partition

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/herald-lb/herald/speaker/view"
)

// TestJudge covers a takeover check's transitions: from checking to
// answered (clear, waited, unchecked), or checking on.
func TestJudge(t *testing.T) {
	mac := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x22}
	for _, tc := range []struct {
		name    string
		mac     net.HardwareAddr
		err     error
		answers int
		want    Outcome
	}{
		{"nobody answers at the first check", nil, nil, 0, Clear},
		{"the former winner stopped answering", nil, nil, 3, Waited},
		{"the former winner answers: check again", mac, nil, 0, ""},
		{"it still answers: check again", mac, nil, 5, ""},
		{"the check cannot run: answer", nil, errors.New("no socket"), 0, Unchecked},
		{"the check fails later: answer", nil, errors.New("no socket"), 2, Unchecked},
	} {
		if got := judge(tc.mac, tc.err, tc.answers); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// fakeGate is a proxy that has programmed some VIPs and handles others.
type fakeGate struct{ programmed, handled map[netip.Addr]bool }

func (g fakeGate) Programmed(ip netip.Addr) (bool, bool) { return g.handled[ip], g.programmed[ip] }

// TestProxyWait: an address the proxy handles waits until it is
// programmed, at most the bound, and not at all when another proxy
// serves its Service or this one does not handle it.
func TestProxyWait(t *testing.T) {
	a, b, c := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2"), netip.MustParseAddr("198.51.100.3")
	g := fakeGate{programmed: map[netip.Addr]bool{}, handled: map[netip.Addr]bool{a: true, b: true}}
	svcs := []view.Service{
		{Name: "web", IPs: []netip.Addr{a, c}},
		{Name: "other", IPs: []netip.Addr{b}, Labels: map[string]string{labelServiceProxyName: "someone-else"}},
	}
	p := NewProxyWait(g, time.Second, func() {}, nil)
	t0 := time.Unix(1000, 0)
	if got := p.Unprogrammed(svcs, t0); len(got) != 1 || !got[a] {
		t.Fatalf("at first: waiting for %v, want only %s", got, a)
	}
	if got := p.Unprogrammed(svcs, t0.Add(999*time.Millisecond)); !got[a] {
		t.Errorf("within the bound: not waiting for %s", a)
	}
	if got := p.Unprogrammed(svcs, t0.Add(time.Second)); got[a] {
		t.Errorf("after the bound: still waiting for %s", a)
	}
	g.programmed[a] = true
	p.Unprogrammed(svcs, t0.Add(2*time.Second))
	g.programmed[a] = false // unprogrammed again (a new address, say): a new wait
	if got := p.Unprogrammed(svcs, t0.Add(3*time.Second)); !got[a] {
		t.Errorf("a new wait after programmed: not waiting for %s", a)
	}
	var none *ProxyWait
	if got := none.Unprogrammed(svcs, t0); got != nil {
		t.Errorf("no proxy: waiting for %v", got)
	}
}
