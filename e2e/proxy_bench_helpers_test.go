package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/cluster"
	"github.com/herald-lb/herald/e2e/lab/netns"
	"github.com/herald-lb/herald/e2e/lab/proc"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// pxbPoll calls cond every interval until it returns true, failing the
// test with cond's last explanation after timeout. Unlike harness.Poll it
// does not depend on the harness's 15-minute context, which the 10,000
// Services benchmark outlives.
func pxbPoll(t *testing.T, ctx context.Context, timeout, interval time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return time.Since(start)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, why)
		}
		time.Sleep(interval)
	}
}

// --- Prometheus text ---------------------------------------------------

// pxbKey is a series' key in the map pxbParseMetrics returns:
// name{k=v,...} with the labels sorted, or the bare name.
func pxbKey(name string, kv ...string) string {
	if len(kv) < 2 {
		return name
	}
	pairs := make([]string, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		pairs = append(pairs, kv[i]+"="+kv[i+1])
	}
	sort.Strings(pairs)
	return name + "{" + strings.Join(pairs, ",") + "}"
}

// pxbParseMetrics reads a Prometheus text page into series key -> value.
func pxbParseMetrics(page string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(page, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		name, rest, labelled := strings.Cut(strings.TrimSpace(line[:i]), "{")
		var kv []string
		if labelled {
			kv = pxbParseLabels(strings.TrimSuffix(rest, "}"))
		}
		out[pxbKey(name, kv...)] = v
	}
	return out
}

// pxbParseLabels reads `a="x",b="y"` into a, x, b, y.
func pxbParseLabels(s string) []string {
	var kv []string
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			return kv
		}
		key := strings.TrimSpace(s[:eq])
		var val strings.Builder
		j := eq + 2
		for ; j < len(s) && s[j] != '"'; j++ {
			if s[j] == '\\' && j+1 < len(s) {
				j++
				if s[j] == 'n' {
					val.WriteByte('\n')
					continue
				}
			}
			val.WriteByte(s[j])
		}
		kv = append(kv, key, val.String())
		s = strings.TrimLeft(s[min(j+1, len(s)):], ", ")
	}
	return kv
}

// --- the proxies' network namespaces ------------------------------------

// pxbNetns is a network namespace of the benchmark's own: loopback and a
// veth leg (eth0) on the lab's LAN bridge, only so that the proxy inside
// reaches the API server on the host's LAN address. Nothing is routed
// through it; the proxy programs the namespace's own iptables.
type pxbNetns struct {
	name, hostIf, bridge string
	addr                 netip.Addr
}

