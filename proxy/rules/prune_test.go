package rules

import (
	"strings"
	"testing"
)

const pruneInput = `*filter
:HERALD-FILTER - [0:0]
-A HERALD-FILTER -j ACCEPT
COMMIT
*nat
:HERALD-SERVICES - [0:0]
:HERALD-SVC-A - [0:0]
:HERALD-SVC-OLD - [0:0]
-A HERALD-SERVICES -d 198.19.0.1/32 -j HERALD-SVC-A
-A HERALD-SVC-A -j HERALD-SEP-A1
-A HERALD-MARK-MASQ -j MARK --or-mark 0x4000
-X HERALD-SVC-OLD
COMMIT
`

func TestPruneDropsOnlyUnchangedChains(t *testing.T) {
	out, cur, dropped := Prune([]byte(pruneInput), nil)
	if string(out) != pruneInput || len(dropped) != 0 {
		t.Fatalf("nothing known: the input must be kept whole, got\n%s", out)
	}
	for _, k := range []string{"filter/HERALD-FILTER", "nat/HERALD-SERVICES", "nat/HERALD-SVC-A", "nat/HERALD-SVC-OLD"} {
		if _, ok := cur[k]; !ok {
			t.Errorf("no digest for %s", k)
		}
	}
	last := ChainDigests(nil).Apply(cur, true, []string{"HERALD-SVC-OLD"})
	if _, ok := last["nat/HERALD-SVC-OLD"]; ok {
		t.Error("a deleted chain is remembered")
	}

	// The Service's chain changes; the dispatch chain and the filter
	// chain do not.
	next := strings.Replace(pruneInput, "-j HERALD-SEP-A1", "-j HERALD-SEP-A2", 1)
	out, cur, dropped = Prune([]byte(next), last)
	want := `*filter
COMMIT
*nat
:HERALD-SVC-A - [0:0]
:HERALD-SVC-OLD - [0:0]
-A HERALD-SVC-A -j HERALD-SEP-A2
-A HERALD-MARK-MASQ -j MARK --or-mark 0x4000
-X HERALD-SVC-OLD
COMMIT
`
	if string(out) != want {
		t.Errorf("pruned:\n%s\nwant:\n%s", out, want)
	}
	if dropped["nat"] != 1 || dropped["filter"] != 1 {
		t.Errorf("dropped %v, want one nat and one filter rule", dropped)
	}
	last = last.Apply(cur, false, nil)
	// A chain emptied (declared without rules) is a change too.
	emptied := strings.Replace(next, "-A HERALD-SERVICES -d 198.19.0.1/32 -j HERALD-SVC-A\n", "", 1)
	out, _, _ = Prune([]byte(emptied), last)
	if !strings.Contains(string(out), ":HERALD-SERVICES - [0:0]\n") {
		t.Errorf("a chain that lost its rules must be flushed:\n%s", out)
	}
	// A full sync forgets what a partial one added.
	if d := last.Apply(ChainDigests{"nat/X": 1}, true, nil); len(d) != 1 {
		t.Errorf("after a full apply: %v", d)
	}
}

func TestPruneKeepsOddShapes(t *testing.T) {
	in := "*nat\n:C - [0:0]\n-A C -j ACCEPT\n:C - [0:0]\nCOMMIT\n"
	_, cur, _ := Prune([]byte(in), nil)
	out, _, _ := Prune([]byte(in), cur)
	if string(out) != in {
		t.Errorf("a chain declared twice was pruned:\n%s", out)
	}
}
