package speaker

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/herald-lb/herald/speaker/layer2/election"
	l2plan "github.com/herald-lb/herald/speaker/layer2/plan"
	"github.com/herald-lb/herald/speaker/members"
	"github.com/herald-lb/herald/speaker/partition"
	"github.com/herald-lb/herald/speaker/view"
)

func TestWinnerAnnouncesOnEth0Only(t *testing.T) {
	nodes := []string{"node1", "node2", "node3"}
	ip := ipFor(t, "node2", nodes...)
	for _, self := range nodes {
		t.Run(self, func(t *testing.T) {
			l := newLab(t, self, nodes...)
			l.service("web", false, ip)
			l.sp.Sync()
			won := self == "node2"
			if got := l.sp.Announcements().AnnouncingAnywhere(addr(ip)); got != won {
				t.Fatalf("announcing %s = %v, want %v", ip, got, won)
			}
			// Responders run on the LAN interface only: not on the pod
			// bridge nor on a pod's veth, not on loopback.
			for _, name := range []string{"cbr0", "vethab12", "lo"} {
				if l.responders.live(name) != nil {
					t.Errorf("a responder runs on %s", name)
				}
			}
			r := l.responders.live("eth0")
			if r == nil {
				t.Fatal("no responder on eth0")
			}
			g := r.takeGratuitous()
			ev := l.takeEvents()
			if !won {
				if len(g) != 0 || len(ev) != 0 || len(l.status.anns) != 0 {
					t.Fatalf("loser: gratuitous %v, events %v, status %v; want none", g, ev, l.status.anns)
				}
				return
			}
			if !reflect.DeepEqual(g, []netip.Addr{addr(ip)}) {
				t.Errorf("gratuitous = %v, want [%s]", g, ip)
			}
			want := []view.Announcement{{Service: view.ServiceRef{Namespace: "shop", Name: "web"}, Node: "node2",
				Protocol: "layer2", Interfaces: []string{"eth0"}, IPs: []netip.Addr{addr(ip)}}}
			if !reflect.DeepEqual(l.status.anns, want) {
				t.Errorf("status = %+v, want %+v", l.status.anns, want)
			}
			if len(ev) != 1 || ev[0] != "Normal Announcing announcing "+ip+" from node node2 on eth0" {
				t.Errorf("events = %q", ev)
			}
			// Nothing changed: nothing is sent or written again.
			l.sp.Sync()
			if g := r.takeGratuitous(); len(g) != 0 {
				t.Errorf("a sync without change sent gratuitous %v", g)
			}
			if ev := l.takeEvents(); len(ev) != 0 {
				t.Errorf("a sync without change recorded %v", ev)
			}
		})
	}
}

func TestFailoverWhenWinnerLeaves(t *testing.T) {
	nodes := []string{"node1", "node2", "node3"}
	ip := ipFor(t, "node1", nodes...)
	next := winner(ip, "node2", "node3")
	l := newLab(t, next, nodes...)
	l.service("web", false, ip)
	l.sp.Sync()
	if l.sp.Announcements().AnnouncingAnywhere(addr(ip)) {
		t.Fatal("the runner-up announces while the winner is alive")
	}
	l.cluster.Remove("node1") // the winner's speaker died or left
	l.sp.Sync()
	if !l.sp.Announcements().Announcing(addr(ip), "eth0") {
		t.Fatalf("%s did not take %s over", next, ip)
	}
	if g := l.responders.live("eth0").takeGratuitous(); !reflect.DeepEqual(g, []netip.Addr{addr(ip)}) {
		t.Fatalf("gratuitous on takeover = %v, want [%s]", g, ip)
	}
	if got := testutil.ToFloat64(l.sp.d.Metrics.electionChanges); got != 2 { // none -> node1, node1 -> next
		t.Errorf("election changes = %v, want 2", got)
	}
	// It comes back: the IP returns to it (rendezvous ranking), and this
	// node stops answering and says so.
	l.cluster.Set(members.Member{Name: "node1", Meta: members.Meta{Interfaces: []string{"eth0"}}})
	l.takeEvents()
	l.sp.Sync()
	if l.sp.Announcements().AnnouncingAnywhere(addr(ip)) {
		t.Fatal("still announcing after the winner came back")
	}
	if ev := l.takeEvents(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Normal StoppedAnnouncing stopped announcing "+ip+" from node "+next) {
		t.Errorf("events = %q", ev)
	}
	if len(l.status.anns) != 0 {
		t.Errorf("status still has %+v", l.status.anns)
	}
}

