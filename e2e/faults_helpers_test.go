package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/controlplane"
	"github.com/herald-lb/herald/e2e/lab/netns"
)

// faults wraps the BGP helpers (which bring the layer-2 ones) with what
// the control-plane fault tests need.
type faults struct{ bgpLab }

// stopAPIServer stops kube-apiserver (etcd keeps running) and returns
// when it is gone; restoreAPIServer brings it back.
func (f faults) stopAPIServer() time.Time {
	f.t().Helper()
	if err := f.Lab.ControlPlane.StopComponent(controlplane.APIServer, 10*time.Second); err != nil {
		f.t().Fatal(err)
	}
	return time.Now()
}

// restoreAPIServer starts kube-apiserver again if it is not running and
// waits for /readyz; it is safe to call twice (t.Cleanup calls it).
func (f faults) restoreAPIServer() (time.Time, error) {
	cp := f.Lab.ControlPlane
	for _, p := range cp.Processes() {
		if p.Name == controlplane.APIServer && !p.Exited() {
			return time.Now(), nil
		}
	}
	err := cp.StartComponent(f.Ctx, controlplane.APIServer)
	return time.Now(), err
}

// apiDown tells whether the API server refuses requests.
func (f faults) apiDown() bool {
	_, err := f.CS.Discovery().ServerVersion()
	return err != nil
}

// lbIPs maps every LoadBalancer Service in the cluster to its status IPs.
func (f faults) lbIPs() map[string]string {
	f.t().Helper()
	l, err := f.CS.CoreV1().Services("").List(f.Ctx, metav1.ListOptions{})
	if err != nil {
		f.t().Fatal(err)
	}
	out := map[string]string{}
	for _, s := range l.Items {
		if s.Spec.Type != v1.ServiceTypeLoadBalancer {
			continue
		}
		var ips []string
		for _, in := range s.Status.LoadBalancer.Ingress {
			ips = append(ips, in.IP)
		}
		out[s.Namespace+"/"+s.Name] = strings.Join(ips, ",")
	}
	return out
}

// announcement is one ServiceAnnouncement: what it says and its
// resourceVersion (a rewrite changes it).
type announcement struct{ What, RV string }

// announcementsOf maps the ServiceAnnouncements of Services in default
// named svcs, and every NodeAnnouncement ("node/" + name), by object name.
func (f faults) announcementsOf(svcs ...string) map[string]announcement {
	f.t().Helper()
	out, err := f.K.Output(f.Ctx, "-n", heraldNS, "get", "serviceannouncements", "-l",
		"herald.io/service-namespace=default,herald.io/service-name in ("+strings.Join(svcs, ",")+")", "-o",
		`jsonpath={range .items[*]}{.metadata.name}|{.metadata.resourceVersion}|{.status.node}:{.status.protocol}:{.status.interfaces}{.status.peers}:{.status.ips}{"\n"}{end}`)
	if err != nil {
		f.t().Fatal(err)
	}
	// Cluster BGP Services are published by the nodes' NodeAnnouncements.
	nodes, err := f.K.Output(f.Ctx, "-n", heraldNS, "get", "nodeannouncements", "-o",
		`jsonpath={range .items[*]}node/{.metadata.name}|{.metadata.resourceVersion}|{.status.node}:{.status.protocol}:{.status.reason}{.status.advertisements}:node{"\n"}{end}`)
	if err != nil {
		f.t().Fatal(err)
	}
	m := map[string]announcement{}
	for _, l := range strings.Split(out+nodes, "\n") {
		p := strings.SplitN(strings.TrimSpace(l), "|", 3)
		if len(p) == 3 {
			m[p[0]] = announcement{What: p[2], RV: p[1]}
		}
	}
	return m
}

// announced is the content of the announcements, sorted, without names
// and versions.
func announced(m map[string]announcement) []string {
	var out []string
	for _, a := range m {
		if !strings.HasSuffix(a.What, ":") { // an unannounced report, no IPs
			out = append(out, a.What)
		}
	}
	slices.Sort(out)
	return out
}

// churn counts the announcements created, rewritten and deleted from
// before to after.
func churn(before, after map[string]announcement) (created, rewritten, deleted int) {
	for n, a := range after {
		b, ok := before[n]
		switch {
		case !ok:
			created++
		case b.RV != a.RV:
			rewritten++
		}
	}
	for n := range before {
		if _, ok := after[n]; !ok {
			deleted++
		}
	}
	return created, rewritten, deleted
}

