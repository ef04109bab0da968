package e2e

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// The churn soak's objects: one namespace for the Services and their
// pods, and in herald's namespace a pool, an advertisement and a peer of
// its own. The ranges are left alone by the other tests: the LAN's
// .120-.199 and 2001:db8:0:1::1:0/120 for layer 2 (the client resolves
// them on the LAN), the lab's BGP pool ranges for BGP.
const (
	soakNS      = "soak"
	soakL2Pool  = "soak-l2"
	soakBGPPool = "soak-bgp"
	soakPeer    = "soak"
	soakPeerV6  = "soak-v6"
	soakL2v4    = "198.51.100.120-198.51.100.199"
	soakL2v6    = "2001:db8:0:1::1:1-2001:db8:0:1::1:ff"
	soakBGPv4   = "203.0.113.129-203.0.113.254"
	soakBGPv6   = "2001:db8:0:100::1-2001:db8:0:100::ff"
	// The ranges as prefixes, for FRR's table.
	soakBGPv4Net = "203.0.113.128/25"
	soakBGPv6Net = "2001:db8:0:100::/120"
	// soakReplicas of each backing group: one pod is deleted at a time,
	// so a ready one is always left.
	soakReplicas = 2
	// soakPreStop is how long a deleted pod goes on serving.
	soakPreStop = 10 * time.Second
)

// soakKind is how a Service of the soak is announced, and its family.
type soakKind struct {
	name  string // l2v4, l2v6, bgpv4, bgpv6
	pool  string
	v6    bool
	limit int // addresses the range offers
}

var soakKinds = []soakKind{
	{"l2v4", soakL2Pool, false, 80},
	{"l2v6", soakL2Pool, true, 255},
	{"bgpv4", soakBGPPool, false, 126},
	{"bgpv6", soakBGPPool, true, 255},
}

func (k soakKind) bgp() bool { return k.pool == soakBGPPool }

// soakSvc is one Service of the soak.
type soakSvc struct {
	name  string
	kind  soakKind
	group int
}

// soakServices splits n Services over the kinds (16 % L2 IPv4, 34 % L2
// IPv6, 24 % BGP IPv4, the rest BGP IPv6, each within its range) and
// the groups, round robin.
func soakServices(n, groups int) ([]soakSvc, error) {
	counts := []int{n * 16 / 100, n * 34 / 100, n * 24 / 100, 0}
	counts[3] = n - counts[0] - counts[1] - counts[2]
	var out []soakSvc
	for i, k := range soakKinds {
		if counts[i] > k.limit {
			return nil, fmt.Errorf("%d Services: %d of kind %s, its range has %d addresses", n, counts[i], k.name, k.limit)
		}
		for j := range counts[i] {
			out = append(out, soakSvc{name: fmt.Sprintf("%s-%03d", k.name, j), kind: k, group: len(out) % groups})
		}
	}
	return out, nil
}

