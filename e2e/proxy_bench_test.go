package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/kubeconfig"
	"github.com/herald-lb/herald/e2e/lab/kubelet"
	"github.com/herald-lb/herald/e2e/lab/labbin"
	"github.com/herald-lb/herald/e2e/lab/netns"
	"github.com/herald-lb/herald/e2e/lab/proc"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// Shape of the proxy benchmarks.
const (
	// pxbNS holds the sync benchmark's Services and EndpointSlices.
	pxbNS        = "proxy-bench"
	pxbEndpoints = 10
	// pxbNodePorts: the default NodePort range (30000-32767) has 2,768
	// ports, so only the first 2,000 Services are NodePorts; the rest
	// are ClusterIP only.
	pxbNodePorts = 2000
	pxbWorkers   = 32
	// pxbChanges one-endpoint changes are timed per proxy; an even number,
	// so the changed slice ends as it began and the next proxy sees the
	// same objects.
	pxbChanges = 6
	// pxbFullMax bounds the wait for a proxy's first full sync.
	pxbFullMax = 15 * time.Minute
	// pxbNode is the node both proxies act as (--hostname-override): an
	// existing lab node, so no Node object has to be faked.
	pxbNode = "node1"

	// pxtNS holds the throughput benchmark's echo server and client.
	pxtNS       = "proxy-tput"
	pxtRequests = 10000
	pxtWorkers  = 8
	pxtMax      = 10 * time.Second
	pxtRounds   = 2
)

// pxbSizes are the Service counts measured; the second adds to the first.
var pxbSizes = []int{1000, 10000}

// The addresses of the proxies' own namespaces on the LAN: unused by the
// lab (nodes .11-.20, client .100, pools .200-.249, router .1, host .254).
var (
	pxbHeraldAddr = netip.MustParseAddr("198.51.100.61")
	pxbKubeAddr   = netip.MustParseAddr("198.51.100.62")
)

const pxbReproduce = "cd e2e && HERALD_BENCH=1 go test -count=1 -timeout 60m -run 'TestBenchProxy' -v ."

func pxbPtr[T any](v T) *T { return &v }

func pxbName(i int) string { return fmt.Sprintf("pb-%05d", i) }

// pxbEndpoint is endpoint j of Service i: on node (i+j) mod nodes, with
// an address of that node's pod CIDR. Each Service's ten addresses
// differ; addresses repeat across Services (a /24 per node cannot hold
// 100,000 pods), which changes nothing for the rules.
func pxbEndpoint(l topology.Layout, i, j int) (netip.Addr, string) {
	n := l.Nodes[(i+j)%len(l.Nodes)]
	b := n.PodCIDR.Addr().As4()
	b[3] = byte(2 + (i*pxbEndpoints+j)%240)
	return netip.AddrFrom4(b), n.Name
}

// pxbAltAddr is where the timed change moves Service i's first endpoint.
func pxbAltAddr(l topology.Layout, i int) netip.Addr {
	b := l.Nodes[i%len(l.Nodes)].PodCIDR.Addr().As4()
	b[3] = 250
	return netip.AddrFrom4(b)
}

func pxbService(i int) *v1.Service {
	typ := v1.ServiceTypeClusterIP
	if i < pxbNodePorts {
		typ = v1.ServiceTypeNodePort
	}
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: pxbName(i), Namespace: pxbNS},
		Spec: v1.ServiceSpec{
			Type:  typ,
			Ports: []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
}

func pxbSlice(l topology.Layout, i int) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: pxbName(i), Namespace: pxbNS, Labels: map[string]string{
			discoveryv1.LabelServiceName: pxbName(i),
			discoveryv1.LabelManagedBy:   "proxy-bench.herald.io",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: pxbPtr("http"), Protocol: pxbPtr(v1.ProtocolTCP), Port: pxbPtr(int32(8080))}},
	}
	for j := range pxbEndpoints {
		ip, node := pxbEndpoint(l, i, j)
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{ip.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: pxbPtr(true), Serving: pxbPtr(true), Terminating: pxbPtr(false)},
			NodeName:   pxbPtr(node),
		})
	}
	return s
}

