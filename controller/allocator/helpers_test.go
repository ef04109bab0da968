package allocator

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/herald-lb/herald/config"
)

type poolCfg = config.Pool

func poolsOf(ps ...*config.Pool) []*config.Pool { return ps }

// pool builds an autoAssign pool from address entries.
func pool(name string, entries ...string) *config.Pool {
	p := &config.Pool{Name: name, AutoAssign: true}
	for _, e := range entries {
		r, err := config.ParseAddressEntry(e)
		if err != nil {
			panic(err)
		}
		p.Ranges = append(p.Ranges, r)
	}
	return p
}

func manual(p *config.Pool) *config.Pool { p.AutoAssign = false; return p }
func buggy(p *config.Pool) *config.Pool  { p.AvoidBuggyIPs = true; return p }
func prio(p *config.Pool, n int) *config.Pool {
	p.Allocation = &config.Allocation{Priority: n, HasPriority: true}
	return p
}

// parsePools reads IPAddressPools from YAML through the real parser, for
// tests that need label selectors.
func parsePools(t testing.TB, doc string) []*config.Pool {
	t.Helper()
	var l config.Loader
	if err := l.Load("test", strings.NewReader(doc)); err != nil {
		t.Fatal(err)
	}
	cfg, problems := config.Parse(l.Resources)
	if problems.Errors() > 0 || len(l.Problems) > 0 {
		t.Fatalf("pools do not parse:\n%s\n%s", problems.Error(), l.Problems.Error())
	}
	var out []*config.Pool
	for _, n := range cfg.PoolNames() {
		out = append(out, cfg.Pools[n])
	}
	return out
}

func newWith(t testing.TB, pools ...*config.Pool) *Allocator {
	t.Helper()
	a := New()
	if _, err := a.SetPools(pools); err != nil {
		t.Fatal(err)
	}
	return a
}

func svc(ns, name string) Service {
	return Service{Namespace: ns, Name: name, Families: []Family{IPv4}}
}

func ips(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func tcp(ports ...uint16) []Port {
	var out []Port
	for _, p := range ports {
		out = append(out, Port{"TCP", p})
	}
	return out
}

// mustAssign assigns and checks the pool and IPs.
func mustAssign(t testing.TB, a *Allocator, s Service, wantPool string, want ...string) Assignment {
	t.Helper()
	got, err := a.Assign(s)
	if err != nil {
		t.Fatalf("assign %s: %v", s.Key(), err)
	}
	if got.Pool != wantPool || !slices.Equal(got.IPs, ips(want...)) {
		t.Fatalf("assign %s = %s %v, want %s %v", s.Key(), got.Pool, got.IPs, wantPool, want)
	}
	return got
}

// mustFail assigns, expects a failure with the reason, and checks that the
// message mentions each of the given strings.
func mustFail(t testing.TB, a *Allocator, s Service, reason Reason, mentions ...string) *Error {
	t.Helper()
	got, err := a.Assign(s)
	if err == nil {
		t.Fatalf("assign %s = %v, want %s", s.Key(), got, reason)
	}
	e, ok := err.(*Error)
	if !ok || e.Reason != reason || ReasonOf(err) != reason {
		t.Fatalf("assign %s: %v (%s), want %s", s.Key(), err, ReasonOf(err), reason)
	}
	for _, m := range mentions {
		if !strings.Contains(e.Message, m) {
			t.Errorf("message %q does not mention %q", e.Message, m)
		}
	}
	return e
}

// checkInvariants verifies the allocator's internal consistency: every
// holding is in its pool and recorded on its IPs, holders of an IP agree on
// sharing and have disjoint ports, free sets exclude held IPs, counts match.
func checkInvariants(t testing.TB, a *Allocator) {
	t.Helper()
	inUse := map[string][2]uint64{}
	for ip, st := range a.ips {
		p := a.poolOf(ip)
		if p == nil || p.name() != st.pool {
			t.Fatalf("%s recorded in pool %s, is in %v", ip, st.pool, p)
		}
		e, _ := a.lookup(ip)
		if e.r.free.isFree(addrToU128(ip)) {
			t.Fatalf("%s is held and free", ip)
		}
		if len(st.holders) == 0 {
			t.Fatalf("%s has no holder", ip)
		}
		c := inUse[st.pool]
		c[famIdx(FamilyOf(ip))]++
		inUse[st.pool] = c
		seen := map[Port]Key{}
		for k := range st.holders {
			h := a.held[k]
			if h == nil || !slices.Contains(h.ips, ip) {
				t.Fatalf("%s lists holder %s that does not hold it", ip, k)
			}
			if h.svc.SharingKey != st.sharing || h.svc.backendKey() != st.backend {
				t.Fatalf("%s: holder %s disagrees on sharing", ip, k)
			}
			for _, p := range h.svc.Ports {
				if o, dup := seen[p]; dup {
					t.Fatalf("%s: port %s held by %s and %s", ip, p, o, k)
				}
				seen[p] = k
				if st.ports[p] != k {
					t.Fatalf("%s: port %s recorded for %s, held by %s", ip, p, st.ports[p], k)
				}
			}
		}
		if len(seen) != len(st.ports) {
			t.Fatalf("%s: stale ports %v", ip, st.ports)
		}
		if st.sharing != "" {
			if _, ok := a.groups[st.sharing][ip]; !ok {
				t.Fatalf("%s missing from group %q", ip, st.sharing)
			}
		}
	}
	for k, h := range a.held {
		if h.svc.Key() != k {
			t.Fatalf("holding under %s is for %s", k, h.svc.Key())
		}
		for _, ip := range h.ips {
			if st := a.ips[ip]; st == nil || st.pool != h.pool {
				t.Fatalf("%s holds %s, not recorded in pool %s", k, ip, h.pool)
			}
		}
	}
	for g, set := range a.groups {
		for ip := range set {
			if st := a.ips[ip]; st == nil || st.sharing != g {
				t.Fatalf("group %q lists %s", g, ip)
			}
		}
	}
	for name, p := range a.pools {
		if p.inUse != inUse[name] {
			t.Fatalf("pool %s counts %v in use, holds %v", name, p.inUse, inUse[name])
		}
	}
}
