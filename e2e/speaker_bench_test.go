package e2e

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/e2e/harness"
)

// l2FailoverBench is what TestBenchL2Failover's trials share: the lab,
// the Service's address, and which node owns each MAC.
type l2FailoverBench struct {
	h      *harness.T
	s      l2
	name   string
	ip     string
	nodeOf map[string]string
}

// l2FailoverResult is one failover trial: its kind, the node that
// failed, the one that took over, the outage the client saw and its
// requests.
type l2FailoverResult struct {
	kind, from, to string
	outage         time.Duration
	sent, failed   int
}

// TestBenchL2Failover measures, in the lab, how long the LAN client
// cannot reach a LoadBalancer IP when its announcing node fails: the
// client opens a new TCP connection and sends GET every 10 ms for 10 s,
// and the outage is the longest gap between two successful requests
// (by send time) around the failure. Two failures:
//
//   - hard: the winner's speaker is SIGKILLed and the node's LAN link set
//     down at the same moment, like a power loss (killing only the
//     speaker would leave the node forwarding: its iptables rules stay);
//   - graceful: the winner's speaker pod is deleted (it leaves the
//     memberlist cluster first).
//
// The echo server runs on node1, which the L2Advertisement keeps out of
// the election, so the backend never fails with the announcer. Figures
// are printed, never asserted. HERALD_BENCH_TRIALS sets the trials per
// kind (default 20); HERALD_LAB_NODES the lab's size (make bench runs it
// at 3 and at 10 nodes); HERALD_BENCH_SPEAKER_ARGS flags added to the
// speakers' for the run, to weigh timer settings against failover time.
//
// Every trial starts with every speaker back in the memberlist cluster:
// a speaker killed in the trial before restarts only after the kubelet's
// back-off, and its pod can still read Ready while it is down, so pod
// readiness alone would let a trial fail the one remaining candidate.
func TestBenchL2Failover(t *testing.T) {
	harness.Bench(t)
	runL2Failover(t, harness.Trials(t, 20), []string{"hard", "graceful", "restart"}, false)
}

// TestL2FailoverTarget is TestBenchL2Failover's short version in make
// test: 5 hard failovers (SIGKILL and link down), whose p99 outage (with
// 5 trials, the longest) must be within l2HardFailoverTarget.
func TestL2FailoverTarget(t *testing.T) {
	runL2Failover(t, 5, []string{"hard"}, true)
}

// l2HardFailoverTarget is the hard failover's target outage at p99 (issue
// #36, docs/concepts.md's "about 0.5 s").
const l2HardFailoverTarget = time.Second

