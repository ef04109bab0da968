package speaker

import (
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"testing"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/speaker/bgp"
	"github.com/herald-lb/herald/speaker/members"
	"github.com/herald-lb/herald/speaker/view"
)

// Issue #19: what one speaker's sync costs with 10,000 Services as the
// cluster grows. The sync is the real one (Speaker.Sync: election or BGP
// plan, responders, status hand-off) over fakes for the API, the links,
// memberlist and the router.

const scaleServices = 10000

// scaleSizes are the cluster sizes measured; 1,000 members only with
// HERALD_BENCH_SCALE=1, as it takes minutes at -benchtime 1x.
func scaleSizes() []int {
	if os.Getenv("HERALD_BENCH_SCALE") == "1" {
		return []int{10, 100, 1000}
	}
	return []int{10, 100}
}

func scaleNode(i int) string { return fmt.Sprintf("node-%04d", i) }

// scaleIP is the i-th address of 198.18.0.0/15.
func scaleIP(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18 + byte(i>>16), byte(i >> 8), byte(i)})
}

// Traffic policies of the simulated Services.
const (
	policyMixed   = "mixed" // every other Service Local
	policyCluster = "cluster"
	policyLocal   = "local"
)

// scaleSnapshot is n nodes and svcs Services, one address each, in one
// pool announced over layer 2 or BGP, each with ready endpoints on
// three nodes.
func scaleSnapshot(n, svcs int, useBGP bool, policy string) Snapshot {
	pool := "lan"
	cfg := &config.Config{Pools: map[string]*config.Pool{pool: {Name: pool, Ranges: []config.Range{
		{First: addr("198.18.0.0"), Last: addr("198.19.255.255")}}}}}
	if useBGP {
		cfg.BGPAdvertisements = []*config.BGPAdvertisement{{Name: "bgp", Pools: []string{pool}}}
		cfg.Peers = map[string]*config.Peer{"router": {Name: "router", MyASN: 64513, PeerASN: 64512, Address: addr("198.51.100.1"), Port: 179}}
	} else {
		cfg.L2Advertisements = []*config.L2Advertisement{{Name: "lan", Pools: []string{pool}}}
	}
	snap := Snapshot{Config: cfg, PodCIDRs: []netip.Prefix{podCIDR}, NodeIPs: []netip.Addr{addr("198.51.100.11")}}
	for i := range n {
		name := scaleNode(i)
		snap.Nodes = append(snap.Nodes, view.Node{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}})
	}
	for i := range svcs {
		s := view.Service{Namespace: "ns", Name: fmt.Sprintf("svc-%05d", i), Pool: pool, IPs: []netip.Addr{scaleIP(i + 1)},
			ReadyNodes: map[string]bool{}, ServingTerminatingNodes: map[string]bool{}}
		for k := range 3 {
			s.ReadyNodes[scaleNode((i+k)%n)] = true
		}
		s.Local = policy == policyLocal || policy == policyMixed && i%2 == 1
		snap.Services = append(snap.Services, s)
	}
	return snap
}

// scaleWorld is one speaker among n live nodes over a snapshot.
type scaleWorld struct {
	src     *fakeSource
	cluster *members.Fake
	sp      *Speaker
}

// newScaleSpeaker is the speaker of node self, every node live, writing
// to status.
func newScaleSpeaker(src *fakeSource, self string, n int, useBGP bool, status StatusSink) *scaleWorld {
	d := Deps{
		Node: self, Source: src, Links: &fakeLinks{links: labLinks()},
		NewResponder: (&fakeResponders{fail: map[string]error{}}).factory,
		Status:       status,
		Log:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if useBGP {
		d.BGP = bgp.NewManager(bgp.NewFake(), nil)
	}
	w := &scaleWorld{src: src, sp: New(d)}
	w.cluster = members.NewFake(self, members.Meta{Interfaces: []string{"eth0"}}, func(members.Event) {})
	for i := range n {
		if name := scaleNode(i); name != self {
			w.cluster.Set(members.Member{Name: name, Meta: members.Meta{Interfaces: []string{"eth0"}}})
		}
	}
	w.sp.SetCluster(w.cluster)
	return w
}

// newScaleWorld is node-0000's speaker with scaleServices Services, every
// other one Local.
func newScaleWorld(b *testing.B, n int, useBGP bool) *scaleWorld {
	b.Helper()
	src := &fakeSource{snap: scaleSnapshot(n, scaleServices, useBGP, policyMixed)}
	return newScaleSpeaker(src, scaleNode(0), n, useBGP, &fakeStatus{other: map[string][]string{}})
}

// BenchmarkSyncScale is one speaker's sync with 10,000 Services over N
// nodes: the first (full) sync, a sync with nothing changed, and syncs
// after one change (a Local Service's endpoint moving, a node leaving, a
// node joining). Every sync recomputes the whole plan, ranking again only
// the addresses whose winner left (plan.Input.Previous).
func BenchmarkSyncScale(b *testing.B) {
	for _, proto := range []string{"layer2", "bgp"} {
		for _, n := range scaleSizes() {
			prefix := fmt.Sprintf("%s/nodes=%d", proto, n)
			b.Run(prefix+"/first", func(b *testing.B) {
				b.ReportAllocs()
				for range b.N {
					b.StopTimer()
					w := newScaleWorld(b, n, proto == "bgp")
					b.StartTimer()
					w.sp.Sync()
				}
			})
			w := newScaleWorld(b, n, proto == "bgp")
			w.sp.Sync()
			b.Run(prefix+"/unchanged", func(b *testing.B) {
				b.ReportAllocs()
				for range b.N {
					w.sp.Sync()
				}
			})
			b.Run(prefix+"/endpoint", func(b *testing.B) {
				b.ReportAllocs()
				for i := range b.N {
					// Service 1 is Local: its endpoint on a node moves.
					w.src.set(func(sn *Snapshot) {
						sn.Services[1].ReadyNodes = map[string]bool{scaleNode(1): true, scaleNode(2): true, scaleNode((3 + i%2) % n): true}
					})
					w.sp.Sync()
				}
			})
			leaver := members.Member{Name: scaleNode(n / 2), Meta: members.Meta{Interfaces: []string{"eth0"}}}
			b.Run(prefix+"/leave", func(b *testing.B) {
				b.ReportAllocs()
				for range b.N {
					w.cluster.Remove(leaver.Name)
					w.sp.Sync()
					b.StopTimer()
					w.cluster.Set(leaver)
					w.sp.Sync()
					b.StartTimer()
				}
			})
			b.Run(prefix+"/join", func(b *testing.B) {
				b.ReportAllocs()
				for range b.N {
					b.StopTimer()
					w.cluster.Remove(leaver.Name)
					w.sp.Sync()
					b.StartTimer()
					w.cluster.Set(leaver)
					w.sp.Sync()
				}
			})
		}
	}
}
