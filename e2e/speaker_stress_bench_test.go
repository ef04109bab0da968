package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/herald-lb/herald/e2e/harness"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// stressBench is what TestBenchL2UnderCPUStress's loads share: the lab,
// the VIP and its announcer, and which node owns each MAC.
type stressBench struct {
	h      *harness.T
	s      l2
	name   string
	nodes  []string
	nodeOf map[string]string
	ip     string
	winner string
	// dur is how long each load runs.
	dur time.Duration
	// request is the speaker's requests.cpu in millicores, as shipped.
	request int64
}

// stressResult is what one load did.
type stressResult struct {
	load                  string
	busy                  float64 // share of the machine's CPU time not idle
	speakerCPU            float64 // CPU seconds per second, all speakers
	throttle              string
	changes               float64
	dead, suspect, refute int
	recovering            int // times a speaker started recovering
	minMembers            int
	macs                  []string
	sent, failed          int
	maxGap                time.Duration
}

// TestBenchL2UnderCPUStress measures whether memberlist's fast failure
// detection (100 ms probes, 50 ms timeout: a hard failover under 1 s)
// cries wolf when the speakers are short of CPU. No node fails, so any
// member declared dead and any election change is spurious. For each
// load, a client opens a connection to an L2 VIP every 20 ms while:
//
//   - "none": nothing else runs (the lab's own background: what the
//     other loads compare with);
//   - "cpu": 2 busy loops per CPU at nice 0 saturate the machine. They
//     sit in the same cpu cgroup as the speakers (the lab kubelet makes
//     none), so they compete with the speakers thread for thread;
//   - "cpu+request": the same busy loops in a cpu group of their own
//     with 2048 shares (a pod requesting 2 CPUs), and every speaker in
//     a group of its own with the shares the kubelet gives the
//     speaker's requests.cpu in config/deploy/herald.yaml (200m: 204
//     shares) and no limit: the speaker's guaranteed share of a
//     saturated machine, as shipped;
//   - "limit-100m": every speaker is put in a cgroup-v1 cpu group of its
//     own limited to 10 ms per 100 ms, what the kubelet makes of
//     limits.cpu 100m; whether that bites depends on what the speaker
//     spends, so each group's throttled periods are printed;
//   - "limit-20m": the same at 2 ms per 100 ms (limits.cpu 20m), about
//     what an idle speaker with its in-process proxy spends in the lab,
//     so its own bursts (syncs, GC, iptables-restore) are throttled;
//   - "limit-100m+busy": the limit-100m groups with a busy loop in each,
//     so each group spends its 10 ms at the start of every period and
//     the speaker then waits up to 90 ms for the CPU: a speaker
//     container at its limit all the time. Harsher than any speaker's
//     own work; it shows where fast failure detection ends.
//
// Printed per load: how busy the CPUs were, the speakers' CPU use,
// the cgroups' throttling, election changes (the most any speaker
// counted), members declared dead and suspicions raised and refuted
// (memberlist's log lines in the speakers' logs), how often a speaker
// started recovering (declared dead and back: it then leaves its
// addresses with the others for --recovery-hold), the lowest member
// count sampled every 250 ms, the MACs the client's neighbor entry for
// the VIP went through (sampled every 100 ms), failed requests and the
// longest gap between two answered requests. Nothing is asserted: run
// it with make bench. HERALD_BENCH_STRESS sets the time per load
// (default 2m), HERALD_BENCH_STRESS_LOADS a comma-separated subset, and
// HERALD_BENCH_SPEAKER_ARGS flags added to the speakers' for the run
// (say --memberlist-suspicion-mult=3), to compare timer settings.
func TestBenchL2UnderCPUStress(t *testing.T) {
	harness.Bench(t)
	dur := 2 * time.Minute
	if v := os.Getenv("HERALD_BENCH_STRESS"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 10*time.Second || d > 10*time.Minute {
			t.Fatalf("HERALD_BENCH_STRESS=%q: want a duration between 10s and 10m", v)
		}
		dur = d
	}
	all := []string{"none", "cpu", "cpu+request", "limit-100m", "limit-20m", "limit-100m+busy"}
	loads := all
	if v := os.Getenv("HERALD_BENCH_STRESS_LOADS"); v != "" {
		loads = strings.Split(v, ",")
		for _, l := range loads {
			if !slices.Contains(all, l) {
				t.Fatalf("HERALD_BENCH_STRESS_LOADS=%q: %q is not one of %v", v, l, all)
			}
		}
	}
	runL2UnderCPUStress(t, dur, loads, false)
}