// eventsSince counts the events in default and herald's namespace first
// or last seen after t, as "Kind/Reason" -> count, with a few examples.
func (f faults) eventsSince(t time.Time) (map[string]int, []string) {
	f.t().Helper()
	counts := map[string]int{}
	var examples []string
	for _, ns := range []string{"default", heraldNS} {
		l, err := f.CS.CoreV1().Events(ns).List(f.Ctx, metav1.ListOptions{})
		if err != nil {
			f.t().Fatal(err)
		}
		for _, e := range l.Items {
			last := e.LastTimestamp.Time
			if e.EventTime.After(last) {
				last = e.EventTime.Time
			}
			if e.CreationTimestamp.After(last) {
				last = e.CreationTimestamp.Time
			}
			if !last.After(t) {
				continue
			}
			k := e.InvolvedObject.Kind + "/" + e.Reason
			counts[k]++
			if len(examples) < 12 {
				examples = append(examples, fmt.Sprintf("%s %s/%s: %s", k, e.InvolvedObject.Namespace, e.InvolvedObject.Name, e.Message))
			}
		}
	}
	return counts, examples
}

// rules are herald's iptables rules in a node's nat table, to tell rules
// kept from rules flushed.
func (f faults) rules(node string) []string {
	out, err := netns.Run(f.Ctx, f.Node(node).Netns, "iptables-save", "-t", "nat")
	if err != nil {
		return []string{"iptables-save: " + err.Error()}
	}
	var rs []string
	for _, l := range strings.Split(out, "\n") {
		// The kubernetes Service's endpoint goes when the API server
		// stops gracefully (it removes itself): a real change.
		if strings.HasPrefix(l, "-A HERALD") && !strings.Contains(l, `"default/kubernetes:`) {
			rs = append(rs, l)
		}
	}
	slices.Sort(rs)
	return rs
}

// ruleDiff lists the rules only in a (-) and only in b (+).
func ruleDiff(a, b []string) []string {
	var out []string
	for _, r := range a {
		if !slices.Contains(b, r) {
			out = append(out, "- "+r)
		}
	}
	for _, r := range b {
		if !slices.Contains(a, r) {
			out = append(out, "+ "+r)
		}
	}
	return out
}

// readyEndpoints counts the ready endpoints of a Service in default
// (-1 when the API cannot tell).
func (f faults) readyEndpoints(svc string) int {
	l, err := f.CS.DiscoveryV1().EndpointSlices("default").List(f.Ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + svc})
	if err != nil {
		return -1
	}
	n := 0
	for _, s := range l.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				n++
			}
		}
	}
	return n
}

// blame splits failed requests three ways: sent within 1 s of a failed
// request of the direct probe, which goes to the backend pod without
// herald in the path (the backend or the machine did not answer: on
// the lab's 2 CPUs anything else running starves both); sent while
// Kubernetes had no ready endpoint in the 3 s before (the proxies and
// the speakers follow the EndpointSlices, as kube-proxy does); the
// rest, herald's doing. eps are readyEndpoints samples; an unknown one
// (-1, the API down) counts as unchanged.
func blame(failed []time.Time, eps []sample, direct []time.Time) (herald, noEndpoint, backend []time.Time) {
	for _, t := range failed {
		near := false
		for _, d := range direct {
			if d.After(t.Add(-time.Second)) && d.Before(t.Add(time.Second)) {
				near = true
			}
		}
		none := false
		for _, s := range between(eps, t.Add(-3*time.Second), t.Add(500*time.Millisecond)) {
			if s.Val == "0" {
				none = true
			}
		}
		switch {
		case near:
			backend = append(backend, t)
		case none:
			noEndpoint = append(noEndpoint, t)
		default:
			herald = append(herald, t)
		}
	}
	return herald, noEndpoint, backend
}

