package rules_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/herald-lb/herald/proxy/internal/tracer"
	"github.com/herald-lb/herald/proxy/rules"
)

type state struct {
	svcs []rules.Service
	eps  map[rules.ServicePortName][]rules.Endpoint
}

func svcNamed(l lab, name string, cip string, np int) rules.Service {
	s := l.web()
	s.Name, s.ClusterIPs, s.NodePort, s.LoadBalancerIngress = name, []netip.Addr{netip.MustParseAddr(cip)}, np, nil
	return s
}

// states returns a before/after pair touching every kind of change: an
// untouched Service, changed endpoints, a Service losing all endpoints, one
// gaining them, a deleted one and a new one.
func states(l lab) (before, after state, changed map[rules.ServiceKey]bool) {
	a := svcNamed(l, "a", "10.96.1.1", 0)
	b := svcNamed(l, "b", "10.96.1.2", 30002)
	b.ExternalTrafficPolicy, b.SessionAffinity = rules.PolicyLocal, rules.AffinityClientIP
	b.LoadBalancerIngress = []rules.Ingress{{IP: l.lbIP}}
	b.LoadBalancerSourceRanges = []netip.Prefix{l.clientNet}
	c := svcNamed(l, "c", "10.96.1.3", 30003)
	d := svcNamed(l, "d", "10.96.1.4", 0)
	e := svcNamed(l, "e", "10.96.1.5", 0)
	f := svcNamed(l, "f", "10.96.1.6", 30006)
	ip := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	before = state{
		svcs: []rules.Service{a, b, c, d, e},
		eps: map[rules.ServicePortName][]rules.Endpoint{
			a.ID(): {ready(ip("10.244.1.1"), nodeA)},
			b.ID(): {ready(ip("10.244.1.2"), nodeA), ready(ip("10.244.2.2"), nodeB)},
			c.ID(): {ready(ip("10.244.2.3"), nodeB)},
			d.ID(): {ready(ip("10.244.2.4"), nodeB)},
		},
	}
	after = state{
		svcs: []rules.Service{a, b, c, e, f}, // d deleted, f new
		eps: map[rules.ServicePortName][]rules.Endpoint{
			a.ID(): {ready(ip("10.244.1.1"), nodeA)},
			b.ID(): {ready(ip("10.244.2.2"), nodeB), ready(ip("10.244.2.9"), nodeB)}, // local one gone
			// c lost its endpoints
			e.ID(): {ready(ip("10.244.1.55"), nodeA)}, // e gained one
			f.ID(): {ready(ip("10.244.2.6"), nodeB)},
		},
	}
	changed = map[rules.ServiceKey]bool{}
	for _, s := range []rules.Service{b, c, d, e, f} {
		changed[s.ID().Key()] = true
	}
	return before, after, changed
}

func parseDump(t *testing.T, docs ...string) string {
	t.Helper()
	tr, err := tracer.Parse(docs...)
	if err != nil {
		t.Fatal(err)
	}
	return tr.Dump()
}