func pxbRunCmd(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// pxbNetnsUp creates the namespace (after removing a leftover of a killed
// run with the same name: the names carry the lab's prefix, so they are
// this lab's). routes are `ip route add` arguments inside it, each via a
// lab node: the data-path benchmark reaches its echo pod that way.
func pxbNetnsUp(ctx context.Context, l topology.Layout, name, hostIf string, addr netip.Addr, routes [][]string) (*pxbNetns, error) {
	n := &pxbNetns{name: name, hostIf: hostIf, bridge: l.Bridge, addr: addr}
	if err := n.down(ctx); err != nil {
		return nil, err
	}
	lan := netip.PrefixFrom(addr, topology.LANv4.Bits()).String()
	steps := [][]string{
		{"ip", "netns", "add", name},
		{"ip", "-n", name, "link", "set", "lo", "up"},
		// IPv4 only: no link-local chatter on the LAN from these legs.
		{"ip", "netns", "exec", name, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1"},
		{"ip", "netns", "exec", name, "sysctl", "-q", "-w", "net.ipv6.conf.default.disable_ipv6=1"},
		{"ip", "link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", name},
		{"ip", "link", "set", hostIf, "master", l.Bridge, "up"},
		{"ip", "-n", name, "addr", "add", lan, "dev", "eth0"},
		{"ip", "-n", name, "link", "set", "eth0", "up"},
		// The host's bridge address has no prefix route (see topology):
		// one /32 per LAN member, as the lab adds for its own.
		{"ip", "route", "add", addr.String() + "/32", "dev", l.Bridge, "src", topology.HostLANv4.String()},
	}
	for _, r := range routes {
		steps = append(steps, append([]string{"ip", "-n", name, "route", "add"}, r...))
	}
	for _, s := range steps {
		if _, err := pxbRunCmd(ctx, s...); err != nil {
			_ = n.down(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	return n, nil
}

// down removes the host route, the namespace and with it both ends of the
// veth. Processes inside must have been stopped.
func (n *pxbNetns) down(ctx context.Context) error {
	var errs []string
	route := n.addr.String() + "/32"
	if out, _ := pxbRunCmd(ctx, "ip", "route", "show", route, "dev", n.bridge); strings.TrimSpace(out) != "" {
		if _, err := pxbRunCmd(ctx, "ip", "route", "del", route, "dev", n.bridge); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if _, err := os.Stat(filepath.Join(netns.Dir, n.name)); err == nil {
		if _, err := pxbRunCmd(ctx, "ip", "netns", "delete", n.name); err != nil {
			errs = append(errs, err.Error())
		}
	}
	// The host end goes with its peer, a moment later.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := pxbRunCmd(ctx, "ip", "link", "show", "dev", n.hostIf)
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			if _, err := pxbRunCmd(ctx, "ip", "link", "delete", n.hostIf); err != nil {
				errs = append(errs, err.Error())
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(errs) > 0 {
		return fmt.Errorf("netns %s: %s", n.name, strings.Join(errs, "; "))
	}
	return nil
}

// --- the proxies ------------------------------------------------------

// pxbProxy is one proxy under test and how to read its metrics.
type pxbProxy struct {
	name   string // herald iptables, kube-proxy nftables, ...
	file   string // name in file names: herald-iptables, ...
	netns  string
	hostIf string
	addr   netip.Addr
	routes [][]string // ip route add arguments in its namespace
	// prefix starts its metric names; labels are on its sync metrics
	// (kube-proxy's carry ip_family).
	prefix string
	labels []string
	path   string
	args   []string
	// cleanup are the arguments that remove its rules and exit
	// (herald proxy --cleanup, kube-proxy --cleanup).
	cleanup []string
	// nft names its nftables table (nftables mode); chain is its dispatch
	// chain in nat, one rule per Service address (iptables mode).
	nft   string
	chain string
	// timeRestore: the iptables tools alone are timed on its ruleset.
	timeRestore bool
}

func (p *pxbProxy) get(m map[string]float64, name string, extra ...string) float64 {
	return m[pxbKey(p.prefix+name, append(append([]string{}, p.labels...), extra...)...)]
}

// pxbHist is the sum and count of a histogram at one moment.
type pxbHist struct{ sum, count float64 }

func (p *pxbProxy) hist(m map[string]float64, name string) pxbHist {
	return pxbHist{p.get(m, name+"_sum"), p.get(m, name+"_count")}
}

// pxbRunning is a proxy process in its namespace.
type pxbRunning struct {
	p       *pxbProxy
	ns      *pxbNetns
	proc    *proc.Process
	log     string
	started time.Time
}

func (r *pxbRunning) scrape() (map[string]float64, error) {
	page, err := harness.HTTPGetFrom(r.ns.name, "http://127.0.0.1:10249/metrics")
	if err != nil {
		return nil, err
	}
	return pxbParseMetrics(page), nil
}

// cpu is the CPU time of the process and of its children it has waited
// for (iptables-restore and friends), from /proc/<pid>/stat.
func (r *pxbRunning) cpu() time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.proc.PID))
	if err != nil {
		return 0
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return 0
	}
	var ticks int64
	for _, i := range []int{11, 12, 13, 14} { // utime stime cutime cstime
		n, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

// pxbMiB is a /proc/<pid>/status memory field (kB) in MiB; 0 when the
// process is gone.
func pxbMiB(pid int, field string) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// rss is the proxy process's resident memory now and at its peak (VmRSS,
// VmHWM), in MiB; children such as iptables-restore are not in it.
func (r *pxbRunning) rss() (now, peak float64) {
	return pxbMiB(r.proc.PID, "VmRSS"), pxbMiB(r.proc.PID, "VmHWM")
}

// tail is the end of the process's log, for failures.
func (r *pxbRunning) tail(n int) string {
	var b strings.Builder
	proc.WriteTail(&b, r.log, n)
	return b.String()
}

// pxbLogRule picks at most max lines of a log.
type pxbLogRule struct {
	max   int
	match func(string) bool
}

// logLines returns the lines of the log that rules pick, in order.
func (r *pxbRunning) logLines(rules ...pxbLogRule) []string {
	data, _ := os.ReadFile(r.log)
	taken := make([]int, len(rules))
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		for i, rule := range rules {
			if taken[i] < rule.max && rule.match(line) {
				taken[i]++
				out = append(out, line)
				break
			}
		}
	}
	return out
}

// count is how many lines of the log contain s.
func (r *pxbRunning) count(s string) int {
	data, _ := os.ReadFile(r.log)
	return strings.Count(string(data), s)
}

// pxbStart creates the proxy's namespace and starts it there with
// `ip netns exec` (which execs: the PID is the proxy's). The namespace
// is new, so no earlier proxy's rules or tables are in it; that is
// checked, in nftables (iptables-nft's tables are nftables tables too).
func pxbStart(ctx context.Context, l topology.Layout, p *pxbProxy, logPath string) (*pxbRunning, error) {
	ns, err := pxbNetnsUp(ctx, l, p.netns, p.hostIf, p.addr, p.routes)
	if err != nil {
		return nil, err
	}
	if out, err := netns.Run(ctx, ns.name, "nft", "list", "ruleset"); err != nil || strings.TrimSpace(out) != "" {
		_ = ns.down(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("netns %s is not empty before %s starts (%v): %.300s", ns.name, p.name, err, out)
	}
	r := &pxbRunning{p: p, ns: ns, log: logPath, started: time.Now()}
	r.proc, err = proc.Start(proc.Spec{
		Name:           p.name,
		Path:           "ip",
		Args:           append([]string{"netns", "exec", ns.name, p.path}, p.args...),
		LogPath:        r.log,
		KillWithParent: true,
	})
	if err != nil {
		_ = ns.down(context.WithoutCancel(ctx))
		return nil, err
	}
	return r, nil
}

// pxbCleanupMax bounds a proxy's --cleanup run.
const pxbCleanupMax = 3 * time.Minute

// stop stops the process by its PID, and then any iptables-restore (or
// other child) it left running, by PID; then it runs the proxy's own
// --cleanup in the namespace (bounded; it says how long that took and
// how many rules it left) and removes the namespace, and with it
// whatever was left: the next proxy starts in a new one either way, but
// a namespace freed with 100,000 rules in it keeps the kernel busy for a
// while after, so the rules go first.
func (r *pxbRunning) stop(ctx context.Context) (cleanup string, err error) {
	var errs []string
	children := pxbChildren(r.proc.PID)
	if err := r.proc.Stop(10 * time.Second); err != nil {
		errs = append(errs, err.Error())
	}
	for _, c := range children {
		if c.alive() {
			_ = syscall.Kill(c.pid, syscall.SIGKILL)
		}
	}
	if len(r.p.cleanup) > 0 {
		cctx, cancel := context.WithTimeout(ctx, pxbCleanupMax)
		start := time.Now()
		_, cerr := netns.Run(cctx, r.ns.name, append([]string{r.p.path}, r.p.cleanup...)...)
		cancel()
		cleanup = fmt.Sprintf("%s took %.2fs (%s)", strings.Join(r.p.cleanup, " "), time.Since(start).Seconds(), errOK(cerr))
		if c, err := pxbNFTList(ctx, r.ns.name, "ruleset"); err == nil {
			cleanup += fmt.Sprintf(", %d rules left in nftables", c.rules)
		} else {
			cleanup += fmt.Sprintf(", nft -j list ruleset: %v", err)
		}
	}
	if err := r.ns.down(ctx); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return cleanup, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return cleanup, nil
}

// stopOrFail stops the proxy (stop) and fails the test if that failed;
// it returns how the cleanup went.
func (r *pxbRunning) stopOrFail(t *testing.T, ctx context.Context) string {
	t.Helper()
	cleanup, err := r.stop(context.WithoutCancel(ctx))
	if err != nil {
		t.Errorf("stopping %s: %v", r.p.name, err)
	}
	return cleanup
}

// firstFull is herald's log line "synced" of its first full sync, as
// key=value fields (slog's text format), or nil.
func (r *pxbRunning) firstFull() map[string]string {
	data, _ := os.ReadFile(r.log)
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "msg=synced") && strings.Contains(line, "kind=full") {
			return pxbLogFields(line)
		}
	}
	return nil
}

// pxbLogFields splits a slog text line into its fields; quoted values
// are unquoted.
func pxbLogFields(line string) map[string]string {
	out := map[string]string{}
	for line != "" {
		line = strings.TrimLeft(line, " ")
		k, rest, ok := strings.Cut(line, "=")
		if !ok {
			break
		}
		var v string
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				break
			}
			v, _ = strconv.Unquote(q)
			rest = rest[len(q):]
		} else {
			v, rest, _ = strings.Cut(rest, " ")
		}
		out[k] = v
		line = rest
	}
	return out
}

// pxbNFT counts an `nft -j list` listing.
type pxbNFT struct {
	chains, rules int
	// elements per set or map name.
	elements map[string]int
}

// pxbNFTCount reads `nft -j list ruleset` (or table) output.
func pxbNFTCount(listing string) (pxbNFT, error) {
	var doc struct {
		NFTables []map[string]json.RawMessage `json:"nftables"`
	}
	c := pxbNFT{elements: map[string]int{}}
	if strings.TrimSpace(listing) == "" {
		return c, nil // an empty ruleset lists nothing, not even JSON
	}
	if err := json.Unmarshal([]byte(listing), &doc); err != nil {
		return c, err
	}
	for _, o := range doc.NFTables {
		if o["chain"] != nil {
			c.chains++
		}
		if o["rule"] != nil {
			c.rules++
		}
		for _, k := range []string{"set", "map"} {
			if raw := o[k]; raw != nil {
				var s struct {
					Name string            `json:"name"`
					Elem []json.RawMessage `json:"elem"`
				}
				if err := json.Unmarshal(raw, &s); err != nil {
					return c, err
				}
				c.elements[s.Name] += len(s.Elem)
			}
		}
	}
	return c, nil
}

// pxbNFTList counts what `nft -j list <what...>` shows in ns.
func pxbNFTList(ctx context.Context, ns string, what ...string) (pxbNFT, error) {
	out, err := netns.Run(ctx, ns, append([]string{"nft", "-j", "list"}, what...)...)
	if err != nil {
		return pxbNFT{}, err
	}
	return pxbNFTCount(out)
}

// pxbChild is a child process: its PID and the kernel's start time of
// that PID, so that a later kill never hits a stranger that reused it.
type pxbChild struct {
	pid   int
	start string
}

func pxbStatFields(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(data)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // from field 3
}

func (c pxbChild) alive() bool {
	f := pxbStatFields(c.pid)
	return len(f) > 19 && f[0] != "Z" && f[19] == c.start
}

// pxbChildren lists the live children of pid.
func pxbChildren(pid int) []pxbChild {
	entries, _ := os.ReadDir("/proc")
	var out []pxbChild
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f := pxbStatFields(n)
		if len(f) > 19 && f[1] == strconv.Itoa(pid) && f[0] != "Z" {
			out = append(out, pxbChild{n, f[19]})
		}
	}
	return out
}

// waitHist waits until the histogram's count exceeds min and returns the
// metrics then; ok is false after timeout. It fails the test when the
// process exits.
func (r *pxbRunning) waitHist(t *testing.T, timeout, interval time.Duration, name string, min float64) (m map[string]float64, ok bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if r.proc.Exited() {
			t.Fatalf("%s exited: %v\n%s", r.p.name, r.proc.Err(), r.tail(60))
		}
		if got, err := r.scrape(); err == nil {
			m = got
			if r.p.hist(m, name).count > min {
				return m, true
			}
		}
		if time.Now().After(deadline) {
			return m, false
		}
		time.Sleep(interval)
	}
}

