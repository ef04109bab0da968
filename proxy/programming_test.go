package proxy

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/herald-lb/herald/proxy/iptables"
	"github.com/herald-lb/herald/proxy/rules"
)

// start is when the tests' trackers started.
var start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// clock is a settable time for the tracker and the syncer.
type clock struct{ t time.Time }

func (c *clock) now() time.Time      { return c.t }
func (c *clock) set(d time.Duration) { c.t = start.Add(d) }
func at(d time.Duration) string      { return start.Add(d).Format(time.RFC3339Nano) }
func secs(ds ...time.Duration) (out []float64) {
	for _, d := range ds {
		out = append(out, d.Seconds())
	}
	return out
}

// triggered is a one-endpoint slice of shop/name carrying a trigger time.
func triggered(name, ip, trigger string) *discoveryv1.EndpointSlice {
	sl := slice("shop", name, name+"-1", 8080, "http", corev1.ProtocolTCP, ep{ip, testNode, true})
	if trigger != "" {
		sl.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: trigger}
	}
	return sl
}

// observed are the latency samples so far: their count and sum.
func observed(t *testing.T, m *Metrics) (uint64, float64) {
	t.Helper()
	var d dto.Metric
	if err := m.networkProgramming.(prometheus.Metric).Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetHistogram().GetSampleCount(), d.GetHistogram().GetSampleSum()
}

func wantObserved(t *testing.T, m *Metrics, what string, want ...float64) {
	t.Helper()
	n, sum := observed(t, m)
	wantSum := 0.0
	for _, w := range want {
		wantSum += w
	}
	if n != uint64(len(want)) || math.Abs(sum-wantSum) > 1e-9 {
		t.Errorf("%s: %d samples summing to %gs, want %v", what, n, sum, want)
	}
}

// modes build a syncer on fakes in each proxy mode; fail makes the next
// sync of the family fail, or succeed again.
var modes = []struct {
	name string
	env  func(t *testing.T) (e *env, fail func(bool))
}{
	{"iptables", func(t *testing.T) (*env, func(bool)) {
		e := newEnv(t)
		return e, func(on bool) {
			e.ipt.FailRestore = nil
			if on {
				e.ipt.FailRestore = errors.New("iptables-restore: line 3 failed")
			}
		}
	}},
	{"nftables", func(t *testing.T) (*env, func(bool)) {
		e, k := newNFTEnv(t)
		return e, func(on bool) {
			k.fail = nil
			if on {
				k.fail = errors.New("netlink: transaction refused")
			}
		}
	}},
}

func withClock(e *env) *clock {
	c := &clock{t: start}
	e.tracker.started, e.tracker.now, e.s.now = start, c.now, c.now
	e.tracker.Metrics = e.m
	return c
}

// TestNetworkProgrammingLatency: each endpoint change is observed once,
// from its slice's trigger time to the sync that applied it, in the
// first (full) sync and in partial ones, in both modes; a sync that
// fails observes nothing and the next one that succeeds observes the
// whole wait.
func TestNetworkProgrammingLatency(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			e, fail := mode.env(t)
			c := withClock(e)
			e.tracker.UpdateService(clusterIPService("shop", "web", "10.96.0.10"))
			e.tracker.UpdateService(clusterIPService("shop", "db", "10.96.0.20"))
			e.tracker.UpdateSlice(triggered("web", "10.244.1.20", at(time.Second)))
			e.tracker.UpdateSlice(triggered("db", "10.244.1.30", at(2*time.Second)))
			c.set(3500 * time.Millisecond)
			if res := e.sync(false); !res.Families[0].Full || res.Families[0].Err != nil {
				t.Fatalf("first sync: %+v", res.Families[0])
			}
			wantObserved(t, e.m, "first sync", secs(2500*time.Millisecond, 1500*time.Millisecond)...)

			c.set(10 * time.Second)
			e.tracker.UpdateSlice(triggered("web", "10.244.1.21", at(9750*time.Millisecond)))
			if res := e.sync(false); res.Families[0].Full || res.Families[0].Err != nil {
				t.Fatalf("partial sync: %+v", res.Families[0])
			}
			wantObserved(t, e.m, "after a partial sync", secs(2500*time.Millisecond, 1500*time.Millisecond, 250*time.Millisecond)...)
			if res := e.sync(false); !res.Idle {
				t.Fatalf("sync with no change: %+v", res)
			}
			wantObserved(t, e.m, "after an idle sync", secs(2500*time.Millisecond, 1500*time.Millisecond, 250*time.Millisecond)...)

			e.tracker.UpdateSlice(triggered("db", "10.244.1.31", at(20*time.Second)))
			fail(true)
			c.set(21 * time.Second)
			if res := e.sync(false); res.Families[0].Err == nil {
				t.Fatalf("sync meant to fail: %+v", res.Families[0])
			}
			wantObserved(t, e.m, "after a failed sync", secs(2500*time.Millisecond, 1500*time.Millisecond, 250*time.Millisecond)...)
			fail(false)
			c.set(24 * time.Second)
			if res := e.sync(false); !res.Families[0].Full || res.Families[0].Err != nil {
				t.Fatalf("sync after the failure: %+v", res.Families[0])
			}
			wantObserved(t, e.m, "after the repair", secs(2500*time.Millisecond, 1500*time.Millisecond, 250*time.Millisecond, 4*time.Second)...)
		})
	}
}

