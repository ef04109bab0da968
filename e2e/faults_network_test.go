package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/e2e/harness"
)

// frrTable is FRR's unicast BGP table of one family in one call: each
// prefix with the sorted next hops of its valid paths (none when no
// path is valid). IPv6 paths carry the global next hop first.
func (b bgpLab) frrTable(v6 bool) (map[string][]string, error) {
	fam := "ipv4"
	if v6 {
		fam = "ipv6"
	}
	out, err := b.frr().Vtysh(b.Ctx, "show bgp "+fam+" unicast json")
	if err != nil {
		return nil, err
	}
	var r struct {
		Routes map[string][]struct {
			Valid    bool `json:"valid"`
			Nexthops []struct {
				IP string `json:"ip"`
			} `json:"nexthops"`
		} `json:"routes"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return nil, fmt.Errorf("%v in %.300q", err, out)
	}
	t := map[string][]string{}
	for prefix, paths := range r.Routes {
		var hops []string
		for _, p := range paths {
			if p.Valid && len(p.Nexthops) > 0 {
				hops = append(hops, p.Nexthops[0].IP)
			}
		}
		slices.Sort(hops)
		t[prefix] = hops
	}
	return t, nil
}

// tableHas tells whether table routes every prefix of want via exactly
// its next hops, and lists what differs.
func tableHas(table, want map[string][]string) (bool, string) {
	var diff []string
	for p, hops := range want {
		if !slices.Equal(table[p], hops) {
			diff = append(diff, fmt.Sprintf("%s via %v, want %v", p, table[p], hops))
		}
	}
	slices.Sort(diff)
	return len(diff) == 0, strings.Join(diff, "; ")
}

// waitTable polls FRR's table every 100 ms until it holds want, and
// returns the time from since.
func (b bgpLab) waitTable(want map[string][]string, since time.Time, timeout time.Duration) (time.Duration, error) {
	var last string
	for time.Since(since) < timeout {
		t, err := b.frrTable(false)
		if err == nil {
			ok, diff := tableHas(t, want)
			if ok {
				return time.Since(since), nil
			}
			last = diff
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0, fmt.Errorf("no full table %s after the fault: %s", timeout, last)
}

// TestFaultsNetworkRouterRestart restarts the router's FRR (every
// daemon, as a reboot or a service restart would) and then resets every
// session from the router (`clear bgp *`), with three Cluster Services
// (ECMP over every node) and one Local Service (one node) over BGP, a
// BGPPeer without connectTime (the default), and a remote client probing
// a Cluster address every 20 ms. The figure: the time from the fault to
// FRR's full table (every prefix with every expected next hop).
//
// HERALD_ROUTER_CONNECT_TIME (e.g. 120s, GoBGP's own default) sets the
// BGPPeer's connectTime instead, to compare.
func TestFaultsNetworkRouterRestart(t *testing.T) {
	h := harness.Start(t)
	b := newBGPLab(h)
	const name = "flt-rtr"
	b.readySpeakers(2 * time.Minute)
	nodes := b.nodeNames()
	t.Cleanup(func() {
		for _, s := range []string{name + "-0", name + "-1", name + "-2", name + "-local"} {
			_, _ = h.K.Run(h.Ctx, "delete", "service", s, "--ignore-not-found")
		}
		_, _ = h.K.Run(h.Ctx, "delete", "deployment", name, "--ignore-not-found")
		_, _ = h.K.Run(h.Ctx, "-n", heraldNS, "delete", "bgppeer,bgpadvertisement,ipaddresspool", name, "--ignore-not-found")
	})
	// No connectTime: the default is what is measured.
	peer := strings.Replace(bgpPeerYAML(name, generalPeerSelector), "  connectTime: 1s\n", "", 1)
	if ct := os.Getenv("HERALD_ROUTER_CONNECT_TIME"); ct != "" {
		peer = bgpPeerYAML(name, generalPeerSelector, "connectTime: "+ct)
	}
	h.Apply(bgpPoolYAML(name, "203.0.113.192/28") + bgpAdvertisementYAML(name, name) + peer +
		echoDeploymentYAML(name, nodes[0], 1))
	h.ReadyPods("app="+name, 1, 2*time.Minute)
	var yaml strings.Builder
	for i := range 3 {
		yaml.WriteString(lbServiceYAML(fmt.Sprintf("%s-%d", name, i), name, name, "Cluster", ""))
	}
	yaml.WriteString(lbServiceYAML(name+"-local", name, name, "Local", ""))
	h.Apply(yaml.String())
	c := ctl{h}
	want := map[string][]string{}
	var cluster0 string
	for i := range 3 {
		ip := c.waitAnyIP("default", fmt.Sprintf("%s-%d", name, i))
		want[ip+"/32"] = b.nodeIPs(nodes...)
		if i == 0 {
			cluster0 = ip
		}
	}
	want[c.waitAnyIP("default", name+"-local")+"/32"] = b.nodeIPs(nodes[0])
	b.waitSessions(time.Minute, nodes...)
	if _, err := b.waitTable(want, time.Now(), time.Minute); err != nil {
		t.Fatal(err)
	}
	b.waitRemoteEcho("http://"+cluster0+"/", func(string) bool { return true }, "the remote client to reach "+cluster0)
	t.Logf("FRR routes %d prefixes (3 Cluster over %d nodes, 1 Local over %s); BGPPeer: %s", len(want), len(nodes), nodes[0],
		strings.ReplaceAll(strings.TrimSpace(peer[strings.Index(peer, "spec:"):]), "\n", ";"))

	fault := func(what string, do func() error) {
		t.Helper()
		before, _ := b.frrPeers()
		probe := b.StartProbe(b.Layout.Remote, cluster0)
		time.Sleep(time.Second)
		start := time.Now()
		if err := do(); err != nil {
			probe.Stop()
			t.Fatalf("%s: %v", what, err)
		}
		done := time.Since(start)
		full, err := b.waitTable(want, start, 3*time.Minute)
		time.Sleep(time.Second)
		probe.Stop()
		sent, failed := probe.Result()
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
		after, _ := b.frrPeers()
		var sessions []string
		for _, n := range nodes {
			p := after[b.nodeIP(n)]
			sessions = append(sessions, fmt.Sprintf("%s %s (#%d, was #%d)", n, p.State, p.Established, before[b.nodeIP(n)].Established))
		}
		t.Logf("FIGURE %s | remote client on a Cluster VIP: %d of %d requests failed, longest gap %s | withdrawn: every route at the router until the sessions were back | full table (%d prefixes, all next hops) %s after the fault (the fault itself took %s)",
			what, failed, sent, probe.MaxGap(), len(want), full.Round(time.Millisecond), done.Round(time.Millisecond))
		t.Logf("%s: sessions at FRR now: %s; first failures: %s", what, strings.Join(sessions, ", "), probe.Failures())
		if full > 20*time.Second {
			t.Errorf("%s: the full table took %s; sessions must come back within seconds", what, full)
		}
	}
	fault("router restart (FRR zebra+bgpd+bfdd stopped and started)", func() error { return h.Lab.RestartRouter(h.Ctx) })
	b.waitSessions(time.Minute, nodes...)
	fault("router-side session reset (vtysh clear bgp *)", func() error {
		out, err := b.frr().Vtysh(h.Ctx, "clear bgp *")
		if err == nil && strings.Contains(out, "%") {
			err = fmt.Errorf("vtysh: %s", out)
		}
		return err
	})
}

// nodeReady is the status of node's Ready condition ("" if none).
func (s l2) nodeReady(node string) string {
	n, err := s.CS.CoreV1().Nodes().Get(s.Ctx, node, metav1.GetOptions{})
	if err != nil {
		return "error: " + err.Error()
	}
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return string(c.Status)
		}
	}
	return ""
}

// TestFaultsNetworkNodeNotReady freezes a node's lab kubelet (SIGSTOP: a
// hung or stopped kubelet, while the node's speaker, proxy and pods keep
// running, as they do on a real node) until the node controller marks
// the Node NotReady (Ready Unknown), then lets it go on. The node wins
// an L2 Cluster address and is a next hop of a BGP Cluster address and
// of a BGP Local one. The choice proven: herald keeps announcing on
// memberlist, not on the Node's Ready condition, so the Cluster
// addresses neither move nor fail; a Local Service follows its
// endpoints, which Kubernetes marks not ready on a NotReady node, so
// that node's next hop for it is withdrawn, and comes back when the
// kubelet does.
func TestFaultsNetworkNodeNotReady(t *testing.T) {
	h := harness.Start(t)
	b := newBGPLab(h)
	s := b.l2
	const name = "flt-nr"
	b.readySpeakers(2 * time.Minute)
	nodes := b.nodeNames()
	macOf := map[string]string{}
	for mac, n := range s.macOwners() {
		macOf[n] = mac
	}
	t.Cleanup(func() {
		for _, svc := range []string{name + "-l2", name + "-bgp", name + "-local"} {
			_, _ = h.K.Run(h.Ctx, "delete", "service", svc, "--ignore-not-found")
		}
		for _, n := range nodes {
			_, _ = h.K.Run(h.Ctx, "delete", "deployment", name+"-"+n, "--ignore-not-found")
		}
		_, _ = h.K.Run(h.Ctx, "-n", heraldNS, "delete", "l2advertisement,bgppeer,bgpadvertisement,ipaddresspool", name, name+"-bgp", "--ignore-not-found")
	})
	l2ip, bgpIP, localIP, victim, all := serveNotReadyServices(t, h, b, name, nodes)

	l2probe := h.StartProbe(h.Layout.Client, l2ip)
	bgpProbe := b.StartProbe(b.Layout.Remote, bgpIP)
	localProbe := b.StartProbe(b.Layout.Remote, localIP)
	stopProbes := func() {
		l2probe.Stop()
		bgpProbe.Stop()
		localProbe.Stop()
	}
	// Changes watched every 200 ms: the L2 winner, and each BGP prefix's
	// next hops.
	var changes []change
	lastWinner, lastTable := victim, map[string][]string{bgpIP + "/32": all, localIP + "/32": all}
	start := time.Now()
	watch := func() {
		if w := s.announcer("default", name+"-l2", l2ip, 5*time.Second); w != lastWinner {
			changes = append(changes, change{time.Since(start), fmt.Sprintf("L2 %s: %s -> %s", l2ip, lastWinner, w)})
			lastWinner = w
		}
		if tb, err := b.frrTable(false); err == nil {
			for p := range lastTable {
				if !slices.Equal(tb[p], lastTable[p]) {
					changes = append(changes, change{time.Since(start), fmt.Sprintf("BGP %s: %v -> %v", p, lastTable[p], tb[p])})
					lastTable[p] = tb[p]
				}
			}
		}
	}
	pid := h.KubeletPID(victim)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		stopProbes()
		t.Fatal(err)
	}
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	var notReady time.Duration
	for time.Since(start) < 3*time.Minute {
		watch()
		if notReady == 0 && s.nodeReady(victim) != "True" {
			notReady = time.Since(start)
			t.Logf("%s NotReady (Ready %s) %s after its kubelet stopped", victim, s.nodeReady(victim), notReady.Round(time.Second))
		}
		// 20 s past NotReady: the node controller has marked the pods
		// not ready by then.
		if notReady > 0 && time.Since(start) > notReady+20*time.Second {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if notReady == 0 {
		stopProbes()
		t.Fatalf("%s still Ready 3 minutes after its kubelet stopped", victim)
	}
	localDuring := slices.Clone(lastTable[localIP+"/32"])
	winnerDuring := lastWinner
	resumeAt := time.Since(start)
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	var readyAgain time.Duration
	for time.Since(start) < resumeAt+90*time.Second {
		watch()
		if readyAgain == 0 && s.nodeReady(victim) == "True" {
			readyAgain = time.Since(start)
		}
		if readyAgain > 0 && slices.Equal(lastTable[localIP+"/32"], all) && time.Since(start) > readyAgain+5*time.Second {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	stopProbes()
	var log []string
	for _, ch := range changes {
		log = append(log, fmt.Sprintf("+%s %s", ch.at.Round(100*time.Millisecond), ch.what))
	}
	l2s, l2f := l2probe.Result()
	bs, bf := bgpProbe.Result()
	ls, lf := localProbe.Result()
	t.Logf("FIGURE node NotReady (kubelet of %s stopped %s, NotReady after %s, kubelet resumed at +%s, Ready again at +%s) | L2 Cluster VIP: %d of %d failed (longest gap %s); BGP Cluster VIP: %d of %d failed (gap %s); BGP Local VIP: %d of %d failed (gap %s) | withdrawn: %s | recovery: Local next hop back %s",
		victim, "at +0s", notReady.Round(time.Second), resumeAt.Round(time.Second), readyAgain.Round(time.Second),
		l2f, l2s, l2probe.MaxGap(), bf, bs, bgpProbe.MaxGap(), lf, ls, localProbe.MaxGap(), strings.Join(log, "; "), localBack(changes, localIP+"/32", resumeAt))
	if winnerDuring != victim {
		t.Errorf("the L2 address moved from %s to %s while its kubelet was stopped: the node's speaker still ran", victim, winnerDuring)
	}
	if l2f > 0 || bf > 0 {
		t.Errorf("requests failed on the Cluster addresses: L2 %d (%s), BGP %d (%s)", l2f, l2probe.Failures(), bf, bgpProbe.Failures())
	}
	for _, ch := range changes {
		if strings.HasPrefix(ch.what, "BGP "+bgpIP) || strings.HasPrefix(ch.what, "L2 ") {
			t.Errorf("a Cluster address changed: %s", ch.what)
		}
	}
	if slices.Contains(localDuring, b.nodeIP(victim)) {
		t.Errorf("the Local address still routed via %s while its endpoint was not ready: %v", victim, localDuring)
	}
	if !slices.Equal(lastTable[localIP+"/32"], all) {
		t.Errorf("the Local address did not come back on every node: %v", lastTable[localIP+"/32"])
	}
}

// serveNotReadyServices runs an echo pod on every node behind an L2
// Service, a BGP Cluster and a BGP Local one, and waits until each
// answers; victim is the L2 address's winner, all the nodes' addresses.
func serveNotReadyServices(t *testing.T, h *harness.T, b bgpLab, name string, nodes []string) (l2ip, bgpIP, localIP, victim string, all []string) {
	s := b.l2
	// One echo pod on every node, all app=name: the Cluster Services keep
	// endpoints when one node's go not ready.
	var yaml strings.Builder
	for _, n := range nodes {
		yaml.WriteString(strings.ReplaceAll(echoDeploymentYAML(name+"-"+n, n, 1), "app: "+name+"-"+n, "app: "+name))
	}
	h.Apply(yaml.String())
	h.Apply(poolYAML(name, []string{"198.51.100.246-198.51.100.249"}, "autoAssign: false") +
		fmt.Sprintf("---\napiVersion: herald.io/v1beta1\nkind: L2Advertisement\nmetadata: {name: %s, namespace: %s}\nspec:\n  ipAddressPools: [%s]\n", name, heraldNS, name) +
		bgpPoolYAML(name+"-bgp", "203.0.113.208/28") + bgpAdvertisementYAML(name+"-bgp", name+"-bgp") + bgpPeerYAML(name+"-bgp", generalPeerSelector))
	h.ReadyPods("app="+name, len(nodes), 2*time.Minute)
	h.Apply(lbServiceYAML(name+"-l2", name, name, "Cluster", "") + lbServiceYAML(name+"-bgp", name, name+"-bgp", "Cluster", "") +
		lbServiceYAML(name+"-local", name, name+"-bgp", "Local", ""))
	c := ctl{h}
	l2ip = c.waitAnyIP("default", name+"-l2")
	bgpIP = c.waitAnyIP("default", name+"-bgp")
	localIP = c.waitAnyIP("default", name+"-local")
	victim = s.announcer("default", name+"-l2", l2ip, time.Minute)
	b.waitSessions(time.Minute, nodes...)
	all = b.nodeIPs(nodes...)
	want := map[string][]string{bgpIP + "/32": all, localIP + "/32": all}
	if _, err := b.waitTable(want, time.Now(), time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s wins the L2 address %s and is a next hop of %s (Cluster) and %s (Local, a pod on every node)", victim, l2ip, bgpIP, localIP)
	// The fault is measured from a working path: each address answers
	// its client before the probes start.
	for _, c := range []struct{ ns, ip string }{{h.Layout.Client, l2ip}, {b.Layout.Remote, bgpIP}, {b.Layout.Remote, localIP}} {
		h.Poll(time.Minute, "the first answer from "+c.ip, func() (bool, string) {
			ok, err := harness.EchoGet(c.ns, c.ip, time.Second)
			return ok, fmt.Sprint(err)
		})
	}
	return l2ip, bgpIP, localIP, victim, all
}

// change is one announcement change a fault test saw, at its time
// since the fault.
type change struct {
	at   time.Duration
	what string
}

// localBack says when the last change of prefix after resume happened.
func localBack(changes []change, prefix string, after time.Duration) string {
	for i := len(changes) - 1; i >= 0; i-- {
		if changes[i].at >= after && strings.Contains(changes[i].what, prefix) {
			return fmt.Sprintf("+%s (%s after the kubelet resumed)", changes[i].at.Round(100*time.Millisecond), (changes[i].at - after).Round(100*time.Millisecond))
		}
	}
	return "(no change after resume)"
}
