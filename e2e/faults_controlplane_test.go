package e2e

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/herald-lb/herald/e2e/harness"
)

// apiDownProbeNames names the probes startProbes starts but the direct one.
var apiDownProbeNames = []string{"L2 VIP", "BGP VIP", "NodePort", "ClusterIP (pod)"}

// apiDownRun is what TestFaultsControlPlaneAPIServerDown's phases share:
// the Services, the victim node, the probes' targets and the samplers
// running through both phases.
type apiDownRun struct {
	f                  faults
	h                  *harness.T
	nodes              []string
	l2Name, bgpName    string
	outage, killOutage time.Duration
	l2IP, bgpIP        string
	victim, victimIP   string
	macOf              map[string]string
	clusterIP          string
	nodePort           int
	podNS              string
	echoNode, echoIP   string
	arp, frr, eps      *sampler
	// resets are every TCP reset in the clients' and nodes' namespaces
	// during a phase's probes, printed around a failure blamed on herald.
	resets *harness.RSTCapture
}

// TestFaultsControlPlaneAPIServerDown takes kube-apiserver away (etcd
// keeps running) while clients probe, every 20 ms, an L2 VIP and a
// NodePort from the LAN client, a BGP VIP from the remote client behind
// FRR, and a ClusterIP from a pod's network namespace:
//
//   - 60 s without the API: no failed request, the same one MAC answers
//     ARP throughout, FRR's paths for the BGP VIP never change, and when
//     the API is back no ServiceAnnouncement, no Service's IP changes;
//   - a speaker SIGKILLed while the API is down (the L2 VIP's winner, on
//     the node whose rules the NodePort and ClusterIP probes go through):
//     the lab kubelet restarts it without the API, and it waits — no
//     memberlist join, no ARP answer, no BGP session — until it has read
//     the API; the other speakers take its address over meanwhile, its
//     proxy keeps the node's rules, and no request fails. Once the API
//     is back it joins and gets its address back.
//
// The figures are printed as FAULT lines: fault | what the clients saw |
// what was withdrawn | recovery.
func TestFaultsControlPlaneAPIServerDown(t *testing.T) {
	h := harness.Start(t)
	f := faults{newBGPLab(h)}
	const (
		l2Name, bgpName, clientName = "cpf-l2", "cpf-bgp", "cpf-client"
		outage                      = 60 * time.Second
		killOutage                  = 45 * time.Second
	)
	if h.Lab.ControlPlane == nil {
		t.Fatal("the lab's control plane is not this process's: cannot stop its API server")
	}
	f.readySpeakers(2 * time.Minute)
	ctl{h}.readyControllers(1)
	t.Cleanup(func() {
		for _, o := range []string{"service/" + l2Name, "service/" + bgpName, "deployment/" + l2Name, "pod/" + clientName} {
			_, _ = h.K.Run(h.Ctx, "delete", o, "--ignore-not-found", "--wait=false")
		}
		_, _ = h.K.Run(h.Ctx, "-n", heraldNS, "delete", "l2advertisement,ipaddresspool", l2Name, "--ignore-not-found")
		_, _ = h.K.Run(h.Ctx, "-n", heraldNS, "delete", "bgppeer,bgpadvertisement,ipaddresspool", bgpName, "--ignore-not-found")
	})
	// Whatever happens, the API server comes back (the other tests need
	// it); registered last, it runs first, before the deletes above.
	t.Cleanup(func() {
		if _, err := f.restoreAPIServer(); err != nil {
			t.Errorf("restoring kube-apiserver: %v", err)
		}
	})

	nodes := f.nodeNames()
	// The echo pods run on the first node, the fault is on the winner of
	// the L2 address, wherever it is.
	h.Apply(l2Objects(l2Name, "198.51.100.246-198.51.100.247", "2001:db8:0:1::246-2001:db8:0:1::247", nodes[0]) +
		bgpPoolYAML(bgpName, "203.0.113.208/29") + bgpAdvertisementYAML(bgpName, bgpName) +
		bgpPeerYAML(bgpName, generalPeerSelector) +
		lbServiceYAML(l2Name, l2Name, l2Name, "Cluster", "") + lbServiceYAML(bgpName, l2Name, bgpName, "Cluster", ""))
	h.ReadyPods("app="+l2Name, 1, 2*time.Minute)
	l2IP := ctl{h}.waitAnyIP("default", l2Name)
	bgpIP := ctl{h}.waitAnyIP("default", bgpName)
	f.waitSessions(time.Minute, nodes...)
	f.waitFRRNextHops(bgpIP, nodes, time.Minute)
	victim := f.announcer("default", l2Name, l2IP, time.Minute)
	macOf := map[string]string{}
	for mac, n := range f.macOwners() {
		macOf[n] = mac
	}
	f.Poll(30*time.Second, "arping "+l2IP+" to get "+victim+"'s MAC alone", func() (bool, string) {
		macs, out := f.arping(l2IP, 1, 1)
		return slices.Equal(macs, []string{macOf[victim]}), out
	})
	// The ClusterIP client runs on the node whose speaker is killed
	// later, so its requests go through that node's proxy rules.
	h.Apply(echoPodYAML(clientName, clientName, victim))
	h.ReadyPods("app="+clientName, 1, time.Minute)
	svc := ctl{h}.service("default", l2Name)
	clusterIP, nodePort := svc.Spec.ClusterIP, int(svc.Spec.Ports[0].NodePort)
	victimIP := f.nodeIP(victim)
	podNS := h.PodNetns("default", clientName)
	for _, c := range []struct{ ns, ip string }{{h.Layout.Client, l2IP}, {h.Layout.Remote, bgpIP}, {podNS, clusterIP}} {
		f.Poll(30*time.Second, "an answer from "+c.ip+" in "+c.ns, func() (bool, string) {
			ok, err := harness.EchoGet(c.ns, c.ip, time.Second)
			return ok, fmt.Sprint(err)
		})
	}
	t.Logf("L2 VIP %s (winner %s, MAC %s), BGP VIP %s, NodePort %s:%d, ClusterIP %s from pod %s on %s",
		l2IP, victim, macOf[victim], bgpIP, victimIP, nodePort, clusterIP, clientName, victim)

	// The direct probe goes from the echo pod's node to the pod, no
	// herald in the path: the control for the others.
	echo := h.Pods("app=" + l2Name)
	if len(echo) != 1 || echo[0].Status.PodIP == "" {
		t.Fatalf("want one echo pod with an IP, got %d", len(echo))
	}
	echoNode, echoIP := echo[0].Spec.NodeName, echo[0].Status.PodIP
	ad := &apiDownRun{f: f, h: h, nodes: nodes, l2Name: l2Name, bgpName: bgpName, outage: outage, killOutage: killOutage,
		l2IP: l2IP, bgpIP: bgpIP, victim: victim, victimIP: victimIP, macOf: macOf,
		clusterIP: clusterIP, nodePort: nodePort, podNS: podNS, echoNode: echoNode, echoIP: echoIP}
	arp := startSampler(time.Second, func() string {
		macs, _ := f.arping(l2IP, 1, 1)
		return strings.Join(macs, ",")
	})
	frr := startSampler(time.Second, ad.frrPaths)
	eps := startSampler(500*time.Millisecond, func() string { return fmt.Sprint(f.readyEndpoints(l2Name)) })
	defer arp.stop()
	defer frr.stop()
	defer eps.stop()
	ad.arp, ad.frr, ad.eps = arp, frr, eps

	t.Run("API server down 60 s", ad.checkAPIServerDown)
	t.Run("speaker SIGKILLed while the API server is down", ad.checkSpeakerKilledDuringOutage)
}

