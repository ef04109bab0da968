package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/kubeconfig"
)

// TestBenchBGP measures, in the lab, how fast FRR in the router namespace
// follows the speakers in BGP mode. "At FRR" means the router namespace's
// kernel routing table, where FRR's zebra installs what bgpd decided: the
// moments are read from `ip -o -4 monitor route` as the messages arrive,
// so no polling interval blurs them.
//
//   - withdraw: the last local endpoint of an externalTrafficPolicy Local
//     Service (a bare pod, so nothing replaces it) is deleted; time to the
//     route's removal, split into the pod's termination (until its
//     EndpointSlice shows no serving endpoint: a terminating pod still
//     serving keeps the route, as in the layer-2 election; the API is
//     polled every 10 ms) and the speaker's and FRR's share after it.
//   - failover: the LAN link of the advertising node goes down and its
//     speaker is SIGKILLed at the same moment (link first, so not even a
//     FIN leaves); time to the route's removal, detected by the BGP hold
//     time (9 s) alone, or by BFD (300 ms x 3) on a BGPPeer with a
//     bfdProfile and an FRR neighbor with `bfd`.
//   - create: a Service with a fixed IP is created (eTP Cluster, pod
//     ready); time to its IP in status, to the first route at FRR, and to
//     the ECMP route over every node.
//
// Figures are printed, never asserted; the targets (withdraw <=
// 0.5 s, BFD failover <= 1 s) are reported as met or not.
// HERALD_BENCH_TRIALS sets the trials per measurement (default 5).
func TestBenchBGP(t *testing.T) {
	harness.Bench(t)
	trials := harness.Trials(t, 5)
	h := harness.Start(t)
	b := newBGPLab(h)
	const name = "bbgp"
	b.readySpeakers(2 * time.Minute)
	nodes := b.nodeNames()
	victim := nodes[len(nodes)-1]
	w := b.watchRoutes()
	t.Cleanup(func() {
		for _, suffix := range []string{"-create", "-local", "-fail"} {
			_, _ = h.K.Run(h.Ctx, "delete", "service", name+suffix, "--ignore-not-found")
		}
		_, _ = h.K.Run(h.Ctx, "delete", "deployment", name, name+"-fail", "--ignore-not-found")
		_, _ = h.K.Run(h.Ctx, "delete", "pod", name+"-local", "--ignore-not-found")
		_, _ = h.K.Run(h.Ctx, "-n", heraldNS, "delete", "bgppeer,bgpadvertisement,ipaddresspool", name, "--ignore-not-found")
		for _, n := range nodes {
			_ = b.labelNode(n, "")
		}
	})
	h.Apply(bgpPoolYAML(name, "203.0.113.160/28", "2001:db8:0:100::20/124") +
		bgpAdvertisementYAML(name, name) +
		bgpPeerYAML(name, generalPeerSelector))
	b.waitSessions(time.Minute, nodes...)

	bb := &bgpBench{b: b, name: name, trials: trials, nodes: nodes, victim: victim, w: w}
	t.Run("create", bb.benchCreate)
	t.Run("withdraw", bb.benchWithdraw)
	t.Run("failover hold time", bb.benchFailoverHoldTime)
	t.Run("failover BFD", bb.benchFailoverBFD)

	var s strings.Builder
	fmt.Fprintf(&s, "BENCH BGP, %d nodes peering with FRR 8.4 (router namespace); %d trials each; times to the router's kernel route table (ip monitor)\n", len(nodes), trials)
	for _, l := range bb.report {
		s.WriteString(l + "\n")
	}
	fmt.Fprintf(&s, "BENCH reproduce: cd e2e && HERALD_BENCH=1 HERALD_BENCH_TRIALS=%d go test -count=1 -timeout 60m -run TestBenchBGP -v .\n", trials)
	t.Log("\n" + s.String())
}

