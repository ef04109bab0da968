package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/cluster"
	"github.com/herald-lb/herald/e2e/lab/kubectl"
	"github.com/herald-lb/herald/e2e/lab/kubelet"
	"github.com/herald-lb/herald/e2e/lab/netns"
	"github.com/herald-lb/herald/e2e/lab/topology"
	"github.com/herald-lb/herald/e2e/lab/walkthrough"
)

const (
	helmPrefix  = "hlhm"
	helmNS      = "herald-system"
	helmRelease = "herald"
	// The node agents' ASN towards the lab router (AS cluster.RouterASN,
	// which accepts any LAN address with `bgp listen range`).
	helmNodeASN = 64513
	upgradeTag  = "e2e-upgrade"
)

// helmRun is what TestHelm's steps share: the lab, the helm command and
// the chart with its values.
type helmRun struct {
	ctx           context.Context
	h             *harness.T
	helm          func(args ...string)
	chart, values string
}

// TestHelm is issue #13's install lifecycle as a user runs it: helm
// install into a bare lab, the "Using Source IP" walkthrough passing on
// it, an L2 VIP and a BGP VIP answering, the proxy's metrics on the pods'
// port "metrics" where the shipped PodMonitor scrapes (in the speakers,
// then in the standalone proxy's pods), helm
// upgrade to another image tag under a 20 ms probe of both, helm
// uninstall leaving no herald rules, announcements or routes (CRDs kept).
func TestHelm(t *testing.T) {
	needLab(t)
	root := repoRoot(t)
	helmBin := helmBinary(t, root)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()

	h := upBareLab(t, ctx)
	helm := helmRunner(t, ctx, helmBin, h.Lab.Kubeconfig)
	values := labValues(t, h.Lab.APIServerURL)
	chart := filepath.Join(root, "charts", "herald")
	hr := &helmRun{ctx: ctx, h: h, helm: helm, chart: chart, values: values}

	// What is not herald's on the nodes (kubelet's chains, on real nodes
	// the CNI plugins' with a host-port pod): install and uninstall must
	// leave it as it was.
	if h.Lab.RealNodes {
		startHostPort(h)
	}
	foreign := map[string][]string{}
	for _, n := range h.Layout.Nodes {
		foreign[n.Name] = harness.ForeignRules(h.Ctx, n.Netns)
	}

	hr.installAndWalkthrough(t)
	l2IP, bgpIP, nodeIPs := hr.serveVIPs(t)

	// The speakers' last words at the upgrade and the uninstall: a real
	// kubelet removes a deleted pod's logs, so they are followed.
	speakerLogs := h.FollowLogs(helmNS, "app.kubernetes.io/component=speaker", "speaker")
	scrapeMetrics(h, "speaker", "herald_speaker_members ", `herald_build_info{component="speaker"`)
	hr.upgradeUnderProbe(t, l2IP, bgpIP, speakerLogs)
	hr.uninstallKeepsConfig(t, nodeIPs, speakerLogs)
	hr.standaloneProxy(t, nodeIPs)

	// Nothing that is not herald's was touched, and the host port still
	// works.
	for _, n := range h.Layout.Nodes {
		gone, added := harness.DiffRules(foreign[n.Name], harness.ForeignRules(h.Ctx, n.Netns))
		t.Logf("%s: %d rules and chains not herald's before the install; after the uninstalls %d gone, %d added", n.Name, len(foreign[n.Name]), len(gone), len(added))
		if len(gone) > 0 || len(added) > 0 {
			t.Errorf("%s: rules not herald's changed across install and uninstall:\ngone:\n%s\nadded:\n%s", n.Name, strings.Join(gone, "\n"), strings.Join(added, "\n"))
		}
	}
	if h.Lab.RealNodes {
		checkHostPort(h)
	}
}

