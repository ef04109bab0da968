package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// l2Suite is what TestSpeakerL2's steps share.
type l2Suite struct {
	s    l2
	name string
	// macOf is each node's eth0 MAC; nodeOf, the node of a MAC.
	macOf, nodeOf map[string]string
	// ip and url are the Service's address and its URL.
	ip, url string
	// winner is the node the first step found announcing ip.
	winner string
}

// TestSpeakerL2 checks `herald speaker` as installed by config/deploy,
// from the LAN client, the way a user would see it: an IPAddressPool and
// an L2Advertisement, `kubectl expose --type=LoadBalancer`, then arping
// (exactly one MAC, the winner's) and curl; the ServiceAnnouncement,
// events, metrics and `herald status`; interface selection;
// externalTrafficPolicy Local following the pod; failover when the
// winner's speaker is SIGKILLed (the client's ARP entry follows by
// gratuitous ARP alone) and when its LAN link goes down.
func TestSpeakerL2(t *testing.T) {
	h := harness.Start(t)
	s := l2{h}
	const name = "sp-l2"
	s.readySpeakers(2 * time.Minute)
	macOf := map[string]string{}
	nodeOf := s.macOwners()
	for mac, n := range nodeOf {
		macOf[n] = mac
	}
	t.Cleanup(func() {
		_, _ = h.K.Run(h.Ctx, "delete", "service", name, "--ignore-not-found")
		_, _ = h.K.Run(h.Ctx, "delete", "deployment", name, "--ignore-not-found")
		_, _ = h.K.Run(h.Ctx, "-n", heraldNS, "delete", "l2advertisement,ipaddresspool", name, "--ignore-not-found")
		h.Poll(time.Minute, "the ServiceAnnouncements of "+name+" to be gone", func() (bool, string) {
			a := s.announcements("default", name)
			return len(a) == 0, fmt.Sprint(a)
		})
	})
	h.Apply(l2Objects(name, "198.51.100.220-198.51.100.229", "2001:db8:0:1::220-2001:db8:0:1::229", "node1"))
	h.ReadyPods("app="+name, 1, 2*time.Minute)
	created := time.Now()
	h.Kubectl("expose", "deployment", name, "--name="+name, "--port=80", "--target-port=8080", "--type=LoadBalancer")
	ip := ctl{h}.waitAnyIP("default", name)
	url := "http://" + ip + "/"
	h.Poll(30*time.Second, "the first answer from "+url, func() (bool, string) {
		page, err := s.curlClient(url)
		return err == nil && strings.Contains(page, "CLIENT VALUES:"), fmt.Sprint(err)
	})
	t.Logf("TIMING Service created -> first successful curl from the client: %s", time.Since(created).Round(time.Millisecond))

	ls := &l2Suite{s: s, name: name, macOf: macOf, nodeOf: nodeOf, ip: ip, url: url}

	t.Run("arping and curl", ls.checkARPingAndCurl)
	t.Run("IPv6 with ndisc6", ls.checkIPv6NDisc)
	t.Run("interface selection", ls.checkInterfaceSelection)
	t.Run("externalTrafficPolicy Local", ls.checkLocalFollowsPod)
	t.Run("failover: speaker SIGKILL", ls.checkFailoverSpeakerKill)
	t.Run("failover: link down", ls.checkFailoverLinkDown)
}

