package proxy

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/herald-lb/herald/proxy/healthcheck"
	"github.com/herald-lb/herald/proxy/iptables"
	"github.com/herald-lb/herald/proxy/rules"
)

func (e *env) addWebAndDB() {
	e.tracker.UpdateService(clusterIPService("shop", "web", "10.96.0.10"))
	e.tracker.UpdateSlice(slice("shop", "web", "web-1", 8080, "http", corev1.ProtocolTCP,
		ep{"10.244.1.20", testNode, true}, ep{"10.244.2.20", otherNode, true}))
	e.tracker.UpdateService(clusterIPService("shop", "db", "10.96.0.20"))
	e.tracker.UpdateSlice(slice("shop", "db", "db-1", 5432, "http", corev1.ProtocolTCP, ep{"10.244.2.30", otherNode, true}))
}

// jumpsIn lists the targets of the herald jumps in a built-in chain, in
// order, from the fake's table.
func jumpsIn(ipt *iptables.Fake, table, chain string) []string {
	var out []string
	for _, r := range ipt.Rules(table, chain) {
		f := strings.Fields(r)
		if i := slices.Index(f, "-j"); i >= 0 && i+1 < len(f) && strings.HasPrefix(f[i+1], "HERALD-") {
			out = append(out, f[i+1])
		}
	}
	return out
}

func wantJumps(table, chain string) []string {
	var out []string
	for _, j := range rules.Jumps() {
		if j.Table == table && j.Chain == chain {
			out = append(out, j.Target)
		}
	}
	return out
}

func TestSyncFirstFullThenPartial(t *testing.T) {
	e := newEnv(t)
	e.addWebAndDB()

	res := e.sync(false)
	if len(res.Families) != 1 || !res.Families[0].Full || res.Families[0].Reason != "first sync" || res.Families[0].Err != nil || res.Retry {
		t.Fatalf("first sync: %+v", res)
	}
	if len(e.ipt.Restores) != 1 {
		t.Fatalf("%d restores, want one per family per sync", len(e.ipt.Restores))
	}
	web, db := svcChain("shop", "web", "http", rules.TCP), svcChain("shop", "db", "http", rules.TCP)
	if d := declared(e.lastRestore()); !d[web] || !d[db] {
		t.Errorf("full sync does not declare both service chains:\n%s", e.lastRestore())
	}
	for _, table := range []string{"nat", "filter"} {
		for _, chain := range []string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"} {
			if got, want := jumpsIn(e.ipt, table, chain), wantJumps(table, chain); !slices.Equal(got, want) {
				t.Errorf("%s/%s jumps %v, want %v", table, chain, got, want)
			}
		}
	}
	for _, table := range rules.CanaryTables {
		if ok, _ := e.ipt.ChainExists(table, rules.CanaryChain); !ok {
			t.Errorf("no canary in %s", table)
		}
	}
	if !e.s.Synced() {
		t.Error("not Synced after a successful sync")
	}

	// Nothing changed: nothing is written.
	if res := e.sync(false); !res.Idle || len(e.ipt.Restores) != 1 {
		t.Fatalf("idle sync wrote: %+v, %d restores", res, len(e.ipt.Restores))
	}

	// One endpoint of web goes: a partial sync rewrites web's chains only.
	e.tracker.UpdateSlice(slice("shop", "web", "web-1", 8080, "http", corev1.ProtocolTCP, ep{"10.244.1.20", testNode, true}))
	res = e.sync(false)
	if res.Families[0].Full || res.Families[0].Reason != "" || res.Families[0].Err != nil {
		t.Fatalf("change sync: %+v", res.Families[0])
	}
	d := declared(e.lastRestore())
	if !d[web] || d[db] {
		t.Errorf("partial sync declares web %v (want true), db %v (want false)", d[web], d[db])
	}
	// The dispatch chain is the same (web keeps its ClusterIP): it is
	// left out, as is every other chain that would be written unchanged.
	if d[rules.ChainServices] {
		t.Errorf("partial sync rewrites the unchanged dispatch chain:\n%s", e.lastRestore())
	}
	if len(e.lastRestore()) >= len(e.ipt.Restores[0]) {
		t.Errorf("partial restore (%d bytes) is not smaller than the full one (%d)", len(e.lastRestore()), len(e.ipt.Restores[0]))
	}

	// The tables after the partial sync are exactly what a full sync of
	// the same model writes on a fresh node.
	fresh := newEnv(t)
	fresh.addWebAndDB()
	fresh.tracker.UpdateSlice(slice("shop", "web", "web-1", 8080, "http", corev1.ProtocolTCP, ep{"10.244.1.20", testNode, true}))
	fresh.sync(false)
	for _, table := range []string{"nat", "filter"} {
		if got, want := e.save(table), fresh.save(table); got != want {
			t.Errorf("%s after partial sync differs from a full sync:\n%s\nwant:\n%s", table, got, want)
		}
	}

	// A deleted Service's chains go in the next partial sync.
	e.tracker.DeleteService("shop", "db")
	e.tracker.DeleteSlice(slice("shop", "db", "db-1", 5432, "http", corev1.ProtocolTCP))
	if res := e.sync(false); res.Families[0].Full {
		t.Fatal("deletion made a full sync")
	}
	if strings.Contains(e.save("nat"), db) {
		t.Errorf("chain %s of the deleted Service is still there", db)
	}
	if !declared(e.lastRestore())[rules.ChainServices] {
		t.Error("a deleted Service's dispatch rule stays: the dispatch chain was not rewritten")
	}
}