// installAndWalkthrough installs the chart and runs the "Using Source IP"
// walkthrough on it; the test stops if a step fails.
func (hr *helmRun) installAndWalkthrough(t *testing.T) {
	h := hr.h
	start := time.Now()
	hr.helm("install", helmRelease, hr.chart, "-n", helmNS, "--create-namespace", "-f", hr.values, "--wait", "--timeout", "5m")
	t.Logf("TIMING helm install --wait: %s", time.Since(start).Round(time.Millisecond))
	h.Kubectl("-n", helmNS, "rollout", "status", "--timeout=120s", "daemonset/herald-speaker")

	// The acceptance story on what helm installed: every step of "Using
	// Source IP" passes (none may wait for a missing component).
	env := h.Lab.WalkthroughEnv(h.Layout, t.Output())
	env.Kubectl = h.K
	results := walkthrough.Run(h.Ctx, env)
	pass, fail, notYet := walkthrough.Summary(results)
	for _, r := range results {
		if r.Verdict != walkthrough.Pass {
			t.Errorf("walkthrough after helm install: step %q: %s: %s", r.Step, r.Verdict, r.Detail)
		}
	}
	t.Logf("walkthrough after helm install: %d passed, %d failed, %d not yet possible", pass, fail, notYet)
	if t.Failed() {
		t.FailNow()
	}
}

// serveVIPs applies the configuration and an echo server behind an L2 and
// a BGP Service, waits until both VIPs answer, and checks the nodes: herald's
// rules, their iptables backend, conntrack's timeouts.
func (hr *helmRun) serveVIPs(t *testing.T) (l2IP, bgpIP string, nodeIPs map[string]bool) {
	h := hr.h
	// The configuration, as a user writes it, and an echo server behind
	// an L2 Service and a BGP Service.
	h.Apply(helmConfigYAML())
	h.Apply(echoYAML("helm-echo", 2) + serviceYAML("helm-l2", "helm-echo", "helm-l2") + serviceYAML("helm-bgp", "helm-echo", "helm-bgp"))
	h.Kubectl("rollout", "status", "--timeout=120s", "deployment/helm-echo")
	l2IP, bgpIP = waitIP(h, "helm-l2"), waitIP(h, "helm-bgp")
	t.Logf("L2 VIP %s, BGP VIP %s", l2IP, bgpIP)
	h.Poll(time.Minute, "the L2 VIP answering the LAN client", func() (bool, string) {
		ok, err := harness.EchoGet(h.Layout.Client, l2IP, 2*time.Second)
		return ok, fmt.Sprint(err)
	})
	h.Poll(time.Minute, "the BGP VIP answering the client behind the router", func() (bool, string) {
		ok, err := harness.EchoGet(h.Layout.Remote, bgpIP, 2*time.Second)
		return ok, fmt.Sprint(err)
	})
	nodeIPs = map[string]bool{}
	for _, n := range h.Layout.Nodes {
		nodeIPs[n.IPv4.String()] = true
		nodeIPs[n.IPv6.String()] = true
	}
	h.Poll(time.Minute, "FRR's route to the BGP VIP from every node", func() (bool, string) {
		peers, raw := frrRoutePeers(h, bgpIP+"/32")
		return len(peers) == len(h.Layout.Nodes), raw
	})
	for _, n := range h.Layout.Nodes {
		if rules := heraldRules(h, n); len(rules) == 0 {
			t.Fatalf("%s: no herald chains after the install: the uninstall check below would prove nothing", n.Name)
		}
	}
	// herald's rules live in the iptables backend kubelet chose.
	checkSameBackend(h)
	// The conntrack init container wrote kube-proxy's timeouts in each
	// node's namespace (the table's size is the host's: left, with a
	// warning).
	for _, n := range h.Layout.Nodes {
		for file, want := range map[string]string{"nf_conntrack_tcp_timeout_close_wait": "3600", "nf_conntrack_tcp_timeout_established": "86400"} {
			out, err := exec.Command("ip", "netns", "exec", n.Netns, "cat", "/proc/sys/net/netfilter/"+file).Output()
			if got := strings.TrimSpace(string(out)); err != nil || got != want {
				t.Errorf("%s: %s is %q (%v), want %s (kube-proxy's default, written by the chart's conntrack init container)", n.Name, file, got, err, want)
			}
		}
	}
	return l2IP, bgpIP, nodeIPs
}