// checkARPingAndCurl checks that exactly the winner's MAC answers ARP and
// curl gets through; ServiceAnnouncement, event, metrics, herald status.
func (ls *l2Suite) checkARPingAndCurl(t *testing.T) {
	s, h := ls.s.on(t)
	ls.winner = ls.winnerAnswers(s, anyNode, "one node to announce "+ls.ip)
	macs, out := s.arping(ls.ip, 3, 3)
	t.Logf("$ arping -i eth0 -c 3 -w 3 -r %s  # from the client\n%s=> %v, %s's eth0 is %s", ls.ip, out, macs, ls.winner, ls.macOf[ls.winner])
	if !slices.Equal(macs, []string{ls.macOf[ls.winner]}) {
		t.Fatalf("arping got %v, want exactly %s's MAC %s", macs, ls.winner, ls.macOf[ls.winner])
	}
	page, err := s.curlClient(ls.url)
	if err != nil {
		t.Fatalf("curl %s: %v", ls.url, err)
	}
	a := harness.ClientAddress(page)
	if n, ok := topologyNodeByIP(h, a); !ok {
		t.Errorf("Cluster policy: client_address=%s, want a node's IP (SNAT)", a)
	} else {
		t.Logf("curl %s from the client: client_address=%s (%s, SNAT)", ls.url, a, n)
	}
	if got, want := s.announcements("default", ls.name), []string{ls.winner + `:layer2:["eth0"]:["` + ls.ip + `"]`}; !slices.Equal(got, want) {
		t.Errorf("ServiceAnnouncements %v, want %v (eth0 only: never the pod bridge cbr0)", got, want)
	}
	out2 := h.Kubectl("-n", heraldNS, "get", "serviceannouncements", "-l", "herald.io/service-name="+ls.name)
	t.Logf("$ kubectl -n %s get serviceannouncements -l herald.io/service-name=%s\n%s", heraldNS, ls.name, out2)
	ctl{h}.waitEvent("default", ls.name, "Announcing", "announcing "+ls.ip+" from node "+ls.winner+" on eth0")
	if v, err := s.speakerMetric(ls.winner, `herald_speaker_announced_ips{family="IPv4"}`); err != nil || v < 1 {
		t.Errorf("%s: herald_speaker_announced_ips{family=IPv4} = %v (%v), want >= 1", ls.winner, v, err)
	}
	if v, err := s.speakerMetric(ls.winner, `herald_speaker_responses_sent_total{interface="eth0",protocol="arp"}`); err != nil || v < 3 {
		t.Errorf("%s: ARP responses sent = %v (%v), want >= 3 after arping", ls.winner, v, err)
	}
	if v, err := s.speakerMetric(ls.winner, `herald_speaker_gratuitous_sent_total{interface="eth0",protocol="arp"}`); err != nil || v < 2 {
		t.Errorf("%s: gratuitous ARP sent = %v (%v), want >= 2 (both forms on takeover)", ls.winner, v, err)
	}
	st, err := s.heraldStatus("default/" + ls.name)
	t.Logf("$ herald status default/%s\n%s", ls.name, st)
	if err != nil || !strings.Contains(st, ls.ip) || !strings.Contains(st, ls.name) || !strings.Contains(st, ls.winner+" (layer2 on eth0)") {
		t.Errorf("herald status: %v\n%s", err, st)
	}
}

