package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/labbin"
)

// heraldDrain runs `herald drain [--undo] node` with the lab's
// kubeconfig, as the user would before kubectl drain.
func (s l2) heraldDrain(node string, undo bool) string {
	s.T.T.Helper()
	args := []string{"drain", node}
	if undo {
		args = append(args, "--undo")
	}
	out, err := runOut(s.Lab.Bins.Path(labbin.Herald), append(args, "--kubeconfig", s.Lab.Kubeconfig)...)
	s.T.T.Logf("$ herald %s\n%s", strings.Join(args, " "), out)
	if err != nil {
		s.T.T.Fatalf("herald drain: %v", err)
	}
	return out
}

// ecmpByPorts makes the router hash ECMP next hops on ports too (the
// layer-4 policy), so that one client's connections spread over the
// nodes, until the test ends.
func ecmpByPorts(h *harness.T) {
	h.T.Helper()
	const hashKey = "net.ipv4.fib_multipath_hash_policy"
	old, err := h.Exec("router", "sysctl", "-n", hashKey)
	if err != nil {
		h.T.Fatal(err)
	}
	if _, err := h.Exec("router", "sysctl", "-w", hashKey+"=1"); err != nil {
		h.T.Fatal(err)
	}
	h.T.Cleanup(func() { _, _ = h.Exec("router", "sysctl", "-w", hashKey+"="+strings.TrimSpace(old)) })
}

// cleanupBGPService deletes, when the test ends, the Service, Deployment
// and BGP objects named name, and undoes herald drain of node if
// *drained says the test left it drained.
func (b bgpLab) cleanupBGPService(name, node string, drained *bool) {
	h := b.T
	h.T.Cleanup(func() {
		if *drained {
			_, _ = runOut(b.Lab.Bins.Path(labbin.Herald), "drain", node, "--undo", "--kubeconfig", b.Lab.Kubeconfig)
		}
		_, _ = h.K.Run(h.Ctx, "delete", "service", name, "--ignore-not-found")
		_, _ = h.K.Run(h.Ctx, "delete", "deployment", name, "--ignore-not-found")
		_, _ = h.K.Run(h.Ctx, "-n", heraldNS, "delete", "bgppeer,bgpadvertisement,ipaddresspool", name, "--ignore-not-found")
	})
}

// probeResult checks a probe's figures: no failed request, and logs
// what it measured.
func probeResult(t *testing.T, what string, p *harness.Probe) {
	t.Helper()
	p.Stop()
	sent, failed := p.Result()
	t.Logf("DRAIN %s: %d requests every 20 ms, %d failed, longest gap between answered requests %s", what, sent, failed, p.MaxGap().Round(time.Millisecond))
	if failed > 0 {
		t.Errorf("%s: %d of %d requests failed: %s", what, failed, sent, p.Failures())
	}
	if sent < 100 {
		t.Errorf("%s: only %d requests sent: the probe did not run", what, sent)
	}
}

// macChanges renders the neighbour entry's MACs with the node owning
// each and the time since start.
func macChanges(ch []harness.MACChange, owner map[string]string, start time.Time) string {
	var out []string
	for _, c := range ch {
		out = append(out, fmt.Sprintf("%s (%s) at %+dms", c.MAC, owner[c.MAC], c.At.Sub(start).Milliseconds()))
	}
	return strings.Join(out, " -> ")
}