func TestMemberJoinAnnouncesHeldIPsAgain(t *testing.T) {
	l := newLab(t, "node1", "node1")
	ip := "198.51.100.200"
	l.service("web", false, ip)
	l.sp.Sync()
	r := l.responders.live("eth0")
	r.takeGratuitous()
	// A partition heals: a node whose winner is not this one joins, and
	// this node keeps its IP; clients that followed the other side's
	// gratuitous ARP must be told again.
	other := "node9"
	for i := 2; winner(ip, "node1", other) != "node1"; i++ {
		other = "node" + string(rune('a'+i))
	}
	l.src.set(func(s *Snapshot) {
		s.Nodes = append(s.Nodes, view.Node{Name: other})
	})
	l.cluster.Set(members.Member{Name: other, Meta: members.Meta{Interfaces: []string{"eth0"}}})
	l.sp.Sync()
	if g := r.takeGratuitous(); !reflect.DeepEqual(g, []netip.Addr{addr(ip)}) {
		t.Fatalf("after a join: gratuitous = %v, want [%s]", g, ip)
	}
	l.sp.Sync()
	if g := r.takeGratuitous(); len(g) != 0 {
		t.Fatalf("second sync sent %v again", g)
	}
}

// A member's death (it may be a partition, whose other side claimed some
// of this node's addresses for a moment) makes this node announce what
// it holds again, at once and after ReannounceAfterDeath; a graceful
// leave does not.
func TestMemberDeathAnnouncesHeldIPsAgain(t *testing.T) {
	nodes := []string{"node1", "node2", "node3"}
	ip := ipFor(t, "node1", nodes...)
	l := newLab(t, "node1", nodes...)
	l.service("web", false, ip)
	l.sp.Sync()
	r := l.responders.live("eth0")
	r.takeGratuitous()
	l.cluster.Leave("node3")
	l.sp.Sync()
	if g := r.takeGratuitous(); len(g) != 0 {
		t.Fatalf("after a graceful leave: gratuitous %v, want none", g)
	}
	l.cluster.Remove("node2")
	l.sp.Sync()
	if g := r.takeGratuitous(); !reflect.DeepEqual(g, []netip.Addr{addr(ip)}) {
		t.Fatalf("after a death: gratuitous = %v, want [%s]", g, ip)
	}
	time.Sleep(ReannounceAfterDeath + 200*time.Millisecond)
	l.sp.Sync()
	if g := r.takeGratuitous(); !reflect.DeepEqual(g, []netip.Addr{addr(ip)}) {
		t.Fatalf("%s after a death: gratuitous = %v, want [%s] again", ReannounceAfterDeath, g, ip)
	}
	l.sp.Sync()
	if g := r.takeGratuitous(); len(g) != 0 {
		t.Fatalf("a later sync sent %v again", g)
	}
}

func TestLinkDownMovesAndComesBack(t *testing.T) {
	l := newLab(t, "node1", "node1", "node2")
	ip := ipFor(t, "node1", "node1", "node2")
	l.service("web", false, ip)
	l.sp.Sync()
	if !l.sp.Announcements().AnnouncingAnywhere(addr(ip)) {
		t.Fatal("not announcing before the link went down")
	}
	l.links.set("eth0", func(k *Link) { k.Carrier = false })
	l.sp.Sync()
	if l.sp.Announcements().AnnouncingAnywhere(addr(ip)) {
		t.Fatal("still announcing on a link without carrier")
	}
	if l.responders.live("eth0") != nil {
		t.Fatal("responder still runs on a link without carrier")
	}
	// The others learn it from the metadata.
	l.sp.publishOnce()
	self := selfMember(l.cluster, "node1")
	if !slices.Contains(self.Meta.DownInterfaces, "eth0") {
		t.Fatalf("published metadata %+v does not say eth0 is down", self.Meta)
	}
	// Carrier back: a new responder, which announces the IP at once.
	l.links.set("eth0", func(k *Link) { k.Carrier = true })
	l.sp.Sync()
	r := l.responders.live("eth0")
	if r == nil || !l.sp.Announcements().Announcing(addr(ip), "eth0") {
		t.Fatal("not announcing after the carrier came back")
	}
	if g := r.takeGratuitous(); len(g) == 0 || g[0] != addr(ip) {
		t.Fatalf("no gratuitous after the link came back: %v", g)
	}
}