// runL2Failover runs trials of each kind of failure and prints the
// figures; with assert, it fails the test when the hard failover's p99
// misses l2HardFailoverTarget (the benchmark prints PASS or FAIL).
func runL2Failover(t *testing.T, trials int, kinds []string, assert bool) {
	h := harness.Start(t)
	s := l2{h}
	const name = "bl2"
	s.readySpeakers(2 * time.Minute)
	extra := strings.Fields(os.Getenv("HERALD_BENCH_SPEAKER_ARGS"))
	if len(extra) > 0 {
		s.speakerArgs(extra)
	}
	nodeOf := s.macOwners()
	lb := &l2FailoverBench{h: h, s: s, name: name, nodeOf: nodeOf}
	t.Cleanup(func() {
		_, _ = h.K.Run(h.Ctx, "delete", "service", name, "--ignore-not-found")
		_, _ = h.K.Run(h.Ctx, "delete", "deployment", name, "--ignore-not-found")
		_, _ = h.K.Run(h.Ctx, "-n", heraldNS, "delete", "l2advertisement,ipaddresspool", name, "--ignore-not-found")
	})
	// Pod start on this kind of node (lab kubelet, or real kubelet and
	// containerd), creation to Ready, 10 pods at once; the benchmark's
	// figure only, as the create timings below.
	var podStarts []time.Duration
	if !assert {
		var err error
		if podStarts, err = h.PodStarts("bl2-start", "registry.k8s.io/echoserver:1.4", 10, 3*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	h.Apply(l2Objects(name, "198.51.100.230-198.51.100.239", "2001:db8:0:1::230-2001:db8:0:1::239", "node1"))
	h.Kubectl("-n", heraldNS, "patch", "l2advertisement", name, "--type=merge", "-p",
		`{"spec":{"nodeSelectors":[{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"NotIn","values":["node1"]}]}]}}`)
	h.ReadyPods("app="+name, 1, 2*time.Minute)
	// Create -> first answer, each sample a new Service on the same pods:
	// kubectl expose, then a request every 10 ms (200 ms timeout) until
	// one is answered. The first Service stays for the failover trials.
	var createToCurl, createToIP []time.Duration
	if assert {
		h.Kubectl("expose", "deployment", name, "--name="+name, "--port=80", "--target-port=8080", "--type=LoadBalancer")
		lb.ip = ctl{h}.waitAnyIP("default", name)
	} else {
		createToCurl, createToIP = lb.createToAnswer(t)
	}

	var results []l2FailoverResult
	// hard: the winner's speaker killed and its link down; graceful: its
	// node cordoned, then its pod deleted (the hand-over of a node being
	// taken down); restart: its pod deleted on a healthy node (a rolling
	// update: a restart in place, the address must stay).
	for _, kind := range kinds {
		for i := range trials {
			results = append(results, lb.trial(t, kind, i))
		}
	}
	s.speakersInCluster(3 * time.Minute)

	var b strings.Builder
	kind := "lab kubelet"
	if h.Lab.RealNodes {
		kind = "real nodes (kubelet, containerd, runc, CNI)"
	}
	fmt.Fprintf(&b, "BENCH L2 failover, %d nodes, %s (node1 holds the pod and never announces), a request every 10 ms for 10 s, failure at 2 s\n", len(h.Layout.Nodes), kind)
	if !assert {
		fmt.Fprintf(&b, "BENCH pod start, creation -> Ready, 10 pods created together: p50 %s  max %s  (all: %v)\n",
			podStarts[len(podStarts)/2].Round(time.Millisecond), podStarts[len(podStarts)-1].Round(time.Millisecond), roundAll(podStarts))
		fmt.Fprintf(&b, "BENCH Service create -> first successful request: p50 %s over %d Services (all: %v); create -> IP in status: p50 %s\n",
			createToCurl[len(createToCurl)/2].Round(time.Millisecond), len(createToCurl), roundAll(createToCurl), createToIP[len(createToIP)/2].Round(time.Millisecond))
	}
	for _, kind := range kinds {
		var ds []time.Duration
		for _, r := range results {
			if r.kind == kind {
				ds = append(ds, r.outage)
			}
		}
		slices.Sort(ds)
		if len(ds) == 0 {
			continue
		}
		p := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
		fmt.Fprintf(&b, "BENCH %-8s outage over %d trials: p50 %s  p99 %s  max %s  (all: %v)\n", kind, len(ds),
			p(0.5).Round(time.Millisecond), p(0.99).Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond), roundAll(ds))
		if kind == "hard" {
			verdict := "PASS"
			if p(0.99) > l2HardFailoverTarget {
				verdict = "FAIL"
				if assert {
					t.Errorf("hard failover p99 %s over %d trials, target %s", p(0.99).Round(time.Millisecond), len(ds), l2HardFailoverTarget)
				}
			}
			fmt.Fprintf(&b, "BENCH target: hard failover p99 <= %s: %s\n", l2HardFailoverTarget, verdict)
		}
	}
	nodes := ""
	if v := os.Getenv("HERALD_LAB_NODES"); v != "" {
		nodes = "HERALD_LAB_NODES=" + v + " "
	}
	args := ""
	if len(extra) > 0 {
		fmt.Fprintf(&b, "BENCH speakers run with the extra flags %s\n", strings.Join(extra, " "))
		args = "HERALD_BENCH_SPEAKER_ARGS='" + strings.Join(extra, " ") + "' "
	}
	real := ""
	if h.Lab.RealNodes {
		real = "HERALD_LAB_REAL_NODES=1 "
	}
	if assert {
		fmt.Fprintf(&b, "BENCH reproduce: cd e2e && %s%sgo test -count=1 -timeout 30m -run 'TestL2FailoverTarget$' -v .\n", real, nodes)
	} else {
		fmt.Fprintf(&b, "BENCH reproduce: cd e2e && HERALD_BENCH=1 %s%s%sHERALD_BENCH_TRIALS=%d go test -count=1 -timeout 90m -run 'TestBenchL2Failover$' -v .\n", real, nodes, args, trials)
	}
	t.Log("\n" + b.String())
}

// createToAnswer times six Services' creation to their first answer
// and to their IP; the first stays for the failover trials, its address
// in ip.
func (lb *l2FailoverBench) createToAnswer(t *testing.T) (createToCurl, createToIP []time.Duration) {
	h := lb.h
	for i := range 6 {
		svc := lb.name
		if i > 0 {
			svc = fmt.Sprintf("%s-c%d", lb.name, i)
			t.Cleanup(func() { _, _ = h.K.Run(h.Ctx, "delete", "service", svc, "--ignore-not-found") })
		}
		created := time.Now()
		h.Kubectl("expose", "deployment", lb.name, "--name="+svc, "--port=80", "--target-port=8080", "--type=LoadBalancer")
		sip := ctl{h}.waitAnyIP("default", svc)
		createToIP = append(createToIP, time.Since(created))
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if ok, _ := benchGet(h.Layout.Client, sip, 200*time.Millisecond); ok {
				createToCurl = append(createToCurl, time.Since(created))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no answer from %s (Service %s) 30 s after it was created", sip, svc)
			}
		}
		if i == 0 {
			lb.ip = sip
		} else {
			h.Kubectl("delete", "service", svc)
		}
	}
	slices.Sort(createToCurl)
	slices.Sort(createToIP)
	return createToCurl, createToIP
}

