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
	"slices"
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

// pxbDefaultSizes are the Service counts measured; each adds to the one
// before. HERALD_BENCH_SIZES replaces them (pxbSizes).
var pxbDefaultSizes = []int{1000, 10000}

// pxbTargetN is the size the absolute targets are set at.
const pxbTargetN = 10000

// The addresses of the proxies' own namespaces on the LAN: unused by the
// lab (nodes .11-.20, client .100, pools .200-.249, router .1, host .254)
// and by the other benchmarks (.61-.64 here only).
var (
	pxbHeraldAddr    = netip.MustParseAddr("198.51.100.61")
	pxbKubeAddr      = netip.MustParseAddr("198.51.100.62")
	pxbHeraldNFTAddr = netip.MustParseAddr("198.51.100.63")
	pxbKubeNFTAddr   = netip.MustParseAddr("198.51.100.64")
)

// pxbSizes are the sizes to measure: HERALD_BENCH_SIZES (ascending
// counts above 10, e.g. 100,300, for a quick run) or the defaults.
func pxbSizes(t *testing.T) []int {
	t.Helper()
	v := os.Getenv("HERALD_BENCH_SIZES")
	if v == "" {
		return pxbDefaultSizes
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 10 || len(out) > 0 && n <= out[len(out)-1] {
			t.Fatalf("HERALD_BENCH_SIZES=%q: want ascending Service counts above 10, comma-separated", v)
		}
		out = append(out, n)
	}
	return out
}

// pxbReproduce is the command that runs test run again, with the sizes
// of this run.
func pxbReproduce(run string) string {
	env := "HERALD_BENCH=1"
	if v := os.Getenv("HERALD_BENCH_SIZES"); v != "" {
		env += " HERALD_BENCH_SIZES=" + v
	}
	return fmt.Sprintf("cd e2e && %s go test -count=1 -timeout 120m -run '%s' -v .", env, run)
}

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

// pxbService is Service i in ns; a NodePort when nodePort says so.
func pxbService(ns string, i int, nodePort bool) *v1.Service {
	typ := v1.ServiceTypeClusterIP
	if nodePort {
		typ = v1.ServiceTypeNodePort
	}
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: pxbName(i), Namespace: ns},
		Spec: v1.ServiceSpec{
			Type:  typ,
			Ports: []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
}