func TestLinkRecreatedRestartsResponder(t *testing.T) {
	l := newLab(t, "node1", "node1")
	l.service("web", false, "198.51.100.201")
	l.sp.Sync()
	first := l.responders.live("eth0")
	l.links.set("eth0", func(k *Link) { k.Index = 42 })
	l.sp.Sync()
	second := l.responders.live("eth0")
	if second == first || second == nil || second.ifi.Index != 42 {
		t.Fatalf("responder not restarted on the new link: %+v", second)
	}
	// A responder whose socket died is replaced at the next sync.
	second.die()
	l.sp.Sync()
	if third := l.responders.live("eth0"); third == nil || third == second {
		t.Fatal("dead responder not replaced")
	}
	// Counters of replaced responders still count.
	if got := l.sp.l2.responders.stats()["eth0"].GratuitousARP; got < 4 {
		t.Errorf("eth0 gratuitous counter = %d, want the retired responders' counts kept", got)
	}
}

func TestLocalPolicyFollowsEndpoints(t *testing.T) {
	nodes := []string{"node1", "node2", "node3"}
	ip := ipFor(t, "node1", nodes...) // node1 would win under Cluster
	for _, self := range nodes {
		l := newLab(t, self, nodes...)
		l.service("web", true, ip)
		l.endpoints("web", "node3")
		l.sp.Sync()
		if got, want := l.sp.Announcements().AnnouncingAnywhere(addr(ip)), self == "node3"; got != want {
			t.Fatalf("%s announcing = %v, want %v (only node3 has a pod)", self, got, want)
		}
		// The pod moves to node2.
		l.endpoints("web", "node2")
		l.sp.Sync()
		if got, want := l.sp.Announcements().AnnouncingAnywhere(addr(ip)), self == "node2"; got != want {
			t.Fatalf("after the move %s announcing = %v, want %v", self, got, want)
		}
		// No pod anywhere: nobody announces.
		l.endpoints("web")
		l.sp.Sync()
		if l.sp.Announcements().AnnouncingAnywhere(addr(ip)) {
			t.Fatalf("%s announces without any endpoint", self)
		}
		// Every speaker counts the address as unannounced, with the reason.
		reason := l.sp.State().IPs[0].Reason
		if reason == "" {
			t.Fatalf("%s: no reason for the unannounced IP", self)
		}
		if got := testutil.ToFloat64(l.sp.d.Metrics.unannounced.WithLabelValues(reason)); got != 1 {
			t.Errorf("%s: herald_speaker_layer2_unannounced_ips{reason=%q} = %v, want 1", self, reason, got)
		}
		l.endpoints("web", "node1")
		l.sp.Sync()
		if n := testutil.CollectAndCount(l.sp.d.Metrics.unannounced); n != 0 {
			t.Errorf("%s: %d unannounced series once node1 has a pod, want none", self, n)
		}
	}
}

func TestNamedInterfaceAndPodBridge(t *testing.T) {
	l := newLab(t, "node1", "node1")
	l.src.set(func(s *Snapshot) { s.Config = labConfig("cbr0") })
	l.service("web", false, "198.51.100.210")
	l.sp.Sync()
	if !l.sp.Announcements().Announcing(addr("198.51.100.210"), "cbr0") || l.sp.Announcements().Announcing(addr("198.51.100.210"), "eth0") {
		t.Fatal("an advertisement naming cbr0 must announce there and only there")
	}
	// An advertisement naming an interface the node lacks announces
	// nothing here.
	l.src.set(func(s *Snapshot) { s.Config = labConfig("bond7") })
	l.sp.Sync()
	if l.sp.Announcements().AnnouncingAnywhere(addr("198.51.100.210")) {
		t.Fatal("announcing although the named interface does not exist")
	}
}