// upgradeUnderProbe upgrades to another image tag while both VIPs are
// probed, and checks that no request failed and nothing moved.
func (hr *helmRun) upgradeUnderProbe(t *testing.T, l2IP, bgpIP string, speakerLogs *harness.LogFollower) {
	h := hr.h
	// helm upgrade to another tag while both VIPs are probed every 20 ms.
	// In binary mode every tag is this tree's binary; image mode runs real
	// tags, so the tag is given to the image under test.
	if h.Lab.ImageMode || h.Lab.RealNodes {
		podman(t, hr.ctx, "tag", kubelet.HeraldImageName, kubelet.HeraldRepository+":"+upgradeTag)
		// untag with the name twice: with the image alone, podman removes
		// every name it has, :dev included.
		t.Cleanup(func() {
			podman(t, context.Background(), "untag", kubelet.HeraldRepository+":"+upgradeTag, kubelet.HeraldRepository+":"+upgradeTag)
		})
		if err := h.Lab.LoadImages(hr.ctx, kubelet.HeraldRepository+":"+upgradeTag); err != nil {
			t.Fatal(err)
		}
	}
	// A failed request is explained by a capture or it is herald's bug:
	// every reset in the clients' and nodes' namespaces, and the L2
	// client's whole exchange with the VIP (which MAC answered it).
	captureIn := []string{h.Layout.Client, h.Layout.Remote}
	for _, n := range h.Layout.Nodes {
		captureIn = append(captureIn, n.Netns)
	}
	resets := harness.StartRSTCapture(t, captureIn)
	l2Packets := harness.StartPacketCapture(t, h.Lab.ModuleDir, h.Layout.Client, l2IP)
	// And each echo pod's packets in its node's namespace: a request the
	// pod's kernel acknowledged but that got no answer within the probe's
	// second is told apart here from an answer lost on its way back.
	echoPackets := map[string]*harness.PacketCapture{}
	for node, ips := range podIPsByNode(h, "app=helm-echo") {
		if n, ok := h.Layout.Node(node); ok {
			echoPackets[node] = harness.StartPacketCapture(t, h.Lab.ModuleDir, n.Netns, ips...)
		}
	}
	// The L2 election as the speakers saw it up to now: what a move
	// during the upgrade is compared with.
	electionBefore := electionLines(h)
	l2Probe, bgpProbe := h.StartProbe(h.Layout.Client, l2IP), h.StartProbe(h.Layout.Remote, bgpIP)
	// Which node answers for the L2 VIP, seen from the client: a restart
	// in place must not move it, even for a moment.
	l2MACs := harness.WatchMAC(h.Layout.Client, l2IP)
	ipChanges := watchIPs(h, map[string]string{"helm-l2": l2IP, "helm-bgp": bgpIP})
	time.Sleep(time.Second)
	start := time.Now()
	hr.helm("upgrade", helmRelease, hr.chart, "-n", helmNS, "-f", hr.values, "--set", "image.tag="+upgradeTag, "--wait", "--timeout", "5m")
	h.Kubectl("-n", helmNS, "rollout", "status", "--timeout=180s", "daemonset/herald-speaker")
	h.Kubectl("-n", helmNS, "rollout", "status", "--timeout=120s", "deployment/herald-controller")
	upgradeTook := time.Since(start)
	time.Sleep(2 * time.Second) // the last pod's takeover settles under the probe
	l2Probe.Stop()
	bgpProbe.Stop()
	changes := ipChanges()
	if macs := l2MACs(); len(macs) != 1 {
		node := map[string]string{}
		for _, n := range h.Layout.Nodes {
			node[harness.LinkMAC(n.Netns, "eth0")] = n.Name
		}
		var moves []string
		for _, m := range macs {
			moves = append(moves, fmt.Sprintf("%s %s (%s)", m.At.UTC().Format("15:04:05.000"), m.MAC, node[m.MAC]))
		}
		t.Errorf("upgrade: the L2 VIP %s was answered by %d MACs in turn, want one (a restart in place moves nothing): %s", l2IP, len(macs), strings.Join(moves, ", "))
		var at []time.Time
		for _, m := range macs[1:] {
			at = append(at, m.At)
		}
		t.Logf("the speakers' logs within 3 s of a move:\n  %s", strings.Join(speakerLogs.Near(at, 3*time.Second), "\n  "))
		t.Logf("the speakers' election before the upgrade:\n  %s", strings.Join(electionBefore, "\n  "))
	}
	t.Logf("TIMING helm upgrade --wait and the rollouts: %s", upgradeTook.Round(time.Millisecond))
	for _, p := range []struct {
		name string
		p    *harness.Probe
	}{{"L2 VIP " + l2IP, l2Probe}, {"BGP VIP " + bgpIP, bgpProbe}} {
		sent, failed := p.p.Result()
		t.Logf("TIMING upgrade, %s: %d requests every 20 ms, %d failed, max gap between answers %s %s",
			p.name, sent, failed, p.p.MaxGap().Round(time.Millisecond), p.p.Failures())
		// Each speaker restarts in place: its node keeps forwarding,
		// the others keep electing it (L2) and the router keeps its
		// routes (BGP graceful restart), so nothing moves.
		if failed > 0 {
			t.Errorf("upgrade, %s: %d of %d requests failed; a rolling update must not move an address or drop a request", p.name, failed, sent)
		}
	}
	if failedAt := append(l2Probe.FailedAt(), bgpProbe.FailedAt()...); len(failedAt) > 0 {
		t.Logf("TCP resets (tcpdump -e in the clients' and every node's namespace):\n  %s", strings.Join(resets.Near(failedAt), "\n  "))
		t.Logf("the speakers' logs within 3 s of a failure:\n  %s", strings.Join(speakerLogs.Near(failedAt, 3*time.Second), "\n  "))
		if at := l2Probe.FailedAt(); len(at) > 0 {
			t.Logf("the L2 client's packets to and from %s within 300 ms of a failure:\n  %s", l2IP, strings.Join(l2Packets.Around(at, 300*time.Millisecond, 400), "\n  "))
		}
		for _, node := range slices.Sorted(maps.Keys(echoPackets)) {
			t.Logf("the echo pods' packets on %s within 1.5 s of a failure (the probe waits 1 s for an answer):\n  %s", node, strings.Join(echoPackets[node].Around(failedAt, 1500*time.Millisecond, 300), "\n  "))
		}
	}
	if len(changes) > 0 {
		t.Errorf("IP changes during the upgrade: %v", changes)
	}
	images := h.Kubectl("-n", helmNS, "get", "pods", "-o", "jsonpath={range .items[*]}{.metadata.name}={.spec.containers[0].image}{\"\\n\"}{end}")
	if strings.Count(images, ":"+upgradeTag) != len(h.Layout.Nodes)+1 {
		t.Errorf("after the upgrade, the pods' images are not all %s:\n%s", upgradeTag, images)
	}
}