// TestL2UnderCPUStressTarget is TestBenchL2UnderCPUStress's short
// version in make test: the two loads a node really sees (the machine
// saturated, with the speakers in the same group as the load and in
// groups of their own with the manifests' request), 60 s each; no
// node fails, so a single election change fails the test.
func TestL2UnderCPUStressTarget(t *testing.T) {
	runL2UnderCPUStress(t, time.Minute, []string{"cpu", "cpu+request"}, true)
}

// runL2UnderCPUStress runs each load for dur and prints the table; with
// assert, an election change under any load fails the test (the
// benchmark prints PASS or FAIL).
func runL2UnderCPUStress(t *testing.T, dur time.Duration, loads []string, assert bool) {
	h := harness.Start(t)
	s := l2{h}
	const name = "stress"
	s.readySpeakers(2 * time.Minute)
	extra := strings.Fields(os.Getenv("HERALD_BENCH_SPEAKER_ARGS"))
	if len(extra) > 0 {
		s.speakerArgs(extra)
	}
	nodes := s.nodeNames()
	t.Cleanup(func() {
		_, _ = h.K.Run(h.Ctx, "delete", "service", name, "--ignore-not-found")
		_, _ = h.K.Run(h.Ctx, "delete", "deployment", name, "--ignore-not-found")
		_, _ = h.K.Run(h.Ctx, "-n", heraldNS, "delete", "l2advertisement,ipaddresspool", name, "--ignore-not-found")
	})
	h.Apply(l2Objects(name, "198.51.100.218-198.51.100.219", "2001:db8:0:1::218-2001:db8:0:1::219", "node1"))
	h.ReadyPods("app="+name, 1, 2*time.Minute)
	h.Kubectl("expose", "deployment", name, "--name="+name, "--port=80", "--target-port=8080", "--type=LoadBalancer")
	ip := ctl{h}.waitAnyIP("default", name)
	winner := s.announcer("default", name, ip, time.Minute)
	h.Poll(time.Minute, ip+" answering", func() (bool, string) {
		ok, err := benchGet(h.Layout.Client, ip, time.Second)
		return ok, fmt.Sprint(err)
	})
	nodeOf := s.macOwners()

	sb := &stressBench{h: h, s: s, name: name, nodes: nodes, nodeOf: nodeOf, ip: ip, winner: winner, dur: dur, request: speakerCPURequest(t)}
	var results []stressResult
	for _, load := range loads {
		if res, ok := sb.runLoad(t, load); ok {
			results = append(results, res)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "BENCH L2 VIP %s under CPU stress, %d nodes, %d CPUs, %s per load, a new connection every 20 ms (1 s timeout):\n", ip, len(nodes), runtime.NumCPU(), dur)
	fmt.Fprintf(&b, "  %-16s %5s %8s %8s %5s %7s %8s %10s %8s %6s %9s %7s %8s  %s\n", "load", "busy", "speakers", "election", "dead", "suspect", "refuted", "recovering", "min", "client", "requests", "failed", "longest", "throttling")
	fmt.Fprintf(&b, "  %-16s %5s %8s %8s %5s %7s %8s %10s %8s %6s %9s %7s %8s\n", "", "CPUs", "CPU", "changes", "", "", "", "", "members", "MACs", "", "", "gap")
	for _, r := range results {
		fmt.Fprintf(&b, "  %-16s %4.0f%% %7.1f%% %8v %5d %7d %8d %10d %8d %6d %9d %7d %8s  %s\n", r.load, 100*r.busy, 100*r.speakerCPU, r.changes,
			r.dead, r.suspect, r.refute, r.recovering, r.minMembers, len(r.macs), r.sent, r.failed, r.maxGap.Round(time.Millisecond), r.throttle)
	}
	fmt.Fprintf(&b, "  targets: 0 election changes, 0 members dead, 1 client MAC (no node failed), 0 failed requests\n")
	changed := 0.0
	for _, r := range results {
		changed += r.changes
	}
	verdict := "PASS"
	if changed > 0 || len(results) < len(loads) {
		verdict = "FAIL"
		if assert {
			t.Errorf("%v election changes over %d of %d loads, target 0 (no node failed)", changed, len(results), len(loads))
		}
	}
	fmt.Fprintf(&b, "  target: 0 election changes under every load: %s\n", verdict)
	fmt.Fprintf(&b, "  speakers CPU: all speakers together, %% of one CPU; client MACs: distinct runs in the client's neighbor entry\n")
	if len(extra) > 0 {
		fmt.Fprintf(&b, "  speakers run with the extra flags %s\n", strings.Join(extra, " "))
	}
	if assert {
		fmt.Fprintf(&b, "BENCH reproduce: cd e2e && go test -count=1 -timeout 30m -run 'TestL2UnderCPUStressTarget$' -v .\n")
	} else {
		fmt.Fprintf(&b, "BENCH reproduce: cd e2e && HERALD_BENCH=1 HERALD_BENCH_STRESS=%s HERALD_BENCH_STRESS_LOADS=%s HERALD_BENCH_SPEAKER_ARGS='%s' go test -count=1 -timeout 60m -run 'TestBenchL2UnderCPUStress$' -v .\n",
			dur, strings.Join(loads, ","), strings.Join(extra, " "))
	}
	t.Log("\n" + b.String())
}

// changes is each speaker's count of election changes.
func (sb *stressBench) changes(t *testing.T) map[string]float64 {
	s := sb.s
	out := map[string]float64{}
	for _, n := range sb.nodes {
		v, err := s.speakerMetric(n, "herald_speaker_election_changes_total")
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		out[n] = v
	}
	return out
}

// runLoad runs one load for dur while probing the VIP and sampling the
// membership and the client's neighbor entry; false if the load could
// not be started.
func (sb *stressBench) runLoad(t *testing.T, load string) (stressResult, bool) {
	h, s := sb.h, sb.s
	s.speakersInCluster(3 * time.Minute)
	before := sb.changes(t)
	pids := map[string]int{}
	for n, p := range s.speakers() {
		pids[n] = s.speakerPID(p)
	}
	started, err := startLoad(load, pids, sb.request)
	if err != nil {
		t.Logf("%s: not run: %v", load, err)
		return stressResult{}, false
	}
	// Also on a failure: no busy loop or cgroup outlives the test.
	stop := sync.OnceValue(started)
	t.Cleanup(func() { stop() })
	from := time.Now()
	cpu0, sp0 := machineCPU(), speakersCPU(pids)

	// Sample the membership and the client's neighbor entry while
	// the load runs.
	minMembers := len(sb.nodes)
	var macs []string
	var mu sync.Mutex
	done := make(chan struct{})
	var wg sync.WaitGroup
	sample := func(every time.Duration, f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
				}
				f()
			}
		}()
	}
	sample(250*time.Millisecond, func() {
		for _, n := range sb.nodes {
			if v, err := s.speakerMetric(n, "herald_speaker_members"); err == nil {
				mu.Lock()
				minMembers = min(minMembers, int(v))
				mu.Unlock()
			}
		}
	})
	sample(100*time.Millisecond, func() {
		mac, _ := s.neighMAC(sb.ip)
		if mac == "" {
			return // no entry or not resolved yet
		}
		who := sb.nodeOf[strings.ToLower(mac)]
		if who == "" {
			who = mac
		}
		mu.Lock()
		if len(macs) == 0 || macs[len(macs)-1] != who {
			macs = append(macs, who)
		}
		mu.Unlock()
	})
	p := h.StartProbe(h.Layout.Client, sb.ip)
	time.Sleep(sb.dur)
	p.Stop()
	close(done)
	wg.Wait()
	cpu1, sp1 := machineCPU(), speakersCPU(pids)
	elapsed := time.Since(from)
	throttle := stop()
	to := time.Now()

	after := sb.changes(t)
	var delta float64
	for _, n := range sb.nodes {
		delta = max(delta, after[n]-before[n])
	}
	label := load
	if load == "cpu+request" {
		label = fmt.Sprintf("cpu+request-%dm", sb.request)
	}
	res := stressResult{load: label, changes: delta, minMembers: minMembers, macs: macs, throttle: throttle,
		busy: cpu1.busySince(cpu0), speakerCPU: (sp1 - sp0) / elapsed.Seconds(), maxGap: p.MaxGap()}
	res.sent, res.failed = p.Result()
	var events strings.Builder
	for _, n := range sb.nodes {
		win := logSince(newBGPLab(h).speakerLogs(n), from, to)
		for _, l := range strings.Split(win, "\n") {
			counted := true
			// memberlist's own lines lose their "memberlist: " prefix.
			switch {
			case strings.Contains(l, "event=leave"):
				res.dead++ // a member dead (or left) as this speaker saw it
			case strings.Contains(l, `msg="Suspect `):
				res.suspect++
			case strings.Contains(l, `msg="Refuting a`):
				res.refute++
			case strings.Contains(l, `msg="recovering:`):
				res.recovering++
			default:
				// Also what explains an election change: the
				// winner changes themselves, isolation, and
				// memberlist marking members.
				counted = strings.Contains(l, `msg="Marking `) || strings.Contains(l, `msg="winner changed"`) ||
					strings.Contains(l, `msg="isolated:`) || strings.Contains(l, `msg="recovered:`)
			}
			if counted {
				fmt.Fprintf(&events, "  %s:%s\n", n, l)
			}
		}
	}
	post, _ := s.announcersOf("default", sb.name, sb.ip)
	t.Logf("%s load for %s: CPUs %.0f%% busy, speakers %.1f%% of a CPU; %s; election changes %v; members dead %d, suspicions %d, refuted %d, recovering %d; lowest member count %d of %d; client's MACs for %s %v; %d requests, %d failed, longest gap %s; announcer %s before, %v after",
		load, sb.dur, 100*res.busy, 100*res.speakerCPU, throttle, delta, res.dead, res.suspect, res.refute, res.recovering, minMembers, len(sb.nodes),
		sb.ip, macs, res.sent, res.failed, res.maxGap.Round(time.Millisecond), sb.winner, post)
	if events.Len() > 0 {
		t.Logf("%s: failure detection and election changes in the speakers' logs:\n%s", load, events.String())
	}
	if res.failed > 0 {
		t.Logf("%s: failures: %s", load, p.Failures())
	}
	return res, true
}