func TestBadInputLeavesOthersAlone(t *testing.T) {
	l := newLab(t, "node1", "node1")
	l.service("web", false, "198.51.100.220")
	l.sp.Sync()
	// A Service with an IP outside every pool, one without the pool
	// annotation, one with no IP, and a configuration that goes away
	// for one sync: only the configuration loss stops announcing, and
	// the next good configuration restores it.
	l.service("outside", false, "192.0.2.1")
	l.src.set(func(s *Snapshot) {
		s.Services = append(s.Services, view.Service{Namespace: "shop", Name: "nopool", IPs: []netip.Addr{addr("198.51.100.221")}},
			view.Service{Namespace: "shop", Name: "noip"})
	})
	l.sp.Sync()
	if !l.sp.Announcements().AnnouncingAnywhere(addr("198.51.100.220")) {
		t.Fatal("a bad Service disturbed a working one")
	}
	for _, bad := range []string{"192.0.2.1", "198.51.100.221"} {
		if l.sp.Announcements().AnnouncingAnywhere(addr(bad)) {
			t.Errorf("announcing %s", bad)
		}
	}
	// A failing netlink dump keeps the last known interfaces.
	l.links.mu.Lock()
	l.links.err = errors.New("netlink: no buffer space")
	l.links.mu.Unlock()
	l.sp.Sync()
	if !l.sp.Announcements().AnnouncingAnywhere(addr("198.51.100.220")) {
		t.Fatal("a failed link listing dropped the announcements")
	}
	// A responder that cannot start is retried, and does not stop the rest.
	l.links.mu.Lock()
	l.links.err = nil
	l.links.mu.Unlock()
	l.responders.live("eth0").die()
	l.responders.mu.Lock()
	l.responders.fail["eth0"] = errors.New("socket: operation not permitted")
	l.responders.mu.Unlock()
	l.sp.Sync()
	if !l.sp.Announcements().AnnouncingAnywhere(addr("198.51.100.220")) {
		t.Fatal("the election result was dropped with the responder")
	}
	l.responders.mu.Lock()
	delete(l.responders.fail, "eth0")
	l.responders.mu.Unlock()
	l.sp.Sync()
	if l.responders.live("eth0") == nil {
		t.Fatal("responder not retried")
	}
}

func TestSweepDeparted(t *testing.T) {
	l := newLab(t, "node1", "node1", "node2", "node3")
	l.status.other = map[string][]string{"node2": {"x"}, "node4": {"y"}}
	l.sp.Sync()
	if !reflect.DeepEqual(l.status.swept, []string{"node4"}) {
		t.Fatalf("swept %v, want [node4] (node2 is live)", l.status.swept)
	}
	// Only the first live member by name sweeps.
	l2 := newLab(t, "node2", "node1", "node2")
	l2.status.other = map[string][]string{"node4": {"y"}}
	l2.sp.Sync()
	if len(l2.status.swept) != 0 {
		t.Fatalf("node2 swept %v although node1 is live", l2.status.swept)
	}
}

