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

// configSafety is what TestConfigEditsKeepTraffic's steps share: the
// objects' names and manifests, and what the traffic looked like before
// the edits.
type configSafety struct {
	b       bgpLab
	c       ctl
	objects map[string]string

	l2Pool, bgpPool, l2Svc, bgpSvc  string
	general, md5, adv, comm, secret string

	l2IP, bgpIP     string
	l2Anns, bgpAnns []string
	paths           []frrPath
}

// configEdit is one edit of the test: the object, the field its
// condition must name, and how to make and undo it.
type configEdit struct {
	name, kind, obj, field string
	edit, undo             func()
	// want is a further part of the condition's message, if any.
	want string
}

// TestConfigEditsKeepTraffic applies, with kubectl, the ten configuration
// edits a user is most likely to get wrong and that the API server
// accepts (each object is fine alone), to a cluster serving an L2 VIP and
// a BGP VIP, while the LAN client probes the L2 VIP and the remote client
// the BGP VIP every 20 ms. Each edit must be refused with the object's
// Valid condition (reason EditRefused, "in force: generation N, refused:
// generation M") and an EditRefused event naming the field; no Service IP
// changes, no ServiceAnnouncement or FRR path is withdrawn, and no request
// fails. Each edit is then undone, and the object is valid again.
func TestConfigEditsKeepTraffic(t *testing.T) {
	h := harness.Start(t)
	b := newBGPLab(h)
	const (
		l2Pool, bgpPool = "safe-l2", "safe-bgp"
		app, l2Svc      = "safe", "safe-l2"
		bgpSvc          = "safe-bgp"
		general, md5    = "safe-general", "safe-md5"
		adv, comm       = "safe-bgp", "safe"
		bfd, secret     = "safe", "safe-md5"
		password        = "herald-e2e-safe-Md5"
	)
	b.readySpeakers(2 * time.Minute)
	nodes := b.nodeNames()
	if len(nodes) < 3 {
		t.Fatalf("the lab has %d nodes; the test needs 3", len(nodes))
	}
	special := nodes[len(nodes)-1]
	t.Cleanup(func() {
		_, _ = h.K.Run(h.Ctx, "delete", "service", l2Svc, bgpSvc, "--ignore-not-found")
		_, _ = h.K.Run(h.Ctx, "delete", "deployment", app, "--ignore-not-found")
		_, _ = h.K.Run(h.Ctx, "-n", heraldNS, "delete", "l2advertisement/"+l2Pool, "bgpadvertisement/"+adv,
			"bgppeer/"+general, "community/"+comm, "bfdprofile/"+bfd, "ipaddresspool/"+l2Pool, "ipaddresspool/"+bgpPool, "--ignore-not-found")
	})

	objects := map[string]string{
		"pool/" + l2Pool:  poolYAML(l2Pool, []string{"198.51.100.210-198.51.100.214"}, "autoAssign: false"),
		"l2ad":            fmt.Sprintf("---\napiVersion: herald.io/v1beta1\nkind: L2Advertisement\nmetadata: {name: %s, namespace: %s}\nspec:\n  ipAddressPools: [%s]\n", l2Pool, heraldNS, l2Pool),
		"pool/" + bgpPool: bgpPoolYAML(bgpPool, "203.0.113.176/28"),
		"community":       bgpCommunityYAML(comm),
		"bfd":             fmt.Sprintf("---\napiVersion: herald.io/v1beta1\nkind: BFDProfile\nmetadata: {name: %s, namespace: %s}\nspec: {receiveInterval: 300, transmitInterval: 300}\n", bfd, heraldNS),
		"adv":             bgpAdvertisementYAML(adv, bgpPool, bgpAdvertisedCommunities(comm), "peers: ["+general+", "+md5+"]"),
		"general":         bgpPeerYAML(general, generalPeerSelector),
		"secret":          fmt.Sprintf("---\napiVersion: v1\nkind: Secret\nmetadata: {name: %s, namespace: %s}\nstringData: {password: %q}\n", secret, heraldNS, password),
	}
	// The pools first, oldest L2: that is the order that makes the first
	// edit below a trap (an older pool reaching into a newer one's range).
	h.Apply(objects["pool/"+l2Pool])
	time.Sleep(1100 * time.Millisecond) // creation timestamps have whole seconds
	for _, k := range []string{"pool/" + bgpPool, "l2ad", "community", "bfd", "general", "adv"} {
		h.Apply(objects[k])
	}
	// The last node on a peer of its own with TCP MD5 (FRR knows a
	// neighbor by address alone).
	b.isolate(isolated{Node: special, Role: "safe-md5",
		FRR:     frrNeighborConf{Addr: b.nodeIP(special), RemoteAS: fmt.Sprint(bgpNodeASN), Password: password},
		YAML:    objects["secret"] + bgpPeerYAML(md5, rolePeerSelector("safe-md5"), "passwordSecret: {name: "+secret+", key: password}"),
		Objects: []string{"bgppeer/" + md5, "secret/" + secret}})
	h.Apply(echoDeploymentYAML(app, nodes[0], 1))
	h.Apply(lbServiceYAML(l2Svc, app, l2Pool, "Cluster", "") + lbServiceYAML(bgpSvc, app, bgpPool, "Cluster", ""))
	h.ReadyPods("app="+app, 1, 2*time.Minute)
	c := ctl{h}
	l2IP, bgpIP := c.waitAnyIP("default", l2Svc), c.waitAnyIP("default", bgpSvc)
	l2Node := b.announcer("default", l2Svc, l2IP, time.Minute)
	b.waitSessions(time.Minute, nodes...)
	b.waitFRRNextHops(bgpIP, nodes, time.Minute)
	for _, v := range [][2]string{{h.Layout.Client, l2IP}, {h.Layout.Remote, bgpIP}} {
		h.Poll(time.Minute, v[1]+" answering "+v[0], func() (bool, string) {
			ok, err := benchGet(v[0], v[1], time.Second)
			return ok, fmt.Sprint(err)
		})
	}
	// Every object's version in force is recorded before the edits.
	kinds := map[string]string{"ipaddresspool": l2Pool, "l2advertisement": l2Pool, "community": comm, "bfdprofile": bfd,
		"bgpadvertisement": adv, "bgppeer": general}
	h.Poll(30*time.Second, "status.inForce on every object", func() (bool, string) {
		for kind, name := range kinds {
			got := h.Kubectl("-n", heraldNS, "get", kind, name, "-o", "jsonpath={.metadata.generation}/{.status.inForce.generation}")
			if g, f, _ := strings.Cut(got, "/"); f != g {
				return false, kind + "/" + name + ": generation/inForce " + got
			}
		}
		return true, ""
	})
	l2Anns, bgpAnns := b.announcements("default", l2Svc), b.bgpAnnouncements("default", bgpSvc)
	paths, _ := b.frrPaths(bgpIP)
	t.Logf("L2 VIP %s on %s, BGP VIP %s over %s", l2IP, l2Node, bgpIP, joinPaths(paths))
	cf := &configSafety{b: b, c: c, objects: objects, l2Pool: l2Pool, bgpPool: bgpPool, l2Svc: l2Svc, bgpSvc: bgpSvc,
		general: general, md5: md5, adv: adv, comm: comm, secret: secret,
		l2IP: l2IP, bgpIP: bgpIP, l2Anns: l2Anns, bgpAnns: bgpAnns, paths: paths}

	probes := []*probe{h.StartProbe(h.Layout.Client, l2IP), h.StartProbe(h.Layout.Remote, bgpIP)}
	defer func() {
		for _, p := range probes {
			p.Stop()
		}
	}()

	edits := cf.edits(h)
	for _, e := range edits {
		t.Logf("%s: edit %q", probes[0].Since(), e.name)
		ok := t.Run(e.name, func(t *testing.T) { cf.checkEditRefused(t, e) })
		if !ok {
			break
		}
	}
	// A controller that starts while an edit is refused reads the version
	// in force from the status and decides as the one before it did.
	t.Logf("%s: controller restart", probes[0].Since())
	t.Run("controller restarted while an edit is refused", cf.checkControllerRestartDuringRefusal)
	for _, p := range probes {
		p.Stop()
		sent, failed := p.Result()
		t.Logf("probe %s -> %s: %d requests every 20 ms, %d failed", p.NS, p.IP, sent, failed)
		if failed > 0 {
			t.Errorf("%d of %d requests to %s failed: %s", failed, sent, p.IP, p.Failures())
		}
		if sent == 0 {
			t.Errorf("the probe to %s sent nothing", p.IP)
		}
	}
}

