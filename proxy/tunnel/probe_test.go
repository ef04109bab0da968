package tunnel

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
)

// TestProberDownAndBack: a peer that stops answering is down after
// ProbeRounds rounds, not before; it is up again at its first answer; a
// peer that leaves is forgotten; every change is told once.
func TestProberDownAndBack(t *testing.T) {
	p := NewProber("herald-dsr", DefaultPort, nil)
	var mu sync.Mutex
	silent := map[netip.Addr]bool{}
	p.exchange = func(_ context.Context, _, peer netip.Addr) error {
		mu.Lock()
		defer mu.Unlock()
		if silent[peer] {
			return errors.New("timeout")
		}
		return nil
	}
	changes := 0
	p.OnChange = func() { changes++ }
	a, b := ProbeAddr(netip.MustParseAddr("192.0.2.12")), ProbeAddr(netip.MustParseAddr("192.0.2.13"))
	p.SetPeers(ProbeAddr(netip.MustParseAddr("192.0.2.11")), map[string]netip.Addr{"node2": a, "node3": b})
	ctx := context.Background()
	p.Round(ctx)
	if len(p.Down()) != 0 || changes != 0 {
		t.Fatalf("all answer: down %v, changes %d", p.Down(), changes)
	}
	mu.Lock()
	silent[b] = true
	mu.Unlock()
	for i := range ProbeRounds {
		if p.Down()["node3"] {
			t.Fatalf("node3 down after %d failed rounds, want %d", i, ProbeRounds)
		}
		p.Round(ctx)
	}
	if d, ok := p.Down()["node3"]; !ok || !d || len(p.Down()) != 1 || changes != 1 {
		t.Fatalf("after %d silent rounds: down %v, changes %d", ProbeRounds, d, changes)
	}
	p.Round(ctx)
	if changes != 1 {
		t.Errorf("a peer still down told again: %d changes", changes)
	}
	mu.Lock()
	silent[b] = false
	mu.Unlock()
	p.Round(ctx)
	if _, down := p.Down()["node3"]; down || changes != 2 {
		t.Errorf("node3 answers again: down %v, changes %d", p.Down(), changes)
	}
	// A peer that never answered is down as such.
	c := ProbeAddr(netip.MustParseAddr("192.0.2.14"))
	mu.Lock()
	silent[c] = true
	mu.Unlock()
	p.SetPeers(ProbeAddr(netip.MustParseAddr("192.0.2.11")), map[string]netip.Addr{"node2": a, "node3": b, "node4": c})
	for range ProbeRounds {
		p.Round(ctx)
	}
	if answered, down := p.Down()["node4"]; !down || answered {
		t.Errorf("node4 never answered: %v", p.Down())
	}
	mu.Lock()
	silent[a] = true
	mu.Unlock()
	for range ProbeRounds {
		p.Round(ctx)
	}
	p.SetPeers(ProbeAddr(netip.MustParseAddr("192.0.2.11")), map[string]netip.Addr{"node3": b})
	if _, down := p.Down()["node2"]; down {
		t.Errorf("node2 left, still down: %v", p.Down())
	}
}

func TestProbeAddr(t *testing.T) {
	a := ProbeAddr(netip.MustParseAddr("192.0.2.3"))
	if a.String() != "fe80::4852:1:c000:203" || !a.IsLinkLocalUnicast() {
		t.Errorf("IPv4: %s", a)
	}
	b := ProbeAddr(netip.MustParseAddr("2001:db8::3"))
	if !b.IsLinkLocalUnicast() || b == ProbeAddr(netip.MustParseAddr("2001:db8::4")) {
		t.Errorf("IPv6: %s", b)
	}
	m := NewManager(Config{}, &fakeKernel{})
	if _, err := m.Sync(netip.MustParseAddr("192.0.2.11"), map[string][]netip.Addr{"node2": addrs("192.0.2.12")}); err != nil {
		t.Fatal(err)
	}
	self, peers := m.Probes()
	if self != ProbeAddr(netip.MustParseAddr("192.0.2.11")) || peers["node2"] != ProbeAddr(netip.MustParseAddr("192.0.2.12")) {
		t.Errorf("probes %s %v", self, peers)
	}
}