// pxbResult is one proxy's figures at one size.
type pxbResult struct {
	busyBefore float64 // the machine's busy fraction before the start
	// full is the first full sync (seconds), fullCount the full syncs
	// seen by then (1 expected); timedOut says it did not finish within
	// the time the run had left for it.
	full      float64
	fullCount float64
	timedOut  time.Duration
	fullNAT   float64       // nat rules after the first full sync (own gauge)
	firstSeen time.Duration // process start to the full sync in its metrics
	// complete is the time of every sync (seconds, summed) until the
	// proxy had nothing left to do, syncs how many; completeAt is the
	// process start to the last of them.
	complete   float64
	syncs      float64
	completeAt time.Duration
	cpu        time.Duration // CPU of the process and its reaped children by then
	partials   []float64     // seconds, one per change
	multi      int           // changes followed by more than one sync
	fullsAfter float64       // full syncs during the changes (0 expected)
	saveLines  int           // `iptables-save | wc -l`
	natRules   int           // -A lines in nat
	filterRule int           // -A lines in filter
	gaugeNAT   float64       // the proxy's own rules gauge, nat, at the end
	dispatch   int           // rules in its dispatch chain
	saveNotes  []string      // iptables-save crashes and slow runs
	logLines   []string
	nfacct     int // kube-proxy's "failed to collect nfacct counter" lines
}