func TestSyncRestoreFailureThenFull(t *testing.T) {
	e := newEnv(t)
	e.addWebAndDB()
	e.ipt.FailRestore = errors.New("iptables-restore: line 7 failed")
	res := e.sync(false)
	if res.Families[0].Err == nil || !res.Retry || e.s.Synced() {
		t.Fatalf("failed first sync: %+v, synced %v", res, e.s.Synced())
	}
	if got := testutil.ToFloat64(e.m.restoreFailures); got != 1 {
		t.Errorf("restore failures %v, want 1", got)
	}
	if got := testutil.ToFloat64(e.m.partialFailures); got != 0 {
		t.Errorf("partial failures %v, want 0 (it was a full sync)", got)
	}
	e.ipt.FailRestore = nil
	// Nothing changed, yet the failed family must be written in full.
	res = e.sync(false)
	if res.Idle || !res.Families[0].Full || res.Families[0].Err != nil || res.Families[0].Reason != "first sync" {
		t.Fatalf("sync after failure: %+v", res)
	}

	// A partial sync that fails makes the next one full.
	e.tracker.UpdateSlice(slice("shop", "db", "db-1", 5432, "http", corev1.ProtocolTCP, ep{"10.244.2.31", otherNode, true}))
	e.ipt.FailRestore = errors.New("boom")
	if res := e.sync(false); res.Families[0].Full || res.Families[0].Err == nil {
		t.Fatalf("want a failed partial sync: %+v", res.Families[0])
	}
	if got := testutil.ToFloat64(e.m.partialFailures); got != 1 {
		t.Errorf("partial failures %v, want 1", got)
	}
	if got := testutil.ToFloat64(e.m.restoreFailures); got != 2 {
		t.Errorf("restore failures %v, want 2", got)
	}
	e.ipt.FailRestore = nil
	res = e.sync(false)
	if !res.Families[0].Full || res.Families[0].Err != nil || res.Families[0].Reason != "the previous restore failed" {
		t.Fatalf("want a full sync after the partial failure: %+v", res.Families[0])
	}
	// The change that failed to apply is in the kernel now.
	if !strings.Contains(e.save("nat"), "10.244.2.31:5432") {
		t.Error("the endpoint whose partial sync failed was not programmed by the full sync")
	}
}

