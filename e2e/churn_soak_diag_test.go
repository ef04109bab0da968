package e2e

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/herald-lb/herald/e2e/harness"
)

// soakLag measures, for each deleted pod, how long until no Service of
// its group lists it as ready any more: the control plane's share of a
// deletion. The deleted pod serves for its preStop sleep; past that, a
// request the proxy still sends there fails.
type soakLag struct {
	mu   sync.Mutex
	lags []time.Duration
	late []string // deletions whose endpoints outlasted the preStop sleep
	wg   sync.WaitGroup
}

// follow polls the informer until the pod's IPs are ready in none of
// the Services, for at most limit.
func (l *soakLag) follow(w *soakWatch, svcs []soakSvc, pod string, ips []string, at time.Time, limit time.Duration) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for time.Since(at) < limit {
			if len(w.readyIn(svcs, ips)) == 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		d := time.Since(at)
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lags = append(l.lags, d)
		if d >= soakPreStop {
			l.late = append(l.late, fmt.Sprintf("%s %s (%v): still ready in %v after %s", at.UTC().Format("15:04:05"), pod, ips, w.readyIn(svcs, ips), d.Round(time.Millisecond)))
		}
	}()
}

// result waits for the followers and returns the longest lag and the
// late deletions.
func (l *soakLag) result() (time.Duration, []string) {
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Max(append([]time.Duration{0}, l.lags...)), l.late
}

// readyIn are the Services whose EndpointSlices list one of ips ready.
func (w *soakWatch) readyIn(svcs []soakSvc, ips []string) []string {
	var out []string
	bySvc := w.slicesBySvc()
	for _, s := range svcs {
		if slices.ContainsFunc(bySvc[s.name], func(sl *discoveryv1.EndpointSlice) bool {
			for _, e := range sl.Endpoints {
				if (e.Conditions.Ready == nil || *e.Conditions.Ready) && slices.ContainsFunc(e.Addresses, func(a string) bool { return slices.Contains(ips, a) }) {
					return true
				}
			}
			return false
		}) {
			out = append(out, s.name)
		}
	}
	return out
}

// soakWatchdog looks at the probes every 500 ms and, the first few times
// one fails, logs what the path of its VIP looks like then: the
// Service's endpoints in the API, its pods, and every node's rules for
// the VIP (the Service chain and the endpoint chains it jumps to).
func soakWatchdog(h *harness.T, w *soakWatch, p *soakProbes, svcOf map[string]string, done <-chan struct{}, maxDumps int) {
	seen := map[*harness.Probe]int{}
	dumps := 0
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for dumps < maxDumps {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		for _, pr := range p.running() {
			_, failed := pr.Result()
			if failed <= seen[pr] {
				continue
			}
			seen[pr] = failed
			if dumps >= maxDumps {
				break
			}
			dumps++
			h.T.Logf("probe of %s failing at %s: %s", pr.IP, pr.Since(), soakPathDump(h, w, pr.IP, svcOf[pr.IP], time.Now()))
		}
	}
}

// running are the probes of the current segment.
func (p *soakProbes) running() []*harness.Probe {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.live)
}

var soakJump = regexp.MustCompile(`-j (HERALD-[A-Z0-9-]+)`)