// settle waits until the proxy has nothing left to do: no child process
// (iptables-restore) running and no sync finished, twice in a row over
// a few seconds. It returns the metrics then, false after timeout.
func (r *pxbRunning) settle(timeout time.Duration) (map[string]float64, bool) {
	deadline := time.Now().Add(timeout)
	var last map[string]float64
	quiet := 0
	for time.Now().Before(deadline) && !r.proc.Exited() {
		m, err := r.scrape()
		idle := err == nil && len(pxbChildren(r.proc.PID)) == 0
		if idle && last != nil && r.p.hist(m, "sync_proxy_rules_duration_seconds").count == r.p.hist(last, "sync_proxy_rules_duration_seconds").count {
			quiet++
		} else {
			quiet = 0
		}
		if quiet == 2 {
			return m, true
		}
		if err == nil {
			last = m
		}
		time.Sleep(1500 * time.Millisecond)
	}
	return last, false
}

// --- machine load ---------------------------------------------------------

// pxbBusy is the fraction of the machine's CPU time spent busy over d.
func pxbBusy(d time.Duration) float64 {
	read := func() (busy, total float64) {
		data, err := os.ReadFile("/proc/stat")
		if err != nil {
			return 0, 0
		}
		line, _, _ := strings.Cut(string(data), "\n")
		f := strings.Fields(line)
		for i, s := range f[1:] {
			v, _ := strconv.ParseFloat(s, 64)
			if i >= 8 { // guest time is already in user
				break
			}
			total += v
			if i != 3 && i != 4 { // idle, iowait
				busy += v
			}
		}
		return busy, total
	}
	b0, t0 := read()
	time.Sleep(d)
	b1, t1 := read()
	if t1 <= t0 {
		return 0
	}
	return (b1 - b0) / (t1 - t0)
}