func (r pxbResult) partialMedian() float64 {
	if len(r.partials) == 0 {
		return 0
	}
	s := append([]float64(nil), r.partials...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// TestBenchProxyVsKubeProxy measures herald's proxy and kube-proxy (the
// lab's Kubernetes release, iptables mode) side by side: N selectorless
// Services with an EndpointSlice of ten endpoints each, N = 1,000 and
// 10,000; per proxy the first full sync, the syncs until its rules are
// complete, six one-endpoint changes, all read from the proxy's own
// metrics, and the rules it wrote. The proxies run one at a time, each
// in a fresh network namespace of its own, with the lab's herald-speaker
// pods paused. It prints figures and asserts no time. HERALD_BENCH=1
// runs it.
func TestBenchProxyVsKubeProxy(t *testing.T) {
	harness.Bench(t)
	h := harness.Start(t)
	// The harness's context lasts 15 minutes; this test can take longer.
	// It ends 8 minutes before the binary's -timeout, which leaves time
	// for the cleanup and the throughput benchmark.
	deadline := time.Now().Add(55 * time.Minute)
	if d, ok := t.Deadline(); ok {
		deadline = d.Add(-8 * time.Minute)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	t.Cleanup(cancel) // registered first: runs after every other cleanup
	rc, err := kubeconfig.RESTConfig(h.Lab.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rc.QPS, rc.Burst = 2000, 4000
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	logDir, err := os.MkdirTemp("", "herald-proxy-bench-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			var b strings.Builder
			files, _ := filepath.Glob(filepath.Join(logDir, "*.log"))
			for _, f := range files {
				proc.WriteTail(&b, f, 80)
			}
			t.Log("proxy logs:\n" + b.String())
		}
		_ = os.RemoveAll(logDir)
	})

	t.Cleanup(pxbPauseLabProxies(t, ctx, cs))
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pxbNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx := context.WithoutCancel(ctx)
		pxbDeleteNamespace(t, cctx, cs, pxbNS)
		if n, err := pxbDeleteKubeProxyEvents(cctx, cs); err != nil {
			t.Errorf("deleting kube-proxy's events: %v", err)
		} else if n > 0 {
			t.Logf("deleted %d events kube-proxy recorded", n)
		}
	})

	kc := h.Lab.Kubeconfig
	common := []string{"--kubeconfig=" + kc, "--hostname-override=" + pxbNode, "--cluster-cidr=" + topology.ClusterCIDR.String(),
		"--metrics-bind-address=127.0.0.1:10249", "--healthz-bind-address=127.0.0.1:10256", "--kube-api-qps=50", "--kube-api-burst=100"}
	herald := &pxbProxy{
		name: "herald", netns: h.Layout.Prefix + "-pxh", hostIf: h.Layout.Prefix + "-pxh", addr: pxbHeraldAddr,
		prefix: "herald_proxy_", path: h.Lab.Bins.Path(labbin.Herald), chain: "HERALD-SERVICES",
		// No periodic sync during the measurement, for both.
		args: append(append([]string{"proxy"}, common...), "--min-sync-period=1s", "--sync-period=1h"),
	}
	kube := &pxbProxy{
		name: "kube-proxy", netns: h.Layout.Prefix + "-pxk", hostIf: h.Layout.Prefix + "-pxk", addr: pxbKubeAddr,
		prefix: "kubeproxy_", labels: []string{"ip_family", "IPv4"}, path: h.Lab.K8s.Tool("kube-proxy"), chain: "KUBE-SERVICES",
		args: append(append([]string{}, common...), "--proxy-mode=iptables",
			"--iptables-min-sync-period=1s", "--iptables-sync-period=1h",
			// Leave the machine-wide conntrack table size and hash (a
			// module parameter) alone, and the timeouts too.
			"--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
			"--v=2"),
	}
	ipt, _ := exec.CommandContext(ctx, "iptables", "--version").Output()
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	t.Logf("BENCH setup: herald proxy (%s) vs kube-proxy %s --proxy-mode=iptables; %s; kernel %s; %d CPUs",
		herald.path, h.Lab.K8s.Version, strings.TrimSpace(string(ipt)), strings.TrimSpace(string(kernel)), runtime.NumCPU())
	t.Logf("BENCH setup: each proxy alone, in a fresh network namespace (%s %s, %s %s: loopback and a leg on the LAN bridge to reach the API server), as node %s, min sync period 1s, no periodic sync",
		herald.netns, herald.addr, kube.netns, kube.addr, pxbNode)
	t.Logf("BENCH setup: Services: NodePort for the first %d, ClusterIP for the rest; %d endpoints each on the nodes' pod CIDRs; the lab's own herald-speaker pods (with their proxies) paused; this run ends by %s",
		pxbNodePorts, pxbEndpoints, deadline.Format(time.TimeOnly))

	type row struct {
		n    int
		h, k pxbResult
	}
	var rows []row
	created := 0
	for _, n := range pxbSizes {
		start := time.Now()
		from := created
		got := parallel(n-from, pxbWorkers, func(k int) error {
			i := from + k
			if _, err := cs.CoreV1().Services(pxbNS).Create(ctx, pxbService(i), metav1.CreateOptions{}); err != nil {
				return err
			}
			_, err := cs.DiscoveryV1().EndpointSlices(pxbNS).Create(ctx, pxbSlice(h.Layout, i), metav1.CreateOptions{})
			return err
		})
		if got != n-from {
			t.Fatalf("created %d of %d Services with their slices", got, n-from)
		}
		created = n
		t.Logf("BENCH N=%d: created Services %s..%s and their EndpointSlices in %.1fs", n, pxbName(from), pxbName(n-1), time.Since(start).Seconds())
		r := row{n: n}
		r.h = pxbMeasure(t, ctx, h.Layout, cs, herald, n, logDir)
		r.k = pxbMeasure(t, ctx, h.Layout, cs, kube, n, logDir)
		rows = append(rows, r)
		for _, x := range []struct {
			p   *pxbProxy
			res pxbResult
		}{{herald, r.h}, {kube, r.k}} {
			if x.res.timedOut > 0 {
				t.Logf("BENCH N=%d %s: the first full sync did not finish within %s (the time this run had left); machine %.0f%% busy before the start",
					n, x.p.name, x.res.timedOut.Round(time.Second), 100*x.res.busyBefore)
			} else {
				t.Logf("BENCH N=%d %s: first full sync %.3fs (%v full syncs), %.0f nat rules, seen %.1fs after start; complete after %v syncs taking %.3fs, the last %.1fs after start, CPU %.1fs by then; one-endpoint changes %s, %d followed by more than one sync, %v full syncs among them; machine %.0f%% busy before the start",
					n, x.p.name, x.res.full, x.res.fullCount, x.res.fullNAT, x.res.firstSeen.Seconds(), x.res.syncs, x.res.complete, x.res.completeAt.Seconds(), x.res.cpu.Seconds(),
					pxbSeconds(x.res.partials), x.res.multi, x.res.fullsAfter, 100*x.res.busyBefore)
			}
			for _, l := range x.res.logLines {
				t.Logf("BENCH N=%d %s log: %s", n, x.p.name, l)
			}
			for _, e := range x.res.saveNotes {
				t.Logf("BENCH N=%d %s: %s", n, x.p.name, e)
			}
			if x.res.nfacct > 0 {
				t.Logf("BENCH N=%d %s log: %d lines \"failed to collect nfacct counter\" (metrics scraped before its first sync created the nfacct objects)", n, x.p.name, x.res.nfacct)
			}
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "BENCH herald proxy vs kube-proxy %s (iptables), N Services x %d endpoints, one proxy at a time in its own network namespace; seconds from each proxy's own metrics:\n", h.Lab.K8s.Version, pxbEndpoints)
	fmt.Fprintf(&b, "BENCH %6s %6s | %-28s | %-43s | %-43s\n", "", "", "first full sync", "all syncs until the rules were complete", fmt.Sprintf("one-endpoint change (median of %d)", pxbChanges))
	fmt.Fprintf(&b, "BENCH %6s %6s | %8s %10s %7s | %8s %10s %7s %15s | %8s %10s %7s %15s\n", "N", "NodePt", "herald", "kube-proxy", "ratio", "herald", "kube-proxy", "ratio", "target <=1.0x", "herald", "kube-proxy", "ratio", "target <=0.5x")
	for _, r := range rows {
		fh, fk, fr := pxbCell(r.h, r.h.full), pxbCell(r.k, r.k.full), pxbRatio(r.h, r.k, r.h.full, r.k.full)
		ch, ck, cr := pxbCell(r.h, r.h.complete), pxbCell(r.k, r.k.complete), pxbRatio(r.h, r.k, r.h.complete, r.k.complete)
		ph, pk, pr := pxbCell(r.h, r.h.partialMedian()), pxbCell(r.k, r.k.partialMedian()), pxbRatio(r.h, r.k, r.h.partialMedian(), r.k.partialMedian())
		fmt.Fprintf(&b, "BENCH %6d %6d | %8s %10s %7s | %8s %10s %7s %15s | %8s %10s %7s %15s\n",
			r.n, min(r.n, pxbNodePorts), fh, fk, fr, ch, ck, cr, pxbMet(cr, 1.0), ph, pk, pr, pxbMet(pr, 0.5))
	}
	fmt.Fprintf(&b, "BENCH rules (IPv4, at the end):\n")
	fmt.Fprintf(&b, "BENCH %6s | %-21s | %-21s | %-21s | %-21s | %-21s\n", "", "iptables-save lines", "nat -A rules", "filter -A rules", "own nat rules gauge", "dispatch chain rules")
	fmt.Fprintf(&b, "BENCH %6s | %10s %10s | %10s %10s | %10s %10s | %10s %10s | %10s %10s\n", "N", "herald", "kube-proxy", "herald", "kube-proxy", "herald", "kube-proxy", "herald", "kube-proxy", "herald", "kube-proxy")
	for _, r := range rows {
		fmt.Fprintf(&b, "BENCH %6d | %10d %10d | %10d %10d | %10d %10d | %10.0f %10.0f | %10d %10d\n",
			r.n, r.h.saveLines, r.k.saveLines, r.h.natRules, r.k.natRules, r.h.filterRule, r.k.filterRule, r.h.gaugeNAT, r.k.gaugeNAT, r.h.dispatch, r.k.dispatch)
	}
	fmt.Fprintf(&b, "BENCH reproduce: %s", pxbReproduce)
	t.Log("\n" + b.String())
}

// pxbCell is a figure in seconds, or ">Ns" when the proxy's first full
// sync did not finish.
func pxbCell(r pxbResult, v float64) string {
	if r.timedOut > 0 {
		return fmt.Sprintf(">%.0f", r.timedOut.Seconds())
	}
	return fmt.Sprintf("%.3f", v)
}

// pxbRatio is herald/kube-proxy; "<x" when kube-proxy did not finish.
func pxbRatio(h, k pxbResult, hv, kv float64) string {
	switch {
	case h.timedOut > 0 || kv == 0 && k.timedOut == 0:
		return "-"
	case k.timedOut > 0:
		return fmt.Sprintf("<%.2fx", hv/k.timedOut.Seconds())
	}
	return fmt.Sprintf("%.2fx", hv/kv)
}

func pxbMet(ratio string, target float64) string {
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimPrefix(ratio, "<"), "x"), 64)
	switch {
	case err != nil:
		return "not measured"
	case v <= target:
		return "met"
	}
	return "NOT met"
}