func TestPartialRenderEqualsFullRender(t *testing.T) {
	l := lab4
	before, after, changed := states(l)
	node := l.node()
	full1 := rules.Render(l.family, before.svcs, before.eps, node)
	full2 := rules.Render(l.family, after.svcs, after.eps, node)
	partial := rules.RenderWith(l.family, after.svcs, after.eps, node, rules.Options{Changed: changed, Existing: full1.NATChains})

	if !partial.Partial || full2.Partial {
		t.Fatalf("Partial flags wrong")
	}
	// The kernel state after full1 + partial is exactly that of full2 alone.
	wantDump := parseDump(t, string(full2.Bytes()), rules.JumpsText())
	got := parseDump(t, string(full1.Bytes()), rules.JumpsText(), string(partial.Bytes()))
	if got != wantDump {
		t.Fatalf("partial sync diverges from full sync\n--- full1+partial\n%s\n--- full2\n%s", got, wantDump)
	}
	// A full render given the existing chains also cleans up.
	full2x := rules.RenderWith(l.family, after.svcs, after.eps, node, rules.Options{Existing: full1.NATChains})
	if got := parseDump(t, string(full1.Bytes()), rules.JumpsText(), string(full2x.Bytes())); got != wantDump {
		t.Fatalf("full sync over old state leaves stale chains\n%s", got)
	}

	// The untouched Service's chains are not in the partial input.
	aChain := rules.PrefixService + rules.ChainSuffix(after.svcs[0].ID(), rules.TCP)
	if strings.Contains(string(partial.NAT), ":"+aChain) || !strings.Contains(string(full2.NAT), ":"+aChain) {
		t.Errorf("partial render rewrote unchanged %s (or full render lacks it)", aChain)
	}
	if !strings.Contains(string(partial.NAT), "-j "+aChain) {
		t.Errorf("partial render lost the dispatch rule for %s", aChain)
	}
	if len(partial.Deleted) == 0 || !slices.Equal(partial.Deleted, full2x.Deleted) {
		t.Errorf("deleted chains: partial %v, full %v", partial.Deleted, full2x.Deleted)
	}
	for _, c := range partial.Deleted {
		if slices.Contains(full2.NATChains, c) {
			t.Errorf("deleted chain %s is still in use", c)
		}
	}
	if !slices.Equal(sorted(partial.NATChains), sorted(full2.NATChains)) {
		t.Errorf("NATChains differ: partial %v full %v", partial.NATChains, full2.NATChains)
	}
	if partial.Stats.NATRules >= full2.Stats.NATRules || partial.Stats.NATRulesTotal != full2.Stats.NATRules {
		t.Errorf("stats partial %+v full %+v", partial.Stats, full2.Stats)
	}
	if string(partial.Filter) != string(full2.Filter) {
		t.Errorf("the filter table must always be complete")
	}

	// The synced state serves traffic like the full one.
	tr, err := tracer.Parse(string(full1.Bytes()), rules.JumpsText(), string(partial.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	tr.SetLocalAddrs(l.nodeIP)
	// b: eTP=Local and its local endpoint is gone; clients in the allowed
	// range are dropped, pods still reach the remote endpoints.
	check(t, trace(t, tr, l.flow(fromExternal, toLBIP)), want{verdict: tracer.Drop})
	np := l.flow(fromPod, toNodePort)
	np.Port = 30002
	check(t, trace(t, tr, np), want{verdict: tracer.Accept, endpoints: []string{"10.244.2.2:8080", "10.244.2.9:8080"}})
	cf := l.flow(fromPod, toClusterIP)
	cf.Dst = netip.MustParseAddr("10.96.1.3")
	check(t, trace(t, tr, cf), want{verdict: tracer.Reject}) // c has no endpoints now
	cf.Dst = netip.MustParseAddr("10.96.1.5")
	check(t, trace(t, tr, cf), want{verdict: tracer.Accept, endpoints: []string{"10.244.1.55:8080"}})
}

func TestPartialWithoutChangesOnlyRewritesDispatch(t *testing.T) {
	l := lab4
	before, _, _ := states(l)
	full := rules.Render(l.family, before.svcs, before.eps, l.node())
	p := rules.RenderWith(l.family, before.svcs, before.eps, l.node(), rules.Options{Changed: map[rules.ServiceKey]bool{}, Existing: full.NATChains})
	if strings.Contains(string(p.NAT), ":"+rules.PrefixService) || strings.Contains(string(p.NAT), ":"+rules.PrefixEndpoint) || len(p.Deleted) != 0 {
		t.Fatalf("no-change partial render rewrote service chains:\n%s", p.NAT)
	}
	if got, want := parseDump(t, string(full.Bytes()), rules.JumpsText(), string(p.Bytes())), parseDump(t, string(full.Bytes()), rules.JumpsText()); got != want {
		t.Fatalf("no-change partial render changed the state")
	}
}

func TestPartialRewritesChainsMissingFromTheKernel(t *testing.T) {
	l := lab4
	before, _, _ := states(l)
	full := rules.Render(l.family, before.svcs, before.eps, l.node())
	// Someone deleted one SEP chain (and so the kernel lost its Service's
	// rules); an unchanged-but-broken Service must be rewritten.
	var existing []string
	var lost string
	for _, c := range full.NATChains {
		if lost == "" && strings.HasPrefix(c, rules.PrefixEndpoint) {
			lost = c
			continue
		}
		existing = append(existing, c)
	}
	p := rules.RenderWith(l.family, before.svcs, before.eps, l.node(), rules.Options{Changed: map[rules.ServiceKey]bool{}, Existing: existing})
	if !strings.Contains(string(p.NAT), ":"+lost+" ") {
		t.Fatalf("missing chain %s not rewritten", lost)
	}
	if strings.Count(string(p.NAT), ":"+rules.PrefixService) != 1 {
		t.Fatalf("more than the broken Service was rewritten:\n%s", p.NAT)
	}
}

func TestStaleChainsOfOtherOwnersAreKept(t *testing.T) {
	l := lab4
	rs := rules.RenderWith(l.family, nil, nil, l.node(), rules.Options{Existing: []string{"KUBE-SVC-AAAA", "HERALD-SERVICES", "HERALD-SEP-OLD", "HERALD-SEP-OLD", "CUSTOM"}})
	if !slices.Equal(rs.Deleted, []string{"HERALD-SEP-OLD"}) {
		t.Fatalf("deleted %v", rs.Deleted)
	}
	if strings.Count(string(rs.NAT), "-X HERALD-SEP-OLD") != 1 {
		t.Fatalf("stale chain deleted %d times", strings.Count(string(rs.NAT), "-X HERALD-SEP-OLD"))
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