// pxbQuiet waits (at most max) until the machine is mostly idle, so that
// each proxy starts from the same state (the API server's and the
// kernel's work after the previous step, such as freeing a namespace's
// rules, done). It returns the last busy fraction seen.
func pxbQuiet(max time.Duration) float64 {
	deadline := time.Now().Add(max)
	for {
		b := pxbBusy(time.Second)
		if b < 0.15 || time.Now().After(deadline) {
			return b
		}
	}
}

// --- the lab's own proxies ------------------------------------------------

const pxbPausedLabel = "herald.io/proxy-bench-paused"

// pxbPauseLabProxies takes the lab's herald-speaker pods (and their in-process proxies) off the nodes (a
// nodeSelector no node matches; their rules stay in the nodes' tables)
// so that they do not sync the benchmark's Services on the same two CPUs
// while it measures. The returned function restores the DaemonSet's
// nodeSelector and waits until the proxy is ready on every node again.
func pxbPauseLabProxies(t *testing.T, ctx context.Context, cs kubernetes.Interface) func() {
	t.Helper()
	dsc := cs.AppsV1().DaemonSets(cluster.HeraldNamespace)
	ds, err := dsc.Get(ctx, cluster.HeraldProxy, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	orig := ds.Spec.Template.Spec.NodeSelector
	patch := func(sel any) error {
		b, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"nodeSelector": sel}}}})
		_, err := dsc.Patch(ctx, cluster.HeraldProxy, types.MergePatchType, b, metav1.PatchOptions{})
		return err
	}
	restore := func() {
		var sel any // null: no nodeSelector, as before
		if len(orig) > 0 {
			m := map[string]any{pxbPausedLabel: nil}
			for k, v := range orig {
				m[k] = v
			}
			sel = m
		}
		if err := patch(sel); err != nil {
			t.Errorf("restoring the herald-speaker DaemonSet (the proxy runs in it): %v", err)
			return
		}
		pxbWaitLabProxies(t, ctx, cs, 3*time.Minute)
		t.Logf("the lab's herald-speaker DaemonSet (the proxy runs in it) is back on every node")
	}
	if err := patch(map[string]string{pxbPausedLabel: "true"}); err != nil {
		t.Fatal(err)
	}
	pxbPoll(t, ctx, 2*time.Minute, 300*time.Millisecond, "the lab's herald-speaker pods (and their in-process proxies) to be gone", func() (bool, string) {
		l, err := cs.CoreV1().Pods(cluster.HeraldNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=herald,app.kubernetes.io/component=speaker"})
		if err != nil {
			return false, err.Error()
		}
		return len(l.Items) == 0, fmt.Sprintf("%d pods left", len(l.Items))
	})
	t.Logf("the lab's herald-speaker pods (and their in-process proxies) are paused (nodeSelector %s=true) while the benchmark runs", pxbPausedLabel)
	return restore
}