func pxbSeconds(v []float64) string {
	var s []string
	for _, x := range v {
		s = append(s, strconv.FormatFloat(x, 'f', 3, 64))
	}
	return "[" + strings.Join(s, " ") + "]s"
}

// pxbMeasure runs one proxy against the N Services: start in a fresh
// namespace, wait for the first full sync and for the proxy to have
// nothing left to do, time pxbChanges one-endpoint changes, count the
// rules, stop.
func pxbMeasure(t *testing.T, ctx context.Context, l topology.Layout, cs kubernetes.Interface, p *pxbProxy, n int, logDir string) (res pxbResult) {
	t.Helper()
	res.busyBefore = pxbQuiet(45 * time.Second)
	r, err := pxbStart(ctx, l, p, filepath.Join(logDir, fmt.Sprintf("%s-%d.log", p.name, n)))
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		if err := r.stop(context.WithoutCancel(ctx)); err != nil {
			t.Errorf("stopping %s: %v", p.name, err)
		}
	}
	defer stop()
	defer func() {
		res.nfacct = r.count("failed to collect nfacct counter")
		res.logLines = r.logLines(
			pxbLogRule{8, func(s string) bool { // errors and warnings, slog and klog
				return !strings.Contains(s, "nfacct") && (strings.Contains(s, "level=ERROR") || strings.Contains(s, "level=WARN") ||
					strings.HasPrefix(s, "E") || strings.HasPrefix(s, "W"))
			}},
			pxbLogRule{1, func(s string) bool { return strings.Contains(s, "msg=syncing") || strings.Contains(s, "-stack mode") }},
			pxbLogRule{2, func(s string) bool { return strings.Contains(s, "msg=synced") && strings.Contains(s, "kind=full") }},
			pxbLogRule{2, func(s string) bool { return strings.Contains(s, "msg=synced") && strings.Contains(s, "kind=partial") }},
			pxbLogRule{2, func(s string) bool { return strings.Contains(s, "Reloading service iptables data") }},
			pxbLogRule{4, func(s string) bool { return strings.Contains(s, "SyncProxyRules complete") }},
		)
	}()

	const all, full, partial = "sync_proxy_rules_duration_seconds", "sync_full_proxy_rules_duration_seconds", "sync_partial_proxy_rules_duration_seconds"
	// The first full sync may take very long (kube-proxy's at 10,000
	// Services with iptables-nft: more than 40 minutes here): it gets at
	// most pxbFullMax, or what the run has left less 3 minutes, and is
	// reported as longer than that when it does not finish.
	budget := min(pxbFullMax, time.Until(deadlineOf(ctx))-3*time.Minute)
	m, ok := r.waitHist(t, budget, 500*time.Millisecond, full, 0)
	if !ok {
		res.timedOut = budget
		return res
	}
	res.firstSeen = time.Since(r.started)
	f := p.hist(m, full)
	res.full, res.fullCount = f.sum/f.count, f.count
	res.fullNAT = p.get(m, "sync_proxy_rules_iptables_total", "table", "nat")

	// Then whatever the first sync did not cover.
	m, ok = r.settle(time.Until(deadlineOf(ctx)) - 3*time.Minute)
	if !ok {
		t.Fatalf("%s did not settle after its first sync", p.name)
	}
	a := p.hist(m, all)
	res.complete, res.syncs = a.sum, a.count
	res.completeAt = time.Unix(0, int64(p.get(m, "sync_proxy_rules_last_timestamp_seconds")*1e9)).Sub(r.started)
	res.cpu = r.cpu()

	// One endpoint of one Service moves, and back, pxbChanges times.
	target := n / 2
	for k := range pxbChanges {
		before, err := r.scrape()
		if err != nil {
			t.Fatal(err)
		}
		addr, _ := pxbEndpoint(l, target, 0)
		if k%2 == 0 {
			addr = pxbAltAddr(l, target)
		}
		sl, err := cs.DiscoveryV1().EndpointSlices(pxbNS).Get(ctx, pxbName(target), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sl.Endpoints[0].Addresses = []string{addr.String()}
		if _, err := cs.DiscoveryV1().EndpointSlices(pxbNS).Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		b := p.hist(before, partial)
		if _, ok := r.waitHist(t, 5*time.Minute, 100*time.Millisecond, partial, b.count); !ok {
			t.Fatalf("%s: no partial sync within 5 minutes of an endpoint change", p.name)
		}
		// Past the minimum sync period: a second sync would show.
		after, ok := r.settle(5 * time.Minute)
		if !ok {
			t.Fatalf("%s did not settle after an endpoint change", p.name)
		}
		a := p.hist(after, partial)
		res.partials = append(res.partials, (a.sum-b.sum)/(a.count-b.count))
		if a.count-b.count > 1 {
			res.multi++
		}
		res.fullsAfter += p.hist(after, full).count - p.hist(before, full).count
	}
	if m, err = r.scrape(); err == nil {
		res.gaugeNAT = p.get(m, "sync_proxy_rules_iptables_total", "table", "nat")
	}
	// Count the rules with iptables-save, one table at a time: -t nat is
	// also what herald runs on its first sync after a restart. At 10,000
	// Services iptables-save (iptables-nft 1.8.9) has overflowed its
	// stack (a segfault, dmesg: in libnftnl); then it is run again with
	// an unlimited stack, and the crash is reported, not fatal.
	var save strings.Builder
	for _, table := range []string{"nat", "filter", "mangle"} {
		start := time.Now()
		out, err := netns.Run(ctx, p.netns, "iptables-save", "-t", table)
		took := time.Since(start)
		if err != nil {
			res.saveNotes = append(res.saveNotes, fmt.Sprintf("iptables-save -t %s failed after %.1fs: %v", table, took.Seconds(), err))
			start = time.Now()
			out, err = netns.Run(ctx, p.netns, "sh", "-c", "ulimit -s unlimited && exec iptables-save -t "+table)
			res.saveNotes = append(res.saveNotes, fmt.Sprintf("with ulimit -s unlimited: %v after %.1fs", errOK(err), time.Since(start).Seconds()))
			if err != nil {
				res.saveLines, res.natRules, res.filterRule, res.dispatch = -1, -1, -1, -1
				return res
			}
		} else if took > 10*time.Second {
			res.saveNotes = append(res.saveNotes, fmt.Sprintf("iptables-save -t %s took %.1fs", table, took.Seconds()))
		}
		save.WriteString(out)
	}
	table := ""
	for _, line := range strings.Split(strings.TrimRight(save.String(), "\n"), "\n") {
		res.saveLines++
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, "-A "):
			switch table {
			case "nat":
				res.natRules++
				if strings.HasPrefix(line, "-A "+p.chain+" ") {
					res.dispatch++
				}
			case "filter":
				res.filterRule++
			}
		}
	}
	// Correctness, not time: every Service is programmed, none rejected.
	if res.dispatch < n {
		t.Errorf("%s: %d rules in nat %s, want at least one per Service (%d)", p.name, res.dispatch, p.chain, n)
	}
	for _, line := range strings.Split(save.String(), "\n") {
		if strings.Contains(line, pxbNS+"/") && strings.Contains(line, "has no endpoints") {
			t.Errorf("%s: a benchmark Service is rejected as having no endpoints: %s", p.name, line)
			break
		}
	}
	return res
}

