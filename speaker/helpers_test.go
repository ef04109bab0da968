package speaker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/speaker/layer2"
	"github.com/herald-lb/herald/speaker/layer2/election"
	"github.com/herald-lb/herald/speaker/members"
	"github.com/herald-lb/herald/speaker/view"
)

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func mac(last byte) net.HardwareAddr { return net.HardwareAddr{0x02, 0, 0, 0, 0, last} }

// fakeSource is a Source whose snapshot the test sets.
type fakeSource struct {
	mu   sync.Mutex
	snap Snapshot
}

func (f *fakeSource) Snapshot() Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.snap
	s.Services = slices.Clone(s.Services)
	return s
}

func (f *fakeSource) Service(ref view.ServiceRef) runtime.Object {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name}}
}

func (f *fakeSource) BGPPeer(string) runtime.Object { return nil }

func (f *fakeSource) set(mod func(*Snapshot)) {
	f.mu.Lock()
	mod(&f.snap)
	f.mu.Unlock()
}

// fakeLinks is a Links whose links the test sets; Watch blocks.
type fakeLinks struct {
	mu    sync.Mutex
	links []Link
	err   error
}

func (f *fakeLinks) List() ([]Link, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.links), f.err
}

func (f *fakeLinks) Watch(ctx context.Context, _ func()) error {
	<-ctx.Done()
	return nil
}

func (f *fakeLinks) set(name string, mod func(*Link)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.links {
		if f.links[i].Name == name {
			mod(&f.links[i])
		}
	}
}

// fakeResponder records what the speaker asks of it; it asks the
// Announcer, as the real one does, before a gratuitous burst.
type fakeResponder struct {
	ifi        layer2.Interface
	a          layer2.Announcer
	mu         sync.Mutex
	gratuitous []netip.Addr
	groups     []netip.Addr
	stats      layer2.Stats
	done       chan struct{}
	stopped    bool
}

func (r *fakeResponder) Gratuitous(ip netip.Addr) error {
	if !r.a.Announcing(ip, r.ifi.Name) {
		return fmt.Errorf("%s is not announced on %s", ip, r.ifi.Name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gratuitous = append(r.gratuitous, ip)
	r.stats.GratuitousARP += 2
	return nil
}

func (r *fakeResponder) SyncGroups(ips []netip.Addr) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.groups = slices.Clone(ips)
	return nil
}

func (r *fakeResponder) Stats() layer2.Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

func (r *fakeResponder) Done() <-chan struct{} { return r.done }

func (r *fakeResponder) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.stopped {
		r.stopped = true
		close(r.done)
	}
}

// die simulates a socket failing for good.
func (r *fakeResponder) die() { r.Stop() }

// takeGratuitous returns and clears the gratuitous calls.
func (r *fakeResponder) takeGratuitous() []netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.gratuitous
	r.gratuitous = nil
	return out
}

type fakeResponders struct {
	mu      sync.Mutex
	started []*fakeResponder
	fail    map[string]error
}

func (f *fakeResponders) factory(ifi layer2.Interface, a layer2.Announcer) (Responder, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail[ifi.Name]; err != nil {
		return nil, err
	}
	r := &fakeResponder{ifi: ifi, a: a, done: make(chan struct{})}
	f.started = append(f.started, r)
	return r, nil
}

// live is the running responder of iface, or nil.
func (f *fakeResponders) live(iface string) *fakeResponder {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.started) - 1; i >= 0; i-- {
		r := f.started[i]
		r.mu.Lock()
		stopped := r.stopped
		r.mu.Unlock()
		if r.ifi.Name == iface && !stopped {
			return r
		}
	}
	return nil
}

// fakeStatus is a StatusSink in memory.
type fakeStatus struct {
	mu    sync.Mutex
	anns  []view.Announcement
	other map[string][]string // node -> announcements of other nodes
	swept []string
	// node is the last NodeAnnouncement set; nodeSets counts the calls.
	node     *view.NodeSummary
	nodeSets int
}

func (f *fakeStatus) SetNode(s *view.NodeSummary) {
	f.mu.Lock()
	f.node, f.nodeSets = s, f.nodeSets+1
	f.mu.Unlock()
}

func (f *fakeStatus) Set(a []view.Announcement) {
	f.mu.Lock()
	f.anns = slices.Clone(a)
	f.mu.Unlock()
}