// uninstallKeepsConfig uninstalls and checks what the speakers did on the
// way out, and that the CRDs and the configuration stay.
func (hr *helmRun) uninstallKeepsConfig(t *testing.T, nodeIPs map[string]bool, speakerLogs *harness.LogFollower) {
	h := hr.h
	// helm uninstall: each node's last speaker removes its rules, the
	// ones the upgrade replaced kept them.
	uninstallAndCheck(h, hr.helm, nodeIPs)
	followed := speakerLogs.Stop()
	removed, kept := decisions(h, "speaker", followed)
	if removed != len(h.Layout.Nodes) || kept != len(h.Layout.Nodes) {
		t.Errorf("the proxies removed their rules %d times and kept them %d times; want %d and %d (uninstall, upgrade)",
			removed, kept, len(h.Layout.Nodes), len(h.Layout.Nodes))
	}
	if inPlace, handedOver := speakerStops(h, followed); inPlace != len(h.Layout.Nodes) || handedOver != len(h.Layout.Nodes) {
		t.Errorf("the speakers restarted in place %d times and handed their addresses over %d times; want %d and %d (upgrade, uninstall)",
			inPlace, handedOver, len(h.Layout.Nodes), len(h.Layout.Nodes))
	}
	crds := h.Kubectl("get", "crd", "-o", "name")
	for _, c := range []string{"ipaddresspools", "l2advertisements", "bgpadvertisements", "bgppeers", "communities", "bfdprofiles", "serviceannouncements", "nodeannouncements"} {
		if !strings.Contains(crds, "/"+c+".herald.io") {
			t.Errorf("CRD %s.herald.io gone after helm uninstall (Helm keeps a chart's CRDs)", c)
		}
	}
	if out := h.Kubectl("-n", helmNS, "get", "ipaddresspools,l2advertisements,bgppeers,bgpadvertisements", "-o", "name"); strings.Count(out, "\n") < 4 {
		t.Errorf("the configuration did not survive helm uninstall:\n%s", out)
	}
}