// startLoad starts one kind of load on the speakers (pids by node), the
// speaker's CPU request being requestMilli, and returns what stops it,
// which reports the throttling it saw.
func startLoad(load string, pids map[string]int, requestMilli int64) (stop func() string, err error) {
	var groups []*cpuGroup
	var kills []func()
	stop = func() string {
		for _, k := range kills {
			k()
		}
		var stats []string
		for _, g := range groups {
			if st := g.stat(); st != "" {
				stats = append(stats, st)
			}
			if err := g.remove(); err != nil {
				stats = append(stats, err.Error())
			}
		}
		if len(stats) == 0 {
			return "-"
		}
		return strings.Join(stats, "; ")
	}
	fail := func(err error) (func() string, error) {
		stop()
		return nil, err
	}
	group := func(node string, settings []cgSetting, pid int) (*cpuGroup, error) {
		g, err := newCPUGroup(fmt.Sprintf("herald-bench-%d-%s", os.Getpid(), node), settings, pid)
		if err == nil {
			g.node = node
			groups = append(groups, g)
		}
		return g, err
	}
	busy := func(n int, dir string) error {
		kill, err := busyLoops(n, dir, 15*time.Minute)
		if err == nil {
			kills = append(kills, kill)
		}
		return err
	}
	switch load {
	case "none":
	case "cpu":
		if err := busy(2*runtime.NumCPU(), ""); err != nil {
			return fail(err)
		}
	case "cpu+request":
		// What the kubelet makes of the speaker's requests.cpu (its
		// shares, no quota) beside a pod requesting 2 CPUs that spins.
		for _, node := range slices.Sorted(maps.Keys(pids)) {
			if _, err := group(node, []cgSetting{{"cpu.shares", int(milliCPUToShares(requestMilli))}}, pids[node]); err != nil {
				return fail(err)
			}
		}
		hog, err := group("hog", []cgSetting{{"cpu.shares", 2048}}, 0)
		if err != nil {
			return fail(err)
		}
		hog.quiet = true
		if err := busy(2*runtime.NumCPU(), hog.dir); err != nil {
			return fail(err)
		}
	case "limit-100m", "limit-20m", "limit-100m+busy":
		quota := 10_000 // µs per 100 ms period
		if load == "limit-20m" {
			quota = 2_000
		}
		for _, node := range slices.Sorted(maps.Keys(pids)) {
			g, err := group(node, []cgSetting{{"cpu.cfs_period_us", 100_000}, {"cpu.cfs_quota_us", quota}}, pids[node])
			if err != nil {
				return fail(err)
			}
			if load == "limit-100m+busy" {
				if err := busy(1, g.dir); err != nil {
					return fail(err)
				}
			}
		}
	default:
		return nil, fmt.Errorf("unknown load %q", load)
	}
	return stop, nil
}