// TestDrainL2 drains the node announcing a layer-2 address with `herald
// drain` while the LAN client sends a request every 20 ms: no request
// fails, the client's neighbour entry moves exactly once, to one other
// node whose MAC alone answers ARP, `herald status` and the node's
// herald_speaker_drained say it is drained. `herald drain --undo` then
// fails no request either; rendezvous hashing gives the address back to
// the node that held it, once.
func TestDrainL2(t *testing.T) {
	h := harness.Start(t)
	m := startL2MoveService(h, "drain-l2", "198.51.100.248-198.51.100.249", "2001:db8:0:1::248-2001:db8:0:1::249")
	s, ip, winner, owner, macOf := m.l2, m.ip, m.winner, m.owner, m.macOf
	oneAnswer := m.oneAnswer
	resets, packets := m.captures()

	// Drain the announcer under the probe.
	probe := h.StartProbe(h.Layout.Client, ip)
	stopMAC := harness.WatchMAC(h.Layout.Client, ip)
	time.Sleep(2 * time.Second)
	start := time.Now()
	m.drain(winner, false)
	next := oneAnswer(func(n string) bool { return n != winner }, "another node than "+winner+" answering for "+ip)
	moved := time.Since(start)
	time.Sleep(3 * time.Second)
	changes := stopMAC()
	probeResult(t, "drain of "+winner, probe)
	if at := probe.FailedAt(); len(at) > 0 {
		t.Logf("TCP resets (tcpdump -e in the client's and every node's namespace):\n  %s", strings.Join(resets.Near(at), "\n  "))
		t.Logf("the client's packets to and from %s within 300 ms of a failure:\n  %s", ip, strings.Join(packets.Around(at, 300*time.Millisecond, 400), "\n  "))
	}
	t.Logf("DRAIN %s handed %s to %s: ServiceAnnouncement and arping agree %s after herald drain; the client's neighbour entry: %s",
		winner, ip, next, moved.Round(time.Millisecond), macChanges(changes, owner, start))
	if len(changes) != 2 || changes[0].MAC != macOf[winner] || changes[1].MAC != macOf[next] {
		t.Errorf("the client's neighbour entry went %s, want exactly one move, from %s to %s", macChanges(changes, owner, start), winner, next)
	}
	if v, err := s.speakerMetric(winner, "herald_speaker_drained"); err != nil || v != 1 {
		t.Errorf("%s: herald_speaker_drained = %v (%v), want 1", winner, v, err)
	}
	st, err := s.heraldStatus()
	t.Logf("$ herald status\n%s", st)
	if err != nil || !strings.Contains(st, "  "+winner+": drained:") {
		t.Errorf("herald status does not show %s drained (%v)", winner, err)
	}

	// Undo under the probe: the address may come back, once, without a
	// failed request.
	probe = h.StartProbe(h.Layout.Client, ip)
	stopMAC = harness.WatchMAC(h.Layout.Client, ip)
	time.Sleep(2 * time.Second)
	start = time.Now()
	m.drain(winner, true)
	back := oneAnswer(func(n string) bool { return n == winner }, winner+" answering for "+ip+" again (rendezvous hashing ranks it first)")
	moved = time.Since(start)
	time.Sleep(3 * time.Second)
	changes = stopMAC()
	probeResult(t, "undo on "+winner, probe)
	t.Logf("DRAIN undo: %s back with %s %s after herald drain --undo; the client's neighbour entry: %s", ip, back, moved.Round(time.Millisecond), macChanges(changes, owner, start))
	if len(changes) != 2 || changes[0].MAC != macOf[next] || changes[1].MAC != macOf[winner] {
		t.Errorf("the client's neighbour entry went %s on undo, want exactly one move, from %s back to %s", macChanges(changes, owner, start), next, winner)
	}
	if v, err := s.speakerMetric(winner, "herald_speaker_drained"); err != nil || v != 0 {
		t.Errorf("%s: herald_speaker_drained = %v (%v) after undo, want 0", winner, v, err)
	}
}

