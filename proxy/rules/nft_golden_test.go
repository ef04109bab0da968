package rules_test

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/herald-lb/herald/proxy/nft"
	"github.com/herald-lb/herald/proxy/rules"
)

// renumbered is the table's text with the endpoints maps' blocks given
// to the chains in name order, so renders that numbered them in other
// orders compare.
func renumbered(rs rules.NFTRuleset) string {
	names := slices.Sorted(maps.Keys(rs.Slots))
	to := map[uint32]uint32{}
	for i, n := range names {
		to[rs.Slots[n]] = uint32(i) * rules.NFTSlotBlock
	}
	t := &nft.Table{Family: rs.Table.Family}
	for _, c := range rs.Table.Chains {
		nc := &nft.Chain{Name: c.Name, Base: c.Base}
		for _, r := range c.Rules {
			nr := nft.Rule{Comment: r.Comment, Exprs: slices.Clone(r.Exprs)}
			for i, e := range nr.Exprs {
				if d, ok := e.(nft.DNATMap); ok {
					d.Offset = to[d.Offset]
					d.Map = rules.NFTEndpointsMap(rs.Table.Set(d.Map).Proto, d.Offset)
					nr.Exprs[i] = d
				}
			}
			nc.Rules = append(nc.Rules, nr)
		}
		t.Chains = append(t.Chains, nc)
	}
	moved := map[string]*nft.Set{}
	for _, s := range rs.Table.Sets {
		if !s.Endpoints {
			t.Sets = append(t.Sets, s)
			continue
		}
		for _, e := range s.Elements {
			base := e.Key.Slot - e.Key.Slot%rules.NFTSlotBlock
			e.Key.Slot = to[base] + e.Key.Slot - base
			name := rules.NFTEndpointsMap(s.Proto, e.Key.Slot)
			if moved[name] == nil {
				moved[name] = &nft.Set{Name: name, Key: s.Key, Endpoints: true, Proto: s.Proto}
				t.Sets = append(t.Sets, moved[name])
			}
			moved[name].Elements = append(moved[name].Elements, e)
		}
	}
	t.Sort()
	return t.Text()
}

// nftGoldenCases are goldenCases rendered for the nftables mode.
func nftGoldenCases() map[string]rules.NFTRuleset {
	out := map[string]rules.NFTRuleset{}
	for name, c := range goldenInputs() {
		out[name] = rules.RenderNFT(c.family, c.svcs, c.eps, c.node)
	}
	return out
}

func TestNFTGolden(t *testing.T) {
	for name, rs := range nftGoldenCases() {
		t.Run(name, func(t *testing.T) {
			if len(rs.Problems) != 0 {
				t.Fatalf("problems: %v", rs.Problems)
			}
			path := filepath.Join("testdata", name+".nft.golden")
			got := rs.Table.Text()
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from the golden file\n--- got\n%s\n--- want\n%s", name, got, want)
			}
		})
	}
}

// TestNFTIncrementalEqualsFull: a render reusing the previous render's
// chains for the unchanged Services equals a full render of the new
// state, and it does reuse them (same chain objects).
func TestNFTIncrementalEqualsFull(t *testing.T) {
	for _, l := range []lab{lab4} { // the states' Services are IPv4
		before, after, changed := states(l)
		prev := rules.RenderNFT(l.family, before.svcs, before.eps, l.node())
		inc := rules.RenderNFTWith(l.family, after.svcs, after.eps, l.node(), rules.NFTOptions{Prev: &prev, Changed: changed})
		// Every chain built again, with the same blocks of the endpoints map.
		all := map[rules.ServiceKey]bool{}
		for _, s := range after.svcs {
			all[s.ID().Key()] = true
		}
		rebuilt := rules.RenderNFTWith(l.family, after.svcs, after.eps, l.node(), rules.NFTOptions{Prev: &prev, Changed: all})
		if inc.Table.Text() != rebuilt.Table.Text() {
			t.Errorf("%s: the incremental render differs from a full one:\n%s\nwant:\n%s", l.family, inc.Table.Text(), rebuilt.Table.Text())
		}
		// A render from nothing numbers the blocks afresh; otherwise alike.
		full := rules.RenderNFT(l.family, after.svcs, after.eps, l.node())
		if got, want := renumbered(inc), renumbered(full); got != want {
			t.Errorf("%s: the incremental render differs from a full one beyond block numbers:\n%s\nwant:\n%s", l.family, got, want)
		}
		a := after.svcs[0] // unchanged
		for _, name := range inc.ServiceChains[a.ID()] {
			if c := inc.Table.Chain(name); c != nil && c != prev.Table.Chain(name) {
				t.Errorf("%s: chain %s of the unchanged Service was built again", l.family, name)
			}
		}
		// A Service the previous render did not have is built.
		none := rules.RenderNFTWith(l.family, after.svcs, after.eps, l.node(), rules.NFTOptions{Prev: &prev, Changed: map[rules.ServiceKey]bool{}})
		if none.Table.Chain(inc.ServiceChains[after.svcs[4].ID()][0]) == nil {
			t.Errorf("%s: the new Service's chains are missing when Changed does not name it", l.family)
		}
	}
}