// unreadyWindows are the spans in which the samples said 0, as
// "from+duration" relative to t0.
func unreadyWindows(eps []sample, t0 time.Time) []string {
	var out []string
	var from time.Time
	for _, s := range eps {
		switch {
		case s.Val == "0" && from.IsZero():
			from = s.At
		case s.Val != "0" && !from.IsZero():
			out = append(out, fmt.Sprintf("%s+%s", from.Sub(t0).Round(100*time.Millisecond), s.At.Sub(from).Round(100*time.Millisecond)))
			from = time.Time{}
		}
	}
	if !from.IsZero() {
		out = append(out, fmt.Sprintf("%s+(still)", from.Sub(t0).Round(100*time.Millisecond)))
	}
	return out
}

// speakersSettled waits until every node's speaker says ready on
// /readyz and is neither recovering nor isolated, read from the nodes
// (the pods' Ready in the API lags behind the lab kubelets' watches
// after an API outage).
func (f faults) speakersSettled(timeout time.Duration) time.Duration {
	f.t().Helper()
	return f.Poll(timeout, "every speaker ready, none recovering or isolated", func() (bool, string) {
		var states []string
		ok := true
		for _, n := range f.nodeNames() {
			rz := f.speakerReadyz(n)
			rec, err1 := f.speakerMetric(n, "herald_speaker_recovering")
			iso, err2 := f.speakerMetric(n, "herald_speaker_isolated")
			states = append(states, fmt.Sprintf("%s: readyz %q recovering=%v isolated=%v (%v %v)", n, rz, rec, iso, err1, err2))
			ok = ok && rz == "ok" && err1 == nil && err2 == nil && rec == 0 && iso == 0
		}
		return ok, strings.Join(states, "; ")
	})
}

// speakerReadyz is a node's speaker /readyz answer, read in the node's
// namespace without the API.
func (f faults) speakerReadyz(node string) string {
	page, err := harness.HTTPGetFrom(f.Node(node).Netns, "http://127.0.0.1:7473/readyz")
	if err != nil {
		return "error: " + err.Error()
	}
	return strings.TrimSpace(page)
}

// speakerProcess finds the herald speaker process in a node's network
// namespace other than not, from /proc: the lab kubelet restarts a
// killed container without the API, which cannot tell its new PID then.
func (f faults) speakerProcess(node string, not int) int {
	var want syscall.Stat_t
	if err := syscall.Stat(filepath.Join(netns.Dir, f.Node(node).Netns), &want); err != nil {
		return 0
	}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == not {
			continue
		}
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.Contains(string(cmd), "herald\x00speaker") {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st) == nil && st.Ino == want.Ino && st.Dev == want.Dev {
			return pid
		}
	}
	return 0
}

// joins counts the speaker log lines of a node that report a memberlist
// join (the first one of each run, and rejoins on Node changes).
func (f faults) joins(node string) int {
	logs := f.speakerLogs(node)
	return strings.Count(logs, "joined the memberlist cluster") + strings.Count(logs, "no other nodes to join")
}

// sampler runs fn every period in the background until stopped and
// keeps what it returns, with the time.
type sampler struct {
	mu      sync.Mutex
	samples []sample
	done    chan struct{}
	wg      sync.WaitGroup
}

type sample struct {
	At  time.Time
	Val string
}

func startSampler(period time.Duration, fn func() string) *sampler {
	s := &sampler{done: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			v := fn()
			s.mu.Lock()
			s.samples = append(s.samples, sample{time.Now(), v})
			s.mu.Unlock()
			select {
			case <-s.done:
				return
			case <-time.After(period):
			}
		}
	}()
	return s
}

// stop ends the sampler and returns its samples.
func (s *sampler) stop() []sample {
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.samples)
}

// between are the samples taken in [from, to).
func between(ss []sample, from, to time.Time) []sample {
	var out []sample
	for _, s := range ss {
		if !s.At.Before(from) && s.At.Before(to) {
			out = append(out, s)
		}
	}
	return out
}

// distinct are the distinct values of samples, sorted.
func distinct(ss []sample) []string {
	var out []string
	for _, s := range ss {
		if !slices.Contains(out, s.Val) {
			out = append(out, s.Val)
		}
	}
	slices.Sort(out)
	return out
}

// probeLine is a probe's figures for a table row.
func probeLine(what string, p *harness.Probe) string {
	sent, failed := p.Result()
	return fmt.Sprintf("%s %d sent, %d failed, longest gap between answers %s", what, sent, failed, p.MaxGap())
}