// TestDrainBGP drains a node advertising a Cluster Service's address to
// the lab's FRR while the remote client behind the router sends a
// request every 20 ms, spread over every node by the router's L4 ECMP
// hash: FRR first gets the node's path with GRACEFUL_SHUTDOWN and, the
// session being eBGP, sets its LOCAL_PREF to 0 on its own, so the route
// moves off the node while the node still forwards; the path is
// withdrawn after the speaker's --bgp-drain-wait; no request fails. Undo
// puts the node back into the ECMP set, again without a failed request.
func TestDrainBGP(t *testing.T) {
	h := harness.Start(t)
	b := newBGPLab(h)
	const name = "drain-bgp"
	b.readySpeakers(2 * time.Minute)
	nodes := b.nodeNames()
	if len(nodes) < 3 {
		t.Fatalf("the lab has %d nodes; the test needs 3", len(nodes))
	}
	victim := nodes[1]
	drained := false
	// Every connection its own next hop: with the default L3 hash all of
	// the remote client's requests would go to one node, maybe not the
	// drained one.
	ecmpByPorts(h)
	b.cleanupBGPService(name, victim, &drained)
	h.Apply(bgpPoolYAML(name, "203.0.113.200/29") + bgpAdvertisementYAML(name, name) + bgpPeerYAML(name, generalPeerSelector) +
		echoDeploymentYAML(name, nodes[0], 1) + lbServiceYAML(name, name, name, "Cluster", ""))
	b.waitSessions(time.Minute, nodes...)
	h.ReadyPods("app="+name, 1, 2*time.Minute)
	ip := ctl{h}.waitAnyIP("default", name)
	url := "http://" + ip + "/"
	b.waitFRRNextHops(ip, nodes, time.Minute)
	b.waitRemoteEcho(url, func(string) bool { return true }, "the remote client to get an answer from "+url)
	others := slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return n == victim })

	probe := h.StartProbe(h.Layout.Remote, ip)
	time.Sleep(2 * time.Second)
	start := time.Now()
	b.heraldDrain(victim, false)
	drained = true
	// Graceful shutdown: the path stays, marked and at LOCAL_PREF 0, and
	// the router forwards over the others only.
	var gshut frrPath
	h.Poll(15*time.Second, "FRR's path from "+victim+" with GRACEFUL_SHUTDOWN and LOCAL_PREF 0", func() (bool, string) {
		paths, raw := b.frrPaths(ip)
		p, ok := pathFrom(paths, b.nodeIP(victim))
		gshut = p
		return ok && slices.Contains(p.Communities, "graceful-shutdown") && p.LocalPref == 0, raw
	})
	shutAt := time.Since(start)
	b.waitFRRNextHops(ip, others, 10*time.Second)
	movedAt := time.Since(start)
	t.Logf("DRAIN %s: FRR holds its path %v %s after herald drain; the route leaves it (next hops %v only) %s after",
		victim, gshut, shutAt.Round(time.Millisecond), others, movedAt.Round(time.Millisecond))
	if movedAt > 8*time.Second {
		t.Errorf("the route left %s only %s after the drain: that is the withdrawal, not the graceful shutdown", victim, movedAt.Round(time.Millisecond))
	}
	h.Poll(30*time.Second, "the path from "+victim+" withdrawn", func() (bool, string) {
		paths, raw := b.frrPaths(ip)
		_, ok := pathFrom(paths, b.nodeIP(victim))
		return !ok, raw
	})
	t.Logf("DRAIN %s: path withdrawn %s after herald drain (the speaker's --bgp-drain-wait is 10s)", victim, time.Since(start).Round(time.Millisecond))
	time.Sleep(2 * time.Second)
	probeResult(t, "BGP drain of "+victim, probe)
	if na := b.nodeAnnouncements()[victim]; !slices.ContainsFunc(na, func(s string) bool { return strings.Contains(s, "reason:node drained") }) {
		t.Errorf("%s's NodeAnnouncement %v does not say it is drained", victim, na)
	}
	if v, err := b.speakerMetric(victim, "herald_speaker_drained"); err != nil || v != 1 {
		t.Errorf("%s: herald_speaker_drained = %v (%v), want 1", victim, v, err)
	}
	st, _ := b.heraldStatus("default/" + name)
	t.Logf("$ herald status default/%s\n%s", name, st)
	if !strings.Contains(st, "  "+victim+": drained:") {
		t.Errorf("herald status does not show %s drained", victim)
	}

	probe = h.StartProbe(h.Layout.Remote, ip)
	time.Sleep(2 * time.Second)
	start = time.Now()
	b.heraldDrain(victim, true)
	drained = false
	paths := b.waitFRRNextHops(ip, nodes, 30*time.Second)
	t.Logf("DRAIN undo: %s back in the ECMP set %s after herald drain --undo", victim, time.Since(start).Round(time.Millisecond))
	if p, ok := pathFrom(paths, b.nodeIP(victim)); !ok || slices.Contains(p.Communities, "graceful-shutdown") {
		t.Errorf("after undo, the path from %s is %v, want one without GRACEFUL_SHUTDOWN", victim, p)
	}
	time.Sleep(3 * time.Second)
	probeResult(t, "BGP undo on "+victim, probe)
}