// checkAPIServerDown stops kube-apiserver for the outage and checks that
// nothing is withdrawn or changed, during it or after.
func (ad *apiDownRun) checkAPIServerDown(t *testing.T) {
	b, _ := ad.f.on(t)
	f := faults{b}
	probes := ad.startProbes()
	electionsBefore := ad.elections(f)
	ipsBefore := f.lbIPs()
	saBefore := f.announcementsOf(ad.l2Name, ad.bgpName)
	pathsBefore := ad.frrPaths()
	rulesBefore := f.rules(ad.victim)
	down := f.stopAPIServer()
	if !f.apiDown() {
		t.Fatal("the API server still answers after it was stopped")
	}
	t.Logf("kube-apiserver stopped; waiting %s", ad.outage)
	time.Sleep(ad.outage / 2)
	members := map[string]float64{}
	for _, n := range ad.nodes {
		members[n], _ = f.speakerMetric(n, "herald_speaker_members")
	}
	rulesDuring := f.rules(ad.victim)
	time.Sleep(ad.outage - time.Since(down))
	up, err := f.restoreAPIServer()
	if err != nil {
		t.Fatal(err)
	}
	apiGone := up.Sub(down)
	t.Logf("kube-apiserver back (ready) after %s down", apiGone.Round(time.Millisecond))
	settled := f.speakersSettled(3 * time.Minute)
	ctlBack := f.Poll(3*time.Minute, "the controller to lead again", func() (bool, string) {
		pods := ctl{f.T}.controllerPods()
		for i := range pods {
			if v, err := (ctl{f.T}).metric(&pods[i], "herald_controller_leader"); err == nil && v == 1 {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d controller pods, none leading", len(pods))
	})
	// Late writes, and what Kubernetes does after its own outage, show
	// within this time.
	end, saAfter, ipsAfter, events, examples := ad.afterReturn(f, 60*time.Second, up)
	created, rewritten, deleted := churn(saBefore, saAfter)
	arpDuring := distinct(between(ad.arp.samplesNow(), down, end))
	frrAll := between(ad.frr.samplesNow(), down, end)
	frrOutage := distinct(between(frrAll, down, up))
	epsPhase := between(ad.eps.samplesNow(), down, end)
	probesLine, heraldFailed, noEndpoint, backend := ad.stopProbes(t, probes, epsPhase)
	rulesAfter := f.rules(ad.victim)

	t.Logf("speaker memberlist members mid-outage: %v; herald iptables rules on %s (the kubernetes Service's left out): %d before, %d mid-outage (diff %q), %d after (diff %q)",
		members, ad.victim, len(rulesBefore), len(rulesDuring), ruleDiff(rulesBefore, rulesDuring), len(rulesAfter), ruleDiff(rulesBefore, rulesAfter))
	t.Logf("FRR paths for %s: before %q; during the outage %q; after the return %q", ad.bgpIP, pathsBefore, frrOutage, distinct(between(frrAll, up, end)))
	t.Logf("arping %s from the client, every second: MACs seen %q (want only %s's %s)", ad.l2IP, arpDuring, ad.victim, ad.macOf[ad.victim])
	t.Logf("%s's ready endpoints after the return: none during %q (from the return)", ad.l2Name, unreadyWindows(between(epsPhase, up, end), up))
	t.Logf("events after the return (default and %s): %v %q", heraldNS, events, examples)
	t.Logf("FAULT kube-apiserver down %s (etcd up) | %s | withdrawn during the outage: nothing (ARP MACs seen %v, FRR path sets %d); after the return: Service and NodeAnnouncements %d of %d rewritten/created/deleted (%d/%d/%d), Service IPs changed %d | recovery: API ready -> every speaker ready %s, controller leading %s; events after the return %d",
		apiGone.Round(time.Second), probesLine, arpDuring, len(frrOutage), rewritten+created+deleted, len(saBefore), rewritten, created, deleted,
		changedIPs(ipsBefore, ipsAfter), settled.Round(time.Millisecond), ctlBack.Round(time.Millisecond), sum(events))
	t.Logf("election changes summed over the speakers during the phase: %v", ad.elections(f)-electionsBefore)
	t.Logf("FAULT kube-apiserver down: failed requests blamed on herald %d, sent while Kubernetes had no ready endpoint %d, while the pod did not answer the direct probe either %d", heraldFailed, noEndpoint, backend)

	if !slices.Equal(arpDuring, []string{ad.macOf[ad.victim]}) {
		t.Errorf("arping saw %q, want exactly %s's MAC %s throughout", arpDuring, ad.victim, ad.macOf[ad.victim])
	}
	if !slices.Equal(frrOutage, []string{pathsBefore}) {
		t.Errorf("FRR's paths for %s changed during the outage: before %q, seen %q", ad.bgpIP, pathsBefore, frrOutage)
	}
	if !slices.Equal(announced(saAfter), announced(saBefore)) {
		t.Errorf("Service or NodeAnnouncements changed: before %v, after %v", saBefore, saAfter)
	}
	if n := changedIPs(ipsBefore, ipsAfter); n > 0 {
		t.Errorf("%d Service IPs changed: before %v, after %v", n, ipsBefore, ipsAfter)
	}
	if d := ruleDiff(rulesBefore, rulesDuring); len(d) > 0 {
		t.Errorf("herald's rules on %s changed during the outage: %q", ad.victim, d)
	}
}

// checkSpeakerKilledDuringOutage kills the victim's speaker while the API is
// down and checks that the restarted one waits for the API, the others taking
// its address over meanwhile.
func (ad *apiDownRun) checkSpeakerKilledDuringOutage(t *testing.T) {
	b, _ := ad.f.on(t)
	f := faults{b}
	ad.endpointsReady(f)
	f.speakersSettled(3 * time.Minute)
	if got := f.announcer("default", ad.l2Name, ad.l2IP, time.Minute); got != ad.victim {
		t.Fatalf("%s is announced by %s now, not %s", ad.l2IP, got, ad.victim)
	}
	probes := ad.startProbes()
	electionsBefore := ad.elections(f)
	ipsBefore := f.lbIPs()
	saBefore := f.announcementsOf(ad.l2Name, ad.bgpName)
	oldPID := f.speakerProcess(ad.victim, 0)
	joinsBefore := f.joins(ad.victim)
	rulesBefore := f.rules(ad.victim)
	others := slices.DeleteFunc(slices.Clone(ad.nodes), func(n string) bool { return n == ad.victim })

	down := f.stopAPIServer()
	time.Sleep(5 * time.Second)
	if err := syscall.Kill(oldPID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", oldPID, err)
	}
	killed := time.Now()
	var newPID int
	restartedIn := f.Poll(40*time.Second, "the lab kubelet to restart "+ad.victim+"'s speaker without the API", func() (bool, string) {
		newPID = f.speakerProcess(ad.victim, oldPID)
		return newPID != 0, "no new herald speaker process in " + ad.victim + "'s namespace"
	})
	t.Logf("speaker of %s SIGKILLed (pid %d) %s into the outage; the lab kubelet ran it again as pid %d after %s",
		ad.victim, oldPID, killed.Sub(down).Round(time.Millisecond), newPID, restartedIn.Round(time.Millisecond))
	// What the restarted speaker and the others do while the API is
	// still down.
	watch := startSampler(time.Second, func() string {
		var ms []string
		for _, n := range others {
			v, err := f.speakerMetric(n, "herald_speaker_members")
			ms = append(ms, fmt.Sprintf("%s=%v%s", n, v, errSuffix(err)))
		}
		peers, _ := f.frrPeers()
		st := "absent"
		if p, ok := peers[ad.victimIP]; ok {
			st = p.State
		}
		rz := f.speakerReadyz(ad.victim)
		if len(rz) > 60 {
			rz = rz[:60]
		}
		return fmt.Sprintf("members %s; %s readyz %q; FRR session from %s %s", strings.Join(ms, " "), ad.victim, rz, ad.victim, st)
	})
	time.Sleep(ad.killOutage - time.Since(down))
	rulesDuring := f.rules(ad.victim)
	joinsDuring := f.joins(ad.victim)
	up, err := f.restoreAPIServer()
	if err != nil {
		t.Fatal(err)
	}
	during := watch.stop()
	arpDown := between(ad.arp.samplesNow(), killed, up)
	t.Logf("kube-apiserver back after %s down", up.Sub(down).Round(time.Millisecond))

	// Back: it joins, turns ready, and takes its address back.
	joinedIn := f.Poll(2*time.Minute, ad.victim+"'s restarted speaker to join memberlist", func() (bool, string) {
		return f.joins(ad.victim) > joinsBefore, "no join logged yet"
	})
	readyIn := f.speakersSettled(3*time.Minute) + joinedIn
	settledIn := f.Poll(2*time.Minute, "the announcements as before the kill", func() (bool, string) {
		got := announced(f.announcementsOf(ad.l2Name, ad.bgpName))
		return slices.Equal(got, announced(saBefore)), fmt.Sprintf("%v, want %v", got, announced(saBefore))
	})
	var backOn time.Duration
	f.Poll(30*time.Second, "arping to get "+ad.victim+"'s MAC again", func() (bool, string) {
		macs, out := f.arping(ad.l2IP, 1, 1)
		backOn = time.Since(up)
		return slices.Equal(macs, []string{ad.macOf[ad.victim]}), out
	})
	end, saAfter, ipsAfter, events, examples := ad.afterReturn(f, 30*time.Second, up)
	created, rewritten, deleted := churn(saBefore, saAfter)
	epsPhase := between(ad.eps.samplesNow(), down, end)
	probesLine, heraldFailed, noEndpoint, backend := ad.stopProbes(t, probes, epsPhase)

	// The takeover during the outage: when another node's MAC answered.
	var takeover time.Duration = -1
	var takeoverMAC string
	for _, s := range arpDown {
		if s.Val != "" && s.Val != ad.macOf[ad.victim] {
			takeover, takeoverMAC = s.At.Sub(killed), s.Val
			break
		}
	}
	for _, s := range during {
		if s.At.Sub(killed) < 4*time.Second || len(during) < 8 || s.At.After(up.Add(-3*time.Second)) {
			t.Logf("  %s after the kill: %s", s.At.Sub(killed).Round(100*time.Millisecond), s.Val)
		}
	}
	t.Logf("arping %s between the kill and the return: %q", ad.l2IP, distinct(arpDown))
	t.Logf("%s's ready endpoints after the return: none during %q (from the return)", ad.l2Name, unreadyWindows(between(epsPhase, up, end), up))
	t.Logf("events after the return (default and %s): %v %q", heraldNS, events, examples)
	t.Logf("FAULT speaker of %s SIGKILLed %s into a %s API outage, restarted by the kubelet %s later | %s | withdrawn: %s's memberlist membership, its BGP session and path for %s, its L2 address (taken over by %s %s after the kill); the restarted speaker waited: memberlist joins %d, ARP answers 0, BGP sessions 0 until the API returned; herald rules on %s %d before / %d at the end of the outage | recovery: API ready -> joined %s, every speaker ready %s, address back on %s %s, announcements as before %s later; Service and NodeAnnouncements rewritten/created/deleted %d/%d/%d; Service IPs changed %d; events after the return %d",
		ad.victim, killed.Sub(down).Round(time.Second), up.Sub(down).Round(time.Second), restartedIn.Round(100*time.Millisecond), probesLine,
		ad.victim, ad.bgpIP, takeoverMAC, takeover.Round(100*time.Millisecond), joinsDuring-joinsBefore, ad.victim, len(rulesBefore), len(rulesDuring),
		joinedIn.Round(time.Millisecond), readyIn.Round(time.Millisecond), ad.victim, backOn.Round(time.Millisecond), settledIn.Round(time.Millisecond),
		rewritten, created, deleted, changedIPs(ipsBefore, ipsAfter), sum(events))
	t.Logf("election changes summed over the speakers during the phase (the killed one's count restarts at 0): %v", ad.elections(f)-electionsBefore)
	t.Logf("FAULT speaker SIGKILLed while the API is down: failed requests blamed on herald %d, sent while Kubernetes had no ready endpoint %d, while the pod did not answer the direct probe either %d", heraldFailed, noEndpoint, backend)

	// It waited: no join, never answering ARP, no BGP session, not
	// ready, while the API was down.
	if joinsDuring != joinsBefore {
		t.Errorf("the restarted speaker joined memberlist %d times while the API was down", joinsDuring-joinsBefore)
	}
	for _, s := range arpDown {
		if strings.Contains(s.Val, ",") || (s.At.Sub(killed) > 2*time.Second && s.Val == ad.macOf[ad.victim]) {
			t.Errorf("arping %s %s after the kill got %q: two MACs, or the restarted speaker answering", ad.l2IP, s.At.Sub(killed).Round(time.Millisecond), s.Val)
		}
	}
	if takeover < 0 {
		t.Errorf("no other node took %s over while %s's speaker waited: %q", ad.l2IP, ad.victim, distinct(arpDown))
	}
	for _, s := range during {
		if strings.Contains(s.Val, "Established") || strings.Contains(s.Val, `readyz "ok`) {
			t.Errorf("%s after the kill: %s (the restarted speaker must wait for the API)", s.At.Sub(killed).Round(time.Millisecond), s.Val)
		}
	}
	if len(during) == 0 || !strings.Contains(during[len(during)-1].Val, "members "+others[0]+"=2 ") {
		t.Errorf("at the end of the outage the others' memberlist still counts %s in: %v", ad.victim, during)
	}
	if d := ruleDiff(rulesBefore, rulesDuring); len(d) > 0 {
		t.Errorf("herald's rules on %s changed from before the kill to the end of the outage (flushed?): %q", ad.victim, d)
	}
	if n := changedIPs(ipsBefore, ipsAfter); n > 0 {
		t.Errorf("%d Service IPs changed: before %v, after %v", n, ipsBefore, ipsAfter)
	}
}

// startProbes starts a phase's probes, in apiDownProbeNames' order, the
// direct one last.
func (ad *apiDownRun) startProbes() []*harness.Probe {
	captureIn := []string{ad.h.Layout.Client, ad.h.Layout.Remote}
	for _, n := range ad.h.Layout.Nodes {
		captureIn = append(captureIn, n.Netns)
	}
	ad.resets = harness.StartRSTCapture(ad.h.T, captureIn)
	return []*harness.Probe{
		ad.h.StartProbe(ad.h.Layout.Client, ad.l2IP),
		ad.h.StartProbe(ad.h.Layout.Remote, ad.bgpIP),
		ad.h.StartProbePort(ad.h.Layout.Client, ad.victimIP, ad.nodePort),
		ad.h.StartProbe(ad.podNS, ad.clusterIP),
		ad.h.StartProbePort(ad.h.Node(ad.echoNode).Netns, ad.echoIP, 8080),
	}
}

// stopProbes ends a phase's probes and returns their figures, with
// each failure blamed on herald, on Kubernetes (no ready endpoint) or
// on the backend (the direct probe failed then too).
func (ad *apiDownRun) stopProbes(t *testing.T, probes []*harness.Probe, eps []sample) (figures string, heraldFailed, noEndpoint, backend int) {
	var parts []string
	for _, p := range probes {
		p.Stop()
	}
	direct := probes[len(probes)-1]
	for i, p := range probes[:len(probes)-1] {
		hf, ne, be := blame(p.FailedAt(), eps, direct.FailedAt())
		heraldFailed += len(hf)
		noEndpoint += len(ne)
		backend += len(be)
		parts = append(parts, fmt.Sprintf("%s (%d while no endpoint was ready, %d while the direct probe failed too)", probeLine(apiDownProbeNames[i], p), len(ne), len(be)))
		if len(hf) > 0 {
			t.Errorf("%s probe: %d requests failed while the Service had a ready endpoint that answered the direct probe: %s", apiDownProbeNames[i], len(hf), p.Failures())
			t.Logf("TCP resets near them (tcpdump -e in the clients' and every node's namespace):\n  %s", strings.Join(ad.resets.Near(hf), "\n  "))
		}
	}
	parts = append(parts, probeLine("direct to the pod "+ad.echoIP+":8080 from "+ad.echoNode, direct))
	return strings.Join(parts, "; "), heraldFailed, noEndpoint, backend
}

// frrPaths is FRR's paths for the BGP VIP, peer->next hop, sorted.
func (ad *apiDownRun) frrPaths() string {
	ps, raw := ad.f.frrPaths(ad.bgpIP)
	if ps == nil {
		return raw
	}
	var hops []string
	for _, p := range ps {
		hops = append(hops, p.Peer+"->"+p.NextHop)
	}
	slices.Sort(hops)
	return strings.Join(hops, ",")
}

// endpointsReady waits for a ready endpoint of the L2 Service.
func (ad *apiDownRun) endpointsReady(f faults) {
	f.Poll(3*time.Minute, "a ready endpoint of "+ad.l2Name, func() (bool, string) {
		n := f.readyEndpoints(ad.l2Name)
		return n > 0, fmt.Sprintf("%d ready", n)
	})
}

// elections sums the speakers' election changes (a restarted
// speaker's count starts again at 0).
func (ad *apiDownRun) elections(f faults) float64 {
	var n float64
	for _, node := range ad.nodes {
		v, _ := f.speakerMetric(node, "herald_speaker_election_changes_total")
		n += v
	}
	return n
}

// afterReturn waits for late effects of the outage, then for a ready
// endpoint, and reads what there is to compare.
func (ad *apiDownRun) afterReturn(f faults, wait time.Duration, up time.Time) (end time.Time, sa map[string]announcement, ips map[string]string, events map[string]int, examples []string) {
	time.Sleep(wait)
	ad.endpointsReady(f)
	time.Sleep(5 * time.Second)
	end = time.Now()
	events, examples = f.eventsSince(up)
	return end, f.announcementsOf(ad.l2Name, ad.bgpName), f.lbIPs(), events, examples
}

// samplesNow are the samples so far, the sampler running on.
func (s *sampler) samplesNow() []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.samples)
}

// changedIPs counts the Services in both maps whose IPs differ.
func changedIPs(before, after map[string]string) int {
	n := 0
	for k, b := range before {
		if a, ok := after[k]; ok && a != b {
			n++
		}
	}
	return n
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func errSuffix(err error) string {
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return ""
}
