package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
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
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/controlplane"
	"github.com/herald-lb/herald/e2e/lab/kubeconfig"
)

// The mass create's namespace and pool. IPv4's documentation ranges
// have no /22 to spare (198.18.0.0/15 is the lab's pod and Service
// ranges), so the 1,024 addresses are an IPv6 /118 of 2001:db8::/32 that
// nothing else in the lab uses; the pool has no advertisement, so the
// test measures assignment, not announcing.
const (
	massNS      = "cpf-mass"
	massPool    = "cpf-mass"
	massRange   = "2001:db8:0:f17::/118"
	massWorkers = 8
)

// TestFaultsControlPlaneMassCreate creates 1,000 LoadBalancer Services
// (HERALD_CPF_SERVICES overrides the count) with a few parallel clients
// and, during the create, restarts etcd once (stopped about 7 s; the API
// server rides it out) and kills the controller with SIGKILL once, at
// different points. Every Service must end with an IP, no IP twice, and
// no IP may change afterwards, across one more controller kill -9.
func TestFaultsControlPlaneMassCreate(t *testing.T) {
	h := harness.Start(t)
	c := ctl{h}
	n := 1000
	if v := os.Getenv("HERALD_CPF_SERVICES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 10 || n > 1024 {
			t.Fatalf("HERALD_CPF_SERVICES=%q: want 10 to 1024 (the pool's size)", v)
		}
	}
	cp := h.Lab.ControlPlane
	if cp == nil {
		t.Fatal("the lab's control plane is not this process's: cannot restart etcd")
	}
	rc, err := kubeconfig.RESTConfig(h.Lab.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rc.QPS, rc.Burst = 500, 1000
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := h.Ctx
	t.Cleanup(func() {
		for _, p := range cp.Processes() {
			if p.Name == controlplane.Etcd && p.Exited() {
				if err := cp.StartComponent(ctx, controlplane.Etcd); err != nil {
					t.Errorf("restoring etcd: %v", err)
				}
			}
		}
		start := time.Now()
		parallel(n, massWorkers, func(i int) error {
			err := cs.CoreV1().Services(massNS).Delete(context.Background(), massName(i), metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		})
		t.Logf("deleted the Services in %.1fs", time.Since(start).Seconds())
		c.deleteNamespaces(massNS)
		_, _ = h.K.Run(ctx, "-n", heraldNS, "delete", "ipaddresspool", massPool, "--ignore-not-found")
	})
	c.readyControllers(1)
	h.Apply(nsYAML(massNS, nil) + poolYAML(massPool, []string{massRange}, "autoAssign: false"))

	// An informer follows the Services' IPs: when each got one, and any
	// change of an IP once set.
	m := &massRun{h: h, cs: cs, ctx: ctx, n: n, ips: map[string]string{}}
	inf := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(massNS)).Core().V1().Services().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: m.record, UpdateFunc: func(_, o any) { m.record(o) }})
	ictx, stopInf := context.WithCancel(ctx)
	defer stopInf()
	go inf.Run(ictx.Done())
	cache.WaitForCacheSync(ictx.Done(), inf.HasSynced)

	// The create: each Service is retried until the API takes it (an
	// AlreadyExists after a timed-out create counts as made).
	start := time.Now()
	createDone := m.create(start)

	// etcd restart at 30 %.
	m.waitCreated(n * 3 / 10)
	etcdAt := m.created.Load()
	etcdStop := time.Now()
	if err := cp.StopComponent(controlplane.Etcd, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(7 * time.Second)
	if err := cp.StartComponent(ctx, controlplane.Etcd); err != nil {
		t.Fatal(err)
	}
	etcdDown := time.Since(etcdStop)
	apiBack := h.Poll(2*time.Minute, "the API server to answer again", func() (bool, string) {
		_, err := cs.CoreV1().Namespaces().Get(ctx, massNS, metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	createdDuringEtcd := m.created.Load() - etcdAt
	t.Logf("etcd stopped at %d Services created, down %s (healthy again); the API served again %s later; %d creates retried so far",
		etcdAt, etcdDown.Round(time.Millisecond), apiBack.Round(time.Millisecond), m.retries.Load())

	// Controller kill -9 at 60 %.
	m.waitCreated(n * 6 / 10)
	ctlAt := m.created.Load()
	killed, ctlReady := killControllerAndWait(c)
	var firstAssign time.Duration
	h.Poll(2*time.Minute, "an assignment after the controller's restart", func() (bool, string) {
		firstAssign = m.firstAssignedAfter(killed.Add(ctlReady))
		return firstAssign >= 0, fmt.Sprintf("%d with IPs", m.withIP())
	})

	createdIn := <-createDone
	if got := m.created.Load(); got != int64(n) {
		t.Fatalf("created %d of %d Services", got, n)
	}
	h.Poll(5*time.Minute, fmt.Sprintf("%d Services with IPs", n), func() (bool, string) {
		return m.withIP() == n, fmt.Sprintf("%d with IPs", m.withIP())
	})
	allIn := time.Since(start)

	// The API's view: every Service has one IP, no IP twice.
	before := m.check(t)

	// One more controller kill -9, then every IP compared.
	_, ctlReady2 := killControllerAndWait(c)
	time.Sleep(10 * time.Second)
	after := m.check(t)
	changed := 0
	for k, ip := range before {
		if after[k] != ip {
			changed++
		}
	}
	m.mu.Lock()
	seenChanges := slices.Clone(m.changes)
	m.mu.Unlock()

	t.Logf("FAULT mass create of %d LoadBalancer Services (%d clients): created in %.1fs (%.0f/s, %d creates retried); all had IPs %.1fs after the first create",
		n, massWorkers, createdIn.Seconds(), float64(n)/createdIn.Seconds(), m.retries.Load(), allIn.Seconds())
	t.Logf("FAULT etcd restart at %d created | creates went on: %d more made while it was down or the API recovered | down %s, API serving %s after etcd was healthy",
		etcdAt, createdDuringEtcd, etcdDown.Round(time.Millisecond), apiBack.Round(time.Millisecond))
	t.Logf("FAULT controller kill -9 at %d created | kill -> ready %s, ready -> first assignment %s",
		ctlAt, ctlReady.Round(time.Millisecond), firstAssign.Round(time.Millisecond))
	t.Logf("FAULT result | %d Services, %d with one IP, duplicates %d | IPs changed across one more kill -9 (ready in %s, +10 s): %d; IP changes the informer saw during the whole test: %d %v",
		n, len(before), n-len(distinctValues(before)), ctlReady2.Round(time.Millisecond), changed, len(seenChanges), seenChanges)
	if changed != 0 || len(seenChanges) != 0 {
		t.Errorf("IPs changed: %d across the last restart, %d seen by the informer: %v", changed, len(seenChanges), seenChanges)
	}
}

// massRun is what TestFaultsControlPlaneMassCreate's steps share: the
// client, the count, and the Services' IPs as an informer saw them.
type massRun struct {
	h   *harness.T
	cs  *kubernetes.Clientset
	ctx context.Context
	n   int

	mu sync.Mutex
	// ips is each Service's IPs; assigned, when each got its first;
	// changes, every change of an IP once set.
	ips      map[string]string
	assigned []time.Time
	changes  []string

	// created counts the Services made, retries the creates retried.
	created, retries atomic.Int64
}

// record is the informer's handler: it notes a Service's IPs.
func (m *massRun) record(obj any) {
	s, ok := obj.(*v1.Service)
	if !ok {
		return
	}
	var got []string
	for _, in := range s.Status.LoadBalancer.Ingress {
		got = append(got, in.IP)
	}
	ip := strings.Join(got, ",")
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.ips[s.Name]
	m.ips[s.Name] = ip
	switch {
	case old == "" && ip != "":
		m.assigned = append(m.assigned, time.Now())
	case old != "" && ip != old:
		m.changes = append(m.changes, fmt.Sprintf("%s: %q -> %q", s.Name, old, ip))
	}
}

// withIP is how many Services have an IP.
func (m *massRun) withIP() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := 0
	for _, ip := range m.ips {
		if ip != "" {
			k++
		}
	}
	return k
}

// firstAssignedAfter is how long after at a Service first got an IP, or
// -1.
func (m *massRun) firstAssignedAfter(at time.Time) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, a := range m.assigned {
		if a.After(at) {
			return a.Sub(at)
		}
	}
	return -1
}

// create makes the n Services with a few parallel clients, each retried
// until the API takes it (an AlreadyExists after a timed-out create
// counts as made); the channel gets how long it took from start.
func (m *massRun) create(start time.Time) <-chan time.Duration {
	createDone := make(chan time.Duration, 1)
	go func() {
		parallel(m.n, massWorkers, func(i int) error {
			for {
				_, err := m.cs.CoreV1().Services(massNS).Create(m.ctx, massService(i), metav1.CreateOptions{})
				if err == nil || apierrors.IsAlreadyExists(err) {
					m.created.Add(1)
					return nil
				}
				if m.ctx.Err() != nil {
					return err
				}
				m.retries.Add(1)
				time.Sleep(250 * time.Millisecond)
			}
		})
		createDone <- time.Since(start)
	}()
	return createDone
}

// waitCreated waits until k Services are made.
func (m *massRun) waitCreated(k int) {
	m.h.Poll(5*time.Minute, fmt.Sprintf("%d Services created", k), func() (bool, string) {
		return m.created.Load() >= int64(k), fmt.Sprintf("%d created", m.created.Load())
	})
}

// check reads every Service's IP from the API and fails the test unless
// each has exactly one and none is on two.
func (m *massRun) check(t *testing.T) map[string]string {
	l, err := m.cs.CoreV1().Services(massNS).List(m.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	owners := map[string][]string{}
	var without []string
	for _, s := range l.Items {
		var ing []string
		for _, in := range s.Status.LoadBalancer.Ingress {
			ing = append(ing, in.IP)
		}
		if len(ing) != 1 {
			without = append(without, fmt.Sprintf("%s %v", s.Name, ing))
			continue
		}
		got[s.Name] = ing[0]
		owners[ing[0]] = append(owners[ing[0]], s.Name)
	}
	var dups []string
	for ip, ns := range owners {
		if len(ns) > 1 {
			dups = append(dups, fmt.Sprintf("%s: %v", ip, ns))
		}
	}
	slices.Sort(dups)
	if len(l.Items) != m.n || len(without) > 0 || len(dups) > 0 {
		t.Errorf("%d Services; without exactly one IP: %d %v; IPs on more than one Service: %d %v", len(l.Items), len(without), without, len(dups), dups)
	}
	return got
}

// killControllerAndWait SIGKILLs the controller and waits for its
// restart; it returns when it was killed and how long until it was ready.
func killControllerAndWait(c ctl) (killed time.Time, ready time.Duration) {
	pod := c.readyControllers(1)[0]
	old := containerID(&pod)
	killed = time.Now()
	c.signalController(&pod, syscall.SIGKILL)
	c.waitRestarted(pod.Name, old, 2*time.Minute)
	return killed, time.Since(killed)
}

func massName(i int) string { return fmt.Sprintf("m-%04d", i) }

// massService is an IPv6-only LoadBalancer Service from massPool without
// node ports (1,000 would take a third of the NodePort range).
func massService(i int) *v1.Service {
	single := v1.IPFamilyPolicySingleStack
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: massName(i), Namespace: massNS, Annotations: map[string]string{
			"herald.io/address-pool": massPool,
		}},
		Spec: v1.ServiceSpec{
			Type:                          v1.ServiceTypeLoadBalancer,
			AllocateLoadBalancerNodePorts: new(bool),
			IPFamilyPolicy:                &single,
			IPFamilies:                    []v1.IPFamily{v1.IPv6Protocol},
			Ports:                         []v1.ServicePort{{Protocol: v1.ProtocolTCP, Port: 80}},
		},
	}
}

// distinctValues are the distinct values of m.
func distinctValues(m map[string]string) map[string]bool {
	out := map[string]bool{}
	for _, v := range m {
		out[v] = true
	}
	return out
}