// l2MoveService is a layer-2 Service whose one backend runs on node1,
// which its L2Advertisement leaves out, so that its address moves between
// the other nodes while the backend stays (TestDrainL2,
// TestL2MoveKeepsConnections). The test's cleanup deletes it and undoes a
// drain the test left.
type l2MoveService struct {
	l2
	name, ip, winner string
	// owner maps each node's MAC to the node, macOf the other way.
	owner, macOf map[string]string
	drained      string
}

// startL2MoveService makes the Service name with its own pool (v4, v6)
// and waits until one node alone answers for its address, and the
// address answers.
func startL2MoveService(h *harness.T, name, v4, v6 string) *l2MoveService {
	t := h.T
	t.Helper()
	m := &l2MoveService{l2: l2{h}, name: name, macOf: map[string]string{}}
	m.readySpeakers(2 * time.Minute)
	m.speakersInCluster(3 * time.Minute)
	m.owner = m.macOwners()
	for mac, n := range m.owner {
		m.macOf[n] = mac
	}
	t.Cleanup(func() {
		if m.drained != "" {
			_, _ = runOut(m.Lab.Bins.Path(labbin.Herald), "drain", m.drained, "--undo", "--kubeconfig", m.Lab.Kubeconfig)
		}
		_, _ = h.K.Run(h.Ctx, "delete", "service", name, "--ignore-not-found")
		_, _ = h.K.Run(h.Ctx, "delete", "deployment", name, "--ignore-not-found")
		_, _ = h.K.Run(h.Ctx, "-n", heraldNS, "delete", "l2advertisement,ipaddresspool", name, "--ignore-not-found")
	})
	// The echo server on node1, which never announces: the backend
	// stays while the announcer is drained.
	h.Apply(l2Objects(name, v4, v6, "node1"))
	h.Kubectl("-n", heraldNS, "patch", "l2advertisement", name, "--type=merge", "-p",
		`{"spec":{"nodeSelectors":[{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"NotIn","values":["node1"]}]}]}}`)
	h.ReadyPods("app="+name, 1, 2*time.Minute)
	h.Kubectl("expose", "deployment", name, "--name="+name, "--port=80", "--target-port=8080", "--type=LoadBalancer")
	m.ip = ctl{h}.waitAnyIP("default", name)
	m.winner = m.oneAnswer(func(string) bool { return true }, "one node answering for "+m.ip)
	h.Poll(30*time.Second, "an answer from "+m.ip, func() (bool, string) {
		ok, err := harness.EchoGet(h.Layout.Client, m.ip, time.Second)
		return ok, fmt.Sprint(err)
	})
	t.Logf("%s is announced by %s (%s)", m.ip, m.winner, m.macOf[m.winner])
	return m
}

// oneAnswer waits until a node that want accepts announces the address
// and arping gets its MAC alone; it returns the node.
func (m *l2MoveService) oneAnswer(want func(string) bool, what string) string {
	m.T.T.Helper()
	var node string
	m.T.Poll(time.Minute, what, func() (bool, string) {
		who, anns := m.announcersOf("default", m.name, m.ip)
		if len(who) != 1 || !want(who[0]) {
			return false, fmt.Sprint(anns)
		}
		node = who[0]
		macs, out := m.arping(m.ip, 2, 2)
		return slices.Equal(macs, []string{m.macOf[node]}), fmt.Sprintf("announcer %s (%s); arping %v\n%s", node, m.macOf[node], macs, out)
	})
	return node
}

// drain runs herald drain [--undo] node and remembers what to undo.
func (m *l2MoveService) drain(node string, undo bool) {
	m.heraldDrain(node, undo)
	if m.drained = node; undo {
		m.drained = ""
	}
}

// captures starts capturing, until the test ends, every TCP reset in the
// client's and the nodes' namespaces and the client's whole exchange with
// the address (which MAC took which packet): a failed request is
// explained by a capture or it is herald's bug.
func (m *l2MoveService) captures() (*harness.RSTCapture, *harness.PacketCapture) {
	h := m.T
	in := []string{h.Layout.Client}
	for _, n := range h.Layout.Nodes {
		in = append(in, n.Netns)
	}
	return harness.StartRSTCapture(h.T, in), harness.StartPacketCapture(h.T, h.Lab.ModuleDir, h.Layout.Client, m.ip)
}
