package tracer

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/herald-lb/herald/internal/ipfamily"
	"github.com/herald-lb/herald/proxy/maglev"
	"github.com/herald-lb/herald/proxy/nft"
)

// hashNode is one node's table for a virtual address whose flows pick
// their endpoint with DNATHash, the slots filled from a Maglev table built
// from eps in the order the node saw them.
func hashNode(t *testing.T, vip netip.Addr, seed uint32, eps []netip.AddrPort) *NFT {
	t.Helper()
	tb, err := maglev.New(eps)
	if err != nil {
		t.Fatal(err)
	}
	set := &nft.Set{Name: "eps", Key: nft.KeyType{nft.Slot}, Endpoints: true, Proto: nft.TCP}
	for slot := range tb.Size() {
		set.Elements = append(set.Elements, nft.Element{Key: nft.Key{Slot: uint32(slot)}, To: tb.Endpoints()[tb.Owner(slot)]})
	}
	fam := ipfamily.IPv4
	if vip.Is6() {
		fam = ipfamily.IPv6
	}
	table := &nft.Table{Family: fam, Sets: []*nft.Set{set}, Chains: []*nft.Chain{{
		Name: "pre", Base: &nft.Base{Type: nft.TypeNAT, Hook: nft.HookPrerouting, Priority: nft.PriorityDstNAT},
		Rules: []nft.Rule{{Exprs: []nft.Expr{
			nft.MatchProto{Proto: nft.TCP},
			nft.MatchAddr{Field: nft.Daddr, Prefix: netip.PrefixFrom(vip, vip.BitLen())},
			nft.DNATHash{Mod: uint32(tb.Size()), Seed: seed, Map: "eps"},
		}}},
	}}}
	table.Sort()
	return NewNFT(table)
}

// TestDNATHashSameOnEveryNode: two nodes that learnt the same endpoints
// in different orders send every flow to the same endpoint, the one Go's
// table names, with certainty (one outcome, probability 1); a client's
// other source port may go elsewhere, and the flows spread over every
// endpoint. A node with another seed disagrees on most flows: the seed is
// part of the contract.
func TestDNATHashSameOnEveryNode(t *testing.T) {
	const seed = 0x5eed1234
	for _, fam := range []struct {
		vip, client string
		eps         []string
	}{
		{"198.51.100.10", "203.0.113.7", []string{"10.244.1.5:8080", "10.244.2.9:8080", "10.244.3.2:8080", "10.244.1.6:8080"}},
		{"2001:db8::10", "2001:db8:ff::7", []string{"[fd00::1:5]:8080", "[fd00::2:9]:8080", "[fd00::3:2]:8080"}},
	} {
		vip, client := netip.MustParseAddr(fam.vip), netip.MustParseAddr(fam.client)
		var eps []netip.AddrPort
		for _, e := range fam.eps {
			eps = append(eps, netip.MustParseAddrPort(e))
		}
		rev := slices.Clone(eps)
		slices.Reverse(rev)
		a, b, other := hashNode(t, vip, seed, eps), hashNode(t, vip, seed, rev), hashNode(t, vip, seed+1, eps)
		tb, _ := maglev.New(eps)
		used := map[string]int{}
		differ := 0
		const flows = 2000
		for port := range uint16(flows) {
			f := Flow{Origin: External, Src: client, SrcPort: 20000 + port, Proto: "tcp", Dst: vip, Port: 80}
			ra, errA := a.Trace(f)
			rb, errB := b.Trace(f)
			ro, errO := other.Trace(f)
			if errA != nil || errB != nil || errO != nil {
				t.Fatal(errA, errB, errO)
			}
			if len(ra.Outcomes) != 1 || ra.Outcomes[0].Probability != 1 || !ra.Outcomes[0].DNAT {
				t.Fatalf("%v: outcomes %+v, want one certain DNAT", f, ra.Outcomes)
			}
			h, _ := maglev.FlowHash(netip.AddrPortFrom(client, f.SrcPort), netip.AddrPortFrom(vip, 80), seed)
			want := tb.Lookup(h).String()
			if fmt.Sprint(ra.Endpoints()) != "["+want+"]" || fmt.Sprint(rb.Endpoints()) != "["+want+"]" {
				t.Fatalf("%v: node a %v, node b %v, Go's table %s", f, ra.Endpoints(), rb.Endpoints(), want)
			}
			used[want]++
			if fmt.Sprint(ro.Endpoints()) != fmt.Sprint(ra.Endpoints()) {
				differ++
			}
		}
		if len(used) != len(eps) {
			t.Errorf("%s: %d flows reached %d of %d endpoints: %v", fam.vip, flows, len(used), len(eps), used)
		}
		// With another seed a flow lands elsewhere about (n-1)/n of the time.
		if min := flows * (len(eps) - 1) / len(eps) * 8 / 10; differ < min {
			t.Errorf("%s: another seed changed %d of %d flows' endpoint, want at least %d", fam.vip, differ, flows, min)
		}
		t.Logf("%s: %d flows, per endpoint %v; another seed moves %d", fam.vip, flows, used, differ)
	}
}