// standaloneProxy installs with the proxy on its own and checks that it too
// removes its rules at uninstall.
func (hr *helmRun) standaloneProxy(t *testing.T, nodeIPs map[string]bool) {
	h := hr.h
	// The proxy on its own (proxy.mode=standalone, the speakers with
	// --proxy=false) removes its rules at uninstall too.
	hr.helm("install", helmRelease, hr.chart, "-n", helmNS, "-f", hr.values, "--set", "proxy.mode=standalone", "--wait", "--timeout", "5m")
	h.Kubectl("-n", helmNS, "rollout", "status", "--timeout=120s", "daemonset/herald-proxy")
	proxyLogs := h.FollowLogs(helmNS, "app.kubernetes.io/component=proxy", "proxy")
	h.Poll(time.Minute, "the standalone proxies' rules on every node", func() (bool, string) {
		for _, n := range h.Layout.Nodes {
			if len(heraldRules(h, n)) == 0 {
				return false, n.Name + " has none"
			}
		}
		return true, ""
	})
	scrapeMetrics(h, "proxy")
	uninstallAndCheck(h, hr.helm, nodeIPs)
	if removed, kept := decisions(h, "proxy", proxyLogs.Stop()); removed != len(h.Layout.Nodes) || kept != 0 {
		t.Errorf("the standalone proxies removed their rules %d times and kept them %d times; want %d and 0", removed, kept, len(h.Layout.Nodes))
	}
}

// uninstallAndCheck runs helm uninstall and checks that herald left no
// rules on the nodes, no ServiceAnnouncements or NodeAnnouncements and no
// route at the router.
func uninstallAndCheck(h *harness.T, helm func(...string), nodeIPs map[string]bool) {
	t := h.T
	t.Helper()
	start := time.Now()
	helm("uninstall", helmRelease, "-n", helmNS, "--wait", "--timeout", "2m")
	h.Poll(time.Minute, "herald's pods gone", func() (bool, string) {
		out, err := h.K.Output(h.Ctx, "-n", helmNS, "get", "pods", "-o", "name")
		return err == nil && strings.TrimSpace(out) == "", out
	})
	t.Logf("TIMING helm uninstall until herald's pods are gone: %s", time.Since(start).Round(time.Millisecond))
	for _, n := range h.Layout.Nodes {
		if rules := heraldRules(h, n); len(rules) > 0 {
			t.Errorf("%s: herald's rules left after helm uninstall:\n%s", n.Name, strings.Join(rules, "\n"))
		}
	}
	// The speakers delete theirs, or, their Role being gone already, the
	// garbage collector does (their pods own them).
	h.Poll(30*time.Second, "no ServiceAnnouncements or NodeAnnouncements", func() (bool, string) {
		out, err := h.K.Output(h.Ctx, "get", "serviceannouncements,nodeannouncements", "-A", "-o", "name")
		return err == nil && strings.TrimSpace(out) == "", out
	})
	h.Poll(30*time.Second, "FRR without any route from the nodes", func() (bool, string) {
		var left []string
		for _, family := range []string{"ipv4", "ipv6"} {
			var table struct {
				Routes map[string][]struct {
					PeerID string `json:"peerId"`
				} `json:"routes"`
			}
			if err := h.Lab.Router.VtyshJSON(h.Ctx, "show bgp "+family+" unicast json", &table); err != nil {
				return false, err.Error()
			}
			for prefix, paths := range table.Routes {
				for _, p := range paths {
					if nodeIPs[p.PeerID] {
						left = append(left, prefix+" from "+p.PeerID)
					}
				}
			}
		}
		return len(left) == 0, fmt.Sprint(left)
	})
}

func podman(t *testing.T, ctx context.Context, args ...string) {
	t.Helper()
	if out, err := exec.CommandContext(ctx, "podman", args...).CombinedOutput(); err != nil {
		t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// repoRoot is the repository's root: the directory above holding the
// chart.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "charts", "herald", "Chart.yaml")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatalf("no charts/herald above %s", dir)
		}
	}
}

// helmBinary is $HERALD_HELM (relative to the repository's root, as the
// Makefile passes bin/helm), else the root's bin/helm; a missing one fails
// the test, saying how to get it.
func helmBinary(t *testing.T, root string) string {
	t.Helper()
	p, from := os.Getenv("HERALD_HELM"), "HERALD_HELM"
	if p == "" {
		p, from = "bin/helm", "the default"
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(root, p)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no helm at %s (%s): run `make helm` at the repository's root (it installs the pinned Helm into bin/helm), or set HERALD_HELM: %v", p, from, err)
	}
	return p
}

// upBareLab brings up a 2-node lab without herald and without a service
// proxy until helm installs herald's (waiting for any other lab on the
// machine) and takes it down at the end, checking that the machine is as
// before.
func upBareLab(t *testing.T, ctx context.Context) *harness.T {
	t.Helper()
	return harness.UpOwnLab(t, ctx, cluster.Options{Prefix: helmPrefix, Nodes: 2, Bare: true, Proxy: cluster.ProxyHerald})
}

