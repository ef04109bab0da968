package speaker

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/speaker/bgp"
	"github.com/herald-lb/herald/speaker/view"
)

// bgpLab is the layer-2 lab plus pool "bgp" (203.0.113.128/25) advertised
// over BGP to peer "router" with community 64512:7, on a fake router.
func bgpLab(t *testing.T, self string, nodes ...string) (*lab, *bgp.Fake) {
	t.Helper()
	f := bgp.NewFake()
	l := newLabWith(t, self, nodes, func(d *Deps) { d.BGP = bgp.NewManager(f, nil) })
	cfg := labConfig()
	cfg.Pools["bgp"] = &config.Pool{Name: "bgp", Ranges: []config.Range{{First: addr("203.0.113.128"), Last: addr("203.0.113.255")}}}
	cfg.BGPAdvertisements = []*config.BGPAdvertisement{{Name: "bgp", Pools: []string{"bgp"}, Communities: []config.Community{{Standard: 64512<<16 | 7}}}}
	cfg.Peers = map[string]*config.Peer{"router": {Name: "router", MyASN: 64513, PeerASN: 64512, Address: addr("198.51.100.1"), Port: 179}}
	l.src.set(func(sn *Snapshot) {
		sn.Config = cfg
		sn.NodeIPs = []netip.Addr{addr("198.51.100.11")}
	})
	return l, f
}

func (l *lab) bgpService(name string, local bool, ready []string, ips ...string) {
	s := view.Service{Namespace: "shop", Name: name, Pool: "bgp", Local: local, ReadyNodes: map[string]bool{}}
	for _, n := range ready {
		s.ReadyNodes[n] = true
	}
	for _, ip := range ips {
		s.IPs = append(s.IPs, addr(ip))
	}
	l.src.set(func(sn *Snapshot) {
		sn.Services = slices.DeleteFunc(sn.Services, func(x view.Service) bool { return x.Name == name })
		sn.Services = append(sn.Services, s)
	})
}

func prefixesOf(f *bgp.Fake) []string {
	var out []string
	for _, r := range f.Routes(addr("198.51.100.1")) {
		out = append(out, r.Prefix.String())
	}
	return out
}

func TestBGPAdvertisesFollowingEndpoints(t *testing.T) {
	l, f := bgpLab(t, "node1", "node1", "node2")
	l.bgpService("web", true, []string{"node1"}, "203.0.113.130")
	l.sp.Sync()
	if got := prefixesOf(f); !slices.Equal(got, []string{"203.0.113.130/32"}) {
		t.Fatalf("routes %v, want the /32", got)
	}
	if r := f.Routes(addr("198.51.100.1"))[0]; !slices.Equal(r.Communities, []uint32{64512<<16 | 7}) {
		t.Errorf("communities %v", r.Communities)
	}
	want := view.Announcement{Service: view.ServiceRef{Namespace: "shop", Name: "web"}, Node: "node1", Protocol: "bgp",
		Peers: []string{"router"}, IPs: []netip.Addr{addr("203.0.113.130")}}
	if len(l.status.anns) != 1 || !l.status.anns[0].Equal(want) {
		t.Errorf("status %+v, want %+v", l.status.anns, want)
	}
	ev := l.takeEvents()
	if len(ev) != 1 || ev[0] != "Normal Advertising advertising 203.0.113.130 from node node1 over BGP to router" {
		t.Errorf("events %q", ev)
	}
	// The same inputs: no call to the router, no event.
	f.TakeCalls()
	l.sp.Sync()
	if c := f.TakeCalls(); len(c) != 0 {
		t.Errorf("calls on an unchanged sync: %q", c)
	}
	if ev := l.takeEvents(); len(ev) != 0 {
		t.Errorf("events on an unchanged sync: %q", ev)
	}
	// The pod moves to node2: node1 withdraws, the session stays.
	l.bgpService("web", true, []string{"node2"}, "203.0.113.130")
	l.sp.Sync()
	if got := prefixesOf(f); len(got) != 0 {
		t.Errorf("routes %v after the local endpoint left", got)
	}
	if c := f.TakeCalls(); !slices.Equal(c, []string{"routes router"}) {
		t.Errorf("calls %q, want only the route update", c)
	}
	if len(l.status.anns) != 0 {
		t.Errorf("status %+v", l.status.anns)
	}
	if ev := l.takeEvents(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Normal StoppedAdvertising stopped advertising 203.0.113.130 from node node1") {
		t.Errorf("events %q", ev)
	}
}