func TestSyncCanaryLoss(t *testing.T) {
	e := newEnv(t)
	e.addWebAndDB()
	e.sync(false)
	// Someone flushes the tables (iptables -t nat -F; -X): the canary goes
	// with our chains.
	for _, table := range rules.CanaryTables {
		_ = e.ipt.DeleteChain(table, rules.CanaryChain)
	}
	e.tracker.UpdateSlice(slice("shop", "db", "db-1", 5432, "http", corev1.ProtocolTCP, ep{"10.244.2.31", otherNode, true}))
	res := e.sync(false)
	if !res.Families[0].Full || !strings.Contains(res.Families[0].Reason, "canary") {
		t.Fatalf("canary loss: %+v", res.Families[0])
	}
	for _, table := range rules.CanaryTables {
		if ok, _ := e.ipt.ChainExists(table, rules.CanaryChain); !ok {
			t.Errorf("canary not recreated in %s", table)
		}
	}
	// With the canary back, the next change is partial again.
	e.tracker.UpdateSlice(slice("shop", "db", "db-1", 5432, "http", corev1.ProtocolTCP, ep{"10.244.2.32", otherNode, true}))
	if res := e.sync(false); res.Families[0].Full {
		t.Fatalf("after the repair: %+v", res.Families[0])
	}
}

func TestSyncPeriodicAndNodeChangeAreFull(t *testing.T) {
	e := newEnv(t)
	clock := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	e.s.now = func() time.Time { return clock }
	e.addWebAndDB()
	e.sync(false)
	// A periodic sync soon after a full one only checks the canary.
	clock = clock.Add(30 * time.Second)
	if res := e.sync(true); !res.Idle {
		t.Fatalf("periodic sync 30s after a full one: %+v", res)
	}
	// Once the last full sync is FullSyncPeriod old, a periodic sync is
	// full.
	clock = clock.Add(DefaultFullSyncPeriod)
	if res := e.sync(true); res.Idle || !res.Families[0].Full || res.Families[0].Reason != "periodic full resync" {
		t.Fatalf("periodic after an hour: %+v", res)
	}
	clock = clock.Add(30 * time.Second)
	if res := e.sync(true); !res.Idle {
		t.Fatalf("periodic sync 30s after the hourly full one: %+v", res)
	}
	// A heartbeat (same addresses) changes nothing.
	n := node(testNode, testNodeIP.String())
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	kicks := e.kicks
	e.tracker.UpdateNode(n)
	if e.kicks != kicks {
		t.Error("a node heartbeat asked for a sync")
	}
	if res := e.sync(false); !res.Idle {
		t.Fatalf("after a heartbeat: %+v", res)
	}
	e.tracker.UpdateNode(node(testNode, testNodeIP.String(), "198.51.100.10"))
	if res := e.sync(false); !res.Families[0].Full || res.Families[0].Reason != "the node's addresses, pod CIDRs or zone changed" {
		t.Fatalf("node change: %+v", res.Families[0])
	}
}

func TestSyncDeletesChainsOfAnEarlierRun(t *testing.T) {
	e := newEnv(t)
	old := "HERALD-SVC-AAAAAAAAAAAAAAAA"
	if err := e.ipt.Restore(context.Background(), []byte("*nat\n:"+old+" - [0:0]\n-A "+old+" -j DNAT --to-destination 10.244.9.9:80\nCOMMIT\n")); err != nil {
		t.Fatal(err)
	}
	e.addWebAndDB()
	e.sync(false)
	if strings.Contains(e.save("nat"), old) {
		t.Errorf("stale chain %s of an earlier run survived the first sync", old)
	}
}