// settle waits for one announcer that the client's ARP agrees with.
func (lb *l2FailoverBench) settle() string {
	h, s := lb.h, lb.s
	var w string
	h.Poll(2*time.Minute, "one announcer answering ARP", func() (bool, string) {
		who, anns := s.announcersOf("default", lb.name, lb.ip)
		if len(who) != 1 {
			return false, fmt.Sprint(anns)
		}
		w = who[0]
		macs, _ := s.arping(lb.ip, 1, 1)
		return len(macs) == 1 && lb.nodeOf[macs[0]] == w, fmt.Sprint(w, macs)
	})
	return w
}

// trial fails the announcer one way (kind) while the client sends a
// request every 10 ms, and returns what the client saw.
func (lb *l2FailoverBench) trial(t *testing.T, kind string, i int) l2FailoverResult {
	s, h := lb.s, lb.h
	s.speakersInCluster(3 * time.Minute)
	w := lb.settle()
	var v4, v6 []string
	if kind == "hard" {
		v4, v6 = s.routes(w)
	}
	var fail func()
	var killedAt time.Time
	switch kind {
	case "hard":
		fail = func() {
			pod := s.speakers()[w]
			pid := s.speakerPID(pod)
			killedAt = time.Now()
			// Both at once: the kill, and the link like a pulled cable.
			_ = syscallKill(pid)
			if _, err := h.Exec(w, "ip", "link", "set", "eth0", "down"); err != nil {
				t.Error(err)
			}
		}
	case "graceful", "restart":
		if kind == "graceful" {
			h.Kubectl("cordon", w)
		}
		fail = func() {
			pod := s.speakers()[w]
			if err := h.CS.CoreV1().Pods(heraldNS).Delete(h.Ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
				t.Error(err)
			}
		}
	}
	neigh := watchNeigh(s, lb.ip, 10*time.Second)
	log := benchStream(h.Layout.Client, lb.ip, 10*time.Millisecond, 10*time.Second, 2*time.Second, fail)
	neighChanges := <-neigh
	if kind == "hard" {
		time.Sleep(time.Second)
		if err := s.restoreLink(w, v4, v6); err != nil {
			t.Fatal(err)
		}
	}
	if kind == "graceful" {
		h.Kubectl("uncordon", w)
	}
	outage, sent, failed := log.outage()
	macs, _ := s.arping(lb.ip, 1, 1)
	to := ""
	if len(macs) == 1 {
		to = lb.nodeOf[macs[0]]
	}
	if kind == "restart" && to == "" {
		// The new speaker may still be starting: nobody answers
		// ARP meanwhile, while the node forwards.
		h.Poll(time.Minute, "the restarted speaker answering ARP", func() (bool, string) {
			macs, _ := s.arping(lb.ip, 1, 1)
			if len(macs) == 1 {
				to = lb.nodeOf[macs[0]]
			}
			return len(macs) == 1, fmt.Sprint(macs)
		})
	}
	if kind == "restart" && to != w {
		t.Errorf("restart trial #%d: the address moved from %s to %q although %s's speaker restarted in place", i+1, w, to, w)
	}
	res := l2FailoverResult{kind, w, to, outage, sent, failed}
	t.Logf("BENCH trial %s #%d: %s failed, %s took over: outage %s (%d requests, %d failed)", kind, i+1, w, to, outage.Round(time.Millisecond), sent, failed)
	if kind == "hard" && outage > 700*time.Millisecond {
		// Where the time went: the survivors' view and the client's ARP.
		var d strings.Builder
		fmt.Fprintf(&d, "slow failover; killed at %s\nclient neighbor entry for %s:\n", killedAt.Format("15:04:05.000"), lb.ip)
		for _, c := range neighChanges {
			fmt.Fprintf(&d, "  %s\n", c)
		}
		for node := range s.speakers() {
			if node == w {
				continue
			}
			fmt.Fprintf(&d, "%s's speaker after the kill:\n%s\n", node, logSince(newBGPLab(h).speakerLogs(node), killedAt.Add(-25*time.Second), killedAt.Add(3*time.Second)))
		}
		t.Log(d.String())
	}
	return res
}