// edits are the edits to make, each with its undo.
func (cf *configSafety) edits(h *harness.T) []configEdit {
	return []configEdit{
		{"older pool reaches into a newer pool's range", "ipaddresspool", cf.l2Pool, "spec.addresses[1]",
			func() {
				h.Apply(poolYAML(cf.l2Pool, []string{"198.51.100.210-198.51.100.214", "203.0.113.176/30"}, "autoAssign: false"))
			}, func() { h.Apply(cf.objects["pool/"+cf.l2Pool]) }, "IPAddressPool " + cf.bgpPool + ", which is in force there"},
		{"pool drops the range holding the VIP", "ipaddresspool", cf.l2Pool, "spec.addresses",
			func() {
				h.Apply(poolYAML(cf.l2Pool, []string{"198.51.100.215-198.51.100.219"}, "autoAssign: false"))
			}, func() { h.Apply(cf.objects["pool/"+cf.l2Pool]) }, ""},
		{"newer pool overlaps an older one", "ipaddresspool", cf.bgpPool, "spec.addresses[1]",
			func() { h.Apply(bgpPoolYAML(cf.bgpPool, "203.0.113.176/28", "198.51.100.208/29")) },
			func() { h.Apply(cf.objects["pool/"+cf.bgpPool]) }, ""},
		{"L2Advertisement names a pool that does not exist", "l2advertisement", cf.l2Pool, "spec.ipAddressPools[0]",
			func() { h.Apply(strings.Replace(cf.objects["l2ad"], "["+cf.l2Pool+"]", "[safe-l3]", 1)) },
			func() { h.Apply(cf.objects["l2ad"]) }, ""},
		{"BGPAdvertisement names peers that do not exist", "bgpadvertisement", cf.adv, "spec.peers[0]",
			func() {
				h.Apply(bgpAdvertisementYAML(cf.adv, cf.bgpPool, bgpAdvertisedCommunities(cf.comm), "peers: [safe-genral]"))
			}, func() { h.Apply(cf.objects["adv"]) }, ""},
		{"BGPAdvertisement uses an alias nobody defines", "bgpadvertisement", cf.adv, "spec.communities[0]",
			func() {
				h.Apply(bgpAdvertisementYAML(cf.adv, cf.bgpPool, "communities: [safe-sdt]", "peers: ["+cf.general+", "+cf.md5+"]"))
			}, func() { h.Apply(cf.objects["adv"]) }, ""},
		{"aggregation wider than the pool", "bgpadvertisement", cf.adv, "spec.aggregationLength",
			func() {
				h.Apply(bgpAdvertisementYAML(cf.adv, cf.bgpPool, bgpAdvertisedCommunities(cf.comm), "peers: ["+cf.general+", "+cf.md5+"]", "aggregationLength: 24"))
			}, func() { h.Apply(cf.objects["adv"]) }, ""},
		{"BGPPeer names a BFDProfile that does not exist", "bgppeer", cf.general, "spec.bfdProfile",
			func() { h.Apply(bgpPeerYAML(cf.general, generalPeerSelector, "bfdProfile: safe-fast")) },
			func() { h.Apply(cf.objects["general"]) }, ""},
		{"the password Secret is deleted", "bgppeer", cf.md5, "spec.passwordSecret.name",
			func() { h.Kubectl("-n", heraldNS, "delete", "secret", cf.secret) },
			func() { h.Apply(cf.objects["secret"]) }, ""},
		{"a Community drops an alias in use", "community", cf.comm, "spec.communities",
			func() {
				h.Apply(strings.Replace(cf.objects["community"], "name: "+cf.comm+"-std,", "name: "+cf.comm+"-standard,", 1))
			}, func() { h.Apply(cf.objects["community"]) }, ""},
	}
}