func TestHousekeepingRepairsJumpOrder(t *testing.T) {
	ipt := iptables.NewFake()
	ctx := context.Background()
	// A rule of someone else's, which must stay.
	if err := ipt.EnsureRule(false, "filter", "INPUT", "-p", "tcp", "--dport", "22", "-j", "ACCEPT"); err != nil {
		t.Fatal(err)
	}
	if err := Housekeeping(ctx, ipt); err != nil {
		t.Fatal(err)
	}
	want := wantJumps("filter", "INPUT")
	if got := jumpsIn(ipt, "filter", "INPUT"); !slices.Equal(got, want) {
		t.Fatalf("INPUT jumps %v, want %v", got, want)
	}
	// Someone deletes the second jump; EnsureRule alone would put it back
	// on top, before the firewall.
	j := rules.Jumps()[1]
	if err := ipt.DeleteRule(j.Table, j.Chain, j.Args()...); err != nil {
		t.Fatal(err)
	}
	if err := Housekeeping(ctx, ipt); err != nil {
		t.Fatal(err)
	}
	if got := jumpsIn(ipt, "filter", "INPUT"); !slices.Equal(got, want) {
		t.Errorf("after repair INPUT jumps %v, want %v", got, want)
	}
	rs := ipt.Rules("filter", "INPUT")
	if len(rs) != len(want)+1 || rs[len(rs)-1] != "-p tcp --dport 22 -j ACCEPT" {
		t.Errorf("INPUT after repair: %q", rs)
	}
	// Idempotent: a second run changes nothing.
	before := ipt.Rules("filter", "FORWARD")
	if err := Housekeeping(ctx, ipt); err != nil {
		t.Fatal(err)
	}
	if after := ipt.Rules("filter", "FORWARD"); !slices.Equal(before, after) {
		t.Errorf("housekeeping is not idempotent: %q -> %q", before, after)
	}
}

func TestCleanup(t *testing.T) {
	e := newEnv(t)
	e.addWebAndDB()
	ctx := context.Background()
	// Someone else's chain and rules, which must survive.
	if err := e.ipt.Restore(ctx, []byte("*nat\n:OTHER - [0:0]\n-A OTHER -j RETURN\nCOMMIT\n")); err != nil {
		t.Fatal(err)
	}
	if err := e.ipt.EnsureRule(false, "nat", "PREROUTING", "-j", "OTHER"); err != nil {
		t.Fatal(err)
	}
	e.sync(false)
	// A jump in a form an older version may have used.
	if err := e.ipt.EnsureRule(false, "nat", "OUTPUT", "-m", "comment", "--comment", "old herald", "-j", rules.ChainServices); err != nil {
		t.Fatal(err)
	}
	if err := Cleanup(ctx, e.ipt); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"nat", "filter", "mangle"} {
		if s := e.save(table); strings.Contains(s, "HERALD") {
			t.Errorf("%s still has herald rules or chains:\n%s", table, s)
		}
	}
	if got := e.ipt.Rules("nat", "PREROUTING"); !slices.Equal(got, []string{"-j OTHER"}) {
		t.Errorf("PREROUTING after cleanup: %q", got)
	}
	if got := e.ipt.Rules("nat", "OTHER"); !slices.Equal(got, []string{"-j RETURN"}) {
		t.Errorf("OTHER after cleanup: %q", got)
	}
	// Cleaning a clean node is fine.
	if err := Cleanup(ctx, e.ipt); err != nil {
		t.Errorf("second cleanup: %v", err)
	}
}

func TestBuiltinJumpsUnquote(t *testing.T) {
	save := "*nat\n:PREROUTING ACCEPT [0:0]\n" +
		`-A PREROUTING -m comment --comment "herald service portals" -m comment --comment "a \"q\"" -j HERALD-SERVICES` + "\nCOMMIT\n"
	jumps := builtinJumps([]byte(save))["PREROUTING"]
	if len(jumps) != 1 || jumps[0].target != "HERALD-SERVICES" {
		t.Fatalf("jumps %+v", jumps)
	}
	got := jumps[0].args
	want := []string{"-m", "comment", "--comment", "herald service portals", "-m", "comment", "--comment", `a "q"`, "-j", "HERALD-SERVICES"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

func lbLocal(ns, name, clusterIP, lbIP string, hcnp int32) *corev1.Service {
	s := clusterIPService(ns, name, clusterIP, corev1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080})
	s.Spec.Type = corev1.ServiceTypeLoadBalancer
	s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	s.Spec.HealthCheckNodePort = hcnp
	s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: lbIP}}
	return s
}