func TestMetaTooLargeKeepsWhatFits(t *testing.T) {
	var m members.Meta
	for i := range 100 {
		m.Interfaces = append(m.Interfaces, "ethernet"+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	slices.Sort(m.Interfaces)
	fit, dropped := fitMeta(m)
	if len(dropped) == 0 || len(fit.Interfaces)+len(dropped) != 100 {
		t.Fatalf("kept %d, dropped %d", len(fit.Interfaces), len(dropped))
	}
	if _, err := members.EncodeMeta(fit); err != nil {
		t.Fatal(err)
	}
}

func selfMember(c *members.Fake, name string) members.Member {
	for _, m := range c.Members() {
		if m.Name == name {
			return m
		}
	}
	return members.Member{}
}

// Live fails once the loop has not finished a sync for three resync
// periods: the kubelet's liveness probe then restarts the speaker.
func TestLiveFailsWhenTheLoopIsStuck(t *testing.T) {
	l := newLab(t, "node1", "node1", "node2")
	t0 := time.Now()
	if err := l.sp.Live(t0); err != nil {
		t.Fatalf("before the first sync: %v", err)
	}
	l.sp.Sync()
	resync := l.sp.d.Resync
	if err := l.sp.Live(time.Now().Add(3*resync - time.Second)); err != nil {
		t.Errorf("three periods after a sync (still within the bound): %v", err)
	}
	err := l.sp.Live(time.Now().Add(3*resync + 2*time.Second))
	if err == nil || !strings.Contains(err.Error(), "no sync finished") {
		t.Errorf("past three periods: %v, want a failure saying no sync finished", err)
	}
}

// A lonely speaker that the heartbeat says is isolated announces nothing
// the other nodes may announce; once not isolated, it takes its IPs.
func TestIsolatedSpeakerHoldsBack(t *testing.T) {
	now := time.Unix(1000, 0)
	g := partition.New(partition.Config{Self: "node1", Window: 3 * time.Second, Now: func() time.Time { return now }})
	l := newLabWith(t, "node1", []string{"node1", "node2", "node3"}, func(d *Deps) { d.Partition = g })
	// A speaker outside the view renews the Lease: alone, node1 is
	// isolated, for as long as it does.
	g.Observe("node2", now)
	l.service("web", false, "198.51.100.200", "198.51.100.201", "198.51.100.202", "198.51.100.203")
	l.cluster.Remove("node2")
	l.cluster.Remove("node3")
	l.sp.Sync()
	if got := l.sp.Announcements().On("eth0"); len(got) != 0 {
		t.Errorf("isolated, yet announcing %v", got)
	}
	if !l.sp.State().Isolated {
		t.Error("state not marked isolated")
	}
	// The renewals stop for a window: the others are gone.
	now = now.Add(3 * time.Second)
	l.sp.Sync()
	if got := l.sp.Announcements().On("eth0"); len(got) != 4 {
		t.Errorf("alone and not isolated: announcing %v, want all 4", got)
	}
}

// Alone while it joins after its start, a speaker is isolated but was
// never counted out: once joined it wins its IPs at once, with no
// recovery hold (the CI failure this guards against: a speaker that
// started alone took an IP assigned meanwhile from its winner 30 s
// later). An isolation after it had joined starts the hold if it lasts
// partition.MinIsolation.
func TestStartupJoinIsNoRecovery(t *testing.T) {
	nodes := []string{"node1", "node2", "node3"}
	ip := ipFor(t, "node1", nodes...)
	now := time.Unix(1000, 0)
	// Alone is isolated for as long as the clock stands still (the
	// heartbeat window never passes).
	l := newLabWith(t, "node1", nodes, guard(partition.Config{Window: time.Minute, RecoveryHold: 30 * time.Second, Now: func() time.Time { return now }}))
	l.cluster.Remove("node2")
	l.cluster.Remove("node3")
	l.service("web", false, ip)
	l.sp.Sync() // starting: alone, isolated
	if l.sp.Announcements().AnnouncingAnywhere(addr(ip)) {
		t.Fatal("isolated while joining, yet announcing")
	}
	for _, n := range []string{"node2", "node3"} {
		l.cluster.Set(members.Member{Name: n, Meta: members.Meta{Interfaces: []string{"eth0"}}})
	}
	l.sp.Sync()
	l.sp.publishOnce()
	if r, _ := l.sp.partition.Recovering(); r {
		t.Fatal("recovering after the start-up join: nobody counted this speaker out")
	}
	if selfMember(l.cluster, "node1").Meta.Recovering {
		t.Fatal("the metadata says recovering after the start-up join")
	}
	if !l.sp.Announcements().Announcing(addr(ip), "eth0") {
		t.Fatalf("joined, yet not announcing %s, which it wins", ip)
	}

	// Cut off after having joined, for less than MinIsolation: a blip
	// (the others may be the slow ones), which counts nothing.
	cut := func(lasting time.Duration) {
		l.cluster.Remove("node2")
		l.cluster.Remove("node3")
		l.sp.Sync()
		now = now.Add(lasting)
		for _, n := range []string{"node2", "node3"} {
			l.cluster.Set(members.Member{Name: n, Meta: members.Meta{Interfaces: []string{"eth0"}}})
		}
		l.sp.Sync()
	}
	cut(partition.MinIsolation - time.Millisecond)
	if r, _ := l.sp.partition.Recovering(); r {
		t.Fatal("recovering after an isolation shorter than MinIsolation")
	}
	if !l.sp.Announcements().Announcing(addr(ip), "eth0") {
		t.Fatalf("after a blip of isolation, not announcing %s, which it wins", ip)
	}
	// For MinIsolation: that isolation counts.
	cut(partition.MinIsolation)
	if r, _ := l.sp.partition.Recovering(); !r {
		t.Fatal("not recovering after an isolation that followed a join")
	}
	if l.sp.Announcements().AnnouncingAnywhere(addr(ip)) {
		t.Fatal("recovering after an isolation, yet announcing an IP a healthy node can take")
	}
}

// A restarted speaker refutes the death (or the leave) the others still
// remember of the process before it. That is no flap: it must win its
// IPs at once, not sit out a recovery hold (after a rolling update every
// speaker would be recovering, and addresses would move as the holds
// ended one by one). A death refuted after it joined does count.
func TestRestartRefuteIsNoRecovery(t *testing.T) {
	nodes := []string{"node1", "node2", "node3"}
	ip := ipFor(t, "node1", nodes...)
	l := newLabWith(t, "node1", nodes, guard(partition.Config{RecoveryHold: 30 * time.Second}))
	l.service("web", false, ip)
	// During the start-up join, before any sync saw another member: the
	// previous process's death, as node2 declared it.
	l.sp.DeclaredDead("node2")
	l.sp.Sync()
	if r, _ := l.sp.partition.Recovering(); r {
		t.Fatal("recovering after refuting the previous process's death during the start-up join")
	}
	// Its own leave, refuted even after joining.
	l.sp.DeclaredDead("node1")
	l.sp.Sync()
	if r, _ := l.sp.partition.Recovering(); r {
		t.Fatal("recovering after refuting the previous process's own leave")
	}
	if !l.sp.Announcements().Announcing(addr(ip), "eth0") {
		t.Fatalf("restarted, yet not announcing %s, which it wins", ip)
	}
	// Declared dead by node3 once joined: a real flap.
	l.sp.DeclaredDead("node3")
	l.sp.Sync()
	if r, _ := l.sp.partition.Recovering(); !r {
		t.Fatal("not recovering after a death refuted while in the cluster")
	}
}

// A speaker the cluster declared dead (it refuted, so it is back) leaves
// its IPs with the next node for the recovery hold, claims them back only
// after the hold and after the others can know, and still wins what no
// healthy node can take.
func TestRecoveringSpeakerLeavesItsIPs(t *testing.T) {
	nodes := []string{"node1", "node2", "node3"}
	ip := ipFor(t, "node1", nodes...)
	now := time.Unix(1000, 0)
	l := newLabWith(t, "node1", nodes, guard(partition.Config{RecoveryHold: 30 * time.Second, Now: func() time.Time { return now }}))
	l.service("web", false, ip)
	l.sp.Sync()
	l.sp.publishOnce()
	if !l.sp.Announcements().Announcing(addr(ip), "eth0") {
		t.Fatalf("node1 does not announce %s, which it wins", ip)
	}

	l.sp.DeclaredDead("node2")
	l.sp.Sync()
	if l.sp.Announcements().AnnouncingAnywhere(addr(ip)) {
		t.Fatal("declared dead, yet still announcing: the others moved the IP away")
	}
	if got := testutil.ToFloat64(l.sp.d.Metrics.recovering); got != 1 {
		t.Errorf("herald_speaker_recovering = %v, want 1", got)
	}
	l.sp.publishOnce()
	if !selfMember(l.cluster, "node1").Meta.Recovering {
		t.Fatal("the metadata does not say recovering, so the others would give the IP back")
	}

	// Seen from the runner-up: node1 is live but recovering, so the IP
	// stays with it.
	next := winner(ip, "node2", "node3")
	o := newLab(t, next, nodes...)
	o.cluster.Set(members.Member{Name: "node1", Meta: members.Meta{Interfaces: []string{"eth0"}, Recovering: true}})
	o.service("web", false, ip)
	o.sp.Sync()
	if !o.sp.Announcements().Announcing(addr(ip), "eth0") {
		t.Fatalf("%s does not keep %s while node1 recovers", next, ip)
	}
	if why := o.sp.State().IPs[0].Excluded.Reason("node1"); why != election.ReasonRecovering {
		t.Errorf("node1 excluded for %q, want %q", why, election.ReasonRecovering)
	}

	// Declared dead again 20 s later: the hold starts over.
	now = now.Add(20 * time.Second)
	l.sp.DeclaredDead("node2")
	now = now.Add(29 * time.Second)
	l.sp.Sync()
	if l.sp.Announcements().AnnouncingAnywhere(addr(ip)) {
		t.Fatal("announcing 29 s after the second death, within the hold")
	}
	now = now.Add(2 * time.Second)
	l.sp.Sync()
	if l.sp.Announcements().AnnouncingAnywhere(addr(ip)) {
		t.Fatal("claimed the IP back before the others could know the recovery ended")
	}
	l.sp.publishOnce()
	if selfMember(l.cluster, "node1").Meta.Recovering {
		t.Fatal("the hold is over, yet the metadata still says recovering")
	}
	l.sp.Sync()
	if !l.sp.Announcements().Announcing(addr(ip), "eth0") {
		t.Fatal("recovered, yet not announcing the IP it wins")
	}

	// Recovering and the only candidate left: it announces.
	l.sp.DeclaredDead("node2")
	l.cluster.Remove("node2")
	l.cluster.Remove("node3")
	l.sp.Sync()
	if !l.sp.Announcements().Announcing(addr(ip), "eth0") {
		t.Fatal("recovering but alone: the IP must still be announced")
	}
}

// fakeProxy is a ProxyGate whose programmed VIPs the test sets.
type fakeProxy struct {
	mu  sync.Mutex
	ips map[netip.Addr]bool
}

func (f *fakeProxy) Programmed(ip netip.Addr) (handled, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return true, f.ips[ip]
}

func (f *fakeProxy) program(ip string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ips[addr(ip)] = true
}

// TestWaitsForTheProxy: the winner answers for a new address only once
// this node's proxy has its rules (the others do not take it meanwhile),
// and after ProxyWait even if the proxy never lists it.
func TestWaitsForTheProxy(t *testing.T) {
	nodes := []string{"node1", "node2", "node3"}
	ip := ipFor(t, "node2", nodes...)
	px := &fakeProxy{ips: map[netip.Addr]bool{}}
	l := newLabWith(t, "node2", nodes, func(d *Deps) { d.Proxy, d.ProxyWait = px, 300*time.Millisecond })
	l.service("web", false, ip)
	l.sp.Sync()
	r := l.responders.live("eth0")
	if l.sp.Announcements().AnnouncingAnywhere(addr(ip)) || len(r.takeGratuitous()) != 0 || len(l.status.anns) != 0 {
		t.Fatalf("announced %s before the proxy programmed it", ip)
	}
	if got, _ := l.sp.State().Lookup(addr(ip)); got.Winner != "node2" || got.Reason != l2plan.ReasonUnprogrammed {
		t.Errorf("%+v: want won by node2, waiting for the proxy", got)
	}
	px.program(ip)
	l.sp.Sync()
	if !l.sp.Announcements().AnnouncingAnywhere(addr(ip)) || !slices.Equal(r.takeGratuitous(), []netip.Addr{addr(ip)}) {
		t.Fatalf("not announced (with a gratuitous burst) once programmed")
	}

	other := ""
	for i := 249; i >= 200 && other == ""; i-- {
		if c := fmt.Sprintf("198.51.100.%d", i); c != ip && winner(c, nodes...) == "node2" {
			other = c
		}
	}
	l.service("api", false, other)
	l.sp.Sync()
	if l.sp.Announcements().AnnouncingAnywhere(addr(other)) {
		t.Fatalf("announced %s at once", other)
	}
	time.Sleep(350 * time.Millisecond)
	l.sp.Sync()
	if !l.sp.Announcements().AnnouncingAnywhere(addr(other)) {
		t.Errorf("%s still not announced after ProxyWait", other)
	}
}

// guard sets the speaker's partition Guard to one made of c (c.Self is
// the node).
func guard(c partition.Config) func(*Deps) {
	return func(d *Deps) {
		c.Self = d.Node
		d.Partition = partition.New(c)
	}
}

// TestBlipCountsBothOutAndMovesNothing: in a two-node cluster a blip
// counts both speakers out (each declared the other dead), a few hundred
// milliseconds apart. Their holds end as far apart; the one out first
// must not take the other's addresses for that moment (the address moved
// there and back during a helm upgrade on real nodes, and a connection
// caught between reset). One counted out apart from the other is still
// ranked after it.
func TestBlipCountsBothOutAndMovesNothing(t *testing.T) {
	nodes := []string{"node1", "node2"}
	ip := ipFor(t, "node2", nodes...)
	now := time.Unix(1000, 0)
	node2Out := now.Add(-30 * time.Second).Add(100 * time.Millisecond) // its hold ends 100 ms from now

	for _, c := range []struct {
		name    string
		node1At time.Time // when node1 was counted out; its 30 s hold has just ended
		want    bool      // node1 announces the address
	}{
		{"counted out together", node2Out.Add(-200 * time.Millisecond), false},
		{"counted out 6 s before node2: node2 is lesser", node2Out.Add(-6 * time.Second), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			at := c.node1At
			l := newLabWith(t, "node1", nodes, guard(partition.Config{RecoveryHold: 30 * time.Second, Now: func() time.Time { return at }}))
			l.service("web", false, ip)
			l.sp.Sync() // joined: a death now counts
			l.sp.DeclaredDead("node2")
			at = now
			l.cluster.Set(members.Member{Name: "node2", Meta: members.Meta{Interfaces: []string{"eth0"}, Recovering: true, CountedOutAt: node2Out}})
			l.sp.Sync()
			l.sp.publishOnce()
			l.sp.Sync()
			if got := l.sp.Announcements().AnnouncingAnywhere(addr(ip)); got != c.want {
				t.Errorf("node1 out of its hold, node2 in its own for 100 ms more: node1 announces %s: %v, want %v", ip, got, c.want)
			}
			meta := selfMember(l.cluster, "node1").Meta
			if meta.Recovering || !meta.CountedOutAt.Equal(c.node1At.Truncate(time.Millisecond)) {
				t.Errorf("node1's metadata: recovering %v, counted out at %v; want false, %v", meta.Recovering, meta.CountedOutAt, c.node1At)
			}

			// node2's side: recovering, it keeps the address it wins
			// unless node1 was counted out apart from it.
			at2 := node2Out
			o := newLabWith(t, "node2", nodes, guard(partition.Config{RecoveryHold: 30 * time.Second, Now: func() time.Time { return at2 }}))
			o.service("web", false, ip)
			o.sp.Sync()
			o.sp.DeclaredDead("node1")
			at2 = now
			o.cluster.Set(members.Member{Name: "node1", Meta: members.Meta{Interfaces: []string{"eth0"}, CountedOutAt: c.node1At}})
			o.sp.Sync()
			o.sp.publishOnce()
			o.sp.Sync()
			if got := o.sp.Announcements().AnnouncingAnywhere(addr(ip)); got == c.want {
				t.Errorf("node2 recovering: announces %s: %v, want %v", ip, got, !c.want)
			}
		})
	}
}
