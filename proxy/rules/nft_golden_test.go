package rules_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/herald-lb/herald/proxy/rules"
)

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
		full := rules.RenderNFT(l.family, after.svcs, after.eps, l.node())
		if inc.Table.Text() != full.Table.Text() {
			t.Errorf("%s: the incremental render differs from a full one:\n%s\nwant:\n%s", l.family, inc.Table.Text(), full.Table.Text())
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