// pxbWaitLabProxies waits until the herald-speaker DaemonSet (the proxy runs in it) is rolled out
// and ready on every lab node.
func pxbWaitLabProxies(t *testing.T, ctx context.Context, cs kubernetes.Interface, timeout time.Duration) {
	t.Helper()
	pxbPoll(t, ctx, timeout, 500*time.Millisecond, "herald-speaker (with its proxy) ready on every node", func() (bool, string) {
		ds, err := cs.AppsV1().DaemonSets(cluster.HeraldNamespace).Get(ctx, cluster.HeraldProxy, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s := ds.Status
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		ok := s.ObservedGeneration >= ds.Generation && int(s.DesiredNumberScheduled) == len(nodes.Items) &&
			s.NumberReady == s.DesiredNumberScheduled && s.UpdatedNumberScheduled == s.DesiredNumberScheduled
		return ok, fmt.Sprintf("desired %d, ready %d, updated %d, nodes %d", s.DesiredNumberScheduled, s.NumberReady, s.UpdatedNumberScheduled, len(nodes.Items))
	})
}

// pxbDeleteKubeProxyEvents removes the events kube-proxy recorded (its
// start on the node); the lab runs no kube-proxy, so they are ours.
func pxbDeleteKubeProxyEvents(ctx context.Context, cs kubernetes.Interface) (int, error) {
	l, err := cs.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range l.Items {
		if e.Source.Component != "kube-proxy" && e.ReportingController != "kube-proxy" {
			continue
		}
		if err := cs.CoreV1().Events(e.Namespace).Delete(ctx, e.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return n, err
		}
		n++
	}
	return n, nil
}

// pxbDeleteNamespace deletes an API namespace's Services one by one
// (they have no delete-collection), its EndpointSlices in one call, then
// the namespace, and waits until it is gone.
func pxbDeleteNamespace(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string) {
	t.Helper()
	start := time.Now()
	l, err := cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err == nil {
		n := parallel(len(l.Items), pxbWorkers, func(i int) error {
			err := cs.CoreV1().Services(ns).Delete(ctx, l.Items[i].Name, metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		})
		if n != len(l.Items) {
			t.Errorf("deleted %d of %d Services in %s", n, len(l.Items), ns)
		}
	} else if !apierrors.IsNotFound(err) {
		t.Errorf("list Services in %s: %v", ns, err)
	}
	if err := cs.DiscoveryV1().EndpointSlices(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete EndpointSlices in %s: %v", ns, err)
	}
	if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete namespace %s: %v", ns, err)
	}
	pxbPoll(t, ctx, 5*time.Minute, 500*time.Millisecond, "namespace "+ns+" to be gone", func() (bool, string) {
		_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	t.Logf("BENCH cleanup: namespace %s and its objects deleted in %.1fs", ns, time.Since(start).Seconds())
}

// --- HTTP load -------------------------------------------------------------

// pxbGet sends one GET on a new connection and reads the whole answer;
// anything but a 200 is an error. The server closes first (Connection:
// close); the client then resets instead of sending its FIN, so that the
// server's socket does not wait in TIME_WAIT: tens of thousands of those
// for one client address slow later connections down (seen: half the
// requests per second in a second round), whatever the path.
func pxbGet(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", addr); err != nil {
		return err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(b, []byte("HTTP/1.1 200 ")) && !bytes.HasPrefix(b, []byte("HTTP/1.0 200 ")) {
		first, _, _ := bytes.Cut(b, []byte("\n"))
		return fmt.Errorf("answer %q", first)
	}
	return nil
}

// pxbLoadResult is one bounded load run.
type pxbLoadResult struct {
	ok, failed int
	elapsed    time.Duration
	lat        []time.Duration // sorted
	firstErr   error
}

// add merges another run of the same path into r.
func (r *pxbLoadResult) add(o pxbLoadResult) {
	r.ok += o.ok
	r.failed += o.failed
	r.elapsed += o.elapsed
	r.lat = append(r.lat, o.lat...)
	sort.Slice(r.lat, func(i, j int) bool { return r.lat[i] < r.lat[j] })
	if r.firstErr == nil {
		r.firstErr = o.firstErr
	}
}

func (r pxbLoadResult) rps() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ok) / r.elapsed.Seconds()
}

func (r pxbLoadResult) pct(p int) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	return r.lat[min(len(r.lat)-1, len(r.lat)*p/100)]
}