func TestBGPAndLayer2Together(t *testing.T) {
	l, f := bgpLab(t, "node1", "node1")
	l.service("lan", false, "198.51.100.200")
	l.bgpService("web", false, []string{"node1"}, "203.0.113.130")
	l.sp.Sync()
	if got := prefixesOf(f); !slices.Equal(got, []string{"203.0.113.130/32"}) {
		t.Errorf("routes %v: the layer-2 pool must not be advertised over BGP", got)
	}
	var protos []string
	for _, a := range l.status.anns {
		protos = append(protos, a.Service.Name+"/"+a.Protocol)
	}
	// web (Cluster) is published by the node's summary.
	if !slices.Equal(protos, []string{"lan/layer2"}) {
		t.Errorf("announcements %v", protos)
	}
	if s := l.status.node; s == nil || len(s.Advertisements) != 1 || !slices.Equal(s.Advertisements[0].IPv4Peers, []string{"router"}) {
		t.Errorf("node summary %+v", s)
	}
	if !l.sp.Announcements().AnnouncingAnywhere(addr("198.51.100.200")) || l.sp.Announcements().AnnouncingAnywhere(addr("203.0.113.130")) {
		t.Error("ARP answered for the wrong IPs")
	}
}

func TestBGPFailureIsRetriedAndNotAnnounced(t *testing.T) {
	l, f := bgpLab(t, "node1", "node1")
	l.bgpService("web", false, []string{"node1"}, "203.0.113.130")
	f.Fail = "add router"
	l.sp.Sync()
	peers := func() []string {
		if s := l.status.node; s != nil && len(s.Advertisements) == 1 {
			return s.Advertisements[0].IPv4Peers
		}
		return nil
	}
	if len(l.status.anns) != 0 || len(peers()) != 0 {
		t.Errorf("announced %+v, summary %+v over a session that failed to open", l.status.anns, l.status.node)
	}
	f.Fail = ""
	l.sp.Sync()
	if !slices.Equal(peers(), []string{"router"}) || len(prefixesOf(f)) != 1 {
		t.Errorf("after the retry: summary %+v, routes %v", l.status.node, prefixesOf(f))
	}
}

func TestBGPSessionWatcherMetricsAndEvents(t *testing.T) {
	l, f := bgpLab(t, "node1", "node1")
	l.bgpService("web", false, []string{"node1"}, "203.0.113.130")
	l.sp.Sync()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.sp.bgp.watchSessions(ctx, 5*time.Millisecond) }()
	defer func() { cancel(); <-done }()

	up := func(want float64) func() bool {
		return func() bool { v, ok := gauge(t, l.sp, "herald_speaker_bgp_session_up"); return ok && v == want }
	}
	waitFor(t, up(1), "session_up 1")
	if v, _ := gauge(t, l.sp, "herald_speaker_bgp_prefixes_configured"); v != 1 {
		t.Errorf("prefixes_configured %v, want 1", v)
	}
	f.SetDown(addr("198.51.100.1"), true)
	waitFor(t, up(0), "session_up 0")
	// No BGPPeer object in the fake source: no event, and no crash.
}

// gauge reads the single sample of a metric from the speaker's registry.
func gauge(t *testing.T, s *Speaker, name string) (float64, bool) {
	t.Helper()
	mfs, err := s.d.Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			m := mf.GetMetric()[0]
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue(), true
			}
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
