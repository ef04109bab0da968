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
