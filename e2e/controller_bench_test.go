package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/kubeconfig"
)

// Shape of the benchmark. The documentation ranges the lab may use hold
// fewer IPv4 addresses than 10,000 (and the lab's Services are IPv4
// only), so the Services share: 100 groups of 100, each group one sharing
// key and one IP, its members on ports 1000-1099.
const (
	benchNS       = "ctl-bench"
	benchPool     = "ctl-bench"
	benchServices = 10_000
	benchGroup    = 100
	benchWorkers  = 32
)

// TestBenchController10k creates 10,000 LoadBalancer Services through the
// API server and prints how long until all have IPs, then kills the
// controller and prints how long until it is ready again and how many IPs
// changed (which must be none). It prints figures and asserts no time.
// HERALD_BENCH=1 runs it.
func TestBenchController10k(t *testing.T) {
	harness.Bench(t)
	h := harness.Start(t)
	c := ctl{h}
	rc, err := kubeconfig.RESTConfig(h.Lab.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rc.QPS, rc.Burst = 2000, 4000
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := h.Ctx
	t.Cleanup(func() {
		start := time.Now()
		n := parallel(benchServices, benchWorkers, func(i int) error {
			err := cs.CoreV1().Services(benchNS).Delete(context.Background(), benchName(i), metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		})
		t.Logf("BENCH deleted %d Services in %.1fs", n, time.Since(start).Seconds())
		c.deleteNamespaces(benchNS)
		c.Kubectl("-n", heraldNS, "delete", "ipaddresspool", "--ignore-not-found", benchPool)
	})
	c.readyControllers(1)
	h.Apply(nsYAML(benchNS, nil) + poolYAML(benchPool, []string{"203.0.113.128/25"}, "autoAssign: false"))

	// Watch the Services: an informer counts those with IPs.
	var withIP atomic.Int64
	var mu sync.Mutex
	ips := map[string]string{}
	var lastChange atomic.Int64
	record := func(obj any) {
		s, ok := obj.(*v1.Service)
		if !ok || !strings.HasPrefix(s.Name, "b-") {
			return
		}
		var got []string
		for _, in := range s.Status.LoadBalancer.Ingress {
			got = append(got, in.IP)
		}
		ip := strings.Join(got, ",")
		mu.Lock()
		old, had := ips[s.Name]
		ips[s.Name] = ip
		mu.Unlock()
		switch {
		case ip != "" && (!had || old == ""):
			withIP.Add(1)
		case ip == "" && had && old != "":
			withIP.Add(-1)
		}
		if had && old != ip {
			lastChange.Store(time.Now().UnixNano())
		}
	}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(benchNS))
	inf := f.Core().V1().Services().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, o any) { record(o) }})
	ictx, stop := context.WithCancel(ctx)
	defer stop()
	f.Start(ictx.Done())
	cache.WaitForCacheSync(ictx.Done(), inf.HasSynced)

	start := time.Now()
	n := parallel(benchServices, benchWorkers, func(i int) error {
		_, err := cs.CoreV1().Services(benchNS).Create(ctx, benchService(i), metav1.CreateOptions{})
		return err
	})
	created := time.Since(start)
	if n != benchServices {
		t.Fatalf("created %d of %d Services", n, benchServices)
	}
	h.Poll(15*time.Minute, fmt.Sprintf("%d Services with IPs", benchServices), func() (bool, string) {
		return withIP.Load() == benchServices, fmt.Sprintf("%d with IPs after %.0fs", withIP.Load(), time.Since(start).Seconds())
	})
	all := time.Since(start)
	t.Logf("BENCH %d LoadBalancer Services (%d groups sharing an IP): created in %.1fs (%.0f/s); all had IPs %.1fs after the first create",
		benchServices, benchServices/benchGroup, created.Seconds(), benchServices/created.Seconds(), all.Seconds())
	pod := c.readyControllers(1)[0]
	if v, err := c.metric(&pod, "herald_controller_allocations_total"); err == nil {
		t.Logf("BENCH controller: herald_controller_allocations_total %v", v)
	}
	mu.Lock()
	before := make(map[string]string, len(ips))
	for k, v := range ips {
		before[k] = v
	}
	mu.Unlock()
	distinct := map[string]bool{}
	for _, ip := range before {
		distinct[ip] = true
	}
	t.Logf("BENCH distinct IPs in use: %d", len(distinct))

	// Restart: kill -9, wait for ready, then for a new Service's IP.
	old := containerID(&pod)
	killed := time.Now()
	c.signalController(&pod, syscall.SIGKILL)
	back := c.waitRestarted(pod.Name, old, 5*time.Minute)
	ready := time.Since(killed)
	probe := benchService(benchServices) // one more, not in the sharing groups
	probe.Name = "probe-after-restart"
	delete(probe.Annotations, "herald.io/allow-shared-ip")
	if _, err := cs.CoreV1().Services(benchNS).Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cs.CoreV1().Services(benchNS).Delete(context.Background(), probe.Name, metav1.DeleteOptions{})
	}()
	c.waitAnyIP(benchNS, probe.Name)
	assigning := time.Since(killed)
	startup, _ := c.metric(back, "herald_controller_startup_seconds")
	adopted, _ := c.metric(back, "herald_controller_adopted_services")
	// Give a wrong reassignment time to show, then compare every IP.
	time.Sleep(5 * time.Second)
	l, err := cs.CoreV1().Services(benchNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for _, s := range l.Items {
		want, ok := before[s.Name]
		if !ok {
			continue
		}
		var got []string
		for _, in := range s.Status.LoadBalancer.Ingress {
			got = append(got, in.IP)
		}
		if strings.Join(got, ",") != want {
			changed++
		}
	}
	t.Logf("BENCH restart: kill -9 to ready %.2fs (controller: startup %.2fs, adopted %v Services), to a new Service's IP %.2fs; IPs changed: %d of %d",
		ready.Seconds(), startup, adopted, assigning.Seconds(), changed, len(before))
	if changed != 0 {
		t.Errorf("%d Services changed IPs across the restart", changed)
	}
}

func benchName(i int) string { return fmt.Sprintf("b-%05d", i) }

// benchService is Service i: group i/100, port 1000 + i%100. No node
// ports: 10,000 Services would exhaust the NodePort range.
func benchService(i int) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: benchName(i), Namespace: benchNS, Annotations: map[string]string{
			"herald.io/address-pool":    benchPool,
			"herald.io/allow-shared-ip": fmt.Sprintf("g%03d", i/benchGroup),
		}},
		Spec: v1.ServiceSpec{
			Type:                          v1.ServiceTypeLoadBalancer,
			AllocateLoadBalancerNodePorts: new(bool),
			Selector:                      map[string]string{"app": "bench"},
			Ports:                         []v1.ServicePort{{Protocol: v1.ProtocolTCP, Port: int32(1000 + i%benchGroup)}},
		},
	}
}

// parallel runs f(0..n-1) on workers goroutines and returns how many
// succeeded; it stops handing out work after the first error.
func parallel(n, workers int, f func(int) error) int {
	var next, ok atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					fmt.Fprintf(os.Stderr, "bench: item %d: %v\n", i, err)
					failed.Store(true)
					return
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(ok.Load())
}