// TestNetworkProgrammingLatencyNotMeasured: trigger times from before the
// proxy started (a restart, the initial list's old slices) and malformed
// ones are not observed, the malformed one with a debug line naming the
// slice; the endpoints of each are programmed all the same, and the other
// Services' changes are measured.
func TestNetworkProgrammingLatencyNotMeasured(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			e, _ := mode.env(t)
			c := withClock(e)
			var logs bytes.Buffer
			e.tracker.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			e.tracker.UpdateService(clusterIPService("shop", "old", "10.96.0.10"))
			e.tracker.UpdateService(clusterIPService("shop", "bad", "10.96.0.20"))
			e.tracker.UpdateService(clusterIPService("shop", "web", "10.96.0.30"))
			e.tracker.UpdateService(clusterIPService("shop", "same", "10.96.0.40"))
			e.tracker.UpdateSlice(triggered("old", "10.244.1.10", at(-time.Minute)))
			e.tracker.UpdateSlice(triggered("same", "10.244.1.40", at(0)))
			e.tracker.UpdateSlice(triggered("bad", "10.244.1.20", "yesterday at noon"))
			e.tracker.UpdateSlice(triggered("web", "10.244.1.30", at(time.Second)))
			c.set(2 * time.Second)
			if res := e.sync(false); res.Families[0].Err != nil {
				t.Fatal(res.Families[0].Err)
			}
			wantObserved(t, e.m, "sync", secs(time.Second)...)
			if !strings.Contains(logs.String(), "level=DEBUG") || !strings.Contains(logs.String(), "shop/bad-1") || !strings.Contains(logs.String(), "yesterday at noon") {
				t.Errorf("no debug line naming the malformed annotation:\n%s", logs.String())
			}
			snap := e.tracker.Snapshot()
			for _, svc := range []string{"old", "bad", "web", "same"} {
				if eps := snap.Endpoints[rules.ServicePortName{Namespace: "shop", Name: svc, Port: "http"}]; len(eps) != 1 {
					t.Errorf("%s: endpoints %v, want its one", svc, eps)
				}
			}
		})
	}
}

// TestTriggersOnlyForChanges follows which slice events keep a trigger
// time: one that changes the endpoints; not one that rewrites them as
// they were; a deletion drops the Service's pending ones of that family,
// as kube-proxy's tracker does, since a deleted slice's time is that of
// its last update.
func TestTriggersOnlyForChanges(t *testing.T) {
	tr := NewTracker(testNode, nil)
	tr.started = start
	tr.UpdateSlice(triggered("web", "10.244.1.20", at(time.Second)))
	tr.UpdateSlice(triggered("web", "10.244.1.20", at(2*time.Second)))
	v6 := slice("shop", "web", "web-v6", 8080, "http", corev1.ProtocolTCP, ep{"fd00:244::20", testNode, true})
	v6.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: at(3 * time.Second)}
	tr.UpdateSlice(v6)
	want := []Trigger{
		{Service: rules.ServiceKey{Namespace: "shop", Name: "web"}, Family: rules.IPv4, At: start.Add(time.Second)},
		{Service: rules.ServiceKey{Namespace: "shop", Name: "web"}, Family: rules.IPv6, At: start.Add(3 * time.Second)},
	}
	if got := tr.Snapshot().Triggers; !slices.Equal(got, want) {
		t.Errorf("triggers %v, want %v", got, want)
	}
	if got := tr.Snapshot().Triggers; len(got) != 0 {
		t.Errorf("a second snapshot has triggers %v", got)
	}

	tr.UpdateSlice(triggered("web", "10.244.1.21", at(4*time.Second)))
	v6.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: at(5 * time.Second)}
	v6.Endpoints[0].Addresses = []string{"fd00:244::21"}
	tr.UpdateSlice(v6)
	tr.DeleteSlice(triggered("web", "10.244.1.21", ""))
	want = []Trigger{{Service: rules.ServiceKey{Namespace: "shop", Name: "web"}, Family: rules.IPv6, At: start.Add(5 * time.Second)}}
	if got := tr.Snapshot().Triggers; !slices.Equal(got, want) {
		t.Errorf("after deleting the IPv4 slice: triggers %v, want %v", got, want)
	}
}