func errOK(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}

func deadlineOf(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(time.Hour)
}

// TestBenchProxyThroughput sends a bounded HTTP load, one new connection
// per request, to an echo server directly and through the lab's proxy
// (herald's, as installed): from a pod to the pod IP and to the ClusterIP,
// and from the LAN's client to the NodePort of the pod's node and of
// another node, against a node sending to the pod IP directly. It prints
// requests/s and latencies and asserts no time. HERALD_BENCH=1 runs it.
func TestBenchProxyThroughput(t *testing.T) {
	harness.Bench(t)
	h := harness.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	t.Cleanup(cancel)
	pxbWaitLabProxies(t, ctx, h.CS, 3*time.Minute)
	t.Cleanup(func() {
		cctx := context.WithoutCancel(ctx)
		if _, err := h.K.Run(cctx, "delete", "namespace", pxtNS, "--ignore-not-found", "--wait=false"); err != nil {
			t.Errorf("delete namespace %s: %v", pxtNS, err)
		}
		pxbPoll(t, cctx, 2*time.Minute, 300*time.Millisecond, "namespace "+pxtNS+" to be gone", func() (bool, string) {
			_, err := h.CS.CoreV1().Namespaces().Get(cctx, pxtNS, metav1.GetOptions{})
			return err != nil, "still there"
		})
	})
	objects := fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: echo, namespace: %[1]s}