// busyLoops starts n busy shell loops, each in the cpu cgroup dir if
// not "" (the shell moves itself before it loops), bounded by
// timeout(1) to limit in case the test dies, and returns what kills them
// (their process groups, by PID).
func busyLoops(n int, cgroup string, limit time.Duration) (func(), error) {
	var cmds []*exec.Cmd
	kill := func() {
		for _, c := range cmds {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			_ = c.Wait()
		}
	}
	script := fmt.Sprintf(`exec timeout %ds sh -c 'while :; do :; done'`, int(limit.Seconds())+1)
	if cgroup != "" {
		script = `echo $$ > "$1/cgroup.procs" || exit 1; ` + script
	}
	for range n {
		c := exec.Command("sh", "-c", script, "sh", cgroup)
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			kill()
			return nil, err
		}
		cmds = append(cmds, c)
	}
	return kill, nil
}

// cpuGroup is a cgroup-v1 cpu group holding a process.
type cpuGroup struct {
	node   string
	dir    string
	origin string // where what is left in the group goes back to
	quiet  bool   // no throttling to report
}

type cgSetting struct {
	file string
	v    int
}

// newCPUGroup makes the group with the settings and moves the process
// (all its threads: cgroup.procs), if pid is not 0, into it; its
// children follow.
func newCPUGroup(name string, settings []cgSetting, pid int) (*cpuGroup, error) {
	const root = "/sys/fs/cgroup/cpu"
	if _, err := os.Stat(filepath.Join(root, "cpu.cfs_quota_us")); err != nil {
		return nil, fmt.Errorf("no cgroup-v1 cpu controller at %s: %v", root, err)
	}
	from := "/"
	if pid != 0 {
		var err error
		if from, err = cpuCgroup(pid); err != nil {
			return nil, err
		}
		settings = append(slices.Clone(settings), cgSetting{"cgroup.procs", pid})
	}
	g := &cpuGroup{dir: filepath.Join(root, name), origin: filepath.Join(root, from)}
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		return nil, err
	}
	for _, w := range settings {
		if err := os.WriteFile(filepath.Join(g.dir, w.file), []byte(strconv.Itoa(w.v)), 0o644); err != nil {
			_ = g.remove()
			return nil, fmt.Errorf("%s/%s: %w", g.dir, w.file, err)
		}
	}
	return g, nil
}