// checkEditRefused makes edit e and checks that it is refused, with a
// condition and an event naming the field, and changes nothing; then
// undoes it.
func (cf *configSafety) checkEditRefused(t *testing.T, e configEdit) {
	b, h := cf.b.on(t)
	before := h.Kubectl("-n", heraldNS, "get", e.kind, e.obj, "-o", "jsonpath={.status.inForce.generation}")
	nEvents := len(b.objectEvents(kindName(e.kind), e.obj))
	e.edit()
	var cond string
	h.Poll(30*time.Second, e.kind+"/"+e.obj+" to report the refused edit", func() (bool, string) {
		cond = h.Kubectl("-n", heraldNS, "get", e.kind, e.obj, "-o",
			`jsonpath={.status.conditions[?(@.type=="Valid")].reason}|{.status.conditions[?(@.type=="Valid")].message}`)
		return strings.HasPrefix(cond, "EditRefused|in force: generation "+before) && strings.Contains(cond, e.field+": ") &&
			strings.Contains(cond, e.want), cond
	})
	t.Logf("condition: %s", cond)
	h.Poll(30*time.Second, "an EditRefused event naming "+e.field, func() (bool, string) {
		evs := b.objectEvents(kindName(e.kind), e.obj)
		for _, ev := range evs[min(nEvents, len(evs)):] {
			if strings.HasPrefix(ev, "EditRefused: ") && strings.Contains(ev, e.field+": ") {
				return true, ""
			}
		}
		return false, fmt.Sprint(evs)
	})
	// Give the controller and the speakers time to act on it, had
	// they taken the edit.
	time.Sleep(2 * time.Second)
	checkUnchanged(b, cf.c, cf.l2Svc, cf.bgpSvc, cf.l2IP, cf.bgpIP, cf.l2Anns, cf.bgpAnns, cf.paths)
	e.undo()
	h.Poll(30*time.Second, e.kind+"/"+e.obj+" valid again", func() (bool, string) {
		got := h.Kubectl("-n", heraldNS, "get", e.kind, e.obj, "-o",
			`jsonpath={.status.conditions[?(@.type=="Valid")].status}|{.metadata.generation}|{.status.inForce.generation}`)
		f := strings.Split(got, "|")
		return len(f) == 3 && f[0] == "True" && f[1] == f[2], got
	})
	checkUnchanged(b, cf.c, cf.l2Svc, cf.bgpSvc, cf.l2IP, cf.bgpIP, cf.l2Anns, cf.bgpAnns, cf.paths)
}

