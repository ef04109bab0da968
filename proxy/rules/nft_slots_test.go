package rules_test

import (
	"fmt"
	"math"
	"net/netip"
	"strings"
	"testing"

	"github.com/herald-lb/herald/proxy/internal/tracer"
	"github.com/herald-lb/herald/proxy/nft"
	"github.com/herald-lb/herald/proxy/rules"
)

func podIPs(n int) []rules.Endpoint {
	var out []rules.Endpoint
	for i := range n {
		out = append(out, ready(netip.AddrFrom4([4]byte{10, 244, byte(3 + i/250), byte(1 + i%250)}), nodeB))
	}
	return out
}

// TestNFTEndpointBlocksStay: a chain keeps its block of the endpoints map
// from render to render, so replacing an endpoint changes map elements
// and no rule, and a changed number of endpoints changes the chain's one
// rule; a new Service gets a block no chain had, and a gone Service's
// block is not given again.
func TestNFTEndpointBlocksStay(t *testing.T) {
	l := lab4
	web, db := l.web(), l.web()
	db.Name, db.ClusterIPs = "db", []netip.Addr{netip.MustParseAddr("10.96.0.20")}
	eps := podIPs(4)
	in := map[rules.ServicePortName][]rules.Endpoint{web.ID(): eps[:3], db.ID(): eps[:3]}
	prev := rules.RenderNFT(l.family, []rules.Service{db, web}, in, l.node())
	chain := func(rs rules.NFTRuleset, s rules.Service) *nft.Chain {
		for _, n := range rs.ServiceChains[s.ID()] {
			if strings.HasPrefix(n, rules.NFTPrefixService) {
				return rs.Table.Chain(n)
			}
		}
		t.Fatalf("%s has no service chain", s.Name)
		return nil
	}
	// next renders web with webEps, the other Services with their three.
	next := func(webEps []rules.Endpoint, svcs ...rules.Service) (rules.NFTRuleset, nft.Changes) {
		in := map[rules.ServicePortName][]rules.Endpoint{}
		for _, s := range svcs {
			in[s.ID()] = eps[:3]
		}
		in[web.ID()] = webEps
		rs := rules.RenderNFTWith(l.family, svcs, in, l.node(), rules.NFTOptions{Prev: &prev, Changed: map[rules.ServiceKey]bool{web.ID().Key(): true}})
		return rs, nft.Diff(prev.Table, rs.Table, nft.Partial)
	}

	// One endpoint replaced by another: elements only.
	rs, ch := next([]rules.Endpoint{eps[0], eps[1], eps[3]}, db, web)
	if len(ch.Rewrite) != 0 || len(ch.AddChains) != 0 {
		t.Errorf("replacing an endpoint rewrote chains: %s", nft.ChangesText(rs.Table, ch))
	}
	if added, deleted := ch.Elements(); added != 2 || deleted != 1 { // the map element changed; a hairpin element added (db still has the old endpoint)
		t.Errorf("replacing an endpoint: +%d/-%d elements, want +2/-1:\n%s", added, deleted, nft.ChangesText(rs.Table, ch))
	}
	if rs.Slots[chain(rs, web).Name] != prev.Slots[chain(prev, web).Name] {
		t.Errorf("the chain moved to another block")
	}

	// Four endpoints: the one rule changes, the block stays.
	rs, ch = next(eps, db, web)
	if len(ch.Rewrite) != 1 || ch.Rewrite[0].Name != chain(rs, web).Name {
		t.Errorf("a fourth endpoint: rewrote %d chains, want the web chain alone:\n%s", len(ch.Rewrite), nft.ChangesText(rs.Table, ch))
	}
	if got := chain(rs, web).Rules[len(chain(rs, web).Rules)-1].Text(l.family); !strings.Contains(got, fmt.Sprintf("numgen random mod 4 offset %d map", prev.Slots[chain(prev, web).Name])) {
		t.Errorf("the web chain's rule: %s", got)
	}

	// db gone, a new Service: a block past every earlier one.
	api := l.web()
	api.Name, api.ClusterIPs = "api", []netip.Addr{netip.MustParseAddr("10.96.0.30")}
	rs, _ = next(eps[:3], api, web)
	got := rs.Slots[chain(rs, api).Name]
	for name, off := range prev.Slots {
		if got == off {
			t.Errorf("the new Service got the block %d of %s", off, name)
		}
	}
	if got < prev.NextSlot*rules.NFTSlotBlock {
		t.Errorf("the new block %d is below the first free one %d", got, prev.NextSlot*rules.NFTSlotBlock)
	}
}

// TestNFTManyEndpointsCascade: a chain with more endpoints than a block
// holds picks with the DNAT cascade, still evenly.
func TestNFTManyEndpointsCascade(t *testing.T) {
	l := lab4
	svc := l.web()
	eps := podIPs(rules.NFTSlotBlock + 1)
	rs := renderNFT(l, []rules.Service{svc}, epMap(svc, eps...))
	text := rs.Table.Text()
	if strings.Contains(text, "map @"+rules.NFTMapEndpoints) {
		t.Errorf("a chain of %d endpoints picks from the map", len(eps))
	}
	if got := strings.Count(text, "numgen random mod "); got != len(eps)-1 {
		t.Errorf("%d numgen rules, want %d", got, len(eps)-1)
	}
	res := trace(t, l.loadMode(t, modeNFT, []rules.Service{svc}, epMap(svc, eps...)), l.flow(fromPod, toClusterIP))
	if v := res.Verdicts(); len(v) != 1 || v[0] != tracer.Accept {
		t.Fatalf("verdicts %v", v)
	}
	if len(res.Outcomes) != len(eps) {
		t.Fatalf("%d outcomes, want one per endpoint (%d)", len(res.Outcomes), len(eps))
	}
	for _, o := range res.Outcomes {
		if want := 1 / float64(len(eps)); math.Abs(o.Probability-want) > 1e-9 {
			t.Errorf("%v: p=%g, want %g", o, o.Probability, want)
		}
	}
}
