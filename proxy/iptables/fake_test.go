package iptables

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestFakeRestoreNoflush(t *testing.T) {
	f := NewFake()
	ctx := context.Background()
	first := `*nat
:HERALD-SERVICES - [0:0]
:HERALD-SVC-A - [0:0]
:HERALD-SVC-B - [0:0]
-A HERALD-SERVICES -d 198.19.0.10/32 -j HERALD-SVC-A
-A HERALD-SERVICES -d 198.19.0.11/32 -j HERALD-SVC-B
-A HERALD-SVC-A -j DNAT --to-destination 198.18.1.2:8080
-A HERALD-SVC-B -j DNAT --to-destination 198.18.2.2:8080
COMMIT
`
	if err := f.Restore(ctx, []byte(first)); err != nil {
		t.Fatal(err)
	}
	if err := f.EnsureRule(true, "nat", "PREROUTING", "-j", "HERALD-SERVICES"); err != nil {
		t.Fatal(err)
	}
	// A partial load: only SVC-A is declared and rewritten; SVC-B stays;
	// -X removes a chain.
	partial := `*nat
:HERALD-SVC-A - [0:0]
-A HERALD-SVC-A -j DNAT --to-destination 198.18.3.2:8080
COMMIT
`
	if err := f.Restore(ctx, []byte(partial)); err != nil {
		t.Fatal(err)
	}
	if got := f.Rules("nat", "HERALD-SVC-A"); !reflect.DeepEqual(got, []string{"-j DNAT --to-destination 198.18.3.2:8080"}) {
		t.Errorf("SVC-A after partial: %v", got)
	}
	if got := f.Rules("nat", "HERALD-SVC-B"); len(got) != 1 {
		t.Errorf("SVC-B was not declared and must be kept: %v", got)
	}
	if got := f.Rules("nat", "PREROUTING"); !reflect.DeepEqual(got, []string{"-j HERALD-SERVICES"}) {
		t.Errorf("housekeeping jump lost: %v", got)
	}

	// Structural errors leave everything as it was.
	for name, bad := range map[string]string{
		"missing chain":  "*nat\n-A HERALD-NOPE -j ACCEPT\nCOMMIT\n",
		"dangling jump":  "*nat\n:HERALD-SVC-A - [0:0]\n-A HERALD-SVC-A -j HERALD-SEP-GONE\nCOMMIT\n",
		"no commit":      "*nat\n:HERALD-SVC-A - [0:0]\n",
		"builtin delete": "*nat\n-X PREROUTING\nCOMMIT\n",
		"garbage":        "*nat\nhello\nCOMMIT\n",
	} {
		if err := f.Restore(ctx, []byte(bad)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if got := f.Rules("nat", "HERALD-SVC-A"); !reflect.DeepEqual(got, []string{"-j DNAT --to-destination 198.18.3.2:8080"}) {
		t.Errorf("a failed restore changed SVC-A: %v", got)
	}
	if err := f.Restore(ctx, []byte("*nat\n-X HERALD-SVC-B\nCOMMIT\n")); err == nil {
		t.Errorf("deleting a chain that is still jumped to must fail")
	}
	del := "*nat\n:HERALD-SERVICES - [0:0]\n-A HERALD-SERVICES -d 198.19.0.10/32 -j HERALD-SVC-A\n-X HERALD-SVC-B\nCOMMIT\n"
	if err := f.Restore(ctx, []byte(del)); err != nil {
		t.Fatal(err)
	}
	if ok, _ := f.ChainExists("nat", "HERALD-SVC-B"); ok {
		t.Errorf("-X did not delete SVC-B")
	}
	saved, _ := f.Save(ctx, "nat")
	if !strings.Contains(string(saved), "-A HERALD-SERVICES -d 198.19.0.10/32 -j HERALD-SVC-A") || strings.Contains(string(saved), "SVC-B") {
		t.Errorf("save:\n%s", saved)
	}
	f.FailRestore = errors.New("xtables lock")
	if err := f.Restore(ctx, []byte(first)); err == nil {
		t.Errorf("FailRestore ignored")
	}
	if len(f.Restores) != 10 {
		t.Errorf("recorded %d restores, want 10", len(f.Restores))
	}
}

// A rule is its arguments: restored quoted, then given to EnsureRule and
// DeleteRule unquoted, it is the same rule, and Save quotes it again.
func TestFakeQuotedRules(t *testing.T) {
	f := NewFake()
	ctx := context.Background()
	in := "*nat\n:HERALD-SERVICES - [0:0]\n-A PREROUTING -m comment --comment \"herald service portals\" -j HERALD-SERVICES\nCOMMIT\n"
	if err := f.Restore(ctx, []byte(in)); err != nil {
		t.Fatal(err)
	}
	args := []string{"-m", "comment", "--comment", "herald service portals", "-j", "HERALD-SERVICES"}
	if err := f.EnsureRule(true, "nat", "PREROUTING", args...); err != nil {
		t.Fatal(err)
	}
	want := []string{`-m comment --comment "herald service portals" -j HERALD-SERVICES`}
	if got := f.Rules("nat", "PREROUTING"); !reflect.DeepEqual(got, want) {
		t.Errorf("PREROUTING %q, want %q", got, want)
	}
	if saved, _ := f.Save(ctx, "nat"); !strings.Contains(string(saved), "-A PREROUTING "+want[0]+"\n") {
		t.Errorf("save:\n%s", saved)
	}
	if err := f.DeleteRule("nat", "PREROUTING", args...); err != nil {
		t.Fatal(err)
	}
	if got := f.Rules("nat", "PREROUTING"); len(got) != 0 {
		t.Errorf("DeleteRule left %q", got)
	}
	if err := f.Restore(ctx, []byte("*nat\n-A HERALD-SERVICES -m comment --comment \"open -j RETURN\nCOMMIT\n")); err == nil || !strings.Contains(err.Error(), "line 2: unterminated quote") {
		t.Errorf("unterminated quote: %v", err)
	}
}