// TestNetworkProgrammingLatencyPerFamily: in a dual-stack proxy each
// slice's change is observed when its own family's rules are applied, so
// one family failing delays only its changes; a single-stack proxy
// drops the other family's, never observing what it does not program.
func TestNetworkProgrammingLatencyPerFamily(t *testing.T) {
	v4, v6 := iptables.NewFake(), iptables.NewFake()
	m := NewMetrics()
	tr := NewTracker(testNode, nil)
	c := &clock{t: start}
	tr.started, tr.now = start, c.now
	s := NewSyncer(Config{NodeName: testNode, MasqueradeBit: 14}, tr,
		[]Backend{IPTablesBackend(rules.IPv4, v4, 0), IPTablesBackend(rules.IPv6, v6, 0)}, nil, nil, nil, m, nil)
	s.now = c.now
	svc := clusterIPService("shop", "web", "10.96.0.10")
	svc.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:96::10"}
	tr.UpdateService(svc)
	tr.UpdateSlice(triggered("web", "10.244.1.20", at(time.Second)))
	sl6 := slice("shop", "web", "web-v6", 8080, "http", corev1.ProtocolTCP, ep{"fd00:244:1::20", testNode, true})
	sl6.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: at(2 * time.Second)}
	tr.UpdateSlice(sl6)
	v6.FailRestore = errors.New("ip6tables-restore: no IPv6")
	c.set(3 * time.Second)
	s.Sync(context.Background(), false)
	wantObserved(t, m, "IPv6 failed", secs(2*time.Second)...)
	v6.FailRestore = nil
	c.set(7 * time.Second)
	s.Sync(context.Background(), false)
	wantObserved(t, m, "IPv6 repaired", secs(2*time.Second, 5*time.Second)...)

	e := newEnv(t) // IPv4 only
	withClock(e)
	e.tracker.UpdateService(svc)
	e.tracker.UpdateSlice(sl6)
	e.sync(false)
	e.tracker.UpdateSlice(triggered("web", "10.244.1.20", at(time.Second)))
	e.s.now = func() time.Time { return start.Add(4 * time.Second) }
	e.sync(false)
	wantObserved(t, e.m, "IPv4-only proxy", secs(3*time.Second)...)
}

// TestChangeMetrics: kube-proxy's change counters. Every Service and
// EndpointSlice event counts in _total; _pending counts the Services
// and slice events that changed the rules since the last sync began; the
// last queued timestamp is when a change last asked for a sync.
func TestChangeMetrics(t *testing.T) {
	e := newEnv(t)
	c := withClock(e)
	val := func(g prometheus.Collector) float64 { return testutil.ToFloat64(g) }
	check := func(what string, svcTotal, svcPending, epTotal, epPending float64) {
		t.Helper()
		if a, b, x, y := val(e.m.serviceChanges), val(e.m.servicePending), val(e.m.endpointChanges), val(e.m.endpointPending); a != svcTotal || b != svcPending || x != epTotal || y != epPending {
			t.Errorf("%s: services %v total %v pending, endpoints %v total %v pending; want %v %v %v %v", what, a, b, x, y, svcTotal, svcPending, epTotal, epPending)
		}
	}
	c.set(5 * time.Second)
	e.tracker.UpdateService(clusterIPService("shop", "web", "10.96.0.10"))
	e.tracker.UpdateService(clusterIPService("shop", "web", "10.96.0.10")) // as it was
	e.tracker.UpdateService(clusterIPService("shop", "db", "10.96.0.20"))
	e.tracker.UpdateSlice(triggered("web", "10.244.1.20", ""))
	c.set(6 * time.Second)
	e.tracker.UpdateSlice(triggered("web", "10.244.1.20", "")) // as it was
	check("before the sync", 3, 2, 2, 1)
	if got := val(e.m.lastQueued); got != float64(start.Add(5*time.Second).Unix()) {
		t.Errorf("last queued %v, want the last change's time %v", got, start.Add(5*time.Second).Unix())
	}
	e.sync(false)
	check("after the sync", 3, 0, 2, 0)
	e.tracker.DeleteService("shop", "db")
	e.tracker.DeleteSlice(triggered("web", "10.244.1.20", ""))
	check("after deletions", 4, 1, 3, 1)
}

// TestSyncFailureCounters: a failed nftables transaction counts in
// kube-proxy's nftables counter, not as an iptables-restore failure.
func TestSyncFailureCounters(t *testing.T) {
	e, k := newNFTEnv(t)
	e.addWebAndDB()
	k.fail = errors.New("netlink: transaction refused")
	e.sync(false)
	if a, b, n := testutil.ToFloat64(e.m.restoreFailures), testutil.ToFloat64(e.m.partialFailures), testutil.ToFloat64(e.m.nftFailures); a != 0 || b != 0 || n != 1 {
		t.Errorf("restore failures %v, partial %v, nftables %v; want 0 0 1", a, b, n)
	}
}

// TestProgrammingBuckets: kube-proxy's buckets, so its dashboards' SLO
// thresholds (1 s, 2 s, 5 s...) are bucket bounds here too.
func TestProgrammingBuckets(t *testing.T) {
	b := programmingBuckets
	if len(b) != 80 || b[0] != 0.25 || b[1] != 0.5 || b[2] != 1 || b[60] != 59 || b[61] != 60 || b[72] != 115 || b[73] != 120 || b[79] != 300 {
		t.Errorf("buckets %v", b)
	}
	if !slices.IsSorted(b) || len(slices.Compact(slices.Clone(b))) != len(b) {
		t.Errorf("buckets not strictly increasing: %v", b)
	}
}