func pxbSlice(l topology.Layout, ns string, i int) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: pxbName(i), Namespace: ns, Labels: map[string]string{
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
	nftChains  int           // nftables mode: chains and rules in its table
	nftRules   int
	// dispatch is the rules in its dispatch chain (iptables) or the
	// elements of its service-ips verdict map (nftables).
	dispatch  int
	saveNotes []string // iptables-save crashes and slow runs
	logLines  []string
	nfacct    int // kube-proxy's "failed to collect nfacct counter" lines
	// RSS of the proxy process (MiB): once the rules were complete, at
	// the end, and its peak.
	rssSettled, rssEnd, rssPeak float64
	// firstFull is herald's "synced" log line of its first full sync,
	// as fields: where the time went.
	firstFull map[string]string
	saved     string // iptables mode: iptables-save of nat, filter, mangle
	cleanup   string // how its --cleanup went
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
// lab's Kubernetes release), each in its iptables and its nftables mode,
// side by side: N selectorless Services with an EndpointSlice of ten
// endpoints each, N = 1,000 and 10,000 (HERALD_BENCH_SIZES); per proxy
// the first full sync, the syncs until its rules are complete, six
// one-endpoint changes, all read from the proxy's own metrics, its CPU
// and resident memory, and the rules it wrote. The proxies run one at a
// time, each in a fresh network namespace of its own (its rules removed
// by its own --cleanup before the namespace goes), with the lab's
// herald-speaker pods paused. For herald's first full sync it prints
// where the time went (its log), and for the iptables mode how long the
// iptables tools alone take to restore the same ruleset. It prints
// figures and asserts no time. HERALD_BENCH=1 runs it.
func TestBenchProxyVsKubeProxy(t *testing.T) {
	harness.Bench(t)
	h := harness.Start(t)
	sizes := pxbSizes(t)
	// The harness's context lasts 15 minutes; this test can take longer.
	// It ends 20 minutes before the binary's -timeout, which leaves time
	// for the cleanup and the data-path and throughput benchmarks.
	deadline := time.Now().Add(100 * time.Minute)
	if d, ok := t.Deadline(); ok {
		deadline = d.Add(-20 * time.Minute)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	t.Cleanup(cancel) // registered first: runs after every other cleanup
	cs, logDir := pxbSetup(t, ctx, h, pxbNS)

	kc := h.Lab.Kubeconfig
	common := []string{"--kubeconfig=" + kc, "--hostname-override=" + pxbNode, "--cluster-cidr=" + topology.ClusterCIDR.String(),
		"--metrics-bind-address=127.0.0.1:10249", "--healthz-bind-address=127.0.0.1:10256", "--kube-api-qps=50", "--kube-api-burst=100"}
	heraldIPT, heraldNFT := pxbHeraldProxies(h, common)
	kube := func(mode, netnsSuffix string, addr netip.Addr) *pxbProxy {
		p := &pxbProxy{
			name: "kube-proxy " + mode, file: "kube-proxy-" + mode, netns: h.Layout.Prefix + netnsSuffix, hostIf: h.Layout.Prefix + netnsSuffix, addr: addr,
			prefix: "kubeproxy_", labels: []string{"ip_family", "IPv4"}, path: h.Lab.K8s.Tool("kube-proxy"), cleanup: []string{"--cleanup"},
			args: append(append([]string{}, common...), "--proxy-mode="+mode,
				// Both modes read these (there are no nftables-named ones).
				"--iptables-min-sync-period=1s", "--iptables-sync-period=1h",
				// Leave the machine-wide conntrack table size and hash (a
				// module parameter) alone, and the timeouts too.
				"--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
				"--v=2"),
		}
		if mode == "nftables" {
			p.nft = "kube-proxy"
		} else {
			p.chain = "KUBE-SERVICES"
		}
		return p
	}
	kubeIPT, kubeNFT := kube("iptables", "-pxk", pxbKubeAddr), kube("nftables", "-pxkn", pxbKubeNFTAddr)
	proxies := []*pxbProxy{heraldIPT, heraldNFT, kubeIPT, kubeNFT}
	// HERALD_BENCH_PROXIES (names, comma-separated, e.g. "herald
	// nftables") measures some of them only; the tables comparing them
	// need all four.
	all := true
	if v := os.Getenv("HERALD_BENCH_PROXIES"); v != "" {
		want := strings.Split(v, ",")
		proxies = slices.DeleteFunc(proxies, func(p *pxbProxy) bool { return !slices.Contains(want, p.name) })
		if len(proxies) == 0 {
			t.Fatalf("HERALD_BENCH_PROXIES=%q names none of herald iptables, herald nftables, kube-proxy iptables, kube-proxy nftables", v)
		}
		all = len(proxies) == 4
	}

	ipt, _ := exec.CommandContext(ctx, "iptables", "--version").Output()
	nftv, _ := exec.CommandContext(ctx, "nft", "--version").Output()
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	t.Logf("BENCH setup: herald proxy (%s) in its iptables and nftables modes vs kube-proxy %s in its iptables and nftables modes; %s; %s; kernel %s; %d CPUs",
		heraldIPT.path, h.Lab.K8s.Version, strings.TrimSpace(string(ipt)), strings.TrimSpace(string(nftv)), strings.TrimSpace(string(kernel)), runtime.NumCPU())
	var where []string
	for _, p := range proxies {
		where = append(where, fmt.Sprintf("%s: %s %s", p.name, p.netns, p.addr))
	}
	t.Logf("BENCH setup: each proxy alone, in a fresh network namespace (loopback and a leg on the LAN bridge to reach the API server; %s), its rules removed with its own --cleanup before the namespace is deleted, as node %s, min sync period 1s, no periodic sync",
		strings.Join(where, "; "), pxbNode)
	t.Logf("BENCH setup: Services: NodePort for the first %d, ClusterIP for the rest; %d endpoints each on the nodes' pod CIDRs; the lab's own herald-speaker pods (with their proxies) paused; this run ends by %s",
		pxbNodePorts, pxbEndpoints, deadline.Format(time.TimeOnly))

	type row struct {
		n   int
		res []pxbResult // one per proxy, in the order of proxies
	}
	var rows []row
	created := 0
	for _, n := range sizes {
		pxbCreate(t, ctx, cs, h.Layout, pxbNS, created, n, pxbNodePorts)
		created = n
		r := row{n: n}
		for _, p := range proxies {
			res := pxbMeasure(t, ctx, h.Layout, cs, p, n, logDir)
			if res.saved != "" {
				res.saveNotes = append(res.saveNotes, pxbTimeRestore(ctx, h.Layout, res.saved)...)
				res.saved = ""
			}
			r.res = append(r.res, res)
			pxbLogResult(t, n, p, res)
		}
		rows = append(rows, r)
	}

	var b strings.Builder
	fmt.Fprintf(&b, "BENCH proxy sync: herald vs kube-proxy %s, each in its iptables and its nftables mode, N Services x %d endpoints (NodePort for the first %d), one proxy at a time in its own network namespace; seconds from each proxy's own metrics, CPU and memory from /proc/<pid>:\n",
		h.Lab.K8s.Version, pxbEndpoints, pxbNodePorts)
	fmt.Fprintf(&b, "BENCH %6s %-19s | %10s | %10s %5s | %13s | %7s | %-23s\n", "", "", "first full", "complete", "", "one-endpoint", "CPU", "RSS MiB (proxy process)")
	fmt.Fprintf(&b, "BENCH %6s %-19s | %10s | %10s %5s | %13s | %7s | %7s %7s %7s\n", "N", "proxy", "sync s", "all syncs s", "syncs", fmt.Sprintf("median of %d s", pxbChanges), "s", "settled", "end", "peak")
	for _, r := range rows {
		for i, p := range proxies {
			x := r.res[i]
			fmt.Fprintf(&b, "BENCH %6d %-19s | %10s | %10s %5.0f | %13s | %7.1f | %7.1f %7.1f %7.1f\n", r.n, p.name,
				pxbCell(x, x.full), pxbCell(x, x.complete), x.syncs, pxbCell(x, x.partialMedian()), x.cpu.Seconds(), x.rssSettled, x.rssEnd, x.rssPeak)
		}
	}
	if !all {
		fmt.Fprintf(&b, "BENCH (HERALD_BENCH_PROXIES: the comparisons need all four proxies)\n")
		fmt.Fprintf(&b, "BENCH reproduce: HERALD_BENCH_PROXIES=%q %s", os.Getenv("HERALD_BENCH_PROXIES"), pxbReproduce("TestBenchProxyVsKubeProxy$"))
		t.Log("\n" + b.String())
		return
	}
	fmt.Fprintf(&b, "BENCH targets, herald nftables vs kube-proxy nftables (issue #16; the absolute ones at N=%d):\n", pxbTargetN)
	fmt.Fprintf(&b, "BENCH %6s | %-42s | %-42s\n", "", "first full sync", "one-endpoint change (median)")
	fmt.Fprintf(&b, "BENCH %6s | %8s %-16s %-16s | %8s %-16s %-16s\n", "N", "ratio", "target <=0.1x", "target <=5s", "ratio", "target <=0.1x", "target <=20ms")
	for _, r := range rows {
		hr, kr := r.res[1], r.res[3]
		fr, pr := pxbRatio(hr, kr, hr.full, kr.full), pxbRatio(hr, kr, hr.partialMedian(), kr.partialMedian())
		fmt.Fprintf(&b, "BENCH %6d | %8s %-16s %-16s | %8s %-16s %-16s\n", r.n,
			fr, pxbMet(fr, 0.1), pxbMetAt(r.n, hr, hr.full, 5), pr, pxbMet(pr, 0.1), pxbMetAt(r.n, hr, hr.partialMedian(), 0.020))
	}
	fmt.Fprintf(&b, "BENCH herald iptables vs kube-proxy iptables (the earlier targets):\n")
	fmt.Fprintf(&b, "BENCH %6s | %8s %8s %-16s | %8s %-16s\n", "N", "full", "complete", "target <=1.0x", "one-ep", "target <=0.5x")
	for _, r := range rows {
		hr, kr := r.res[0], r.res[2]
		fr, cr, pr := pxbRatio(hr, kr, hr.full, kr.full), pxbRatio(hr, kr, hr.complete, kr.complete), pxbRatio(hr, kr, hr.partialMedian(), kr.partialMedian())
		fmt.Fprintf(&b, "BENCH %6d | %8s %8s %-16s | %8s %-16s\n", r.n, fr, cr, pxbMet(cr, 1.0), pr, pxbMet(pr, 0.5))
	}
	fmt.Fprintf(&b, "BENCH herald's first full sync, from its log line \"synced kind=full\" (IPv4; restore = iptables-restore, or the netlink transaction; other = the rest of the sync: snapshot, conntrack, health-check servers):\n")
	fmt.Fprintf(&b, "BENCH %6s %-19s | %9s | %12s %13s %9s %9s %9s | %12s\n", "N", "proxy", "took s", "housekeeping", "iptables-save", "render", "restore", "other", "bytes/elems")
	for _, r := range rows {
		for i, p := range proxies[:2] {
			f := r.res[i].firstFull
			if f == nil {
				fmt.Fprintf(&b, "BENCH %6d %-19s | no \"synced kind=full\" line in its log\n", r.n, p.name)
				continue
			}
			d := func(k string) float64 { v, _ := time.ParseDuration(f[k]); return v.Seconds() }
			other := d("took") - d("housekeeping") - d("save") - d("render") - d("restore")
			fmt.Fprintf(&b, "BENCH %6d %-19s | %9.3f | %12.3f %13.3f %9.3f %9.3f %9.3f | %12s\n", r.n, p.name,
				d("took"), d("housekeeping"), d("save"), d("render"), d("restore"), other, f["bytes"])
		}
	}
	fmt.Fprintf(&b, "BENCH rules (IPv4, at the end):\n")
	fmt.Fprintf(&b, "BENCH %6s %-19s | %10s %10s %10s | %10s %10s | %10s | %s\n", "N", "proxy", "save lines", "nat -A", "filter -A", "nft chains", "nft rules", "nat gauge", "dispatch: chain rules (iptables), service-ips elements (nftables)")
	for _, r := range rows {
		for i, p := range proxies {
			x := r.res[i]
			fmt.Fprintf(&b, "BENCH %6d %-19s | %10d %10d %10d | %10d %10d | %10.0f | %d\n", r.n, p.name, x.saveLines, x.natRules, x.filterRule, x.nftChains, x.nftRules, x.gaugeNAT, x.dispatch)
		}
	}
	fmt.Fprintf(&b, "BENCH reproduce: %s", pxbReproduce("TestBenchProxyVsKubeProxy$"))
	t.Log("\n" + b.String())
}

// pxbSetup is what both Service-count benchmarks start with: an API
// client allowed many requests, a log folder (its logs printed when the
// test fails), the lab's proxies paused and namespace ns created, to be
// deleted with everything in it at the end.
func pxbSetup(t *testing.T, ctx context.Context, h *harness.T, ns string) (kubernetes.Interface, string) {
	t.Helper()
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
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx := context.WithoutCancel(ctx)
		pxbDeleteNamespace(t, cctx, cs, ns)
		if n, err := pxbDeleteKubeProxyEvents(cctx, cs); err != nil {
			t.Errorf("deleting kube-proxy's events: %v", err)
		} else if n > 0 {
			t.Logf("deleted %d events kube-proxy recorded", n)
		}
	})
	return cs, logDir
}

