package proxy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/herald-lb/herald/proxy/nft"
	"github.com/herald-lb/herald/proxy/rules"
)

// fakeTunnel stands for tunnel.Manager: every peer with an address
// gets mark (index+1)<<16 by name order of first sight.
type fakeTunnel struct {
	syncs int
	local netip.Addr
	ids   map[string]uint32
	fail  error
}

func (f *fakeTunnel) Sync(local netip.Addr, peers map[string][]netip.Addr) (map[string]uint32, error) {
	f.syncs++
	f.local = local
	if f.ids == nil {
		f.ids = map[string]uint32{}
	}
	out := map[string]uint32{}
	for name := range peers {
		if _, ok := f.ids[name]; !ok {
			f.ids[name] = uint32(len(f.ids)+1) << 16
		}
		out[name] = f.ids[name]
	}
	return out, f.fail
}

func (f *fakeTunnel) Probes() (netip.Addr, map[string]netip.Addr) {
	peers := map[string]netip.Addr{}
	for n := range f.ids {
		peers[n] = netip.AddrFrom4([4]byte{169, 254, 1, byte(f.ids[n] >> 16)})
	}
	return f.local, peers
}

// fakeProber reports the peers in down as down.
type fakeProber struct {
	peers map[string]netip.Addr
	down  map[string]bool
}

func (f *fakeProber) SetPeers(_ netip.Addr, peers map[string]netip.Addr) { f.peers = peers }
func (f *fakeProber) Down() map[string]bool                              { return f.down }

func dsrService() *corev1.Service {
	s := clusterIPService("shop", "web", "10.96.0.10")
	s.Spec.Type = corev1.ServiceTypeLoadBalancer
	s.Annotations = map[string]string{AnnotationForwarding: "dsr"}
	s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.20"}}
	return s
}

// TestSyncDSR: with --dsr the syncer makes the tunnel from the node's
// primary IPv4 address to the peers the tracker knows, renders an
// annotated Service's DSR chains with their marks, syncs the tunnel again
// (and fully) only when the peers change, and reports a Service whose
// endpoint's node has no tunnel.
func TestSyncDSR(t *testing.T) {
	e, k := newNFTEnv(t)
	tun := &fakeTunnel{}
	pr := &fakeProber{down: map[string]bool{}}
	e.s.cfg.DSR = &DSRSetup{Tunnel: tun, Device: "herald-dsr", Seed: DSRSeed("kube-system-uid"), MarkMask: 0x00ff0000, Prober: pr}
	var reported []string
	e.s.Report = func(p rules.Problem) { reported = append(reported, p.Error()) }
	e.tracker.UpdateService(dsrService())
	e.tracker.UpdateSlice(slice("shop", "web", "web-1", 8080, "http", corev1.ProtocolTCP,
		ep{"10.244.1.20", testNode, true}, ep{"10.244.2.20", otherNode, true}))
	e.tracker.UpdatePeer(node(otherNode, "192.0.2.12"))
	e.tracker.UpdatePeer(node(testNode, testNodeIP.String())) // itself: not a peer
	res := e.sync(false)
	if f := res.Families[0]; f.Err != nil || tun.syncs != 1 || tun.local != testNodeIP {
		t.Fatalf("first sync: %+v, tunnel synced %d times from %s", f, tun.syncs, tun.local)
	}
	text := k.table.Text()
	for _, want := range []string{rules.NFTChainDSRPrerouting, "dsrm-", "0x00010000", "seed 0x"} {
		if !strings.Contains(text, want) {
			t.Errorf("the table lacks %q", want)
		}
	}
	if len(reported) != 0 {
		t.Errorf("reported %v", reported)
	}
	// An endpoint change alone does not touch the tunnel.
	e.tracker.UpdateSlice(slice("shop", "web", "web-1", 8080, "http", corev1.ProtocolTCP,
		ep{"10.244.1.20", testNode, true}, ep{"10.244.2.20", otherNode, true}, ep{"10.244.2.21", otherNode, true}))
	if res := e.sync(false); tun.syncs != 1 || res.Families[0].Err != nil {
		t.Errorf("an endpoint change synced the tunnel: %d", tun.syncs)
	}
	// A third node with an endpoint but no Node object yet: refused,
	// reported; once it shows up, tunneled, in a full sync.
	e.tracker.UpdateSlice(slice("shop", "web", "web-1", 8080, "http", corev1.ProtocolTCP,
		ep{"10.244.1.20", testNode, true}, ep{"10.244.3.20", "node3", true}))
	e.sync(false)
	if !strings.Contains(strings.Join(reported, "\n"), "no working tunnel to node node3") {
		t.Errorf("reported %v, want node3 named", reported)
	}
	if strings.Contains(k.table.Text(), "dsrm-") {
		t.Error("DSR chains for a Service it was refused")
	}
	e.tracker.UpdatePeer(node("node3", "192.0.2.13"))
	res = e.sync(false)
	if f := res.Families[0]; !f.Full || f.Reason != "the nodes the DSR tunnel reaches changed" || tun.syncs != 2 {
		t.Errorf("a new peer: %+v, tunnel synced %d times", f, tun.syncs)
	}
	if !strings.Contains(k.table.Text(), "0x00020000") {
		t.Error("node3's mark is not in the table")
	}
	// A failing tunnel: retried, the Services it reaches keep DSR.
	tun.fail = errors.New("boom")
	e.tracker.DeletePeer(otherNode)
	res = e.sync(false)
	if !res.Retry {
		t.Error("a failed tunnel sync is not retried")
	}
	tun.fail = nil
	e.sync(false)
	if tun.syncs != 4 {
		t.Errorf("the retry did not sync the tunnel: %d", tun.syncs)
	}
	// The periodic sync checks the tunnel (a device deleted by hand).
	e.sync(true)
	if tun.syncs != 5 {
		t.Errorf("the periodic sync did not check the tunnel: %d", tun.syncs)
	}
	if len(pr.peers) == 0 {
		t.Error("the prober was not given the peers")
	}
	// node3 never answered the probes (no herald there, a blocked
	// tunnel): its endpoint's Service keeps SNAT, reported, in a full
	// sync. It answered before and stopped (a failed node): its endpoint
	// is left out of the table, reported, the Service keeps DSR. It
	// answers again: DSR with every endpoint.
	reported = nil
	pr.down["node3"] = false
	res = e.sync(false)
	if f := res.Families[0]; !f.Full || strings.Contains(k.table.Text(), "dsrm-") || !strings.Contains(strings.Join(reported, "\n"), "no working tunnel to node node3") {
		t.Errorf("node3 never answered: %+v, reported %v", f, reported)
	}
	reported = nil
	pr.down["node3"] = true
	res = e.sync(false)
	if f := res.Families[0]; !f.Full || !strings.Contains(k.table.Text(), "dsrm-") || strings.Contains(k.table.Text(), "0x00020000") ||
		!strings.Contains(strings.Join(reported, "\n"), "endpoints 10.244.3.20:8080 on node3 left out of the table") {
		t.Errorf("node3 stopped answering: %+v, reported %v", f, reported)
	}
	delete(pr.down, "node3")
	if res = e.sync(false); !res.Families[0].Full || !strings.Contains(k.table.Text(), "0x00020000") {
		t.Errorf("node3 back: %+v", res.Families[0])
	}
	if k.table.Chain(rules.NFTChainDSRPrerouting) == nil || len(k.applied) == 0 || k.applied[0].Mode != nft.Recreate {
		t.Error("the table lost the DSR chains")
	}
}