func TestSyncFeedsHealth(t *testing.T) {
	e := newEnv(t)
	e.health.Timeout = 0
	e.health.QueuedUpdate()
	if e.health.Healthy() {
		// With a zero timeout, a queued update makes it unhealthy at once
		// unless the clock has not moved; either way Updated must clear it.
		t.Log("queued update within the timeout")
	}
	e.tracker.UpdateService(lbLocal("shop", "web", "10.96.0.10", "198.51.100.200", 31000))
	e.tracker.UpdateSlice(slice("shop", "web", "web-1", 8080, "http", corev1.ProtocolTCP,
		ep{"10.244.1.20", testNode, true}, ep{"10.244.2.20", otherNode, true}))
	e.tracker.UpdateService(lbLocal("shop", "api", "10.96.0.11", "198.51.100.201", 31001))
	e.tracker.UpdateSlice(slice("shop", "api", "api-1", 8080, "http", corev1.ProtocolTCP, ep{"10.244.2.21", otherNode, true}))
	e.sync(false)
	web, api := healthcheck.ServiceKey{Namespace: "shop", Name: "web"}, healthcheck.ServiceKey{Namespace: "shop", Name: "api"}
	if e.hc.ports[web] != 31000 || e.hc.ports[api] != 31001 || len(e.hc.ports) != 2 {
		t.Errorf("ports %v", e.hc.ports)
	}
	if e.hc.counts[web] != 1 || e.hc.counts[api] != 0 {
		t.Errorf("local endpoints %v, want web 1 api 0", e.hc.counts)
	}
	if !e.health.Healthy() {
		t.Error("proxy health not updated by the sync")
	}
	if got := testutil.ToFloat64(e.m.noLocalEndpoints.WithLabelValues("external")); got != 1 {
		t.Errorf("no_local_endpoints{external} %v, want 1 (api)", got)
	}
	// The local pod goes: web has no local endpoint here any more.
	e.tracker.UpdateSlice(slice("shop", "web", "web-1", 8080, "http", corev1.ProtocolTCP, ep{"10.244.2.20", otherNode, true}))
	e.sync(false)
	if e.hc.counts[web] != 0 {
		t.Errorf("web local endpoints %d after its local pod went", e.hc.counts[web])
	}
	// The Service stops being Local: its server goes.
	s := lbLocal("shop", "api", "10.96.0.11", "198.51.100.201", 0)
	s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	e.tracker.UpdateService(s)
	e.sync(false)
	if _, ok := e.hc.ports[api]; ok || len(e.hc.ports) != 1 {
		t.Errorf("ports %v after api became Cluster", e.hc.ports)
	}
}