// pxbHeraldProxies are herald's proxy in its iptables and its nftables
// mode, each in a namespace of its own.
func pxbHeraldProxies(h *harness.T, common []string) (ipt, nft *pxbProxy) {
	mk := func(mode, netnsSuffix string, addr netip.Addr) *pxbProxy {
		return &pxbProxy{
			name: "herald " + mode, file: "herald-" + mode, netns: h.Layout.Prefix + netnsSuffix, hostIf: h.Layout.Prefix + netnsSuffix, addr: addr,
			prefix: "herald_proxy_", path: h.Lab.Bins.Path(labbin.Herald), cleanup: []string{"proxy", "--cleanup"},
			// No periodic sync during the measurement, for all.
			args: append(append([]string{"proxy"}, common...), "--proxy-mode="+mode, "--min-sync-period=1s", "--sync-period=1h"),
		}
	}
	ipt, nft = mk("iptables", "-pxh", pxbHeraldAddr), mk("nftables", "-pxhn", pxbHeraldNFTAddr)
	ipt.chain, nft.nft = "HERALD-SERVICES", "herald"
	ipt.timeRestore = true
	return ipt, nft
}

// pxbCreate creates Services from..to-1 in ns with their EndpointSlices;
// those below nodePorts are NodePorts.
func pxbCreate(t *testing.T, ctx context.Context, cs kubernetes.Interface, l topology.Layout, ns string, from, to, nodePorts int) {
	t.Helper()
	start := time.Now()
	got := parallel(to-from, pxbWorkers, func(k int) error {
		i := from + k
		if _, err := cs.CoreV1().Services(ns).Create(ctx, pxbService(ns, i, i < nodePorts), metav1.CreateOptions{}); err != nil {
			return err
		}
		_, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, pxbSlice(l, ns, i), metav1.CreateOptions{})
		return err
	})
	if got != to-from {
		t.Fatalf("created %d of %d Services with their slices", got, to-from)
	}
	if to > from {
		t.Logf("BENCH N=%d: created Services %s/%s..%s and their EndpointSlices in %.1fs", to, ns, pxbName(from), pxbName(to-1), time.Since(start).Seconds())
	}
}