// pxbLoad sends at most total GETs to addr from the network namespace
// ns, workers at a time, each on a new connection, and stops at max. Each
// worker stays on one OS thread in ns for the whole run.
func pxbLoad(ns, addr string, total, workers int, max time.Duration) pxbLoadResult {
	var next atomic.Int64
	lats := make([][]time.Duration, workers)
	fails := make([]int, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(max)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := netns.Do(ns, func() error {
				for time.Now().Before(deadline) && next.Add(1) <= int64(total) {
					t0 := time.Now()
					if err := pxbGet(addr); err != nil {
						fails[w]++
						if errs[w] == nil {
							errs[w] = err
						}
						continue
					}
					lats[w] = append(lats[w], time.Since(t0))
				}
				return nil
			})
			if err != nil && errs[w] == nil {
				errs[w] = err
			}
		}()
	}
	wg.Wait()
	r := pxbLoadResult{elapsed: time.Since(start)}
	for w := range workers {
		r.lat = append(r.lat, lats[w]...)
		r.failed += fails[w]
		if r.firstErr == nil {
			r.firstErr = errs[w]
		}
	}
	r.ok = len(r.lat)
	sort.Slice(r.lat, func(i, j int) bool { return r.lat[i] < r.lat[j] })
	return r
}

// pxbPodReady reports a pod Running and Ready, with its IP.
func pxbPodReady(p *v1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase == v1.PodRunning && harness.PodReady(p) && p.Status.PodIP != ""
}