// stat is the group's throttling so far, from cpu.stat.
func (g *cpuGroup) stat() string {
	if g.quiet {
		return ""
	}
	data, err := os.ReadFile(filepath.Join(g.dir, "cpu.stat"))
	if err != nil {
		return g.node + ": " + err.Error()
	}
	v := map[string]int64{}
	for _, l := range strings.Split(string(data), "\n") {
		if k, n, ok := strings.Cut(l, " "); ok {
			v[k], _ = strconv.ParseInt(n, 10, 64)
		}
	}
	if v["nr_periods"] == 0 {
		return "" // no quota
	}
	return fmt.Sprintf("%s throttled in %d of %d periods for %s", g.node, v["nr_throttled"], v["nr_periods"],
		time.Duration(v["throttled_time"]).Round(time.Millisecond))
}

// remove moves every process still in the group (the speaker and any
// child) back to the process's old group and removes the group, trying
// again for a second while a process forks or a killed one is reaped.
func (g *cpuGroup) remove() error {
	var err error
	for range 20 {
		data, _ := os.ReadFile(filepath.Join(g.dir, "cgroup.procs"))
		for _, p := range strings.Fields(string(data)) {
			_ = os.WriteFile(filepath.Join(g.origin, "cgroup.procs"), []byte(p), 0o644)
		}
		if err = os.Remove(g.dir); err == nil || os.IsNotExist(err) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("cgroup %s left behind: %w", g.dir, err)
}

// cpuCgroup is the cgroup-v1 cpu path of a process.
func cpuCgroup(pid int) (string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), "cpu") {
			return parts[2], nil
		}
	}
	return "", fmt.Errorf("pid %d has no cgroup-v1 cpu controller", pid)
}