// checkControllerRestartDuringRefusal checks that a controller starting
// while an edit is refused keeps the version in force.
func (cf *configSafety) checkControllerRestartDuringRefusal(t *testing.T) {
	b, h := cf.b.on(t)
	c := ctl{h}
	h.Apply(poolYAML(cf.l2Pool, []string{"198.51.100.215-198.51.100.219"}, "autoAssign: false"))
	h.Poll(30*time.Second, "the edit refused", func() (bool, string) {
		got := h.Kubectl("-n", heraldNS, "get", "ipaddresspool", cf.l2Pool, "-o", `jsonpath={.status.conditions[?(@.type=="Valid")].reason}`)
		return got == "EditRefused", got
	})
	pod := c.readyControllers(1)[0]
	old := containerID(&pod)
	c.signalController(&pod, syscall.SIGKILL)
	c.waitRestarted(pod.Name, old, time.Minute)
	time.Sleep(3 * time.Second) // the new controller adopts and parses
	got := h.Kubectl("-n", heraldNS, "get", "ipaddresspool", cf.l2Pool, "-o",
		`jsonpath={.status.conditions[?(@.type=="Valid")].reason}|{.status.inForce.spec.addresses}`)
	if got != `EditRefused|["198.51.100.210-198.51.100.214"]` {
		t.Errorf("after the restart: %s", got)
	}
	checkUnchanged(b, c, cf.l2Svc, cf.bgpSvc, cf.l2IP, cf.bgpIP, cf.l2Anns, cf.bgpAnns, cf.paths)
	h.Apply(cf.objects["pool/"+cf.l2Pool])
	h.Poll(30*time.Second, "the pool valid again", func() (bool, string) {
		got := h.Kubectl("-n", heraldNS, "get", "ipaddresspool", cf.l2Pool, "-o", `jsonpath={.status.conditions[?(@.type=="Valid")].status}`)
		return got == "True", got
	})
}

// kindName is the Kind of a kubectl resource name.
func kindName(resource string) string {
	for _, k := range []string{"IPAddressPool", "L2Advertisement", "BGPAdvertisement", "BGPPeer", "Community", "BFDProfile"} {
		if strings.EqualFold(k, resource) {
			return k
		}
	}
	return resource
}

// checkUnchanged fails the test when a Service's IP, a ServiceAnnouncement
// or an FRR path differs from the start.
func checkUnchanged(b bgpLab, c ctl, l2Svc, bgpSvc, l2IP, bgpIP string, l2Anns, bgpAnns []string, paths []frrPath) {
	t := b.t()
	t.Helper()
	if got := c.ips("default", l2Svc); got != l2IP {
		t.Errorf("the L2 Service's IP changed: %s -> %q", l2IP, got)
	}
	if got := c.ips("default", bgpSvc); got != bgpIP {
		t.Errorf("the BGP Service's IP changed: %s -> %q", bgpIP, got)
	}
	if got := b.announcements("default", l2Svc); !slices.Equal(got, l2Anns) {
		t.Errorf("L2 ServiceAnnouncements changed: %v -> %v", l2Anns, got)
	}
	if got := b.bgpAnnouncements("default", bgpSvc); !slices.Equal(got, bgpAnns) {
		t.Errorf("BGP ServiceAnnouncements changed: %v -> %v", bgpAnns, got)
	}
	if got, raw := b.frrPaths(bgpIP); joinPaths(got) != joinPaths(paths) {
		t.Errorf("FRR's paths for %s changed: %s -> %s (%s)", bgpIP, joinPaths(paths), joinPaths(got), raw)
	}
}

// probe is harness.Probe: GET / every 20 ms, failures kept.
type probe = harness.Probe
