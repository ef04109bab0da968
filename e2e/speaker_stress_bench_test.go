package e2e

import (
	"fmt"
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
)

// TestBenchL2UnderCPUStress measures whether memberlist's fast failure
// detection (100 ms probes, 50 ms timeout: a hard failover under 1 s)
// cries wolf when the machine is busy. For each load, a client probes an
// L2 VIP every 20 ms while:
//   - "cpu": busy loops saturate every CPU of the machine (2 per core)
//     for the duration;
//   - "throttled": every speaker process is put in a cgroup-v1 cpu group
//     limited to 10% of one CPU (cfs_quota 10 ms per 100 ms) for the
//     duration, so its probes and answers wait for the quota.
//
// It prints, per load: election changes seen by the speakers (any is
// spurious: no node failed), the lowest member count sampled every
// 250 ms, failed requests and the longest gap between two answered
// requests. Nothing is asserted: run with make bench.
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
	h := harness.Start(t)
	s := l2{h}
	const name = "stress"
	s.readySpeakers(2 * time.Minute)
	var nodes []string
	for _, n := range h.Layout.Nodes {
		nodes = append(nodes, n.Name)
	}
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

	changes := func() map[string]float64 {
		out := map[string]float64{}
		for _, n := range nodes {
			v, err := s.speakerMetric(n, "herald_speaker_election_changes_total")
			if err != nil {
				t.Fatalf("%s: %v", n, err)
			}
			out[n] = v
		}
		return out
	}
	type result struct {
		load            string
		changes         float64
		minMembers      int
		sent, failed    int
		maxGap          time.Duration
		announcerBefore string
		post            []string
	}
	var results []result
	for _, load := range []string{"cpu", "throttled"} {
		s.speakersInCluster(3 * time.Minute)
		before := changes()
		stop, err := startLoad(load, s)
		if err != nil {
			t.Logf("%s: not run: %v", load, err)
			continue
		}
		// Sample the membership while the load runs.
		minMembers := len(nodes)
		var mu sync.Mutex
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(250 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
				}
				for _, n := range nodes {
					if v, err := s.speakerMetric(n, "herald_speaker_members"); err == nil {
						mu.Lock()
						minMembers = min(minMembers, int(v))
						mu.Unlock()
					}
				}
			}
		}()
		p := startProbe(h.Layout.Client, ip)
		time.Sleep(dur)
		p.stop()
		stop()
		close(done)
		wg.Wait()
		after := changes()
		var delta float64
		for _, n := range nodes {
			delta = max(delta, after[n]-before[n])
		}
		sent, failed := p.result()
		res := result{load: load, changes: delta, minMembers: minMembers, sent: sent, failed: failed,
			maxGap: p.maxGap(), announcerBefore: winner}
		res.post, _ = s.announcersOf("default", name, ip)
		results = append(results, res)
		t.Logf("%s load for %s: election changes %v, lowest member count %d of %d, %d requests, %d failed, longest gap %s; announcer %s before, %v after",
			load, dur, delta, minMembers, len(nodes), sent, failed, res.maxGap.Round(time.Millisecond), winner, res.post)
		if failed > 0 {
			t.Logf("%s: failures: %s", load, p.failures())
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "L2 VIP %s under load, %d nodes, %s per load, a request every 20 ms (1 s timeout):\n", ip, len(nodes), dur)
	fmt.Fprintf(&b, "  %-10s %16s %12s %9s %7s %12s\n", "load", "election changes", "min members", "requests", "failed", "longest gap")
	for _, r := range results {
		fmt.Fprintf(&b, "  %-10s %16v %12d %9d %7d %12s\n", r.load, r.changes, r.minMembers, r.sent, r.failed, r.maxGap.Round(time.Millisecond))
	}
	fmt.Fprintf(&b, "  targets: 0 election changes (no node failed), 0 failed requests\n")
	fmt.Fprintf(&b, "reproduce: cd e2e && HERALD_BENCH=1 HERALD_BENCH_STRESS=%s go test -count=1 -timeout 60m -run 'TestBenchL2UnderCPUStress$' -v .\n", dur)
	t.Log("\n" + b.String())
}

// startLoad starts one kind of load and returns what stops it.
func startLoad(load string, s l2) (func(), error) {
	switch load {
	case "cpu":
		return burnCPUs(2 * runtime.NumCPU())
	case "throttled":
		var pids []int
		for _, p := range s.speakers() {
			pid, err := speakerContainerPID(p)
			if err != nil {
				return nil, err
			}
			pids = append(pids, pid)
		}
		return throttle(pids, 10_000, 100_000)
	}
	return nil, fmt.Errorf("unknown load %q", load)
}

// burnCPUs starts n busy shell loops, bounded by timeout(1) in case the
// test dies, and returns what kills them (by PID).
func burnCPUs(n int) (func(), error) {
	var cmds []*exec.Cmd
	stop := func() {
		for _, c := range cmds {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			_ = c.Wait()
		}
	}
	for range n {
		c := exec.Command("timeout", "15m", "sh", "-c", "while :; do :; done")
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			stop()
			return nil, err
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}

// throttle moves the processes (every thread) into a new cgroup-v1 cpu
// group with quota/period and returns what moves them back and removes
// the group.
func throttle(pids []int, quota, period int) (func(), error) {
	root := "/sys/fs/cgroup/cpu"
	if _, err := os.Stat(filepath.Join(root, "cpu.cfs_quota_us")); err != nil {
		return nil, fmt.Errorf("no cgroup-v1 cpu controller at %s: %v", root, err)
	}
	dir := filepath.Join(root, fmt.Sprintf("herald-bench-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	write := func(file string, v int) error {
		return os.WriteFile(filepath.Join(dir, file), []byte(strconv.Itoa(v)), 0o644)
	}
	if err := write("cpu.cfs_period_us", period); err != nil {
		return nil, err
	}
	if err := write("cpu.cfs_quota_us", quota); err != nil {
		return nil, err
	}
	origin := map[int]string{}
	moved := []int{}
	undo := func() {
		for _, tid := range moved {
			back := origin[tid]
			_ = os.WriteFile(filepath.Join(back, "tasks"), []byte(strconv.Itoa(tid)), 0o644)
		}
		_ = os.Remove(dir)
	}
	for _, pid := range pids {
		from, err := cpuCgroup(pid)
		if err != nil {
			undo()
			return nil, err
		}
		tids, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, e := range tids {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if err := write("tasks", tid); err != nil {
				continue // a thread that just ended
			}
			origin[tid] = filepath.Join(root, from)
			moved = append(moved, tid)
		}
	}
	slices.Sort(moved)
	return undo, nil
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