// pxbLogResult logs one proxy's figures at one size in words.
func pxbLogResult(t *testing.T, n int, p *pxbProxy, res pxbResult) {
	t.Helper()
	if res.timedOut > 0 {
		t.Logf("BENCH N=%d %s: the first full sync did not finish within %s (the time this run had left); machine %.0f%% busy before the start",
			n, p.name, res.timedOut.Round(time.Second), 100*res.busyBefore)
	} else {
		t.Logf("BENCH N=%d %s: first full sync %.3fs (%v full syncs), %.0f nat rules, seen %.1fs after start; complete after %v syncs taking %.3fs, the last %.1fs after start, CPU %.1fs by then, RSS %.1f MiB; one-endpoint changes %s, %d followed by more than one sync, %v full syncs among them; RSS at the end %.1f MiB, peak %.1f MiB; machine %.0f%% busy before the start",
			n, p.name, res.full, res.fullCount, res.fullNAT, res.firstSeen.Seconds(), res.syncs, res.complete, res.completeAt.Seconds(), res.cpu.Seconds(), res.rssSettled,
			pxbSeconds(res.partials), res.multi, res.fullsAfter, res.rssEnd, res.rssPeak, 100*res.busyBefore)
	}
	for _, l := range res.logLines {
		t.Logf("BENCH N=%d %s log: %s", n, p.name, l)
	}
	for _, e := range res.saveNotes {
		t.Logf("BENCH N=%d %s: %s", n, p.name, e)
	}
	if res.cleanup != "" {
		t.Logf("BENCH N=%d %s: %s", n, p.name, res.cleanup)
	}
	if res.nfacct > 0 {
		t.Logf("BENCH N=%d %s log: %d lines \"failed to collect nfacct counter\" (metrics scraped before its first sync created the nfacct objects)", n, p.name, res.nfacct)
	}
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

// pxbMetAt checks an absolute target, in seconds, set for N=pxbTargetN.
func pxbMetAt(n int, r pxbResult, v, limit float64) string {
	switch {
	case n != pxbTargetN:
		return fmt.Sprintf("n/a (N=%d)", pxbTargetN)
	case r.timedOut > 0 || v > limit:
		return "NOT met"
	}
	return "met"
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
	r, err := pxbStart(ctx, l, p, filepath.Join(logDir, fmt.Sprintf("%s-%d.log", p.file, n)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { res.cleanup = r.stopOrFail(t, ctx) }()
	defer func() {
		res.firstFull = r.firstFull()
		res.nfacct = r.count("failed to collect nfacct counter")
		res.logLines = r.logLines(
			pxbLogRule{8, func(s string) bool { // errors and warnings, slog and klog
				return !strings.Contains(s, "nfacct") && (strings.Contains(s, "level=ERROR") || strings.Contains(s, "level=WARN") ||
					strings.HasPrefix(s, "E") || strings.HasPrefix(s, "W"))
			}},
			pxbLogRule{1, func(s string) bool { return strings.Contains(s, "msg=syncing") || strings.Contains(s, "-stack mode") }},
			pxbLogRule{1, func(s string) bool { return strings.Contains(s, `msg="iptables backend"`) }},
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
	res.rssSettled, _ = r.rss()

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
	res.rssEnd, res.rssPeak = r.rss()
	if m, err = r.scrape(); err == nil {
		res.gaugeNAT = p.get(m, "sync_proxy_rules_iptables_total", "table", "nat")
	}
	if p.nft != "" {
		c, err := pxbNFTList(ctx, p.netns, "table", "ip", p.nft)
		if err != nil {
			t.Errorf("%s: %v", p.name, err)
			return res
		}
		res.nftChains, res.nftRules, res.dispatch = c.chains, c.rules, c.elements["service-ips"]
		// Correctness, not time: every Service is programmed.
		if res.dispatch < n {
			t.Errorf("%s: %d elements in its service-ips map, want at least one per Service (%d)", p.name, res.dispatch, n)
		}
		return res
	}
	// Count the rules with iptables-save, one table at a time: -t nat is
	// also what herald runs on its first sync after a restart.
	var save strings.Builder
	for _, table := range []string{"nat", "filter", "mangle"} {
		out, _, notes, err := pxbRunStack(ctx, p.netns, "", "iptables-save", "-t", table)
		res.saveNotes = append(res.saveNotes, notes...)
		if err != nil {
			res.saveLines, res.natRules, res.filterRule, res.dispatch = -1, -1, -1, -1
			return res
		}
		save.WriteString(out)
	}
	if p.timeRestore {
		res.saved = save.String()
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

// pxbRunStack runs args in ns, with stdin, and returns its standard
// output. When it fails it runs again with an unlimited stack: at 10,000
// Services iptables-save (iptables-nft 1.8.9) has overflowed its stack
// (a segfault, dmesg: in libnftnl). notes report such failures and runs
// over 10 s.
// took is the last run's.
func pxbRunStack(ctx context.Context, ns, stdin string, args ...string) (out string, took time.Duration, notes []string, err error) {
	run := func(argv ...string) (string, time.Duration, error) {
		cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, argv...)...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		start := time.Now()
		err := cmd.Run()
		if err != nil {
			err = fmt.Errorf("%w: %.300s", err, strings.TrimSpace(errb.String()))
		}
		return out.String(), time.Since(start), err
	}
	what := strings.Join(args, " ")
	out, took, err = run(args...)
	if err != nil {
		notes = append(notes, fmt.Sprintf("%s failed after %.1fs: %v", what, took.Seconds(), err))
		out, took, err = run(append([]string{"sh", "-c", `ulimit -s unlimited && exec "$@"`, "sh"}, args...)...)
		notes = append(notes, fmt.Sprintf("with ulimit -s unlimited: %v after %.1fs", errOK(err), took.Seconds()))
	} else if took > 10*time.Second {
		notes = append(notes, fmt.Sprintf("%s took %.1fs", what, took.Seconds()))
	}
	return out, took, notes, err
}

// pxbTimeRestore times the iptables tools alone on herald's ruleset, as
// iptables-save printed it: iptables-nft-restore and then
// iptables-legacy-restore, each into an empty namespace of its own, so
// the restore part of herald's full sync can be told from the tools' own
// cost, and the nft backend's from the legacy one's.
func pxbTimeRestore(ctx context.Context, l topology.Layout, saved string) []string {
	const pxbRestoreMax = 10 * time.Minute // each tool's bound
	lines := strings.Count(saved, "\n")
	var out []string
	for _, tool := range []string{"iptables-nft-restore", "iptables-legacy-restore"} {
		ns := l.Prefix + "-pxr"
		if _, err := os.Stat(filepath.Join(netns.Dir, ns)); err == nil {
			_, _ = pxbRunCmd(ctx, "ip", "netns", "delete", ns) // a killed run's
		}
		if _, err := pxbRunCmd(ctx, "ip", "netns", "add", ns); err != nil {
			out = append(out, fmt.Sprintf("%s: %v", tool, err))
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, pxbRestoreMax)
		_, took, notes, err := pxbRunStack(rctx, ns, saved, tool)
		cancel()
		out = append(out, notes...)
		out = append(out, fmt.Sprintf("its ruleset as iptables-save printed it (nat, filter, mangle: %d lines) restored into an empty namespace by %s alone: %s in %.3fs", lines, tool, errOK(err), took.Seconds()))
		if _, err := pxbRunCmd(context.WithoutCancel(ctx), "ip", "netns", "delete", ns); err != nil {
			out = append(out, err.Error())
		}
	}
	return out
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
%[2]s
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
`, pxtNS, pxbEchoDeployment(pxtNS))
	if _, err := h.K.RunStdin(ctx, strings.NewReader(objects), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	echo := pxbWaitPods(t, ctx, h.CS, pxtNS, 2)[pxbEchoApp]
	svc, err := h.CS.CoreV1().Services(pxtNS).Get(ctx, "echo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	np := strconv.Itoa(int(svc.Spec.Ports[0].NodePort))
	clientNS := h.PodNetns(pxtNS, "client")
	echoNS := h.PodNetns(pxtNS, echo.Name)
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
		pxbWarm(t, ctx, 30*time.Second, p.name, p.ns, p.addr)
	}
	// Two rounds, the second in reverse order, so that no path always
	// runs first or last.
	results := make([]pxbLoadResult, len(paths))
	perRound := make([][]string, len(paths))
	pxbTurns(pxtRounds, len(paths), func(round, i int) {
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
	})
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
	fmt.Fprintf(&b, "BENCH reproduce: %s", pxbReproduce("TestBenchProxyThroughput$"))
	t.Log("\n" + b.String())
}

// pxbEchoApp labels the echo server's pods.
const pxbEchoApp = "tput-echo"

// pxbEchoDeployment is an echo server (echoserver:1.4, port 8080) on
// node1, as YAML.
func pxbEchoDeployment(ns string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: echo, namespace: %[1]s}
spec:
  replicas: 1
  selector: {matchLabels: {app: %[2]s}}
  template:
    metadata: {labels: {app: %[2]s}}
    spec:
      nodeSelector: {kubernetes.io/hostname: node1}
      containers: [{name: echo, image: registry.k8s.io/echoserver:1.4}]`, ns, pxbEchoApp)
}

// pxbWaitPods waits until ns has want pods, all ready, and returns them
// by their app label.
func pxbWaitPods(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string, want int) map[string]v1.Pod {
	t.Helper()
	pods := map[string]v1.Pod{}
	pxbPoll(t, ctx, 2*time.Minute, 300*time.Millisecond, fmt.Sprintf("%d pods ready in %s", want, ns), func() (bool, string) {
		l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		clear(pods)
		var states []string
		for i := range l.Items {
			p := &l.Items[i]
			if pxbPodReady(p) {
				pods[p.Labels["app"]] = *p
			}
			states = append(states, fmt.Sprintf("%s %s ready=%v", p.Name, p.Status.Phase, harness.PodReady(p)))
		}
		return len(pods) == want && len(l.Items) == want, strings.Join(states, "; ")
	})
	return pods
}

// pxbTurns runs fn for each of n contenders in each round, the order
// reversed every other round (A B, B A, ...), so that none always runs
// first or last.
func pxbTurns(rounds, n int, fn func(round, i int)) {
	for round := range rounds {
		for k := range n {
			i := k
			if round%2 == 1 {
				i = n - 1 - k
			}
			fn(round, i)
		}
	}
}

// pxbWarm waits (at most timeout) until addr answers from ns, so that the
// rules are written and ARP is resolved, then sends a short warm-up load.
func pxbWarm(t *testing.T, ctx context.Context, timeout time.Duration, what, ns, addr string) {
	t.Helper()
	pxbPoll(t, ctx, timeout, 250*time.Millisecond, what+": "+addr+" to answer from "+ns, func() (bool, string) {
		var err error
		if e := netns.Do(ns, func() error { err = pxbGet(addr); return nil }); e != nil {
			return false, e.Error()
		}
		return err == nil, fmt.Sprint(err)
	})
	pxbLoad(ns, addr, 100, pxtWorkers, pxtMax)
}