// soakPathDump describes a VIP's path now; seen is when its failure was
// noticed.
func soakPathDump(h *harness.T, w *soakWatch, ip, svc string, seen time.Time) string {
	var b strings.Builder
	// A reset leaves its flow in conntrack's CLOSE state for 10 s: the
	// entry names the endpoint the flow was sent to and the node that
	// translated it, so a reset can be told apart from a refused or
	// unreachable endpoint. Read first, before the slower reads below,
	// and timed: a read more than 10 s after the failure cannot show it.
	for _, n := range h.Layout.Nodes {
		ct, err := h.Exec(n.Name, "conntrack", "-L", "-p", "tcp", "--orig-dst", ip, "--state", "CLOSE")
		if err != nil && strings.TrimSpace(ct) == "" {
			ct = err.Error()
		}
		fmt.Fprintf(&b, "  %s: conntrack CLOSE flows to %s, read %s after the failure was seen: %s\n", n.Name, ip, time.Since(seen).Round(time.Millisecond), strings.ReplaceAll(strings.TrimSpace(ct), "\n", "; "))
	}
	fmt.Fprintf(&b, "Service %s\n", svc)
	for _, sl := range w.slicesBySvc()[svc] {
		for _, e := range sl.Endpoints {
			c := e.Conditions
			fmt.Fprintf(&b, "  slice %s rv %s: %v ready=%v serving=%v terminating=%v\n", sl.Name, sl.ResourceVersion, e.Addresses, deref(c.Ready), deref(c.Serving), deref(c.Terminating))
		}
	}
	// The pods' view of their gateway: a pod replies through the node's
	// pod bridge, whose MAC it has cached.
	for _, o := range w.pods.GetStore().List() {
		pod := o.(*v1.Pod)
		if len(pod.Status.ContainerStatuses) == 0 {
			continue
		}
		rest, _ := strings.CutPrefix(pod.Status.ContainerStatuses[0].ContainerID, "lab://")
		netns, _, _ := strings.Cut(rest, "/")
		neigh, _ := runOut("ip", "-n", netns, "neigh")
		fmt.Fprintf(&b, "  pod %s on %s %v deleting=%v: neighbors: %s\n", pod.Name, pod.Spec.NodeName, pod.Status.PodIPs, pod.DeletionTimestamp != nil, strings.ReplaceAll(strings.TrimSpace(neigh), "\n", "; "))
	}
	for _, n := range h.Layout.Nodes {
		br, _ := h.Exec(n.Name, "ip", "-br", "link", "show", "cbr0")
		fmt.Fprintf(&b, "  %s: %s\n", n.Name, strings.TrimSpace(br))
	}
	save := "iptables-save"
	if isIPv6(ip) {
		save = "ip6tables-save"
	}
	for _, n := range h.Layout.Nodes {
		out, err := h.Exec(n.Name, save, "-t", "nat")
		if err != nil {
			fmt.Fprintf(&b, "  %s: %v\n", n.Name, err)
			continue
		}
		lines := strings.Split(out, "\n")
		chains := map[string]bool{}
		for _, l := range lines {
			if strings.Contains(l, ip+"/") {
				fmt.Fprintf(&b, "  %s: %s\n", n.Name, l)
				for _, m := range soakJump.FindAllStringSubmatch(l, -1) {
					chains[m[1]] = true
				}
			}
		}
		// Two levels: the Service's chains, then its endpoints'.
		for range 2 {
			for _, l := range lines {
				for c := range chains {
					if strings.HasPrefix(l, "-A "+c+" ") {
						for _, m := range soakJump.FindAllStringSubmatch(l, -1) {
							chains[m[1]] = true
						}
					}
				}
			}
		}
		for _, l := range lines {
			for c := range chains {
				if strings.HasPrefix(l, "-A "+c+" ") && !strings.Contains(l, ip+"/") {
					fmt.Fprintf(&b, "  %s: %s\n", n.Name, l)
				}
			}
		}
		if page, err := harness.HTTPGetFrom(n.Netns, "http://127.0.0.1:10249/metrics"); err == nil {
			m := pxbParseMetrics(page)
			fmt.Fprintf(&b, "  %s: last sync %.3f (now %.3f), syncs %v (full %v, partial %v), restore failures %v\n", n.Name,
				m["herald_proxy_sync_proxy_rules_last_timestamp_seconds"], float64(time.Now().UnixNano())/1e9,
				m["herald_proxy_sync_proxy_rules_duration_seconds_count"], m["herald_proxy_sync_full_proxy_rules_duration_seconds_count"],
				m["herald_proxy_sync_partial_proxy_rules_duration_seconds_count"], m["herald_proxy_sync_proxy_rules_iptables_restore_failures_total"])
		}
	}
	return b.String()
}

func deref(b *bool) string {
	if b == nil {
		return "nil"
	}
	return fmt.Sprint(*b)
}
