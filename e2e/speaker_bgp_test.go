package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/cluster"
	"github.com/herald-lb/herald/e2e/lab/router"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// The communities TestSpeakerBGP and TestSpeakerBGPBird attach, as the
// routers print them: two numbers and two aliases from a Community.
var (
	bgpWantCommunities = []string{"64513:100", "64513:200"}
	bgpWantLarge       = []string{"64513:1:2", "64513:3:4"}
)

// bgpCommunityYAML defines the aliases <prefix>-std (64513:200) and
// <prefix>-large (large:64513:3:4).
func bgpCommunityYAML(prefix string) string {
	return fmt.Sprintf(`---
apiVersion: herald.io/v1beta1
kind: Community
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  communities:
    - {name: %[1]s-std, value: "64513:200"}
    - {name: %[1]s-large, value: "large:64513:3:4"}
`, prefix, heraldNS)
}

// bgpAdvertisedCommunities is the communities line of an advertisement
// using bgpCommunityYAML's aliases.
func bgpAdvertisedCommunities(prefix string) string {
	return fmt.Sprintf(`communities: ["64513:100", "large:64513:1:2", %[1]s-std, %[1]s-large]`, prefix)
}

// checkCommunities reports what is missing from a path's communities.
func checkCommunities(std, large []string) error {
	var missing []string
	for _, c := range bgpWantCommunities {
		if !slices.Contains(std, c) {
			missing = append(missing, c)
		}
	}
	for _, c := range bgpWantLarge {
		if !slices.Contains(large, c) {
			missing = append(missing, "large:"+c)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("communities %v, large %v: missing %v", std, large, missing)
	}
	return nil
}

// bgpSuite is what TestSpeakerBGP's steps share.
type bgpSuite struct {
	b    bgpLab
	name string
	// nodes are the lab's nodes; special, the last, is the one moved
	// onto BGPPeers of its own.
	nodes   []string
	special string
	// ip and url are the Service's IPv4 address and its URL, once it
	// has one.
	ip, url string
}

// TestSpeakerBGP checks herald's speaker in BGP mode against FRR in the
// router namespace, as a user would see it: an IPAddressPool, a BGPPeer
// (eBGP, AS 64513 -> 64512, hold time 9 s) that every node opens, a
// BGPAdvertisement with communities, large communities and Community
// aliases (and a localPref, which only iBGP peers get); then sessions
// Established in `show bgp summary json`; a LoadBalancer Service with
// externalTrafficPolicy Cluster routed by FRR over every node (ECMP
// installed by zebra) with the communities, reachable from the remote
// client behind the router; Local routed only over the nodes with a pod,
// following the pod, with the remote client's own address at the pod;
// ServiceAnnouncements, events, metrics, `herald status`. Then, each on
// the last node moved onto a BGPPeer of its own (FRR knows a neighbor by
// its address alone): iBGP with localPref, TCP MD5 (wrong password: no
// session; right one: session), eBGP multihop to the router's far
// address, BFD (300 ms x 3) up in FRR's bfdd, and graceful restart
// (SIGKILL of the speaker: the route stays, stale, never leaving the
// router's kernel table, and the remote client keeps getting answers).
// None of it may reset the other nodes' sessions. Last, IPv6: a second
// BGPPeer to the router's LAN IPv6 address and a dual-stack Service,
// whose /128 FRR routes over every node's IPv6 address to the remote
// client.
func TestSpeakerBGP(t *testing.T) {
	h := harness.Start(t)
	b := newBGPLab(h)
	const name = "sp-bgp"
	b.readySpeakers(2 * time.Minute)
	nodes := b.nodeNames()
	if len(nodes) < 3 {
		t.Fatalf("the lab has %d nodes; the test needs 3", len(nodes))
	}
	// The last node is the one moved onto its own BGPPeers; the pods of
	// the Local steps run on the others.
	special := nodes[len(nodes)-1]
	su := &bgpSuite{b: b, name: name, nodes: nodes, special: special}

	t.Cleanup(func() {
		_, _ = h.K.Run(h.Ctx, "delete", "service", name, "--ignore-not-found")
		_, _ = h.K.Run(h.Ctx, "delete", "deployment", name, "--ignore-not-found")
		_, _ = h.K.Run(h.Ctx, "delete", "pod", name+"-extra", "--ignore-not-found")
		_, _ = h.K.Run(h.Ctx, "-n", heraldNS, "delete", "bgppeer,bgpadvertisement,community,ipaddresspool", name, "--ignore-not-found")
		for _, n := range nodes {
			_ = b.labelNode(n, "")
		}
		if err := pollErr(h.Ctx, time.Minute, func() (bool, string) {
			a := b.bgpAnnouncements("default", name)
			peers, raw := b.frrPeers()
			return len(a) == 0 && peers != nil && len(peers) == 0, fmt.Sprintf("announcements %v; FRR: %s", a, raw)
		}); err != nil {
			t.Errorf("after the test, announcements and FRR sessions remain: %v", err)
		}
	})
	h.Apply(bgpPoolYAML(name, "203.0.113.128/28", "2001:db8:0:100::/124") +
		bgpCommunityYAML(name) +
		bgpAdvertisementYAML(name, name, bgpAdvertisedCommunities(name), "localPref: 250") +
		bgpPeerYAML(name, generalPeerSelector))

	t.Run("sessions established", su.checkSessionsEstablished)

	h.Apply(echoDeploymentYAML(name, nodes[0], 1) + lbServiceYAML(name, name, name, "Cluster", ""))
	h.ReadyPods("app="+name, 1, 2*time.Minute)
	ip := ctl{h}.waitAnyIP("default", name)
	if !topology.BGPPoolV4.Contains(mustAddr(t, ip)) {
		t.Fatalf("the Service got %s, outside the lab's BGP range %s", ip, topology.BGPPoolV4)
	}
	su.ip, su.url = ip, "http://"+ip+"/"

	t.Run("Cluster: ECMP over every node with the communities", su.checkClusterECMP)
	t.Run("no serving endpoint: withdrawn everywhere, and herald status says why", su.checkNoServingEndpoint)
	t.Run("Local: next hops follow the pods", su.checkLocalFollowsPods)
	t.Run("iBGP with localPref", su.checkIBGPLocalPref)
	t.Run("TCP MD5", su.checkTCPMD5)
	t.Run("eBGP multihop", su.checkEBGPMultihop)
	t.Run("BFD", su.checkBFD)

	// Everything above changed Services, pods, BGPPeers of another node,
	// a Secret and a BFDProfile: none of it may have reset the sessions
	// of the nodes that stayed on the general peer.
	t.Run("no session reset on the other nodes", su.checkNoSessionReset)
	t.Run("graceful restart keeps forwarding through a speaker restart", su.checkGracefulRestart)

	// IPv6 end to end: a BGPPeer over IPv6 to the router's LAN address
	// next to the IPv4 one, and a dual-stack Service; FRR learns the
	// /128 from every node's IPv6 session with the node's IPv6 address as
	// next hop, and the remote client reaches the IPv6 VIP.
	t.Run("IPv6: a session over IPv6 and a dual-stack Service", su.checkIPv6DualStack)
}

// checkSessionsEstablished checks every node's session: Established at FRR,
// in the metrics, the events and herald status bgp.
func (su *bgpSuite) checkSessionsEstablished(t *testing.T) {
	b, h := su.b.on(t)
	d := b.waitSessions(time.Minute, su.nodes...)
	peers, _ := b.frrPeers()
	for _, n := range su.nodes {
		p := peers[b.nodeIP(n)]
		t.Logf("FRR: neighbor %s (%s) remote AS %d, %s, dynamic=%v", b.nodeIP(n), n, p.RemoteAs, p.State, p.DynamicPeer)
		if p.RemoteAs != bgpNodeASN {
			t.Errorf("FRR sees %s in AS %d, want %d", n, p.RemoteAs, bgpNodeASN)
		}
	}
	t.Logf("every node's session Established at FRR %s after the BGPPeer was applied", d.Round(time.Millisecond))
	for _, n := range su.nodes {
		h.Poll(30*time.Second, n+"'s session_up metric", func() (bool, string) {
			v, err := b.speakerSample(n, "herald_speaker_bgp_session_up", map[string]string{"peer": su.name, "address": topology.RouterLANv4.String()})
			return err == nil && v == 1, fmt.Sprint(v, err)
		})
	}
	h.Poll(30*time.Second, "a SessionEstablished event on BGPPeer "+su.name+" from every node", func() (bool, string) {
		evs := b.objectEvents("BGPPeer", su.name)
		for _, n := range su.nodes {
			if !slices.ContainsFunc(evs, func(e string) bool {
				return strings.HasPrefix(e, "SessionEstablished:") && strings.Contains(e, n)
			}) {
				return false, fmt.Sprintf("events: %q", evs)
			}
		}
		return true, ""
	})
	t.Logf("events on BGPPeer %s: %q", su.name, b.objectEvents("BGPPeer", su.name))
	// herald status bgp reads the same from every speaker.
	st, err := b.heraldStatus("bgp")
	t.Logf("herald status bgp:\n%s", st)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range su.nodes {
		if !regexp.MustCompile(`(?m)^` + n + `\s+` + su.name + `\s+` + regexp.QuoteMeta(topology.RouterLANv4.String()) + `\s+Established\b`).MatchString(st) {
			t.Errorf("herald status bgp shows no Established session from %s to %s", n, su.name)
		}
	}
}

// checkClusterECMP checks externalTrafficPolicy Cluster: routed over every
// node with the communities; NodeAnnouncements, events, metrics, herald
// status.
func (su *bgpSuite) checkClusterECMP(t *testing.T) {
	b, h := su.b.on(t)
	paths := b.waitFRRNextHops(su.ip, su.nodes, time.Minute)
	for _, n := range su.nodes {
		p, ok := pathFrom(paths, b.nodeIP(n))
		if !ok {
			t.Errorf("no BGP path for %s from %s", su.ip, n)
			continue
		}
		if err := checkCommunities(p.Communities, p.Large); err != nil {
			t.Errorf("path from %s: %v", n, err)
		}
		if p.NextHop != b.nodeIP(n) || !p.Multipath || p.ASPath != fmt.Sprint(bgpNodeASN) {
			t.Errorf("path from %s: %v, want next hop %s, multipath, AS path %d", n, p, b.nodeIP(n), bgpNodeASN)
		}
	}
	out := b.vtysh("show bgp ipv4 unicast " + su.ip + "/32")
	t.Logf("$ vtysh -c 'show bgp ipv4 unicast %s/32'\n%s", su.ip, out)
	route, _ := h.Exec("router", "ip", "route", "show", su.ip)
	t.Logf("$ ip route show %s  # in the router namespace\n%s", su.ip, route)

	addr := b.waitRemoteEcho(su.url, func(string) bool { return true }, "the remote client to get an answer from "+su.url)
	t.Logf("GET %s from the remote client (%s): client_address=%s (Cluster: the forwarding node SNATs)", su.url, topology.RemoteV4IP, addr)

	var want []string
	for _, n := range su.nodes {
		want = append(want, fmt.Sprintf(`%s:bgp:["%s"]:["%s"]`, n, su.name, su.ip))
	}
	// externalTrafficPolicy Cluster: no ServiceAnnouncement per node;
	// each node's NodeAnnouncement names the advertisement and its
	// peer, and herald status resolves the Service from them.
	h.Poll(30*time.Second, "each node's NodeAnnouncement with advertisement and IPv4 peer "+su.name, func() (bool, string) {
		got := b.nodeAnnouncements()
		for _, n := range su.nodes {
			if !slices.Contains(got[n], su.name+":"+su.name+":") {
				return false, fmt.Sprint(got)
			}
		}
		return true, ""
	})
	h.Poll(30*time.Second, "herald status: every node advertising over bgp to peer "+su.name, func() (bool, string) {
		got := b.bgpAnnouncements("default", su.name)
		return slices.Equal(got, want), fmt.Sprintf("got %v, want %v", got, want)
	})
	t.Logf("$ kubectl -n %s get nodeannouncements\n%s", heraldNS, h.Kubectl("-n", heraldNS, "get", "nodeannouncements"))
	if sa := h.Kubectl("-n", heraldNS, "get", "serviceannouncements", "-l", "herald.io/service-name="+su.name, "-o", "name"); strings.TrimSpace(sa) != "" {
		t.Errorf("ServiceAnnouncements for a Cluster BGP Service (its nodes are in the NodeAnnouncements): %s", sa)
	}
	for _, n := range su.nodes {
		ctl{h}.waitEvent("default", su.name, "Advertising: advertising ", su.ip, "node "+n+" over BGP to "+su.name)
	}
	for _, n := range su.nodes {
		for _, m := range []string{"herald_speaker_bgp_prefixes_advertised", "herald_speaker_bgp_prefixes_configured", "herald_speaker_bgp_updates_sent_total"} {
			h.Poll(30*time.Second, n+": "+m+" >= 1", func() (bool, string) {
				v, err := b.speakerSample(n, m, map[string]string{"peer": su.name})
				return err == nil && v >= 1, fmt.Sprint(v, err)
			})
		}
		if v, err := b.speakerSample(n, "herald_speaker_bgp_session_flaps_total", map[string]string{"peer": su.name}); err != nil || v != 0 {
			t.Errorf("%s: session flaps %v (%v), want 0", n, v, err)
		}
	}
	st, err := b.heraldStatus("default/" + su.name)
	t.Logf("$ herald status default/%s\n%s", su.name, st)
	if err != nil || !strings.Contains(st, su.ip) {
		t.Errorf("herald status: %v", err)
	}
	for _, n := range su.nodes {
		if !strings.Contains(st, n+" (bgp to "+su.name+")") {
			t.Errorf("herald status does not show %q", n+" (bgp to "+su.name+")")
		}
	}
	if strings.Contains(st, "more than one node") {
		t.Errorf("herald status calls BGP's ECMP a conflict")
	}
}

// checkNoServingEndpoint checks that with the deployment scaled to 0 the
// route is withdrawn and herald status gives the reason.
func (su *bgpSuite) checkNoServingEndpoint(t *testing.T) {
	b, h := su.b.on(t)
	h.Kubectl("scale", "deployment", su.name, "--replicas=0")
	restore := func() {
		h.Kubectl("scale", "deployment", su.name, "--replicas=1")
		h.ReadyPods("app="+su.name, 1, 2*time.Minute)
		b.waitFRRNextHops(su.ip, su.nodes, time.Minute)
	}
	h.Poll(time.Minute, "FRR without a path for "+su.ip, func() (bool, string) {
		paths, raw := b.frrPaths(su.ip)
		return len(paths) == 0 && len(b.bgpAnnouncements("default", su.name)) == 0, raw
	})
	// The reporting speaker publishes the reason; every speaker
	// counts it for the alert.
	want := "nobody: bgp: the Service has no serving endpoint"
	var st string
	h.Poll(30*time.Second, "herald status to give the speakers' reason", func() (bool, string) {
		st, _ = b.heraldStatus("default/" + su.name)
		return strings.Contains(st, want), st
	})
	t.Logf("$ herald status default/%s  # deployment scaled to 0\n%s", su.name, st)
	for _, n := range su.nodes {
		v, err := b.speakerSample(n, "herald_speaker_bgp_unadvertised_ips", map[string]string{"reason": "the Service has no serving endpoint"})
		if err != nil || v < 1 {
			t.Errorf("%s: herald_speaker_bgp_unadvertised_ips{reason=no serving endpoint} = %v (%v), want >= 1", n, v, err)
		}
	}
	restore()
	h.Poll(30*time.Second, "herald status without the reason once advertised again", func() (bool, string) {
		st, _ = b.heraldStatus("default/" + su.name)
		return !strings.Contains(st, "nobody"), st
	})
}

// checkLocalFollowsPods checks externalTrafficPolicy Local: routed over the
// nodes with a pod only, following the pods.
func (su *bgpSuite) checkLocalFollowsPods(t *testing.T) {
	b, h := su.b.on(t)
	h.Kubectl("patch", "service", su.name, "-p", `{"spec":{"externalTrafficPolicy":"Local"}}`)
	t.Cleanup(func() {
		_, _ = h.K.Run(h.Ctx, "delete", "pod", su.name+"-extra", "--ignore-not-found")
		_, _ = h.K.Run(h.Ctx, "patch", "service", su.name, "-p", `{"spec":{"externalTrafficPolicy":"Cluster"}}`)
	})
	own := func(a string) bool { return a == topology.RemoteV4IP.String() }
	step := func(what string, at ...string) {
		t.Helper()
		start := time.Now()
		b.waitFRRNextHops(su.ip, at, time.Minute)
		routed := time.Since(start)
		addr := b.waitRemoteEcho(su.url, own, "the remote client's own address in client_address")
		t.Logf("%s: FRR routes %s via %v only (%s), remote client_address=%s", what, su.ip, at, routed.Round(time.Millisecond), addr)
		want := slices.Clone(at)
		slices.Sort(want)
		h.Poll(30*time.Second, "herald status: advertised by exactly "+fmt.Sprint(want), func() (bool, string) {
			var who []string
			got := b.bgpAnnouncements("default", su.name)
			for _, a := range got {
				who = append(who, strings.SplitN(a, ":", 2)[0])
			}
			return slices.Equal(who, want), fmt.Sprint(got)
		})
	}
	step("pod on "+su.nodes[0], su.nodes[0])

	h.Kubectl("patch", "deployment", su.name, "-p", fmt.Sprintf(`{"spec":{"template":{"spec":{"nodeSelector":{"kubernetes.io/hostname":%q}}}}}`, su.nodes[1]))
	h.Poll(2*time.Minute, "the pod to move to "+su.nodes[1], func() (bool, string) {
		pods := h.Pods("app=" + su.name)
		return len(pods) == 1 && pods[0].Spec.NodeName == su.nodes[1] && harness.PodReady(&pods[0]), fmt.Sprint(len(pods))
	})
	step("pod moved to "+su.nodes[1], su.nodes[1])

	// A second pod on the last node: both nodes, ECMP.
	h.Apply(echoPodYAML(su.name+"-extra", su.name, su.special))
	h.ReadyPods("app="+su.name, 2, 2*time.Minute)
	step("pods on "+su.nodes[1]+" and "+su.special, su.nodes[1], su.special)
	ctl{h}.waitEvent("default", su.name, "StoppedAdvertising: ", su.ip, "node "+su.nodes[0]+" ")

	h.DeletePods(su.name + "-extra")
	step("the pod on "+su.special+" deleted", su.nodes[1])
}

// checkIBGPLocalPref checks that the special node's iBGP path carries
// LOCAL_PREF 250 and wins.
func (su *bgpSuite) checkIBGPLocalPref(t *testing.T) {
	b, h := su.b.on(t)
	peer := su.name + "-ibgp"
	b.isolate(isolated{Node: su.special, Role: "ibgp",
		FRR:  frrNeighborConf{Addr: b.nodeIP(su.special), RemoteAS: "internal"},
		YAML: bgpPeerYAML(peer, "myASN: 64512", "peerASN: 64512", rolePeerSelector("ibgp")), Objects: []string{"bgppeer/" + peer}})
	// LOCAL_PREF 250 makes the iBGP path win over the eBGP ones
	// (100), so FRR routes over the special node alone.
	paths := b.waitFRRNextHops(su.ip, []string{su.special}, time.Minute)
	p, ok := pathFrom(paths, b.nodeIP(su.special))
	switch {
	case !ok:
		t.Fatalf("no path from %s", su.special)
	case p.LocalPref != 250 || !p.Best || p.PeerType != "internal":
		t.Errorf("iBGP path %v (peer type %q): want localpref 250, best, internal", p, p.PeerType)
	}
	if err := checkCommunities(p.Communities, p.Large); err != nil {
		t.Errorf("iBGP path: %v", err)
	}
	for _, n := range su.nodes[:len(su.nodes)-1] {
		if q, ok := pathFrom(paths, b.nodeIP(n)); !ok || q.LocalPref == 250 {
			t.Errorf("eBGP path from %s: %v (present %v); LOCAL_PREF is for iBGP only", n, q, ok)
		}
	}
	t.Logf("$ vtysh -c 'show bgp ipv4 unicast %s/32'\n%s", su.ip, b.vtysh("show bgp ipv4 unicast "+su.ip+"/32"))
	b.waitRemoteEcho(su.url, func(string) bool { return true }, "an answer through "+su.special)
	h.Poll(30*time.Second, "herald status: "+su.special+" advertising to "+peer, func() (bool, string) {
		got := b.bgpAnnouncements("default", su.name)
		return slices.Contains(got, fmt.Sprintf(`%s:bgp:["%s"]:["%s"]`, su.special, peer, su.ip)), fmt.Sprint(got)
	})
}

// checkTCPMD5 checks: no session with the wrong password, one once the
// Secret has the right one, and no password in the logs.
func (su *bgpSuite) checkTCPMD5(t *testing.T) {
	b, h := su.b.on(t)
	peer, secret := su.name+"-md5", su.name+"-md5"
	const right, wrong = "herald-e2e-Md5-right", "herald-e2e-Md5-wrong"
	secretYAML := func(pw string) string {
		return fmt.Sprintf("---\napiVersion: v1\nkind: Secret\nmetadata: {name: %s, namespace: %s}\ntype: kubernetes.io/basic-auth\nstringData: {password: %q}\n", secret, heraldNS, pw)
	}
	addr := b.nodeIP(su.special)
	b.isolate(isolated{Node: su.special, Role: "md5", NoWait: true,
		FRR:     frrNeighborConf{Addr: addr, RemoteAS: fmt.Sprint(bgpNodeASN), Password: right},
		YAML:    secretYAML(wrong) + bgpPeerYAML(peer, rolePeerSelector("md5"), "passwordSecret: {name: "+secret+", key: password}"),
		Objects: []string{"bgppeer/" + peer, "secret/" + secret}})
	// The speaker connects every second; none may get through.
	h.Poll(30*time.Second, su.special+"'s speaker to run the session", func() (bool, string) {
		_, err := b.speakerSample(su.special, "herald_speaker_bgp_session_up", map[string]string{"peer": peer})
		return err == nil, fmt.Sprint(err)
	})
	for end := time.Now().Add(12 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		if st := b.frrPeerStates(); slices.Contains(st, addr+"=Established") {
			t.Fatalf("a session with the wrong password established: %v", st)
		}
	}
	n, _ := b.frrNeighbor(addr)
	t.Logf("wrong password: FRR neighbor %s stays %v for 12 s", addr, n["bgpState"])
	if v, err := b.speakerSample(su.special, "herald_speaker_bgp_session_up", map[string]string{"peer": peer}); err != nil || v != 0 {
		t.Errorf("session_up with the wrong password: %v (%v), want 0", v, err)
	}

	h.Apply(secretYAML(right))
	d := b.waitSessions(time.Minute, su.special)
	t.Logf("Secret updated with the right password: Established %s later", d.Round(time.Millisecond))
	paths := b.waitFRRNextHops(su.ip, su.nodes, time.Minute)
	if _, ok := pathFrom(paths, addr); !ok {
		t.Errorf("no path for %s over the MD5 session", su.ip)
	}
	logs := b.speakerLogs(su.special)
	for _, pw := range []string{right, wrong} {
		if strings.Contains(logs, pw) {
			t.Errorf("the speaker on %s logged the TCP MD5 password %q", su.special, pw)
		}
	}
}

// checkEBGPMultihop checks a session to the router's far address.
func (su *bgpSuite) checkEBGPMultihop(t *testing.T) {
	b, h := su.b.on(t)
	peer := su.name + "-multihop"
	addr := b.nodeIP(su.special)
	// The router's address on the remote side: the node reaches it
	// through its route to 203.0.113.0/25 via 198.51.100.1.
	far := topology.RouterRemV4.String()
	route, _ := h.Exec(su.special, "ip", "route", "get", far)
	t.Logf("%s: ip route get %s: %s", su.special, far, strings.TrimSpace(route))
	b.isolate(isolated{Node: su.special, Role: "multihop",
		FRR:     frrNeighborConf{Addr: addr, RemoteAS: fmt.Sprint(bgpNodeASN), Multihop: 2},
		YAML:    bgpPeerYAML(peer, "peerAddress: "+far, "ebgpMultiHop: true", rolePeerSelector("multihop")),
		Objects: []string{"bgppeer/" + peer}})
	n, raw := b.frrNeighbor(addr)
	t.Logf("FRR neighbor %s: state %v, local %v:%v, foreign %v, external %v, multihop TTL %v", addr, n["bgpState"], n["hostLocal"], n["portLocal"], n["hostForeign"], n["nbrExternalLink"], n["externalBgpNbrMaxHopsAway"])
	if n["hostLocal"] != far {
		t.Errorf("the session ends at FRR on %v, want %s: %s", n["hostLocal"], far, raw)
	}
	paths := b.waitFRRNextHops(su.ip, su.nodes, time.Minute)
	if p, ok := pathFrom(paths, addr); !ok || p.NextHop != addr {
		t.Errorf("path over the multihop session: %v (present %v), want next hop %s", p, ok, addr)
	}
	h.Poll(30*time.Second, "session_up for "+peer, func() (bool, string) {
		v, err := b.speakerSample(su.special, "herald_speaker_bgp_session_up", map[string]string{"peer": peer, "address": far})
		return err == nil && v == 1, fmt.Sprint(v, err)
	})
}

// checkBFD checks that the session settles with BFD up at 300 ms x 3 both
// ways.
func (su *bgpSuite) checkBFD(t *testing.T) {
	b, h := su.b.on(t)
	peer := su.name + "-bfd"
	addr := b.nodeIP(su.special)
	b.isolate(isolated{Node: su.special, Role: "bfd", NoWait: true,
		FRR: frrNeighborConf{Addr: addr, RemoteAS: fmt.Sprint(bgpNodeASN), BFD: true},
		YAML: fmt.Sprintf("---\napiVersion: herald.io/v1beta1\nkind: BFDProfile\nmetadata: {name: %s, namespace: %s}\nspec: {receiveInterval: 300, transmitInterval: 300, detectMultiplier: 3}\n", peer, heraldNS) +
			bgpPeerYAML(peer, "bfdProfile: "+peer, rolePeerSelector("bfd")),
		Objects: []string{"bgppeer/" + peer, "bfdprofile/" + peer}})
	// How the session and its BFD session come up, as FRR sees them.
	labelled := time.Now()
	var timeline []string
	var last string
	var stableSince time.Time
	h.Poll(2*time.Minute, "the BGP session with "+addr+" Established and its BFD session up for 3 s", func() (bool, string) {
		n, _ := b.frrNeighbor(addr)
		bfd := "none"
		peers, _ := b.frrBFDPeers()
		for _, p := range peers {
			if p.Peer == addr {
				bfd = p.Status
			}
		}
		now := fmt.Sprintf("BGP %v (established %v, dropped %v, last reset %q), BFD %s", n["bgpState"], n["connectionsEstablished"], n["connectionsDropped"], n["lastResetDueTo"], bfd)
		if now != last {
			timeline = append(timeline, fmt.Sprintf("%7s %s", time.Since(labelled).Round(100*time.Millisecond), now))
			last, stableSince = now, time.Now()
		}
		up := n["bgpState"] == "Established" && bfd == "up"
		return up && time.Since(stableSince) >= 3*time.Second, now
	})
	t.Logf("after the label, at FRR:\n%s", strings.Join(timeline, "\n"))
	// FRR 8.4 drops the session once as its BFD session first comes up
	// ("BFD down received"); the speaker must be back within seconds
	// (GoBGP's own idle hold after a reset is 30 s; herald sets 5 s).
	if d := time.Since(labelled) - 3*time.Second; d > 20*time.Second {
		var s strings.Builder
		b.frr().WriteLogTails(&s, 30)
		t.Errorf("the session took %s to settle, want at most 20 s; FRR's logs:\n%s\n%s's speaker, BGP lines:\n%s", d.Round(time.Millisecond), s.String(), su.special, b.speakerLogTail(su.special, 30))
	}
	var got frrBFDPeer
	d := h.Poll(time.Minute, "FRR's bfdd to have an up session with "+addr+" at 300 ms x 3 both ways", func() (bool, string) {
		peers, raw := b.frrBFDPeers()
		for _, p := range peers {
			if p.Peer == addr {
				got = p
				return p.Status == "up" && p.RemoteDetectMultiplier == 3 && p.RemoteReceiveInterval == 300 && p.RemoteTransmitInterval == 300, raw
			}
		}
		return false, raw
	})
	t.Logf("bfdd: peer %s local %s status %s after %s; local %d/%d ms x%d, remote (the speaker) %d/%d ms x%d", got.Peer, got.Local, got.Status, d.Round(time.Millisecond),
		got.ReceiveInterval, got.TransmitInterval, got.DetectMultiplier, got.RemoteReceiveInterval, got.RemoteTransmitInterval, got.RemoteDetectMultiplier)
	t.Logf("$ vtysh -c 'show bfd peers'\n%s", b.vtysh("show bfd peers"))
	b.waitSessions(30*time.Second, su.special)
	h.Poll(30*time.Second, "herald_speaker_bgp_bfd_up 1 on "+su.special, func() (bool, string) {
		v, err := b.speakerSample(su.special, "herald_speaker_bgp_bfd_up", map[string]string{"peer": peer})
		return err == nil && v == 1, fmt.Sprint(v, err)
	})
	n, _ := b.frrNeighbor(addr)
	t.Logf("FRR neighbor %s BFD info: %v", addr, n["peerBfdInfo"])
	paths := b.waitFRRNextHops(su.ip, su.nodes, time.Minute)
	if _, ok := pathFrom(paths, addr); !ok {
		t.Errorf("no path over the BFD-tracked session")
	}
}

// checkNoSessionReset checks that the nodes on the general peer kept their
// first session.
func (su *bgpSuite) checkNoSessionReset(t *testing.T) {
	b, _ := su.b.on(t)
	peers, raw := b.frrPeers()
	for _, n := range su.nodes[:len(su.nodes)-1] {
		p, ok := peers[b.nodeIP(n)]
		t.Logf("FRR neighbor %s (%s): %s, sessions established %d, dropped %d", b.nodeIP(n), n, p.State, p.Established, p.Dropped)
		if !ok || p.State != "Established" || p.Established != 1 || p.Dropped != 0 {
			t.Errorf("%s's session was reset during the test: %+v: %s", n, p, raw)
		}
		if v, err := b.speakerSample(n, "herald_speaker_bgp_session_flaps_total", map[string]string{"peer": su.name}); err != nil || v != 0 {
			t.Errorf("%s: session flaps %v (%v), want 0", n, v, err)
		}
	}
}

// checkGracefulRestart checks that a SIGKILLed speaker's route stays
// (stale) at the router and the remote client keeps getting answers.
func (su *bgpSuite) checkGracefulRestart(t *testing.T) {
	b, h := su.b.on(t)
	peer, svc := su.name+"-gr", su.name+"-gr"
	addr := b.nodeIP(su.special)
	b.isolate(isolated{Node: su.special, Role: "gr",
		FRR:     frrNeighborConf{Addr: addr, RemoteAS: fmt.Sprint(bgpNodeASN), GracefulRestart: true},
		YAML:    bgpPeerYAML(peer, "enableGracefulRestart: true", rolePeerSelector("gr")),
		Objects: []string{"bgppeer/" + peer}})
	// Local, with its pod on the special node: FRR's only path for
	// the IP is the one from the speaker about to be killed.
	t.Cleanup(func() {
		_, _ = h.K.Run(h.Ctx, "delete", "service,deployment", svc, "--ignore-not-found")
	})
	h.Apply(echoDeploymentYAML(svc, su.special, 1) + lbServiceYAML(svc, svc, su.name, "Local", ""))
	h.ReadyPods("app="+svc, 1, 2*time.Minute)
	grIP := ctl{h}.waitAnyIP("default", svc)
	grURL := "http://" + grIP + "/"
	b.waitFRRNextHops(grIP, []string{su.special}, time.Minute)
	b.waitRemoteEcho(grURL, func(a string) bool { return a == topology.RemoteV4IP.String() }, "an answer through "+su.special)
	n, _ := b.frrNeighbor(addr)
	t.Logf("FRR neighbor %s graceful restart: %v", addr, n["gracefulRestartInfo"])

	// The remote client sends a request every 100 ms from the kill
	// until the restarted speaker has re-advertised.
	var mu sync.Mutex
	var sent int
	var failures []string
	ctx, stop := context.WithCancel(h.Ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			at := time.Now()
			ok, err := benchGet(h.Layout.Remote, grIP, time.Second)
			mu.Lock()
			sent++
			if !ok {
				failures = append(failures, fmt.Sprintf("%s: %v", at.Format("15:04:05.000"), err))
			}
			mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
	}()
	defer func() { stop(); wg.Wait() }()

	rw := b.watchRoutes()
	pod := b.killSpeaker(su.special)
	killed := time.Now()
	t.Logf("SIGKILLed the speaker on %s (pod %s) at %s", su.special, pod.Name, killed.Format("15:04:05.000"))
	// Until the restarted speaker's path has replaced the stale one,
	// and at least for longer than the hold time: the route must stay
	// (without graceful restart it would go at once: the kernel
	// closes the killed speaker's socket).
	var sawStale bool
	var back, fresh time.Duration
	for {
		el := time.Since(killed)
		paths, raw := b.frrPaths(grIP)
		p, ok := pathFrom(paths, addr)
		zebra, _ := b.zebraNextHops(grIP)
		if !ok || !slices.Equal(zebra, []string{addr}) {
			t.Fatalf("%s after the kill the route is gone: paths %v, zebra %v: %s", el.Round(time.Millisecond), paths, zebra, raw)
		}
		if p.Stale && !sawStale {
			sawStale = true
			t.Logf("%s after the kill FRR keeps the path as stale: %v", el.Round(time.Millisecond), p)
		}
		if sawStale && back == 0 {
			if peers, _ := b.frrPeers(); peers[addr].State == "Established" {
				back = el
			}
		}
		if sawStale && !p.Stale && fresh == 0 {
			fresh = el
		}
		if fresh > 0 && el >= 12*time.Second {
			break
		}
		if el > 2*time.Minute {
			t.Fatalf("2m after the kill: stale seen %v, session back after %s, path %v", sawStale, back, p)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !sawStale {
		t.Errorf("FRR never marked the path stale: the session did not go through a graceful restart")
	}
	// The kernel's view, without a polling gap: not even a moment
	// without the route (as when a router drops the stale routes on
	// the new OPEN before the new UPDATE arrives).
	if ev, ok := rw.first(grIP, killed, isDeleted); ok {
		t.Errorf("the router's kernel route for %s was deleted %s after the kill (%q); route events:\n%s", grIP, ev.At.Sub(killed).Round(time.Millisecond), ev.Line, rw.recent(10))
	}
	t.Logf("after the kill: the restarted speaker's session Established again after %s, its path replaced the stale one after %s; the route stayed installed throughout",
		back.Round(time.Millisecond), fresh.Round(time.Millisecond))
	if p, ok := b.speakers()[su.special]; !ok || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].RestartCount <= pod.Status.ContainerStatuses[0].RestartCount {
		t.Errorf("the speaker on %s was not restarted by the kubelet", su.special)
	}
	time.Sleep(time.Second)
	stop()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("remote client: %d requests to %s through the restart, %d failed", sent, grIP, len(failures))
	if len(failures) > 0 {
		t.Errorf("requests failed during the graceful restart:\n%s", strings.Join(failures, "\n"))
	}
}

// checkIPv6DualStack checks IPv6 sessions and a dual-stack Service whose
// /128 FRR routes over every node.
func (su *bgpSuite) checkIPv6DualStack(t *testing.T) {
	b, h := su.b.on(t)
	peer, svc := su.name+"-v6", su.name+"-v6"
	t.Cleanup(func() {
		_, _ = h.K.Run(h.Ctx, "delete", "service", svc, "--ignore-not-found")
		_, _ = h.K.Run(h.Ctx, "-n", heraldNS, "delete", "bgppeer", peer, "--ignore-not-found")
		if err := pollErr(h.Ctx, time.Minute, func() (bool, string) {
			peers, raw := b.frrPeersAF("ipv6Unicast")
			for _, n := range su.nodes {
				if _, ok := peers[b.nodeIPv6(n)]; ok || peers == nil {
					return false, raw
				}
			}
			return true, ""
		}); err != nil {
			t.Errorf("FRR's IPv6 sessions stay after the BGPPeer is gone: %v", err)
		}
	})
	h.Apply(bgpPeerYAML(peer, "peerAddress: "+topology.RouterLANv6.String(), generalPeerSelector) +
		lbServiceYAML(svc, su.name, su.name, "Cluster", "") + "  ipFamilyPolicy: PreferDualStack\n")
	d := h.Poll(time.Minute, "Established IPv6 sessions at FRR from every node", func() (bool, string) {
		peers, raw := b.frrPeersAF("ipv6Unicast")
		for _, n := range su.nodes {
			if p, ok := peers[b.nodeIPv6(n)]; !ok || p.State != "Established" {
				return false, raw
			}
		}
		return true, ""
	})
	t.Logf("every node's IPv6 session Established at FRR %s after the BGPPeer was applied", d.Round(time.Millisecond))

	var ip4, ip6 string
	h.Poll(30*time.Second, "an IPv4 and an IPv6 address for "+svc, func() (bool, string) {
		cur := ctl{h}.service("default", svc)
		ip4, ip6 = "", ""
		for _, in := range cur.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(in.IP); err == nil && a.Is6() {
				ip6 = in.IP
			} else {
				ip4 = in.IP
			}
		}
		return ip4 != "" && ip6 != "", fmt.Sprint(cur.Spec.IPFamilies, cur.Status.LoadBalancer.Ingress)
	})
	if !topology.BGPPoolV6.Contains(mustAddr(t, ip6)) {
		t.Fatalf("the Service got %s, outside the lab's IPv6 BGP range %s", ip6, topology.BGPPoolV6)
	}
	paths := b.waitFRRNextHops(ip6, su.nodes, time.Minute)
	for _, n := range su.nodes {
		p, ok := pathFrom(paths, b.nodeIPv6(n))
		if !ok || p.NextHop != b.nodeIPv6(n) || !p.Multipath {
			t.Errorf("path for %s from %s: %v (present %v), want next hop %s, multipath", ip6, n, p, ok, b.nodeIPv6(n))
		}
	}
	t.Logf("$ vtysh -c 'show bgp ipv6 unicast %s/128'\n%s", ip6, b.vtysh("show bgp ipv6 unicast "+ip6+"/128"))
	route, _ := h.Exec("router", "ip", "-6", "route", "show", ip6)
	t.Logf("$ ip -6 route show %s  # in the router namespace\n%s", ip6, route)
	// The Service's IPv4 address still goes over the IPv4 sessions.
	b.waitFRRNextHops(ip4, su.nodes, time.Minute)

	url6 := "http://[" + ip6 + "]/"
	addr := b.waitRemoteEcho(url6, func(a string) bool {
		_, ok := topologyNodeByIP(h, a)
		return ok
	}, "the remote client to get an answer from "+url6)
	t.Logf("GET %s from the remote client (%s): client_address=%s (Cluster: the forwarding node SNATs)", url6, topology.RemoteV6IP, addr)
}

// TestSpeakerBGPBird runs the core BGP scenarios against BIRD 2 as a
// second, independent router: BIRD in the router namespace on port 1790
// (FRR keeps 179) accepts sessions from the LAN, merges equal paths into
// ECMP routes in the namespace's kernel table. The advertisement goes to
// the BIRD peer only, so FRR never has a route for these addresses and
// the kernel route BIRD installs is the only one: the remote client's
// traffic follows it. Checked: sessions Established (birdc show
// protocols all), Cluster routed over every node with the communities
// (birdc show route all, kernel route proto bird), Local over the pod's
// node only with the remote client's own address at the pod, following
// the pod.
func TestSpeakerBGPBird(t *testing.T) {
	h := harness.Start(t)
	b := newBGPLab(h)
	const name = "sp-bird"
	const port = 1790
	b.readySpeakers(2 * time.Minute)
	nodes := b.nodeNames()

	birdc := startLabBIRD(t, h, port)

	t.Cleanup(func() {
		_, _ = h.K.Run(h.Ctx, "delete", "service,deployment", name, "--ignore-not-found")
		_, _ = h.K.Run(h.Ctx, "-n", heraldNS, "delete", "bgppeer,bgpadvertisement,community,ipaddresspool", name, "--ignore-not-found")
		if err := pollErr(h.Ctx, time.Minute, func() (bool, string) {
			s := birdSessions(birdc("show", "protocols", "all"))
			up := 0
			for _, st := range s {
				if strings.HasPrefix(st, "Established") {
					up++
				}
			}
			return up == 0, fmt.Sprint(s)
		}); err != nil {
			t.Errorf("BGP sessions to BIRD remain: %v", err)
		}
	})
	h.Apply(bgpPoolYAML(name, "203.0.113.144/28", "2001:db8:0:100::10/124") +
		bgpCommunityYAML(name) +
		bgpAdvertisementYAML(name, name, bgpAdvertisedCommunities(name), "peers: ["+name+"]") +
		bgpPeerYAML(name, fmt.Sprintf("peerPort: %d", port)))

	t.Run("sessions established", func(t *testing.T) {
		_, h := b.on(t)
		d := h.Poll(time.Minute, "an Established session to BIRD from every node", func() (bool, string) {
			s := birdSessions(birdc("show", "protocols", "all"))
			for _, n := range nodes {
				if !strings.HasPrefix(s[b.nodeIP(n)], "Established") {
					return false, fmt.Sprint(s)
				}
			}
			return true, ""
		})
		t.Logf("every node's session to BIRD (port %d) Established %s after the BGPPeer was applied:\n%s", port, d.Round(time.Millisecond), birdc("show", "protocols"))
		// FRR on 179 sees none of it.
		for _, n := range nodes {
			if peers, _ := b.frrPeers(); peers[b.nodeIP(n)].State == "Established" {
				t.Errorf("%s also has a session with FRR", n)
			}
		}
	})

	h.Apply(echoDeploymentYAML(name, nodes[0], 1) + lbServiceYAML(name, name, name, "Cluster", ""))
	h.ReadyPods("app="+name, 1, 2*time.Minute)
	ip := ctl{h}.waitAnyIP("default", name)
	url := "http://" + ip + "/"

	// waitBird waits until BIRD has ip/32 from exactly the nodes, merged
	// into one kernel route over them, and returns BIRD's paths.
	waitBird := func(h *harness.T, at ...string) []birdPath {
		h.T.Helper()
		want := b.nodeIPs(at...)
		var paths []birdPath
		d := h.Poll(time.Minute, fmt.Sprintf("BIRD to route %s/32 via exactly %v", ip, want), func() (bool, string) {
			out := birdc("show", "route", ip+"/32", "all")
			paths = birdPaths(out)
			var via []string
			for _, p := range paths {
				via = append(via, p.Via...)
			}
			slices.Sort(via)
			kern, proto, kraw := b.kernelNextHops(ip)
			return slices.Equal(via, want) && slices.Equal(kern, want) && proto == "bird",
				fmt.Sprintf("BIRD via %v, kernel %v (%s): %s\n%s", via, kern, proto, kraw, out)
		})
		h.T.Logf("BIRD routes %s/32 via %v (%v), installed in the kernel as one ECMP route, after %s", ip, want, at, d.Round(time.Millisecond))
		return paths
	}

	t.Run("Cluster: ECMP over every node with the communities", func(t *testing.T) {
		b, h := b.on(t)
		paths := waitBird(h, nodes...)
		for _, p := range paths {
			if err := checkCommunities(p.Communities, p.Large); err != nil {
				t.Errorf("BIRD path via %v: %v", p.Via, err)
			}
		}
		t.Logf("$ birdc show route %s/32 all\n%s", ip, birdc("show", "route", ip+"/32", "all"))
		route, _ := h.Exec("router", "ip", "route", "show", ip)
		t.Logf("$ ip route show %s  # in the router namespace\n%s", ip, route)
		if zebra, _ := b.zebraNextHops(ip); len(zebra) > 0 {
			t.Errorf("FRR also routes %s: %v", ip, zebra)
		}
		addr := b.waitRemoteEcho(url, func(string) bool { return true }, "the remote client to get an answer from "+url)
		t.Logf("GET %s from the remote client: client_address=%s", url, addr)
		h.Poll(30*time.Second, "herald status: every node advertising to "+name, func() (bool, string) {
			got := b.bgpAnnouncements("default", name)
			return len(got) == len(nodes) && !slices.ContainsFunc(got, func(a string) bool { return !strings.Contains(a, `:bgp:["`+name+`"]:`) }), fmt.Sprint(got)
		})
	})

	t.Run("Local: next hops follow the pod", func(t *testing.T) {
		_, h := b.on(t)
		h.Kubectl("patch", "service", name, "-p", `{"spec":{"externalTrafficPolicy":"Local"}}`)
		own := func(a string) bool { return a == topology.RemoteV4IP.String() }
		waitBird(h, nodes[0])
		addr := b.waitRemoteEcho(url, own, "the remote client's own address in client_address")
		t.Logf("pod on %s: remote client_address=%s", nodes[0], addr)
		h.Kubectl("patch", "deployment", name, "-p", fmt.Sprintf(`{"spec":{"template":{"spec":{"nodeSelector":{"kubernetes.io/hostname":%q}}}}}`, nodes[1]))
		h.Poll(2*time.Minute, "the pod to move to "+nodes[1], func() (bool, string) {
			pods := h.Pods("app=" + name)
			return len(pods) == 1 && pods[0].Spec.NodeName == nodes[1] && harness.PodReady(&pods[0]), fmt.Sprint(len(pods))
		})
		waitBird(h, nodes[1])
		addr = b.waitRemoteEcho(url, own, "the remote client's own address in client_address")
		t.Logf("pod moved to %s: remote client_address=%s", nodes[1], addr)
	})
}

// startLabBIRD starts BIRD in the router namespace, listening on port for
// the LAN's sessions, stopped (its logs shown if the test failed) at the
// test's end; it returns birdc, whose errors are in its output.
func startLabBIRD(t *testing.T, h *harness.T, port int) func(cmd ...string) string {
	dir, err := os.MkdirTemp("", "hle-bird-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	cfg := router.RouterBGP{
		ASN:          cluster.RouterASN,
		RouterID:     topology.RouterLANv4,
		Neighbors:    []router.Neighbor{{Name: "nodes", Range: topology.LANv4}},
		MaximumPaths: topology.MaxNodes,
		ListenPort:   port,
	}
	bird, err := router.StartBIRD(h.Ctx, router.BIRDConfig{Netns: h.Layout.Router, Dir: filepath.Join(dir, "bird"),
		Name: h.Layout.Router + "-bird", Config: router.BIRDBGPConfig(cfg), KillWithParent: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			var s strings.Builder
			bird.WriteLogTails(&s, 60)
			out, _ := bird.Birdc(h.Ctx, "show", "protocols", "all")
			t.Logf("BIRD at the failure:\n%s\n$ birdc show protocols all\n%s", s.String(), out)
		}
		if err := bird.Stop(); err != nil {
			t.Errorf("stopping BIRD: %v", err)
		}
	})
	return func(cmd ...string) string {
		out, err := bird.Birdc(h.Ctx, cmd...)
		if err != nil {
			return fmt.Sprintf("%s (%v)", out, err)
		}
		return out
	}
}