// benchCreate times a Service's creation to its IP, to the first route at
// FRR and to the ECMP route over every node.
func (bb *bgpBench) benchCreate(t *testing.T) {
	b, h := bb.b.on(t)
	const ip = "203.0.113.162"
	svcName := bb.name + "-create"
	cs := b.fastClient()
	h.Apply(echoDeploymentYAML(bb.name, bb.nodes[0], 1))
	h.ReadyPods("app="+bb.name, 1, 2*time.Minute)
	var toIP, toRoute, toECMP []time.Duration
	for i := range bb.trials {
		svc := benchLBService(svcName, bb.name, bb.name, v1.ServiceExternalTrafficPolicyCluster, ip)
		ipCh := b.watchServiceIP(cs, svcName, ip)
		t0 := time.Now()
		if _, err := h.CS.CoreV1().Services("default").Create(h.Ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var gotIP time.Time
		select {
		case gotIP = <-ipCh:
		case <-time.After(30 * time.Second):
			t.Fatalf("trial %d: %s did not get %s within 30 s", i+1, svcName, ip)
		}
		ev, ok := bb.w.wait(h.Ctx, ip, t0, 30*time.Second, isAdded)
		if !ok {
			t.Fatalf("trial %d: no route for %s at FRR 30 s after the Service was created; route events:\n%s", i+1, ip, bb.w.recent(20))
		}
		var all time.Duration
		for {
			hops, _, raw := b.kernelNextHops(ip)
			all = time.Since(t0)
			if len(hops) == len(bb.nodes) {
				break
			}
			if all > 30*time.Second {
				t.Fatalf("trial %d: no ECMP route over every node 30 s after the Service was created: %s", i+1, raw)
			}
			time.Sleep(10 * time.Millisecond)
		}
		toIP, toRoute, toECMP = append(toIP, gotIP.Sub(t0)), append(toRoute, ev.At.Sub(t0)), append(toECMP, all)
		t.Logf("BENCH trial create #%d: IP in status after %s, first route at FRR after %s (%q), ECMP over %d nodes within %s",
			i+1, gotIP.Sub(t0).Round(time.Millisecond), ev.At.Sub(t0).Round(time.Millisecond), ev.Line, len(bb.nodes), all.Round(time.Millisecond))
		b.deleteServiceAndRoute(bb.w, svcName, ip)
	}
	bb.add("create: Service (eTP Cluster, pod ready, fixed IP) created -> IP in its status: %s", benchSummary(toIP))
	bb.add("create: Service created -> first route at FRR (one next hop): %s", benchSummary(toRoute))
	bb.add("create: Service created -> ECMP route over all %d nodes (kernel polled every ~10 ms): %s", len(bb.nodes), benchSummary(toECMP))
}

// benchWithdraw times the deletion of a Local Service's last pod to the
// route's removal at FRR, split into the pod's termination and the rest.
func (bb *bgpBench) benchWithdraw(t *testing.T) {
	b, h := bb.b.on(t)
	const ip = "203.0.113.161"
	svcName, podName, node := bb.name+"-local", bb.name+"-local", bb.nodes[1]
	cs := b.fastClient()
	if _, err := h.CS.CoreV1().Services("default").Create(h.Ctx, benchLBService(svcName, podName, bb.name, v1.ServiceExternalTrafficPolicyLocal, ip), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var total, eps, share []time.Duration
	for i := range bb.trials {
		h.Apply(echoPodYAML(podName, podName, node))
		h.ReadyPods("app="+podName, 1, 2*time.Minute)
		b.waitFRRNextHops(ip, []string{node}, time.Minute)
		sl := b.watchSlices(cs, svcName)
		if _, ok := waitFound(h.Ctx, 10*time.Second, func() (sliceEvent, bool) {
			return sl.first(time.Time{}, func(e sliceEvent) bool { return e.Ready == 1 })
		}); !ok {
			t.Fatalf("trial %d: the EndpointSlices show no ready endpoint:\n%s", i+1, sl)
		}
		t0 := time.Now()
		if err := h.CS.CoreV1().Pods("default").Delete(h.Ctx, podName, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		ev, ok := bb.w.wait(h.Ctx, ip, t0, time.Minute, isDeleted)
		if !ok {
			t.Fatalf("trial %d: the route for %s is still at FRR a minute after its last pod was deleted; route events:\n%s\nEndpointSlices:\n%s", i+1, ip, bb.w.recent(20), sl)
		}
		notReady, ok1 := waitFound(h.Ctx, 30*time.Second, func() (sliceEvent, bool) {
			return sl.first(t0, func(e sliceEvent) bool { return e.Ready == 0 })
		})
		noServing, ok2 := waitFound(h.Ctx, 30*time.Second, func() (sliceEvent, bool) {
			return sl.first(t0, func(e sliceEvent) bool { return e.Serving == 0 })
		})
		if !ok1 || !ok2 {
			t.Fatalf("trial %d: the EndpointSlices of %s kept a ready (%v) or serving (%v) endpoint 30 s after the pod was deleted (route gone at %s):\n%s",
				i+1, svcName, !ok1, !ok2, ev.At.Format("15:04:05.000"), sl)
		}
		tEPS := noServing.At
		total, eps, share = append(total, ev.At.Sub(t0)), append(eps, tEPS.Sub(t0)), append(share, ev.At.Sub(tEPS))
		t.Logf("BENCH trial withdraw #%d: pod deleted -> endpoint not ready %s, not serving %s -> route gone at FRR %s after that (total %s)",
			i+1, notReady.At.Sub(t0).Round(time.Millisecond), tEPS.Sub(t0).Round(time.Millisecond), ev.At.Sub(tEPS).Round(time.Millisecond), ev.At.Sub(t0).Round(time.Millisecond))
		if ev.At.Before(tEPS) {
			t.Logf("trial %d: the route went %s before the endpoint stopped serving; EndpointSlices:\n%s", i+1, tEPS.Sub(ev.At).Round(time.Millisecond), sl)
		}
		h.Poll(time.Minute, "the pod to be gone", func() (bool, string) {
			_, err := h.CS.CoreV1().Pods("default").Get(h.Ctx, podName, metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	}
	bb.add("withdraw: last local pod deleted -> route gone at FRR: %s", benchSummary(total))
	bb.add("withdraw:   of which the pod's termination (-> EndpointSlice without a serving endpoint): %s", benchSummary(eps))
	bb.add("withdraw:   of which the speaker and FRR (EndpointSlice -> route gone): %s", benchSummary(share))
	bb.add("withdraw: target <= 500ms, pod deleted -> route gone: %s", benchTarget(total, 500*time.Millisecond))
	bb.add("withdraw: target <= 500ms, speaker and FRR only: %s", benchTarget(share, 500*time.Millisecond))
}

// benchFailoverHoldTime times failover detected by the hold time alone.
func (bb *bgpBench) benchFailoverHoldTime(t *testing.T) {
	ds := bb.failover(t, "hold", false)
	bb.add("failover without BFD (hold time 9 s, keepalive 3 s): link down + SIGKILL -> route gone at FRR: %s", benchSummary(ds))
}

// benchFailoverBFD times failover detected by BFD, on a BGPPeer of the
// victim's own with a bfdProfile.
func (bb *bgpBench) benchFailoverBFD(t *testing.T) {
	b, _ := bb.b.on(t)
	peer := bb.name + "-bfd"
	b.isolate(isolated{Node: bb.victim, Role: "bfd",
		FRR: frrNeighborConf{Addr: b.nodeIP(bb.victim), RemoteAS: fmt.Sprint(bgpNodeASN), BFD: true},
		YAML: fmt.Sprintf("---\napiVersion: herald.io/v1beta1\nkind: BFDProfile\nmetadata: {name: %s, namespace: %s}\nspec: {receiveInterval: 300, transmitInterval: 300, detectMultiplier: 3}\n", peer, heraldNS) +
			bgpPeerYAML(peer, "bfdProfile: "+peer, rolePeerSelector("bfd")),
		Objects: []string{"bgppeer/" + peer, "bfdprofile/" + peer}, NoWait: true})
	ds := bb.failover(t, "bfd", true)
	bb.add("failover with BFD (300 ms x 3): link down + SIGKILL -> route gone at FRR: %s", benchSummary(ds))
	bb.add("failover with BFD: target <= 1s: %s", benchTarget(ds, time.Second))
}

// bgpBench is what TestBenchBGP's measurements share: the lab, the
// victim of the failovers, the route watch at FRR, and the report.
type bgpBench struct {
	b      bgpLab
	name   string
	trials int
	nodes  []string
	victim string
	w      *routeWatch
	report []string
}

// add appends a BENCH line to the report.
func (bb *bgpBench) add(format string, args ...any) {
	bb.report = append(bb.report, fmt.Sprintf("BENCH "+format, args...))
}

// benchSummary is the min, median and max of ds, and all of them.
func benchSummary(ds []time.Duration) string {
	lo, med, hi := durations(ds)
	return fmt.Sprintf("min %s  median %s  max %s  (all: %v)", lo.Round(time.Millisecond), med.Round(time.Millisecond), hi.Round(time.Millisecond), roundAll(ds))
}

// benchTarget says whether the median of ds meets limit, and how many
// trials did.
func benchTarget(ds []time.Duration, limit time.Duration) string {
	met := 0
	for _, d := range ds {
		if d <= limit {
			met++
		}
	}
	_, med, _ := durations(ds)
	verdict := "target met"
	if med > limit {
		verdict = "target NOT met"
	}
	return fmt.Sprintf("%s (median %s vs <= %s; %d/%d trials within)", verdict, med.Round(time.Millisecond), limit, met, len(ds))
}

// failover runs the trials of one kind; the victim advertises the
// only path of a Local Service whose pod it runs.
func (bb *bgpBench) failover(t *testing.T, kind string, bfd bool) []time.Duration {
	const failIP = "203.0.113.163"
	b, h := bb.b.on(t)
	svcName := bb.name + "-fail"
	h.Apply(echoDeploymentYAML(svcName, bb.victim, 1))
	h.ReadyPods("app="+svcName, 1, 2*time.Minute)
	if _, err := h.CS.CoreV1().Services("default").Get(h.Ctx, svcName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		if _, err := h.CS.CoreV1().Services("default").Create(h.Ctx, benchLBService(svcName, svcName, bb.name, v1.ServiceExternalTrafficPolicyLocal, failIP), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var ds []time.Duration
	for i := range bb.trials {
		b.readySpeakers(3 * time.Minute)
		b.waitSettled(bb.victim, bfd, 2*time.Minute)
		b.waitFRRNextHops(failIP, []string{bb.victim}, time.Minute)
		if i == 0 {
			n, _ := b.frrNeighbor(b.nodeIP(bb.victim))
			t.Logf("FRR neighbor %s: hold time %v ms, keepalive %v ms, BFD %v", b.nodeIP(bb.victim), n["bgpTimerHoldTimeMsecs"], n["bgpTimerKeepAliveIntervalMsecs"], n["peerBfdInfo"])
		}
		v4, v6 := b.routes(bb.victim)
		pid := b.speakerPID(b.speakers()[bb.victim])
		t0 := time.Now()
		if _, err := h.Exec(bb.victim, "ip", "link", "set", "eth0", "down"); err != nil {
			t.Fatal(err)
		}
		if err := syscallKill(pid); err != nil {
			t.Fatal(err)
		}
		ev, ok := bb.w.wait(h.Ctx, failIP, t0, 30*time.Second, isDeleted)
		if err := b.restoreLink(bb.victim, v4, v6); err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Fatalf("trial %d: the route for %s is still at FRR 30 s after %s failed; route events:\n%s", i+1, failIP, bb.victim, bb.w.recent(20))
		}
		ds = append(ds, ev.At.Sub(t0))
		t.Logf("BENCH trial failover %s #%d: %s's link down + speaker SIGKILL -> route gone at FRR after %s", kind, i+1, bb.victim, ev.At.Sub(t0).Round(time.Millisecond))
	}
	b.readySpeakers(3 * time.Minute)
	return ds
}

// benchLBService is a LoadBalancer Service for the pods app=app on port
// 80 -> 8080 with a fixed IP from pool.
func benchLBService(name, app, pool string, policy v1.ServiceExternalTrafficPolicyType, ip string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: map[string]string{
			"herald.io/address-pool": pool, "herald.io/loadBalancerIPs": ip,
		}},
		Spec: v1.ServiceSpec{
			Type:                  v1.ServiceTypeLoadBalancer,
			ExternalTrafficPolicy: policy,
			Selector:              map[string]string{"app": app},
			Ports:                 []v1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP}},
		},
	}
}

// fastClient is a clientset without the default client-side rate limit
// (5 requests/s), which would blur polling every 10 ms.
func (b bgpLab) fastClient() kubernetes.Interface {
	b.t().Helper()
	rc, err := kubeconfig.RESTConfig(b.Lab.Kubeconfig)
	if err != nil {
		b.t().Fatal(err)
	}
	rc.QPS, rc.Burst = 1000, 1000
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		b.t().Fatal(err)
	}
	return cs
}

// watchServiceIP polls a Service every 10 ms (from before it exists)
// and sends the moment its status first shows ip.
func (b bgpLab) watchServiceIP(cs kubernetes.Interface, name, ip string) <-chan time.Time {
	ctx, cancel := context.WithTimeout(b.Ctx, time.Minute)
	ch := make(chan time.Time, 1)
	go func() {
		defer cancel()
		for ctx.Err() == nil {
			svc, err := cs.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
			at := time.Now()
			if err == nil {
				for _, in := range svc.Status.LoadBalancer.Ingress {
					if in.IP == ip {
						ch <- at
						return
					}
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return ch
}

// deleteServiceAndRoute deletes a Service and waits until its route is
// gone at FRR and the Service is gone from the API (so its IP is free).
func (b bgpLab) deleteServiceAndRoute(w *routeWatch, name, ip string) {
	b.t().Helper()
	t0 := time.Now()
	if err := b.CS.CoreV1().Services("default").Delete(b.Ctx, name, metav1.DeleteOptions{}); err != nil {
		b.t().Fatal(err)
	}
	if _, ok := w.wait(b.Ctx, ip, t0, 30*time.Second, isDeleted); !ok {
		b.t().Fatalf("the route for %s stayed at FRR after %s was deleted:\n%s", ip, name, w.recent(20))
	}
	b.Poll(time.Minute, name+" to be gone", func() (bool, string) {
		_, err := b.CS.CoreV1().Services("default").Get(b.Ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// sliceEvent is one state of a Service's EndpointSlices (the endpoints
// over all of them), stamped when it was first seen.
type sliceEvent struct {
	At               time.Time
	Ready, Serving   int
	Endpoints, Event string
}

// sliceLog records a Service's EndpointSlices as they change.
type sliceLog struct {
	mu     sync.Mutex
	events []sliceEvent
}

// watchSlices records the EndpointSlices of a Service for two minutes,
// polling every 10 ms, each state when it is first seen.
func (b bgpLab) watchSlices(cs kubernetes.Interface, svc string) *sliceLog {
	ctx, cancel := context.WithTimeout(b.Ctx, 2*time.Minute)
	l := &sliceLog{}
	go func() {
		defer cancel()
		last := "-"
		for ctx.Err() == nil {
			list, err := cs.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
			at := time.Now()
			if err != nil {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			e := sliceEvent{At: at, Event: fmt.Sprintf("%d slices", len(list.Items))}
			var desc []string
			for _, es := range list.Items {
				for _, ep := range es.Endpoints {
					c := ep.Conditions
					ready := c.Ready == nil || *c.Ready
					serving := ready
					if c.Serving != nil {
						serving = *c.Serving
					}
					terminating := c.Terminating != nil && *c.Terminating
					if ready {
						e.Ready++
					}
					if serving {
						e.Serving++
					}
					node := ""
					if ep.NodeName != nil {
						node = *ep.NodeName
					}
					desc = append(desc, fmt.Sprintf("%v on %s ready=%v serving=%v terminating=%v", ep.Addresses, node, ready, serving, terminating))
				}
			}
			e.Endpoints = strings.Join(desc, "; ")
			if e.Endpoints != last {
				last = e.Endpoints
				l.mu.Lock()
				l.events = append(l.events, e)
				l.mu.Unlock()
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return l
}

// first is the first recorded state after since that matches.
func (l *sliceLog) first(since time.Time, match func(sliceEvent) bool) (sliceEvent, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.events {
		if !e.At.Before(since) && match(e) {
			return e, true
		}
	}
	return sliceEvent{}, false
}

func (l *sliceLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var s []string
	for _, e := range l.events {
		s = append(s, fmt.Sprintf("%s %s: %s", e.At.Format("15:04:05.000"), e.Event, e.Endpoints))
	}
	return strings.Join(s, "\n")
}

// waitFound polls find every 5 ms until it reports a value or timeout
// passes.
func waitFound[E any](ctx context.Context, timeout time.Duration, find func() (E, bool)) (E, bool) {
	deadline := time.Now().Add(timeout)
	for {
		if e, ok := find(); ok {
			return e, true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			var zero E
			return zero, false
		}
		time.Sleep(5 * time.Millisecond)
	}
}
