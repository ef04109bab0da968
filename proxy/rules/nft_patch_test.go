package rules_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/herald-lb/herald/proxy/nft"
	"github.com/herald-lb/herald/proxy/rules"
)

// patchWorld is a cluster the patch test mutates at random: Services of
// every kind, endpoints on this node and others, pods that back several
// Services (shared hairpin elements) and, when conflicts is set, an
// external IP two Services claim.
type patchWorld struct {
	rnd  *rand.Rand
	svcs map[string][]rules.Service
	eps  map[rules.ServicePortName][]rules.Endpoint
	seq  int
}

func (w *patchWorld) service(name string) []rules.Service {
	r := w.rnd
	i := w.seq
	base := rules.Service{Namespace: "ns", Name: name, PortName: "http", Protocol: rules.TCP, Port: 80,
		ClusterIPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 96, byte(i / 250), byte(1 + i%250)})}}
	switch r.IntN(7) {
	case 0:
		base.NodePort = 30000 + i
	case 1:
		base.NodePort, base.HealthCheckNodePort = 30000+i, 32000+i
		base.ExternalTrafficPolicy = rules.PolicyLocal
		base.LoadBalancerIngress = []rules.Ingress{{IP: netip.AddrFrom4([4]byte{198, 51, 100, byte(1 + i%250)})}}
	case 2:
		base.SessionAffinity, base.AffinityTimeout = rules.AffinityClientIP, 60+r.IntN(3)*60
	case 3:
		base.ExternalIPs = []netip.Addr{netip.AddrFrom4([4]byte{203, 0, 113, byte(1 + i%250)})}
		base.InternalTrafficPolicy = rules.PolicyLocal
	case 4:
		base.Protocol = rules.UDP
	case 5:
		base.LoadBalancerIngress = []rules.Ingress{{IP: netip.AddrFrom4([4]byte{198, 51, 100, byte(1 + i%250)})}}
		base.LoadBalancerSourceRanges = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
	}
	out := []rules.Service{base}
	if r.IntN(4) == 0 {
		p2 := base
		p2.PortName, p2.Port, p2.NodePort, p2.HealthCheckNodePort = "metrics", 9090, 0, 0
		out = append(out, p2)
	}
	return out
}

func (w *patchWorld) endpoints(s rules.Service) []rules.Endpoint {
	r := w.rnd
	var out []rules.Endpoint
	for range r.IntN(5) {
		// Few distinct pods: Services share them.
		ip := netip.AddrFrom4([4]byte{10, 244, byte(r.IntN(3)), byte(1 + r.IntN(12))})
		node := []string{nodeA, nodeB}[r.IntN(2)]
		e := rules.Endpoint{IP: ip, Port: 8080, Ready: r.IntN(6) != 0, Serving: true, NodeName: node}
		// Zone hints taken from the address, not the generator, so the
		// worlds stay those the patch counts below were measured on.
		e.ZoneHints = []string{[]string{"z1", "z2"}[ip.As4()[3]%2]}
		e.Terminating = !e.Ready && r.IntN(2) == 0
		if !slices.ContainsFunc(out, func(o rules.Endpoint) bool { return o.IP == ip }) {
			out = append(out, e)
		}
	}
	return out
}

func (w *patchWorld) add(name string) {
	w.svcs[name] = w.service(name)
	w.seq++
	for _, s := range w.svcs[name] {
		w.eps[s.ID()] = w.endpoints(s)
	}
}

func (w *patchWorld) flat() ([]rules.Service, map[rules.ServicePortName][]rules.Endpoint) {
	var out []rules.Service
	for _, ss := range w.svcs {
		out = append(out, ss...)
	}
	return out, w.eps
}