func (f *fakeStatus) Nodes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for n := range f.other {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (f *fakeStatus) Sweep(node string) {
	f.mu.Lock()
	f.swept = append(f.swept, node)
	delete(f.other, node)
	f.mu.Unlock()
}

// lab is a speaker on node "self" among nodes, with eth0 (LAN), cbr0
// (pod bridge) and a pod veth, pool "lan" 198.51.100.200-249 and
// 2001:db8:0:1::200-249 announced by one L2Advertisement.
type lab struct {
	t          *testing.T
	self       string
	src        *fakeSource
	links      *fakeLinks
	responders *fakeResponders
	status     *fakeStatus
	events     *record.FakeRecorder
	cluster    *members.Fake
	sp         *Speaker
}

var podCIDR = netip.MustParsePrefix("198.18.1.0/24")

func labLinks() []Link {
	return []Link{
		{Name: "lo", Index: 1, Up: true, Carrier: true, Loopback: true, Addrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8")}},
		{Name: "eth0", Index: 2, MAC: mac(2), Up: true, Carrier: true, Kind: "veth",
			Addrs: []netip.Prefix{netip.MustParsePrefix("198.51.100.11/24"), netip.MustParsePrefix("fe80::1/64")}},
		{Name: "cbr0", Index: 3, MAC: mac(3), Up: true, Carrier: true, Kind: "bridge",
			Addrs: []netip.Prefix{netip.MustParsePrefix("198.18.1.1/24")}},
		{Name: "vethab12", Index: 4, MAC: mac(4), Up: true, Carrier: true, Kind: "veth", Master: "cbr0"},
	}
}

func labConfig(ifaces ...string) *config.Config {
	return &config.Config{
		Pools: map[string]*config.Pool{"lan": {Name: "lan", Ranges: []config.Range{
			{First: addr("198.51.100.200"), Last: addr("198.51.100.249")},
			{First: addr("2001:db8:0:1::200"), Last: addr("2001:db8:0:1::249")},
		}}},
		L2Advertisements: []*config.L2Advertisement{{Name: "lan", Pools: []string{"lan"}, Interfaces: ifaces}},
	}
}

func newLab(t *testing.T, self string, nodes ...string) *lab {
	t.Helper()
	return newLabWith(t, self, nodes, nil)
}

// newLabWith is newLab with mod applied to the speaker's Deps before the
// speaker is built.
func newLabWith(t *testing.T, self string, nodes []string, mod func(*Deps)) *lab {
	t.Helper()
	l := &lab{
		t: t, self: self,
		src:        &fakeSource{},
		links:      &fakeLinks{links: labLinks()},
		responders: &fakeResponders{fail: map[string]error{}},
		status:     &fakeStatus{other: map[string][]string{}},
		events:     record.NewFakeRecorder(100),
	}
	l.src.snap = Snapshot{Config: labConfig(), PodCIDRs: []netip.Prefix{podCIDR}}
	for _, n := range nodes {
		l.src.snap.Nodes = append(l.src.snap.Nodes, view.Node{Name: n, Labels: map[string]string{"kubernetes.io/hostname": n}})
	}
	d := Deps{
		Node: self, Source: l.src, Links: l.links, NewResponder: l.responders.factory,
		Status: l.status, Events: l.events,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if mod != nil {
		mod(&d)
	}
	l.sp = New(d)
	l.cluster = members.NewFake(self, members.Meta{Interfaces: []string{"eth0"}}, l.sp.MemberEvent)
	for _, n := range nodes {
		if n != self {
			l.cluster.Set(members.Member{Name: n, Meta: members.Meta{Interfaces: []string{"eth0"}}})
		}
	}
	l.sp.SetCluster(l.cluster)
	l.sp.loop.rejoined.Store(false) // the joins above happened before any IP was held
	return l
}

// service adds a LoadBalancer Service with ips from pool lan.
func (l *lab) service(name string, local bool, ips ...string) {
	s := view.Service{Namespace: "shop", Name: name, Pool: "lan", Local: local,
		ReadyNodes: map[string]bool{}, ServingTerminatingNodes: map[string]bool{}}
	for _, ip := range ips {
		s.IPs = append(s.IPs, addr(ip))
	}
	l.src.set(func(sn *Snapshot) {
		sn.Services = slices.DeleteFunc(sn.Services, func(x view.Service) bool { return x.Name == name })
		sn.Services = append(sn.Services, s)
	})
}

// endpoints sets the nodes with ready endpoints of a Local Service.
func (l *lab) endpoints(name string, nodes ...string) {
	l.src.set(func(sn *Snapshot) {
		for i := range sn.Services {
			if sn.Services[i].Name == name {
				sn.Services[i].ReadyNodes = map[string]bool{}
				for _, n := range nodes {
					sn.Services[i].ReadyNodes[n] = true
				}
			}
		}
	})
}

// winner is the node the election picks for ip among candidates.
func winner(ip string, candidates ...string) string {
	return election.Winner(addr(ip), candidates)
}

// ipFor returns an IP of the pool whose winner among nodes is want.
func ipFor(t *testing.T, want string, nodes ...string) string {
	t.Helper()
	for i := 200; i <= 249; i++ {
		ip := fmt.Sprintf("198.51.100.%d", i)
		if winner(ip, nodes...) == want {
			return ip
		}
	}
	t.Fatalf("no IP in the pool elects %s among %v", want, nodes)
	return ""
}

// takeEvents drains the recorded events.
func (l *lab) takeEvents() []string {
	var out []string
	for {
		select {
		case e := <-l.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// publishOnce publishes pending metadata, as publishMeta does in Run.
func (s *Speaker) publishOnce() {
	select {
	case m := <-s.node.metaCh:
		s.publish(m)
	default:
	}
}