// checkIPv6NDisc checks a dual-stack Service over IPv6: NDP answered by the
// announcer, curl SNATed under Cluster and Local following the pod.
func (ls *l2Suite) checkIPv6NDisc(t *testing.T) {
	s, h := ls.s.on(t)
	// The lab is dual-stack with IPv4 first, so `kubectl expose` made
	// an IPv4-only Service; PreferDualStack adds an IPv6 ClusterIP and
	// LoadBalancer IP. Back to SingleStack afterwards, so the other
	// subtests see the Service they always did.
	h.Kubectl("patch", "service", ls.name, "-p", `{"spec":{"ipFamilyPolicy":"PreferDualStack"}}`)
	t.Cleanup(func() {
		h.Kubectl("patch", "service", ls.name, "-p", `{"spec":{"ipFamilyPolicy":"SingleStack","externalTrafficPolicy":"Cluster"}}`)
		h.Poll(30*time.Second, "the Service to be IPv4-only again", func() (bool, string) {
			cur, err := h.CS.CoreV1().Services("default").Get(h.Ctx, ls.name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			ing := cur.Status.LoadBalancer.Ingress
			return len(cur.Spec.IPFamilies) == 1 && len(ing) == 1 && ing[0].IP == ls.ip, fmt.Sprint(cur.Spec.IPFamilies, ing)
		})
	})
	svc, err := h.CS.CoreV1().Services("default").Get(h.Ctx, ls.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(svc.Spec.IPFamilies, []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}) {
		t.Fatalf("PreferDualStack on the dual-stack lab: ipFamilies %v clusterIPs %v, want IPv4 then IPv6", svc.Spec.IPFamilies, svc.Spec.ClusterIPs)
	}
	var ip6 string
	h.Poll(30*time.Second, "an IPv6 address", func() (bool, string) {
		cur, err := h.CS.CoreV1().Services("default").Get(h.Ctx, ls.name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, in := range cur.Status.LoadBalancer.Ingress {
			if strings.Contains(in.IP, ":") {
				ip6 = in.IP
			}
		}
		return ip6 != "", fmt.Sprint(cur.Status.LoadBalancer.Ingress)
	})
	url6 := "http://[" + ip6 + "]/"
	// ndisc6 from the client must get exactly the announcer's MAC.
	ndiscAnswers := func(want func(string) bool, what string) string {
		t.Helper()
		var node string
		h.Poll(45*time.Second, what, func() (bool, string) {
			who, anns := s.announcersOf("default", ls.name, ip6)
			if len(who) != 1 {
				return false, fmt.Sprintf("announcements %v", anns)
			}
			node = who[0]
			out, err := h.Exec("client", "ndisc6", "-q", "-1", "-r", "2", "-w", "500", ip6, "eth0")
			return err == nil && want(node) && strings.ToLower(strings.TrimSpace(out)) == ls.macOf[node],
				fmt.Sprintf("announcer %s (eth0 %s); ndisc6: %s %v", node, ls.macOf[node], strings.TrimSpace(out), err)
		})
		return node
	}
	node := ndiscAnswers(anyNode, "ndisc6 to get the announcer's MAC for "+ip6)
	t.Logf("$ ndisc6 -q -1 %s eth0  # from the client\n=> %s, %s's eth0", ip6, ls.macOf[node], node)
	// The proxy writes the IPv6 rules on its own sync, after the
	// EndpointSlice for IPv6 appears: the answer may lag the NDP one.
	var page string
	if err := pollErr(h.Ctx, 30*time.Second, func() (bool, string) {
		var err error
		page, err = s.curlClient(url6)
		return err == nil && strings.Contains(page, "CLIENT VALUES:"), fmt.Sprint(err)
	}); err != nil {
		rules, _ := h.Exec(node, "sh", "-c", "ip6tables-save -t nat | grep -F -e "+ip6+" -e HERALD-SVC | head -40")
		neigh, _ := h.Exec("client", "ip", "-6", "neigh")
		slices6 := h.Kubectl("get", "endpointslices", "-l", "kubernetes.io/service-name="+ls.name, "-o", "wide")
		t.Fatalf("curl %s: %v\nip6tables nat on %s:\n%s\nclient neighbors:\n%s\n%s", url6, err, node, rules, neigh, slices6)
	}
	if n, ok := topologyNodeByIP(h, harness.ClientAddress(page)); !ok {
		t.Errorf("Cluster policy over IPv6: client_address=%s, want a node's IPv6 address (SNAT)", harness.ClientAddress(page))
	} else {
		t.Logf("curl %s from the client: client_address=%s (%s, SNAT)", url6, harness.ClientAddress(page), n)
	}
	if v, err := s.speakerMetric(node, `herald_speaker_responses_sent_total{interface="eth0",protocol="ndp"}`); err != nil || v < 1 {
		t.Errorf("%s: NDP responses sent = %v (%v), want >= 1 after ndisc6", node, v, err)
	}

	// Local: only the pod's node announces, and the pod sees the
	// client's own IPv6 address.
	h.Kubectl("patch", "service", ls.name, "-p", `{"spec":{"externalTrafficPolicy":"Local"}}`)
	pods, _ := h.ReadyPods("app="+ls.name, 1, 2*time.Minute)
	at := pods[0].Spec.NodeName
	got := ndiscAnswers(func(n string) bool { return n == at }, "the node with the pod ("+at+") to answer NDP for "+ip6)
	h.Poll(30*time.Second, "the client's own IPv6 address in client_address", func() (bool, string) {
		page, err := s.curlClient(url6)
		return err == nil && harness.ClientAddress(page) == topology.ClientV6.String(), harness.ClientAddress(page) + fmt.Sprint(err)
	})
	t.Logf("externalTrafficPolicy Local: %s announces %s, client_address=%s", got, ip6, topology.ClientV6)
}

// checkInterfaceSelection checks that an advertisement on an interface no
// node has announces nothing, and herald status says why.
func (ls *l2Suite) checkInterfaceSelection(t *testing.T) {
	s, h := ls.s.on(t)
	// An advertisement naming an interface no node has announces
	// nothing; naming eth0 again brings the same winner back.
	h.Kubectl("-n", heraldNS, "patch", "l2advertisement", ls.name, "--type=merge", "-p", `{"spec":{"interfaces":["nope0"]}}`)
	h.Poll(30*time.Second, "nobody to announce "+ls.ip, func() (bool, string) {
		a := s.announcements("default", ls.name)
		macs, _ := s.arping(ls.ip, 1, 1)
		return len(a) == 0 && len(macs) == 0, fmt.Sprintf("announcements %v, arping %v", a, macs)
	})
	// The reporting speaker publishes why, and herald status says it.
	want := "nobody: layer2: no node is eligible to announce the IP (no interface to announce the IP on is present and up: node1, node2, node3)"
	var st string
	h.Poll(30*time.Second, "herald status to give the speakers' reason for "+ls.ip, func() (bool, string) {
		st, _ = s.heraldStatus("default/" + ls.name)
		return strings.Contains(st, want), st
	})
	t.Logf("interfaces [nope0]: nobody answers ARP; herald status:\n%s", st)
	h.Kubectl("-n", heraldNS, "patch", "l2advertisement", ls.name, "--type=merge", "-p", `{"spec":{"interfaces":["eth0"]}}`)
	if back := ls.winnerAnswers(s, anyNode, "an announcer on eth0 again"); back != ls.winner {
		t.Errorf("winner %s after the advertisement came back, was %s (same inputs, same election)", back, ls.winner)
	}
}

// checkLocalFollowsPod checks that under externalTrafficPolicy Local the
// pod's node announces, following the pod, with the client's own address.
func (ls *l2Suite) checkLocalFollowsPod(t *testing.T) {
	s, h := ls.s.on(t)
	h.Kubectl("patch", "service", ls.name, "-p", `{"spec":{"externalTrafficPolicy":"Local"}}`)
	t.Cleanup(func() { h.Kubectl("patch", "service", ls.name, "-p", `{"spec":{"externalTrafficPolicy":"Cluster"}}`) })
	podNode := func() string {
		pods, _ := h.ReadyPods("app="+ls.name, 1, 2*time.Minute)
		return pods[0].Spec.NodeName
	}
	for step, target := range []string{"", "node3", "node2"} {
		if target != "" {
			h.Kubectl("patch", "deployment", ls.name, "-p", fmt.Sprintf(`{"spec":{"template":{"spec":{"nodeSelector":{"kubernetes.io/hostname":%q}}}}}`, target))
			h.Poll(2*time.Minute, "the pod to move to "+target, func() (bool, string) {
				pods := h.Pods("app=" + ls.name)
				return len(pods) == 1 && pods[0].Spec.NodeName == target && harness.PodReady(&pods[0]), fmt.Sprint(len(pods))
			})
		}
		at := podNode()
		start := time.Now()
		got := ls.winnerAnswers(s, func(n string) bool { return n == at }, "the node with the pod ("+at+") to announce")
		h.Poll(30*time.Second, "the client's own IP in client_address", func() (bool, string) {
			page, err := s.curlClient(ls.url)
			return err == nil && harness.ClientAddress(page) == topology.ClientV4.String(), harness.ClientAddress(page) + fmt.Sprint(err)
		})
		t.Logf("step %d: pod on %s -> %s announces (after %s), client_address=%s", step, at, got, time.Since(start).Round(time.Millisecond), topology.ClientV4)
	}
}

// checkFailoverSpeakerKill checks that the client's ARP entry follows a
// SIGKILLed winner's IP to another node by gratuitous ARP alone.
func (ls *l2Suite) checkFailoverSpeakerKill(t *testing.T) {
	s, h := ls.s.on(t)
	w := ls.winnerAnswers(s, anyNode, "a stable announcer")
	// The client learns the IP's MAC from its own traffic.
	if _, err := s.curlClient(ls.url); err != nil {
		t.Fatal(err)
	}
	if m, st := s.neighMAC(ls.ip); m != ls.macOf[w] {
		t.Fatalf("client neighbor entry for %s: %q (%s), want %s's %s", ls.ip, m, st, w, ls.macOf[w])
	}
	pod := s.killSpeaker(w)
	killed := time.Now()
	// No traffic from here on: only a gratuitous ARP from the new
	// winner can change the client's entry.
	var moved time.Duration
	var to string
	h.Poll(10*time.Second, "the client's neighbor entry to move off "+w, func() (bool, string) {
		m, st := s.neighMAC(ls.ip)
		to, moved = ls.nodeOf[m], time.Since(killed)
		return m != "" && m != ls.macOf[w] && to != "", fmt.Sprintf("%s (%s)", m, st)
	})
	t.Logf("speaker on %s SIGKILLed: the client's neighbor entry for %s moved to %s (%s) %s later, by gratuitous ARP", w, ls.ip, to, ls.macOf[to], moved.Round(time.Millisecond))
	// One request, before the kubelet restarts the killed speaker
	// (which takes the IP back: it ranks first for it).
	if macs, out := s.arping(ls.ip, 1, 1); !slices.Equal(macs, []string{ls.macOf[to]}) {
		t.Errorf("after the kill arping got %v, want %s only:\n%s", macs, to, out)
	}
	if _, err := s.curlClient(ls.url); err != nil {
		t.Errorf("curl through %s: %v", to, err)
	}
	// The kubelet restarts the speaker; the IP settles again.
	h.Poll(2*time.Minute, "the speaker on "+w+" to run again", func() (bool, string) {
		p, ok := s.speakers()[w]
		return ok && harness.PodReady(&p) && p.Status.ContainerStatuses[0].RestartCount > pod.Status.ContainerStatuses[0].RestartCount, ""
	})
	after := ls.winnerAnswers(s, anyNode, "one announcer after the restart")
	t.Logf("after %s's speaker restarted, %s announces", w, after)
}

// checkFailoverLinkDown checks that another node takes the IP over when the
// winner's LAN link goes down.
func (ls *l2Suite) checkFailoverLinkDown(t *testing.T) {
	s, h := ls.s.on(t)
	w := ls.winnerAnswers(s, anyNode, "a stable announcer")
	v4, v6 := s.routes(w)
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := s.restoreLink(w, v4, v6); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(restore)
	// Only the node's LAN leg goes down: the lab kubelet of the node
	// runs outside its namespace, so the Node stays Ready.
	if _, err := h.Exec(w, "ip", "link", "set", "eth0", "down"); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	var first string
	var answered time.Duration
	h.Poll(15*time.Second, "another node to answer ARP for "+ls.ip, func() (bool, string) {
		macs, out := s.arping(ls.ip, 1, 1)
		answered = time.Since(down)
		if len(macs) == 1 && macs[0] != ls.macOf[w] {
			first = ls.nodeOf[macs[0]]
		}
		return first != "", out
	})
	var neighTo time.Duration
	h.Poll(10*time.Second, "the client's neighbor entry to move off "+w, func() (bool, string) {
		m, st := s.neighMAC(ls.ip)
		neighTo = time.Since(down)
		return m != "" && m != ls.macOf[w], m + " " + st
	})
	t.Logf("eth0 of %s down: %s answered ARP for %s within %s; the client's neighbor entry moved within %s", w, first, ls.ip,
		answered.Round(time.Millisecond), neighTo.Round(time.Millisecond))
	to := ls.winnerAnswers(s, func(n string) bool { return n != w }, "another node to announce "+ls.ip)
	if to != first {
		t.Errorf("%s answered ARP first, but %s announces", first, to)
	}
	if _, err := s.curlClient(ls.url); err != nil {
		t.Errorf("curl through %s: %v", to, err)
	}
	restore()
	s.readySpeakers(2 * time.Minute)
	after := ls.winnerAnswers(s, anyNode, "one announcer after the link came back")
	t.Logf("eth0 of %s up again: %s announces", w, after)
	if _, err := s.curlClient(ls.url); err != nil {
		t.Errorf("curl after the link came back: %v", err)
	}
}

// winnerAnswers waits until exactly one node announces ip and arping
// from the client gets exactly that node's eth0 MAC, and returns it.
func (ls *l2Suite) winnerAnswers(s l2, want func(string) bool, what string) string {
	s.T.T.Helper()
	var node string
	s.Poll(45*time.Second, what, func() (bool, string) {
		node = s.announcer("default", ls.name, ls.ip, 30*time.Second)
		macs, out := s.arping(ls.ip, 2, 2)
		return want(node) && slices.Equal(macs, []string{ls.macOf[node]}),
			fmt.Sprintf("announcer %s (eth0 %s); arping got %v:\n%s", node, ls.macOf[node], macs, out)
	})
	return node
}

// anyNode accepts every node.
func anyNode(string) bool { return true }

// topologyNodeByIP tells whether a is a node's LAN or pod-gateway address
// (of either family).
func topologyNodeByIP(h *harness.T, a string) (string, bool) {
	for _, n := range h.Layout.Nodes {
		if a == n.IPv4.String() || a == n.PodGateway.String() || a == n.IPv6.String() || a == n.PodGatewayV6.String() {
			return n.Name, true
		}
	}
	return "", false
}