// step changes one to three Services and returns their keys.
func (w *patchWorld) step(conflicts bool) map[rules.ServiceKey]bool {
	r := w.rnd
	changed := map[rules.ServiceKey]bool{}
	names := make([]string, 0, len(w.svcs))
	for n := range w.svcs {
		names = append(names, n)
	}
	slices.Sort(names)
	for range 1 + r.IntN(3) {
		name := names[r.IntN(len(names))]
		changed[rules.ServiceKey{Namespace: "ns", Name: name}] = true
		switch r.IntN(6) {
		case 0: // deleted
			for _, s := range w.svcs[name] {
				delete(w.eps, s.ID())
			}
			delete(w.svcs, name)
		case 1: // a new one
			n := fmt.Sprintf("s%03d", 100+w.seq)
			w.add(n)
			changed[rules.ServiceKey{Namespace: "ns", Name: n}] = true
		case 2: // respecified
			for _, s := range w.svcs[name] {
				delete(w.eps, s.ID())
			}
			w.add(name)
		case 3:
			if conflicts {
				// Claims another Service's external IP and port.
				other := w.svcs[names[r.IntN(len(names))]][0]
				ss := w.svcs[name]
				ss[0].ExternalIPs = append(slices.Clone(ss[0].ExternalIPs), other.ClusterIPs[0])
				ss[0].Port = other.Port
				break
			}
			fallthrough
		default: // endpoints
			for _, s := range w.svcs[name] {
				w.eps[s.ID()] = w.endpoints(s)
			}
		}
	}
	return changed
}

// applyChanges plays a transaction on a copy of the table the kernel
// holds, as the kernel would, and returns the result's spelling.
func applyChanges(prev, want *nft.Table, ch nft.Changes) string {
	chains := map[string]*nft.Chain{}
	for _, c := range prev.Chains {
		chains[c.Name] = c
	}
	sets := map[string]*nft.Set{}
	for _, s := range prev.Sets {
		cp := *s
		cp.Elements = slices.Clone(s.Elements)
		sets[s.Name] = &cp
	}
	for _, s := range ch.AddSets {
		if sets[s.Name] == nil {
			sets[s.Name] = &nft.Set{Name: s.Name, Key: s.Key, Map: s.Map, Endpoints: s.Endpoints, Proto: s.Proto, Timeout: s.Timeout, Dynamic: s.Dynamic}
		}
	}
	for _, c := range ch.AddChains {
		chains[c.Name] = &nft.Chain{Name: c.Name, Base: c.Base}
	}
	for name, els := range ch.DelElements {
		s := sets[name]
		for _, e := range els {
			s.Elements = slices.DeleteFunc(s.Elements, func(x nft.Element) bool { return x.Key == e.Key })
		}
	}
	for _, c := range ch.Rewrite {
		chains[c.Name] = c
	}
	for name, els := range ch.AddElements {
		sets[name].Elements = append(sets[name].Elements, els...)
	}
	for _, n := range ch.DelChains {
		delete(chains, n)
	}
	for _, n := range ch.DelSets {
		delete(sets, n)
	}
	t := &nft.Table{Family: want.Family}
	for _, c := range chains {
		t.Chains = append(t.Chains, c)
	}
	for _, s := range sets {
		t.Sets = append(t.Sets, s)
	}
	t.Sort()
	return t.Text()
}