func TestSyncMetrics(t *testing.T) {
	e := newEnv(t)
	e.addWebAndDB()
	res := e.sync(false)
	e.tracker.UpdateSlice(slice("shop", "db", "db-1", 5432, "http", corev1.ProtocolTCP, ep{"10.244.2.31", otherNode, true}))
	e.sync(false)
	e.sync(false) // idle: not a sync
	if got := testutil.CollectAndCount(e.m.syncDuration); got != 1 {
		t.Fatalf("%d histograms", got)
	}
	count := func(name string) uint64 {
		mfs, err := e.m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				return mf.GetMetric()[0].GetHistogram().GetSampleCount()
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
	if n := count("herald_proxy_sync_proxy_rules_duration_seconds"); n != 2 {
		t.Errorf("sync duration samples %d, want 2", n)
	}
	if n := count("herald_proxy_sync_full_proxy_rules_duration_seconds"); n != 1 {
		t.Errorf("full samples %d, want 1", n)
	}
	if n := count("herald_proxy_sync_partial_proxy_rules_duration_seconds"); n != 1 {
		t.Errorf("partial samples %d, want 1", n)
	}
	if got := testutil.ToFloat64(e.m.rules.WithLabelValues("nat")); got != float64(res.Families[0].Stats.NATRulesTotal) || got == 0 {
		t.Errorf("nat rules %v, first sync had %d", got, res.Families[0].Stats.NATRulesTotal)
	}
	if got := testutil.ToFloat64(e.m.rules.WithLabelValues("filter")); got != float64(res.Families[0].Stats.FilterRules) {
		t.Errorf("filter rules %v", got)
	}
	if got := testutil.ToFloat64(e.m.lastSync); got < 1e9 {
		t.Errorf("last sync timestamp %v", got)
	}
	want := []string{
		"herald_proxy_sync_proxy_rules_iptables_restore_failures_total",
		"herald_proxy_sync_proxy_rules_iptables_partial_restore_failures_total",
		"herald_proxy_sync_proxy_rules_last_timestamp_seconds",
		"herald_proxy_sync_proxy_rules_iptables_total",
	}
	mfs, _ := e.m.Registry.Gather()
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	for _, w := range want {
		if !slices.Contains(names, w) {
			t.Errorf("metric %s missing", w)
		}
	}
}

func TestSyncReportsProblemsOnce(t *testing.T) {
	e := newEnv(t)
	var got []string
	e.s.Report = func(p rules.Problem) { got = append(got, p.Error()) }
	bad := clusterIPService("shop", "bad", "10.96.0.30", corev1.ServicePort{Name: "x", Protocol: "ICMP", Port: 1})
	e.tracker.UpdateService(bad)
	e.addWebAndDB()
	e.sync(false)
	e.sync(true)
	if len(got) != 1 || !strings.Contains(got[0], "shop/bad:x") || !strings.Contains(got[0], "protocol") {
		t.Fatalf("reported %q", got)
	}
	// The good Services are programmed anyway.
	if !strings.Contains(e.save("nat"), "10.244.2.30:5432") {
		t.Error("a bad Service kept the others from being programmed")
	}
}

func TestSyncDualStack(t *testing.T) {
	v4, v6 := iptables.NewFake(), iptables.NewFake()
	tr := NewTracker(testNode, nil)
	s := NewSyncer(Config{NodeName: testNode, MasqueradeBit: 14}, tr,
		[]Backend{IPTablesBackend(rules.IPv4, v4, 0), IPTablesBackend(rules.IPv6, v6, 0)}, nil, nil, nil, nil, nil)
	svc := clusterIPService("shop", "web", "10.96.0.10")
	svc.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:96::10"}
	tr.UpdateService(svc)
	tr.UpdateSlice(slice("shop", "web", "web-v4", 8080, "http", corev1.ProtocolTCP, ep{"10.244.1.20", testNode, true}))
	tr.UpdateSlice(slice("shop", "web", "web-v6", 8080, "http", corev1.ProtocolTCP, ep{"fd00:244:1::20", testNode, true}))
	v6.FailRestore = errors.New("ip6tables-restore: no IPv6")
	res := s.Sync(context.Background(), false)
	if res.Families[0].Err != nil || res.Families[1].Err == nil || !res.Retry {
		t.Fatalf("%+v", res)
	}
	if len(v4.Restores) != 1 || len(v6.Restores) != 1 {
		t.Errorf("restores v4 %d v6 %d, want one each", len(v4.Restores), len(v6.Restores))
	}
	if s.Synced() {
		t.Error("Synced although IPv6 failed")
	}
	v6.FailRestore = nil
	res = s.Sync(context.Background(), false)
	// IPv4 had nothing to do but IPv6 is retried in full.
	if res.Families[0].Full || !res.Families[1].Full || res.Families[1].Err != nil {
		t.Fatalf("%+v", res)
	}
	if !strings.Contains(string(v6.Restores[1]), "[fd00:244:1::20]:8080") || strings.Contains(string(v6.Restores[1]), "10.244.1.20") {
		t.Errorf("IPv6 restore:\n%s", v6.Restores[1])
	}
	if !s.Synced() {
		t.Error("not Synced after both families succeeded")
	}
}

func TestNodeConfigFallsBackToPodCIDRs(t *testing.T) {
	s := NewSyncer(Config{NodeName: testNode, MasqueradeBit: 14}, NewTracker(testNode, nil), nil, nil, nil, nil, nil, nil)
	nc := s.nodeConfig(NodeInfo{PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}})
	if len(nc.ClusterCIDRs) != 1 || nc.ClusterCIDRs[0].String() != "10.244.1.0/24" || nc.MasqueradeMark != 0x4000 {
		t.Errorf("%+v", nc)
	}
	s.cfg.ClusterCIDRs = []netip.Prefix{testPodCIDR}
	if nc := s.nodeConfig(NodeInfo{PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}}); nc.ClusterCIDRs[0] != testPodCIDR {
		t.Errorf("--cluster-cidr does not win: %+v", nc)
	}
}