// scrapeMetrics scrapes what the shipped PodMonitor scrapes, as
// Prometheus would: each pod's port "metrics" of the component (speaker,
// or the standalone proxy) on its pod IP (the node's, hostNetwork), from
// the LAN client. The proxy's metrics are there (HeraldProxySyncFailing
// and the proxy panels read them), after a successful sync, with the
// component's own (more); kube-proxy's 127.0.0.1:10249 still answers
// /proxyMode on the node.
func scrapeMetrics(h *harness.T, component string, more ...string) {
	h.T.Helper()
	out := h.Kubectl("-n", helmNS, "get", "pods", "-l", "app.kubernetes.io/component="+component, "-o",
		`jsonpath={range .items[*]}{.spec.nodeName} {.status.podIP} {.spec.containers[0].ports[?(@.name=="metrics")].containerPort}{"\n"}{end}`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(h.Layout.Nodes) {
		h.T.Fatalf("%s pods (node, IP, metrics port): %q", component, out)
	}
	for _, line := range lines {
		f := strings.Fields(line)
		if len(f) != 3 {
			h.T.Fatalf("%s pod without a port \"metrics\": %q", component, line)
		}
		url := "http://" + net.JoinHostPort(f[1], f[2]) + "/metrics"
		page, err := harness.HTTPGetFrom(h.Layout.Client, url)
		if err != nil {
			h.T.Fatalf("%s: GET %s from the LAN client: %v", f[0], url, err)
		}
		synced := sample(page, "herald_proxy_sync_proxy_rules_last_timestamp_seconds")
		for _, want := range append([]string{`herald_build_info{component="proxy"`, "go_goroutines ",
			"herald_proxy_sync_proxy_rules_iptables_restore_failures_total ", "herald_proxy_sync_proxy_rules_duration_seconds_bucket"}, more...) {
			if !strings.Contains(page, want) {
				h.T.Errorf("%s: %s has no %s", f[0], url, want)
			}
		}
		if synced <= 0 {
			h.T.Errorf("%s: %s: herald_proxy_sync_proxy_rules_last_timestamp_seconds %v, want a successful sync's time", f[0], url, synced)
		}
		h.T.Logf("%s: %s: GET %s from the LAN client: %d bytes, the proxy's last sync at %.0f", f[0], component, url, len(page), synced)
		n, _ := h.Layout.Node(f[0])
		if mode, err := harness.HTTPGetFrom(n.Netns, "http://127.0.0.1:10249/proxyMode"); err != nil || (mode != "iptables" && mode != "nftables") {
			h.T.Errorf("%s: 127.0.0.1:10249/proxyMode: %q, %v", f[0], mode, err)
		}
	}
}

// sample is the value of an unlabelled series on a /metrics page, or -1.
func sample(page, name string) float64 {
	for _, line := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return f
			}
		}
	}
	return -1
}

// helmRunner runs helm against the lab with its own cache and config
// directories; a failure ends the test.
func helmRunner(t *testing.T, ctx context.Context, bin, kubeconfig string) func(args ...string) {
	home := t.TempDir()
	return func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, append(args, "--kubeconfig", kubeconfig)...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
			"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
		out, err := cmd.CombinedOutput()
		t.Logf("helm %s:\n%s", strings.Join(args, " "), out)
		if err != nil {
			t.Fatalf("helm %s: %v", args[0], err)
		}
	}
}