spec:
  replicas: 1
  selector: {matchLabels: {app: tput-echo}}
  template:
    metadata: {labels: {app: tput-echo}}
    spec:
      nodeSelector: {kubernetes.io/hostname: node1}
      containers: [{name: echo, image: registry.k8s.io/echoserver:1.4}]
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: %[1]s, labels: {app: tput-client}}
spec:
  nodeName: node2
  containers: [{name: client, image: registry.k8s.io/echoserver:1.4}]
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: %[1]s}
spec:
  type: NodePort
  selector: {app: tput-echo}
  ports: [{name: http, port: 80, targetPort: 8080}]
`, pxtNS)
	if _, err := h.K.RunStdin(ctx, strings.NewReader(objects), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	var echo v1.Pod
	pxbPoll(t, ctx, 2*time.Minute, 300*time.Millisecond, "the echo and client pods ready", func() (bool, string) {
		l, err := h.CS.CoreV1().Pods(pxtNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		var states []string
		for i := range l.Items {
			p := &l.Items[i]
			if pxbPodReady(p) {
				ready++
				if p.Labels["app"] == "tput-echo" {
					echo = *p
				}
			}
			states = append(states, fmt.Sprintf("%s %s ready=%v", p.Name, p.Status.Phase, harness.PodReady(p)))
		}
		return ready == 2 && len(l.Items) == 2, strings.Join(states, "; ")
	})
	svc, err := h.CS.CoreV1().Services(pxtNS).Get(ctx, "echo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	np := strconv.Itoa(int(svc.Spec.Ports[0].NodePort))
	clientNS := kubelet.PodNetnsName(h.Layout.Prefix, pxtNS, "client")
	echoNS := kubelet.PodNetnsName(h.Layout.Prefix, pxtNS, echo.Name)
	podAddr := net.JoinHostPort(echo.Status.PodIP, "8080")
	type path struct {
		name, ns, addr string
		base           int // index of the direct path compared with; -1 for a direct path
	}
	paths := []path{
		{"direct: client pod (node2) -> pod IP (node1)", clientNS, podAddr, -1},
		{"ClusterIP: client pod (node2) -> cluster IP", clientNS, net.JoinHostPort(svc.Spec.ClusterIP, "80"), 0},
		{"direct: node3 -> pod IP (node1)", h.Node("node3").Netns, podAddr, -1},
		{"NodePort: LAN client -> node1 (pod's node)", h.Layout.Client, net.JoinHostPort(h.Node("node1").IPv4.String(), np), 2},
		{"NodePort: LAN client -> node2 (forwarded)", h.Layout.Client, net.JoinHostPort(h.Node("node2").IPv4.String(), np), 2},
	}
	for _, p := range paths {
		// The rules are written and ARP is resolved before timing.
		pxbPoll(t, ctx, 30*time.Second, 250*time.Millisecond, p.name+" to answer", func() (bool, string) {
			var err error
			if e := netns.Do(p.ns, func() error { err = pxbGet(p.addr); return nil }); e != nil {
				return false, e.Error()
			}
			return err == nil, fmt.Sprint(err)
		})
		pxbLoad(p.ns, p.addr, 100, pxtWorkers, pxtMax) // warm-up
	}
	// Two rounds, the second in reverse order, so that no path always
	// runs first or last.
	results := make([]pxbLoadResult, len(paths))
	perRound := make([][]string, len(paths))
	for round := range pxtRounds {
		for k := range paths {
			i := k
			if round%2 == 1 {
				i = len(paths) - 1 - k
			}
			p := paths[i]
			busy := pxbQuiet(10 * time.Second)
			tw, _ := netns.Run(ctx, echoNS, "ss", "-Htan", "state", "time-wait")
			r := pxbLoad(p.ns, p.addr, pxtRequests, pxtWorkers, pxtMax)
			t.Logf("BENCH round %d, %s: %d ok, %d failed, %.0f req/s, p50 %.2fms, p99 %.2fms; before it: machine %.0f%% busy, %d connections in TIME_WAIT at the echo pod",
				round+1, p.name, r.ok, r.failed, r.rps(), float64(r.pct(50).Microseconds())/1000, float64(r.pct(99).Microseconds())/1000, 100*busy, strings.Count(tw, "\n"))
			if r.ok == 0 {
				t.Errorf("%s (%s from %s): no request succeeded: %v", p.name, p.addr, p.ns, r.firstErr)
			} else if r.failed > 0 {
				t.Logf("%s: %d of %d requests failed, first: %v", p.name, r.failed, r.failed+r.ok, r.firstErr)
			}
			perRound[i] = append(perRound[i], fmt.Sprintf("%.0f", r.rps()))
			results[i].add(r)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "BENCH HTTP through herald's proxy: each request a new TCP connection (Connection: close, the server closes, the client resets: no TIME_WAIT pile-up), %d at a time, %d rounds of at most %d requests or %s per path; load generator, echo server and the nodes' kernels share this machine's %d CPUs\n",
		pxtWorkers, pxtRounds, pxtRequests, pxtMax, runtime.NumCPU())
	fmt.Fprintf(&b, "BENCH %-46s %-22s %6s %6s %7s %-11s %7s %7s %s\n", "path", "address", "ok", "failed", "req/s", "per round", "p50 ms", "p99 ms", "vs direct: req/s, p50")
	for i, p := range paths {
		r := results[i]
		vs := "-"
		if p.base >= 0 && results[p.base].rps() > 0 {
			vs = fmt.Sprintf("%.2fx, %.2fx", r.rps()/results[p.base].rps(), float64(r.pct(50))/float64(max(results[p.base].pct(50), 1)))
		}
		fmt.Fprintf(&b, "BENCH %-46s %-22s %6d %6d %7.0f %-11s %7.2f %7.2f %s\n", p.name, p.addr, r.ok, r.failed, r.rps(), strings.Join(perRound[i], "/"),
			float64(r.pct(50).Microseconds())/1000, float64(r.pct(99).Microseconds())/1000, vs)
	}
	fmt.Fprintf(&b, "BENCH reproduce: %s", pxbReproduce)
	t.Log("\n" + b.String())
}