func TestSyncReportsFamilyProblemsOnce(t *testing.T) {
	v4, v6 := iptables.NewFake(), iptables.NewFake()
	tr := NewTracker(testNode, nil)
	s := NewSyncer(Config{NodeName: testNode, MasqueradeBit: 14}, tr,
		[]Backend{IPTablesBackend(rules.IPv4, v4, 0), IPTablesBackend(rules.IPv6, v6, 0)}, nil, nil, nil, nil, nil)
	var got []string
	s.Report = func(p rules.Problem) { got = append(got, p.Error()) }
	// Two IPv6 cluster IPs: a problem of the IPv6 render only.
	svc := clusterIPService("shop", "web", "10.96.0.10")
	svc.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:96::10", "fd00:96::11"}
	tr.UpdateService(svc)
	for range 3 {
		s.Sync(context.Background(), true)
	}
	if len(got) != 1 || !strings.Contains(got[0], "clusterIPs[2]") {
		t.Errorf("reported %q, want the IPv6 problem once", got)
	}
}

// TestProgrammed: a LoadBalancer VIP counts as programmed once a restore
// holding it succeeded in its family, not before, not after a failed
// one; a family without a successful sync is not handled; the VIP goes
// when the Service does; OnProgrammed is told of each change only.
func TestProgrammed(t *testing.T) {
	v4, v6 := iptables.NewFake(), iptables.NewFake()
	tr := NewTracker(testNode, nil)
	s := NewSyncer(Config{NodeName: testNode, MasqueradeBit: 14}, tr,
		[]Backend{IPTablesBackend(rules.IPv4, v4, 0), IPTablesBackend(rules.IPv6, v6, 0)}, nil, nil, nil, nil, nil)
	told := 0
	s.OnProgrammed = func() { told++ }
	vip, vip6 := netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("2001:db8::7")
	if h, _ := s.Programmed(vip); h {
		t.Fatal("handled before any sync")
	}
	svc := clusterIPService("shop", "web", "10.96.0.10")
	svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	svc.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:96::10"}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: vip.String()}, {IP: vip6.String()}}
	v6.FailRestore = errors.New("ip6tables-restore: boom")
	v4.FailRestore = errors.New("iptables-restore: boom")
	tr.UpdateService(svc)
	s.Sync(context.Background(), false)
	if h, ok := s.Programmed(vip); h || ok || told != 0 {
		t.Fatalf("after failed restores: handled %v programmed %v told %d", h, ok, told)
	}
	v4.FailRestore = nil
	s.Sync(context.Background(), false)
	if h, ok := s.Programmed(vip); !h || !ok || told != 1 {
		t.Fatalf("IPv4 restored: handled %v programmed %v told %d", h, ok, told)
	}
	if h, _ := s.Programmed(vip6); h {
		t.Error("IPv6 handled while its restores fail")
	}
	if _, ok := s.Programmed(netip.MustParseAddr("203.0.113.8")); ok {
		t.Error("an address of no Service is programmed")
	}
	v6.FailRestore = nil
	s.Sync(context.Background(), false)
	if h, ok := s.Programmed(vip6); !h || !ok || told != 2 {
		t.Fatalf("IPv6 restored: handled %v programmed %v told %d", h, ok, told)
	}
	s.Sync(context.Background(), true)
	if told != 2 {
		t.Errorf("told %d times, want no call without a change", told)
	}
	tr.DeleteService("shop", "web")
	s.Sync(context.Background(), false)
	if h, ok := s.Programmed(vip); !h || ok || told != 3 {
		t.Errorf("Service deleted: handled %v programmed %v told %d", h, ok, told)
	}
}