// speakersInCluster waits until every node runs a ready speaker whose
// process is alive and which counts every node as a memberlist member.
func (s l2) speakersInCluster(timeout time.Duration) {
	s.T.T.Helper()
	n := len(s.Layout.Nodes)
	s.Poll(timeout, fmt.Sprintf("every speaker running, ready and seeing %d members", n), func() (bool, string) {
		pods := s.speakers()
		var bad []string
		for _, ln := range s.Layout.Nodes {
			node := ln.Name
			p, ok := pods[node]
			switch {
			case !ok:
				bad = append(bad, node+": no speaker pod")
			case !harness.PodReady(&p):
				bad = append(bad, node+": not ready")
			default:
				if err := speakerAlive(s.T, p); err != nil {
					bad = append(bad, node+": "+err.Error())
				} else if v, err := s.speakerMetric(node, "herald_speaker_members"); err != nil || int(v) != n {
					bad = append(bad, fmt.Sprintf("%s: %v members (%v)", node, v, err))
				}
			}
		}
		return len(bad) == 0, strings.Join(bad, "; ")
	})
}

// speakerAlive tells whether the process the pod's status names is a
// running herald speaker (the status lags behind a kill).
func speakerAlive(h *harness.T, p v1.Pod) error {
	pid, err := h.ContainerPID(&p, "speaker")
	if err != nil {
		return err
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return fmt.Errorf("pid %d gone", pid)
	}
	// A killed process is a zombie (state Z) until the kubelet reaps it.
	if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) == 0 || f[0] == "Z" {
		return fmt.Errorf("pid %d exited", pid)
	}
	return nil
}

// watchNeigh records every change of the client's neighbor entry for ip
// for dur, with the wall-clock time, and sends the list when done.
func watchNeigh(s l2, ip string, dur time.Duration) <-chan []string {
	out := make(chan []string, 1)
	go func() {
		var changes []string
		last := ""
		// 50 ms: enough to see the change, light beside the request stream.
		for end := time.Now().Add(dur); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			mac, state := s.neighMAC(ip)
			if now := mac + " " + state; now != last {
				changes = append(changes, time.Now().Format("15:04:05.000")+" "+now)
				last = now
			}
		}
		out <- changes
	}()
	return out
}

// logSince is the lines of a slog text log stamped between from and to.
func logSince(log string, from, to time.Time) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		v, _, ok := strings.Cut(strings.TrimPrefix(l, "time="), " ")
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, v)
		if err == nil && !at.Before(from) && !at.After(to) {
			out = append(out, "  "+at.Format("15:04:05.000")+" "+l[len("time=")+len(v):])
		}
	}
	return strings.Join(out, "\n")
}

func roundAll(ds []time.Duration) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond).String()
	}
	return out
}

// benchLog is the outcome of every request of a stream, by send time.
type benchLog struct {
	mu   sync.Mutex
	at   []time.Duration
	ok   []bool
	fail time.Duration // when the failure was injected
}

// outage is the longest gap between consecutive successful requests
// that ends after the failure: from the last success before the outage
// to the first success after it.
func (l *benchLog) outage() (gap time.Duration, sent, failed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	idx := make([]int, len(l.at))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return int(l.at[a] - l.at[b]) })
	var last time.Duration = -1
	for _, i := range idx {
		if !l.ok[i] {
			failed++
			continue
		}
		if last >= 0 && l.at[i] > l.fail && l.at[i]-last > gap {
			gap = l.at[i] - last
		}
		last = l.at[i]
	}
	return gap, len(l.at), failed
}

// benchStream sends a request every interval for dur from the client
// namespace, each on its own connection with a timeout of 250 ms, and
// calls fail at failAt.
func benchStream(clientNetns, ip string, interval, dur, failAt time.Duration, fail func()) *benchLog {
	l := &benchLog{fail: failAt}
	var wg sync.WaitGroup
	start := time.Now()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	failed := false
	for time.Since(start) < dur {
		<-tick.C
		if !failed && time.Since(start) >= failAt {
			failed = true
			l.fail = time.Since(start)
			go fail()
		}
		at := time.Since(start)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, _ := benchGet(clientNetns, ip, 250*time.Millisecond)
			l.mu.Lock()
			l.at = append(l.at, at)
			l.ok = append(l.ok, ok)
			l.mu.Unlock()
		}()
	}
	wg.Wait()
	return l
}

// benchGet sends one GET / to ip:80 from the namespace on a new
// connection and tells whether the echo server answered within timeout.
func benchGet(ns, ip string, timeout time.Duration) (bool, error) {
	return harness.EchoGet(ns, ip, timeout)
}