// labValues writes the chart values the lab needs (as
// charts/testdata/values/lab.yaml): no kube-proxy, so the API server's
// own address; the lab's pod network.
func labValues(t *testing.T, apiServerURL string) string {
	t.Helper()
	u, err := url.Parse(apiServerURL)
	if err != nil || u.Hostname() == "" || u.Port() == "" {
		t.Fatalf("API server URL %q: %v", apiServerURL, err)
	}
	// The conntrack init container runs too, as it does for every
	// real-node lab (cluster.HelmValues).
	v := fmt.Sprintf("apiServer:\n  host: %s\n  port: %s\nproxy:\n  clusterCIDR: %s,%s\n  conntrack:\n    privilegedInit: true\nspeaker:\n  logLevel: debug\n",
		u.Hostname(), u.Port(), topology.ClusterCIDR, topology.ClusterCIDRv6)
	p := filepath.Join(t.TempDir(), "lab-values.yaml")
	if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func helmConfigYAML() string {
	return fmt.Sprintf(`apiVersion: herald.io/v1beta1
kind: IPAddressPool
metadata: {name: helm-l2, namespace: %[1]s}
spec: {addresses: [198.51.100.210-198.51.100.214], autoAssign: false}
---
apiVersion: herald.io/v1beta1
kind: L2Advertisement
metadata: {name: helm-l2, namespace: %[1]s}
spec: {ipAddressPools: [helm-l2]}
---
apiVersion: herald.io/v1beta1
kind: IPAddressPool
metadata: {name: helm-bgp, namespace: %[1]s}
spec: {addresses: [203.0.113.176/28], autoAssign: false}
---
apiVersion: herald.io/v1beta1
kind: BGPAdvertisement
metadata: {name: helm-bgp, namespace: %[1]s}
spec: {ipAddressPools: [helm-bgp]}
---
apiVersion: herald.io/v1beta1
kind: BGPPeer
metadata: {name: helm-router, namespace: %[1]s}
spec: {myASN: %[2]d, peerASN: %[3]d, peerAddress: %[4]s, holdTime: 9s, keepaliveTime: 3s, connectTime: 1s, enableGracefulRestart: true}
`, helmNS, helmNodeASN, cluster.RouterASN, topology.RouterLANv4)
}

// echoYAML is the echo Deployment behind the probed Services. Its pods
// request CPU, as a served workload does: as BestEffort pods (2 cpu
// shares) they were starved during the upgrade's CPU spike, and the
// captures of 2026-11-28 showed a request reaching the pod and acked by
// its kernel, with no answer from the server within the probe's 1 s.
func echoYAML(name string, replicas int) string {
	return fmt.Sprintf(`---
apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s, namespace: default}
spec:
  replicas: %[2]d
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      terminationGracePeriodSeconds: 5
      containers: [{name: echo, image: registry.k8s.io/echoserver:1.4, resources: {requests: {cpu: 100m}}}]
`, name, replicas)
}

func serviceYAML(name, app, pool string) string {
	return fmt.Sprintf(`---
apiVersion: v1
kind: Service
metadata:
  name: %s
  namespace: default
  annotations: {herald.io/address-pool: %s}
spec:
  type: LoadBalancer
  selector: {app: %s}
  ports: [{port: 80, targetPort: 8080, protocol: TCP}]
`, name, pool, app)
}

// podIPsByNode are the IPs of the pods matching selector in the default
// namespace, by node.
func podIPsByNode(h *harness.T, selector string) map[string][]string {
	out := map[string][]string{}
	lines := h.Kubectl("get", "pods", "-l", selector, "-o", `jsonpath={range .items[*]}{.spec.nodeName} {.status.podIP}{"\n"}{end}`)
	for _, l := range strings.Split(strings.TrimSpace(lines), "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			out[f[0]] = append(out[f[0]], f[1])
		}
	}
	return out
}

func serviceIP(h *harness.T, name string) string {
	out, _ := h.K.Output(h.Ctx, "get", "service", name, "-o", "jsonpath={.status.loadBalancer.ingress[*].ip}")
	return strings.TrimSpace(out)
}

func waitIP(h *harness.T, name string) string {
	h.T.Helper()
	var ip string
	h.Poll(time.Minute, "an IP for Service "+name, func() (bool, string) {
		ip = serviceIP(h, name)
		return ip != "" && !strings.Contains(ip, " "), ip
	})
	return ip
}