// cpuTimes is the machine's CPU time from /proc/stat, in ticks.
type cpuTimes struct{ total, idle int64 }

func machineCPU() cpuTimes {
	data, _ := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(data), "\n")
	var c cpuTimes
	for i, f := range strings.Fields(line)[1:] {
		n, _ := strconv.ParseInt(f, 10, 64)
		c.total += n
		if i == 3 || i == 4 { // idle, iowait
			c.idle += n
		}
	}
	return c
}

// busySince is the share of CPU time that was not idle since c0.
func (c cpuTimes) busySince(c0 cpuTimes) float64 {
	if c.total == c0.total {
		return 0
	}
	return 1 - float64(c.idle-c0.idle)/float64(c.total-c0.total)
}

// speakersCPU is the CPU seconds the processes and their reaped
// children (iptables-restore) used so far.
func speakersCPU(pids map[string]int) float64 {
	var ticks int64
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// utime stime cutime cstime: fields 14-17, 12-15 after the
		// state field that follows the command's closing parenthesis.
		f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
		for _, s := range f[11:15] {
			n, _ := strconv.ParseInt(s, 10, 64)
			ticks += n
		}
	}
	return float64(ticks) / 100 // USER_HZ
}

// speakerArgs adds flags to the speaker container of the lab's
// DaemonSet, waits until every speaker runs with them and is in the
// memberlist cluster, and puts the old flags back when the test ends.
func (s l2) speakerArgs(extra []string) {
	s.T.T.Helper()
	get := func() []string {
		out, err := s.K.Output(s.Ctx, "-n", heraldNS, "get", "daemonset", speakerDS, "-o",
			`jsonpath={.spec.template.spec.containers[?(@.name=="speaker")].args}`)
		var args []string
		if err == nil {
			err = json.Unmarshal([]byte(out), &args)
		}
		if err != nil {
			s.T.T.Fatalf("the speaker's args: %v (%q)", err, out)
		}
		return args
	}
	set := func(args []string) error {
		b, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "speaker", "args": args}}}}}})
		if _, err := s.K.Run(s.Ctx, "-n", heraldNS, "patch", "daemonset", speakerDS, "--type=strategic", "-p", string(b)); err != nil {
			return err
		}
		_, err := s.K.Run(s.Ctx, "-n", heraldNS, "rollout", "status", "--timeout=3m", "daemonset/"+speakerDS)
		return err
	}
	orig := get()
	s.T.T.Cleanup(func() {
		if err := set(orig); err != nil {
			s.T.T.Errorf("putting the speakers' flags back: %v", err)
			return
		}
		s.speakersInCluster(3 * time.Minute)
	})
	if err := set(append(slices.Clone(orig), extra...)); err != nil {
		s.T.T.Fatal(err)
	}
	s.speakersInCluster(3 * time.Minute)
}

// speakerCPURequest is the speaker container's requests.cpu in
// millicores, from the manifests herald ships.
func speakerCPURequest(t *testing.T) int64 {
	for _, obj := range decodeManifests(t, "../config/deploy/herald.yaml") {
		ds, ok := obj.(*appsv1.DaemonSet)
		if !ok || ds.Name != "herald-speaker" {
			continue
		}
		for _, c := range ds.Spec.Template.Spec.Containers {
			if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok && c.Name == "speaker" {
				return q.MilliValue()
			}
		}
	}
	t.Fatal("config/deploy/herald.yaml: no DaemonSet herald-speaker with a container speaker requesting cpu")
	return 0
}

// milliCPUToShares is the kubelet's cgroup v1 cpu.shares for a
// container's requests.cpu: 1024 per CPU, at least 2.
func milliCPUToShares(milli int64) int64 {
	return max(milli*1024/1000, 2)
}

// TestSpeakerCPURequest: the shipped manifests request at least the
// 200m that TestL2UnderCPUStressTarget showed the speaker needs on a
// saturated node (docs/concepts.md, "The speaker's CPU request").
func TestSpeakerCPURequest(t *testing.T) {
	if got := speakerCPURequest(t); got < 200 {
		t.Errorf("the speaker requests %dm of CPU in config/deploy/herald.yaml, want at least 200m", got)
	}
}