// soakObjectsYAML is the pools, the L2 and BGP advertisements, the
// BGPPeer, the namespace, the groups' Deployments and the Services.
func soakObjectsYAML(svcs []soakSvc, groups int) string {
	var b strings.Builder
	b.WriteString(poolYAML(soakL2Pool, []string{soakL2v4, soakL2v6}, "autoAssign: false"))
	fmt.Fprintf(&b, "---\napiVersion: herald.io/v1beta1\nkind: L2Advertisement\nmetadata: {name: %s, namespace: %s}\nspec:\n  ipAddressPools: [%s]\n", soakL2Pool, heraldNS, soakL2Pool)
	b.WriteString(bgpPoolYAML(soakBGPPool, soakBGPv4, soakBGPv6))
	b.WriteString(bgpAdvertisementYAML(soakBGPPool, soakBGPPool))
	// IPv6 routes go over sessions of their own, to the router's IPv6
	// address.
	b.WriteString(bgpPeerYAML(soakPeer, generalPeerSelector))
	b.WriteString(bgpPeerYAML(soakPeerV6, "peerAddress: "+topology.RouterLANv6.String(), generalPeerSelector))
	b.WriteString(nsYAML(soakNS, nil))
	for g := range groups {
		b.WriteString(soakGroupYAML(g))
	}
	for _, s := range svcs {
		fam := "IPv4"
		if s.kind.v6 {
			fam = "IPv6"
		}
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Service
metadata:
  name: %s
  namespace: %s
  annotations: {herald.io/address-pool: %s}
spec:
  type: LoadBalancer
  externalTrafficPolicy: Cluster
  ipFamilyPolicy: SingleStack
  ipFamilies: [%s]
  selector: {app: %s}
  ports: [{port: 80, targetPort: 8080, protocol: TCP}]
`, s.name, soakNS, s.kind.pool, fam, soakGroup(s.group))
	}
	return b.String()
}

func soakGroup(g int) string { return fmt.Sprintf("soak-g%d", g) }

// soakGroupYAML is a group's echo servers. The preStop sleep keeps a
// deleted pod serving while its removal reaches every Service's
// EndpointSlice and the proxies (as a real rollout needs too: the echo
// server exits at SIGTERM); the readiness probe keeps a new pod out of
// the endpoints until it listens.
func soakGroupYAML(g int) string {
	return fmt.Sprintf(`---
apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  replicas: %[3]d
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      terminationGracePeriodSeconds: 30
      containers:
      - name: echo
        image: registry.k8s.io/echoserver:1.4
        lifecycle: {preStop: {sleep: {seconds: %[4]d}}}
        readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 1}
`, soakGroup(g), soakNS, soakReplicas, int(soakPreStop.Seconds()))
}

// soakWatch follows the namespace's EndpointSlices, Services and Pods
// with informers: it counts EndpointSlice changes, records each
// Service's IPs once the soak starts and every change after, and tells
// the churn when the endpoints have caught up with the pods.
type soakWatch struct {
	slices  cache.SharedIndexInformer
	pods    cache.SharedIndexInformer
	svcs    cache.SharedIndexInformer
	stop    chan struct{}
	mu      sync.Mutex
	count   bool
	changes int               // EndpointSlice adds, updates and deletes while counting
	lastEv  time.Time         // the last EndpointSlice event
	ingress map[string]string // Service -> its IPs when the soak started
	ipLog   []string          // every change of a Service's IPs after that
}

func newSoakWatch(h *harness.T) *soakWatch {
	f := informers.NewSharedInformerFactoryWithOptions(h.CS, 0, informers.WithNamespace(soakNS))
	w := &soakWatch{
		slices: f.Discovery().V1().EndpointSlices().Informer(),
		pods:   f.Core().V1().Pods().Informer(),
		svcs:   f.Core().V1().Services().Informer(),
		stop:   make(chan struct{}),
	}
	ev := func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.lastEv = time.Now()
		if w.count {
			w.changes++
		}
	}
	_, _ = w.slices.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { ev() },
		UpdateFunc: func(o, n any) {
			if o.(*discoveryv1.EndpointSlice).ResourceVersion != n.(*discoveryv1.EndpointSlice).ResourceVersion {
				ev()
			}
		},
		DeleteFunc: func(any) { ev() },
	})
	_, _ = w.svcs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, n any) { w.serviceChanged(n.(*v1.Service), "") },
		DeleteFunc: func(o any) {
			if s, ok := o.(*v1.Service); ok {
				w.serviceChanged(s, "deleted")
			}
		},
	})
	f.Start(w.stop)
	f.WaitForCacheSync(w.stop)
	return w
}

func ingressOf(s *v1.Service) string {
	var ips []string
	for _, i := range s.Status.LoadBalancer.Ingress {
		ips = append(ips, i.IP)
	}
	return strings.Join(ips, ",")
}

// serviceChanged logs a change of a Service's IPs from the ones it had
// when the soak started.
func (w *soakWatch) serviceChanged(s *v1.Service, note string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	was, ok := w.ingress[s.Name]
	now := ingressOf(s)
	if note != "" {
		now = note
	}
	if ok && was != now {
		w.ipLog = append(w.ipLog, fmt.Sprintf("%s %s: %q -> %q", time.Now().UTC().Format("15:04:05.000"), s.Name, was, now))
		w.ingress[s.Name] = now
	}
}

// begin records every Service's IPs and starts counting.
func (w *soakWatch) begin() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ingress = map[string]string{}
	for _, o := range w.svcs.GetStore().List() {
		s := o.(*v1.Service)
		w.ingress[s.Name] = ingressOf(s)
	}
	w.count = true
	return maps.Clone(w.ingress)
}

// end stops counting and returns the changes counted and the IP log.
func (w *soakWatch) end() (changes int, ipLog []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.count = false
	return w.changes, slices.Clone(w.ipLog)
}

func (w *soakWatch) close() { close(w.stop) }

// groupPods are a group's pods that are not being deleted, oldest first.
func (w *soakWatch) groupPods(g int) []*v1.Pod {
	var out []*v1.Pod
	for _, o := range w.pods.GetStore().List() {
		p := o.(*v1.Pod)
		if p.Labels["app"] == soakGroup(g) && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreationTimestamp.Before(&out[j].CreationTimestamp) })
	return out
}

// caughtUp tells whether every Service's EndpointSlices list exactly
// its group's pods (in its family), all ready, with every group at full
// strength and ready, and no EndpointSlice event for quiet: the state in
// which deleting one pod leaves a ready endpoint everywhere.
func (w *soakWatch) caughtUp(svcs []soakSvc, groups int, quiet time.Duration) (bool, string) {
	w.mu.Lock()
	last := w.lastEv
	w.mu.Unlock()
	if time.Since(last) < quiet {
		return false, "EndpointSlices still changing"
	}
	want := map[int][]string{}
	for g := range groups {
		pods := w.groupPods(g)
		if len(pods) != soakReplicas {
			return false, fmt.Sprintf("group %d has %d pods", g, len(pods))
		}
		for _, p := range pods {
			if !harness.PodReady(p) || len(p.Status.PodIPs) == 0 {
				return false, fmt.Sprintf("pod %s not ready", p.Name)
			}
			for _, ip := range p.Status.PodIPs {
				want[g] = append(want[g], ip.IP)
			}
		}
	}
	bySvc := w.slicesBySvc()
	for _, s := range svcs {
		var have []string
		for _, o := range bySvc[s.name] {
			for _, e := range o.Endpoints {
				if e.Conditions.Ready != nil && !*e.Conditions.Ready {
					return false, fmt.Sprintf("%s: endpoint %v not ready", s.name, e.Addresses)
				}
				have = append(have, e.Addresses...)
			}
		}
		var exp []string
		for _, ip := range want[s.group] {
			if strings.Contains(ip, ":") == s.kind.v6 {
				exp = append(exp, ip)
			}
		}
		slices.Sort(have)
		slices.Sort(exp)
		if !slices.Equal(have, exp) {
			return false, fmt.Sprintf("%s: endpoints %v, pods %v", s.name, have, exp)
		}
	}
	return true, ""
}

// slicesBySvc are the EndpointSlices by Service.
func (w *soakWatch) slicesBySvc() map[string][]*discoveryv1.EndpointSlice {
	out := map[string][]*discoveryv1.EndpointSlice{}
	for _, o := range w.slices.GetStore().List() {
		e := o.(*discoveryv1.EndpointSlice)
		svc := e.Labels[discoveryv1.LabelServiceName]
		out[svc] = append(out[svc], e)
	}
	return out
}

// soakAnnouncement is one ServiceAnnouncement of the soak's namespace.
type soakAnnouncement struct {
	svc, node, protocol string
	ips                 []string
}

// soakAnnouncements reads who announces the soak's Services, as
// `herald status -n soak -o json` resolves it (layer 2 from the winners'
// ServiceAnnouncements, BGP Cluster from the NodeAnnouncements): one
// entry per Service, node and protocol, with the addresses.
func soakAnnouncements(h *harness.T) ([]soakAnnouncement, error) {
	rep, err := l2{h}.status(soakNS)
	if err != nil {
		return nil, err
	}
	var anns []soakAnnouncement
	for _, sv := range rep.Services {
		if sv.Namespace != soakNS {
			continue
		}
		idx := map[[2]string]int{}
		for _, a := range sv.Addresses {
			for _, who := range a.AnnouncedBy {
				k := [2]string{who.Node, strings.ToLower(who.Protocol)}
				i, ok := idx[k]
				if !ok {
					i = len(anns)
					idx[k] = i
					anns = append(anns, soakAnnouncement{svc: sv.Name, node: who.Node, protocol: k[1]})
				}
				anns[i].ips = append(anns[i].ips, a.IP)
			}
		}
	}
	return anns, nil
}

// soakWinners maps each IP to the nodes announcing it, sorted, per
// protocol ("layer2", "bgp").
func soakWinners(anns []soakAnnouncement) map[string]map[string][]string {
	out := map[string]map[string][]string{}
	for _, a := range anns {
		if out[a.protocol] == nil {
			out[a.protocol] = map[string][]string{}
		}
		for _, ip := range a.ips {
			out[a.protocol][ip] = append(out[a.protocol][ip], a.node)
		}
	}
	for _, m := range out {
		for ip := range m {
			slices.Sort(m[ip])
		}
	}
	return out
}

// soakL2Answers asks for ip on the LAN from the client (arping for
// IPv4, ndisc6 waiting for every answer for IPv6) and returns the MACs
// that answered.
func soakL2Answers(s l2, ip string) ([]string, string) {
	if !isIPv6(ip) {
		return s.arping(ip, 2, 2)
	}
	// -q prints one MAC a line, nothing else.
	out, _ := s.Exec("client", "ndisc6", "-q", "-m", "-r", "2", "-w", "700", ip, "eth0")
	macs := arpingMAC.FindAllString(strings.ToLower(out), -1)
	slices.Sort(macs)
	return slices.Compact(macs), out
}

// soakFRRRoutes are FRR's BGP routes within prefix, keyed by address,
// each with the sorted next hops of its valid paths.
func soakFRRRoutes(b bgpLab, prefix netip.Prefix) (map[string][]string, error) {
	table, err := b.frrTable(prefix.Addr().Is6())
	if err != nil {
		return nil, err
	}
	routes := map[string][]string{}
	for p, hops := range table {
		if pp, err := netip.ParsePrefix(p); err == nil && prefix.Overlaps(pp) {
			routes[pp.Addr().String()] = hops
		}
	}
	return routes, nil
}

// soakRuleCount counts the rules (-A lines) of every table in a node's
// iptables-save or ip6tables-save.
func soakRuleCount(h *harness.T, node, save string) (int, error) {
	out, err := h.Exec(node, save)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "-A ") {
			n++
		}
	}
	return n, nil
}

// soakUsage is a process's resident memory and Go heap in use (MiB)
// and goroutines. The heap tells a leak from memory the Go runtime has
// not yet handed back to the system, which RSS alone cannot.
type soakUsage struct {
	rss, heap, goroutines float64
}

// soakProcUsage reads process_resident_memory_bytes,
// go_memstats_heap_inuse_bytes and go_goroutines from a /metrics page
// reached from a node's namespace.
func soakProcUsage(ns, url string) (soakUsage, error) {
	page, err := harness.HTTPGetFrom(ns, url)
	if err != nil {
		return soakUsage{}, err
	}
	m := pxbParseMetrics(page)
	rss, ok1 := m["process_resident_memory_bytes"]
	gr, ok2 := m["go_goroutines"]
	heap, ok3 := m["go_memstats_heap_inuse_bytes"]
	if !ok1 || !ok2 || !ok3 {
		return soakUsage{}, fmt.Errorf("%s: no process_resident_memory_bytes, go_memstats_heap_inuse_bytes or go_goroutines", url)
	}
	return soakUsage{rss: rss / (1 << 20), heap: heap / (1 << 20), goroutines: gr}, nil
}

// soakUsageSeries keeps usage samples by their time into the soak.
type soakUsageSeries struct {
	at  []time.Duration
	got []map[string]soakUsage
}

func (u *soakUsageSeries) sample(h *harness.T, at time.Duration) []string {
	got, errs := soakUsages(h)
	u.at = append(u.at, at)
	u.got = append(u.got, got)
	return errs
}

// median is, per process, the median of each figure over the samples
// taken in [from, to], and how many samples that was at most.
func (u *soakUsageSeries) median(from, to time.Duration) (map[string]soakUsage, int) {
	by := map[string][]soakUsage{}
	n := 0
	for i, at := range u.at {
		if at < from || at > to {
			continue
		}
		n++
		for p, v := range u.got[i] {
			by[p] = append(by[p], v)
		}
	}
	out := map[string]soakUsage{}
	for p, vs := range by {
		med := func(f func(soakUsage) float64) float64 {
			xs := make([]float64, len(vs))
			for i, v := range vs {
				xs[i] = f(v)
			}
			slices.Sort(xs)
			if len(xs)%2 == 1 {
				return xs[len(xs)/2]
			}
			return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
		}
		out[p] = soakUsage{
			rss:        med(func(v soakUsage) float64 { return v.rss }),
			heap:       med(func(v soakUsage) float64 { return v.heap }),
			goroutines: med(func(v soakUsage) float64 { return v.goroutines }),
		}
	}
	return out, n
}

// soakUsages samples the controllers (by pod) and the speakers (by
// node; the proxy runs in the speaker's process in the lab).
func soakUsages(h *harness.T) (map[string]soakUsage, []string) {
	out := map[string]soakUsage{}
	var errs []string
	for _, p := range (ctl{h}).controllerPods() {
		node, ok := h.Layout.Node(p.Spec.NodeName)
		if !ok {
			continue
		}
		u, err := soakProcUsage(node.Netns, fmt.Sprintf("http://%s:7472/metrics", p.Status.PodIP))
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		out["controller "+p.Name] = u
	}
	for _, n := range h.Layout.Nodes {
		u, err := soakProcUsage(n.Netns, "http://127.0.0.1:7473/metrics")
		if err != nil {
			errs = append(errs, n.Name+": "+err.Error())
			continue
		}
		out["speaker+proxy "+n.Name] = u
	}
	return out, errs
}

// soakProbes probes VIPs from a lab-prober process per namespace
// (harness.StartProbeProcess: the test process's own stalls fail none of
// them), in segments of 10 minutes so that the bench's 30-minute soak
// reads a fresh process's counts now and then; each segment is stopped
// and kept, and their counts summed.
type soakProbes struct {
	bin     string      // labbin.Prober
	targets [][2]string // netns, ip
	every   time.Duration
	mu      sync.Mutex
	live    []*harness.Probe
	done    []*harness.Probe
}

func (p *soakProbes) start() error {
	var order []string
	byNS := map[string][]string{}
	for _, t := range p.targets {
		if byNS[t[0]] == nil {
			order = append(order, t[0])
		}
		byNS[t[0]] = append(byNS[t[0]], t[1])
	}
	var live []*harness.Probe
	for _, ns := range order {
		probes, err := harness.StartProbeProcess(p.bin, ns, byNS[ns], 80, p.every)
		if err != nil {
			for _, pr := range live {
				pr.Stop()
			}
			return err
		}
		live = append(live, probes...)
	}
	p.mu.Lock()
	p.live = live
	p.mu.Unlock()
	return nil
}

func (p *soakProbes) stop() {
	p.mu.Lock()
	live := p.live
	p.live = nil
	p.mu.Unlock()
	for _, pr := range live {
		pr.Stop()
	}
	p.done = append(p.done, live...)
}

// maxLate is the longest any prober sent a request after its turn.
func (p *soakProbes) maxLate() time.Duration {
	var late time.Duration
	for _, pr := range p.done {
		late = max(late, pr.MaxLate())
	}
	return late
}

// failedAt are the times of every failed request.
func (p *soakProbes) failedAt() []time.Time {
	var out []time.Time
	for _, pr := range p.done {
		out = append(out, pr.FailedAt()...)
	}
	return out
}

// result sums every segment: requests, failures, the longest gap, and
// the failures' first lines by VIP.
func (p *soakProbes) result() (sent, failed int, maxGap time.Duration, failures []string) {
	for _, pr := range p.done {
		s, f := pr.Result()
		sent += s
		failed += f
		maxGap = max(maxGap, pr.MaxGap())
		if f > 0 {
			failures = append(failures, pr.IP+": "+pr.Failures())
		}
	}
	return sent, failed, maxGap, failures
}