// TestNFTPatchEqualsFull: over random changes to a cluster of 60
// Services, a render that patches the previous one gives the table a
// full render gives (with the same endpoint blocks), its Delta turns the
// previous table into it, and its stats, health and problems match; with
// a key two Services claim, it falls back to the full walk and still
// matches.
func TestNFTPatchEqualsFull(t *testing.T) {
	l := lab4
	node := l.node()
	node.Zone = "z1" // the hints narrow some Services, not others
	for _, conflicts := range []bool{false, true} {
		t.Run(fmt.Sprintf("conflicts=%v", conflicts), func(t *testing.T) {
			w := &patchWorld{rnd: rand.New(rand.NewPCG(7, 11)), svcs: map[string][]rules.Service{}, eps: map[rules.ServicePortName][]rules.Endpoint{}}
			for i := range 60 {
				w.add(fmt.Sprintf("s%03d", i))
			}
			svcs, eps := w.flat()
			prev := rules.RenderNFT(l.family, svcs, eps, node)
			patched := 0
			for step := range 300 {
				changed := w.step(conflicts)
				svcs, eps := w.flat()
				got := rules.RenderNFTWith(l.family, svcs, eps, node, rules.NFTOptions{Prev: &prev, Changed: changed})
				all := map[rules.ServiceKey]bool{}
				for _, s := range svcs {
					all[s.ID().Key()] = true
				}
				for k := range changed {
					all[k] = true
				}
				want := rules.RenderNFTWith(l.family, svcs, eps, node, rules.NFTOptions{Prev: &prev, Changed: all})
				if g, w := got.Table.Text(), want.Table.Text(); g != w {
					t.Fatalf("step %d (changed %v): the render differs from a full one:\n%s", step, changed, firstDiff(g, w))
				}
				if got.Delta != nil {
					patched++
					if g, w := applyChanges(prev.Table, got.Table, *got.Delta), want.Table.Text(); g != w {
						t.Fatalf("step %d: the delta does not make the table:\n%s\n%s", step, firstDiff(g, w), nft.ChangesText(got.Table, *got.Delta))
					}
					if g, w := got.Delta.Rules(), nft.Diff(prev.Table, want.Table, nft.Partial).Rules(); g != w {
						t.Errorf("step %d: the delta writes %d rules, a diff %d", step, g, w)
					}
				}
				if got.Stats.Services != want.Stats.Services || got.Stats.NATRulesTotal != want.Stats.NATRulesTotal || got.Stats.NATChains != want.Stats.NATChains ||
					got.Stats.NoLocalEndpointsInternal != want.Stats.NoLocalEndpointsInternal || got.Stats.NoLocalEndpointsExternal != want.Stats.NoLocalEndpointsExternal {
					t.Fatalf("step %d: stats %+v, want %+v", step, got.Stats, want.Stats)
				}
				if !sameElements(got.Health, want.Health) {
					t.Fatalf("step %d: health %v, want %v", step, got.Health, want.Health)
				}
				if !sameElements(got.Problems, want.Problems) {
					t.Fatalf("step %d: problems %v, want %v", step, got.Problems, want.Problems)
				}
				prev = got
			}
			t.Logf("%d of 300 renders patched", patched)
			if !conflicts && patched < 250 {
				t.Errorf("only %d of 300 renders patched", patched)
			}
		})
	}
}

func sameElements[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	count := map[T]int{}
	for _, x := range a {
		count[x]++
	}
	for _, x := range b {
		count[x]--
	}
	for _, n := range count {
		if n != 0 {
			return false
		}
	}
	return true
}

func firstDiff(a, b string) string {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			lo := max(0, i-300)
			return fmt.Sprintf("got  ...%s\nwant ...%s", a[lo:min(len(a), i+300)], b[lo:min(len(b), i+300)])
		}
	}
	return fmt.Sprintf("lengths %d and %d", len(a), len(b))
}

// TestNFTPatchOtherFamily: in a dual-stack proxy the IPv6 table of a
// cluster whose Services are IPv4 is patched too (its render knows the
// Services without a port in the family) instead of walking them all at
// every sync.
func TestNFTPatchOtherFamily(t *testing.T) {
	w := &patchWorld{rnd: rand.New(rand.NewPCG(3, 5)), svcs: map[string][]rules.Service{}, eps: map[rules.ServicePortName][]rules.Endpoint{}}
	for i := range 40 {
		w.add(fmt.Sprintf("s%03d", i))
	}
	svcs, eps := w.flat()
	prev := rules.RenderNFT(lab6.family, svcs, eps, lab6.node())
	for step := range 50 {
		changed := w.step(false)
		svcs, eps := w.flat()
		got := rules.RenderNFTWith(lab6.family, svcs, eps, lab6.node(), rules.NFTOptions{Prev: &prev, Changed: changed})
		if got.Delta == nil {
			t.Fatalf("step %d: the IPv6 render walked every Service", step)
		}
		if g, w := got.Table.Text(), rules.RenderNFT(lab6.family, svcs, eps, lab6.node()).Table.Text(); g != w {
			t.Fatalf("step %d: %s", step, firstDiff(g, w))
		}
		prev = got
	}
}