// watchIPs samples the Services' IPs every 200 ms until the returned
// function is called, which returns every change seen.
func watchIPs(h *harness.T, want map[string]string) func() []string {
	done := make(chan struct{})
	var changes []string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for end := time.Now().Add(15 * time.Minute); time.Now().Before(end); {
			for svc, ip := range want {
				if got := serviceIP(h, svc); got != ip {
					changes = append(changes, fmt.Sprintf("%s: %q (want %s)", svc, got, ip))
				}
			}
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return func() []string {
		close(done)
		wg.Wait()
		return changes
	}
}

// frrRoutePeers are the peers FRR has a path to prefix from.
func frrRoutePeers(h *harness.T, prefix string) ([]string, string) {
	out, err := h.Lab.Router.Vtysh(h.Ctx, "show bgp ipv4 unicast "+prefix+" json")
	if err != nil {
		return nil, err.Error()
	}
	var r struct {
		Paths []struct {
			Peer struct {
				PeerID string `json:"peerId"`
			} `json:"peer"`
		} `json:"paths"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return nil, out
	}
	var peers []string
	for _, p := range r.Paths {
		peers = append(peers, p.Peer.PeerID)
	}
	return peers, out
}

// heraldRules are the lines naming a HERALD chain in a node's nat, filter
// and mangle tables, IPv4 and IPv6, through both iptables backends.
func heraldRules(h *harness.T, n topology.Node) []string {
	var out []string
	for _, tool := range []string{"iptables-legacy-save", "iptables-nft-save", "ip6tables-legacy-save", "ip6tables-nft-save"} {
		for _, table := range []string{"nat", "filter", "mangle"} {
			save, err := netns.Run(h.Ctx, n.Netns, tool, "-t", table)
			if err != nil && strings.Contains(save, "HERALD") {
				h.T.Errorf("%s: %s -t %s: %v", n.Name, tool, table, err)
			}
			for _, l := range strings.Split(save, "\n") {
				if strings.Contains(l, "HERALD") {
					out = append(out, tool+" "+table+": "+l)
				}
			}
		}
	}
	return out
}

// decisions counts the proxies' decisions at stop in the logs of every
// pod of component (speaker or proxy), current or deleted, and logs them.
func decisions(h *harness.T, component string, followed map[string]string) (removed, kept int) {
	for pod, log := range podLogs(h, component, followed) {
		l := grepLines(log, "uninstall:", "restart: keeping rules")
		h.T.Logf("%s %s's proxy when it stopped:\n%s", component, pod, l)
		removed += strings.Count(l, `msg="uninstall: removing herald's rules"`)
		kept += strings.Count(l, "restart: keeping rules")
		if strings.Contains(l, "removing herald's rules failed") {
			h.T.Errorf("%s %s: removing herald's rules at uninstall failed", component, pod)
		}
	}
	return removed, kept
}

// speakerStops counts how the speakers left the cluster: restarting in
// place (the upgrade) or handing their addresses over (the uninstall).
func speakerStops(h *harness.T, followed map[string]string) (inPlace, handedOver int) {
	for pod, log := range podLogs(h, "speaker", followed) {
		l := grepLines(log, "stopping: restarting in place", "stopping: leaving the memberlist cluster")
		h.T.Logf("speaker %s when it stopped:\n%s", pod, l)
		inPlace += strings.Count(l, "stopping: restarting in place")
		handedOver += strings.Count(l, "stopping: leaving the memberlist cluster")
	}
	return inPlace, handedOver
}

// podLogs are the logs of every pod of component, current or deleted:
// on real nodes those followed, else those the lab kubelets keep.
func podLogs(h *harness.T, component string, followed map[string]string) map[string]string {
	if h.Lab.RealNodes {
		return followed
	}
	out := map[string]string{}
	for _, k := range h.Lab.Kubelets {
		files, _ := filepath.Glob(filepath.Join(k.Config.StateDir, kubelet.PodsDir, helmNS+"_herald-"+component+"-*", component+".log"))
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				h.T.Errorf("%s log: %v", component, err)
				continue
			}
			out[filepath.Base(filepath.Dir(f))] = string(data)
		}
	}
	return out
}

// grepLines keeps the lines holding any of words.
func grepLines(s string, words ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, w := range words {
			if strings.Contains(l, w) {
				out = append(out, l)
				break
			}
		}
	}
	if len(out) == 0 {
		return "(no such line)"
	}
	return strings.Join(out, "\n")
}

// electionLines are the speakers' log lines, so far, about the L2
// election and who answers: winners, announcements, isolation and
// recovery, memberlist events.
func electionLines(h *harness.T) []string {
	quiet := kubectl.Kubectl{Path: h.K.Path, Kubeconfig: h.K.Kubeconfig} // printed only when an address moves
	out, err := quiet.Output(h.Ctx, "-n", helmNS, "logs", "-l", "app.kubernetes.io/component=speaker", "-c", "speaker", "--tail=-1", "--prefix", "--max-log-requests=10")
	if err != nil {
		return []string{"kubectl logs: " + err.Error()}
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		for _, k := range []string{"winner changed", "msg=announcing", "not answering", "isolated", "recover", "event=join", "event=leave", "interfaces announceable", "first sync done", "restart"} {
			if strings.Contains(l, k) {
				lines = append(lines, l)
				break
			}
		}
	}
	return lines
}
