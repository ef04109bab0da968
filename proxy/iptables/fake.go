package iptables

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Fake is an in-memory Runner: tables of chains of rules, loaded with the
// same --noflush semantics as iptables-restore (a chain declared in the
// input is replaced; chains not declared are kept; -X deletes). It
// rejects input that the real tool would reject for structure (rules
// outside a table, a jump to a chain that does not exist, no COMMIT).
// Rules are kept as arguments, so a rule restored quoted and the same
// rule given to EnsureRule or DeleteRule are one rule.
type Fake struct {
	mu     sync.Mutex
	tables fakeTables
	// Restores records every input, in order.
	Restores [][]byte
	// FailRestore, when set, makes Restore fail with it.
	FailRestore error
	// FailIf, when set, is asked about each input; when it returns an
	// error, Restore fails with it and changes nothing (e.g. to fail one
	// restore of several).
	FailIf func(data []byte) error
}

var builtin = map[string][]string{
	"nat":    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
	"filter": {"INPUT", "FORWARD", "OUTPUT"},
	"mangle": {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"},
}

// NewFake makes a Fake with the built-in chains.
func NewFake() *Fake {
	f := &Fake{tables: fakeTables{}}
	for t, chains := range builtin {
		f.tables[t] = map[string][][]string{}
		for _, c := range chains {
			f.tables[t][c] = nil
		}
	}
	return f
}

func isBuiltin(table, chain string) bool {
	return slices.Contains(builtin[table], chain)
}

// Restore implements Runner.
func (f *Fake) Restore(_ context.Context, data []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Restores = append(f.Restores, append([]byte(nil), data...))
	if f.FailRestore != nil {
		return f.FailRestore
	}
	if f.FailIf != nil {
		if err := f.FailIf(data); err != nil {
			return err
		}
	}
	// Work on a copy: a failed restore changes nothing, like the real
	// tool's atomic commit.
	work := f.tables.clone()
	if err := work.load(data); err != nil {
		return err
	}
	if err := work.checkJumps(); err != nil {
		return err
	}
	f.tables = work
	return nil
}

// fakeTables holds the Fake's rules by table and chain, each rule as its
// arguments.
type fakeTables map[string]map[string][][]string

func (ts fakeTables) clone() fakeTables {
	out := fakeTables{}
	for t, chains := range ts {
		out[t] = map[string][][]string{}
		for c, rules := range chains {
			out[t][c] = slices.Clip(rules) // an append copies, never writes ts
		}
	}
	return out
}

// load applies restore input.
func (tables fakeTables) load(data []byte) error {
	var table string
	committed := true
	for l, err := range Lines(data) {
		if err != nil {
			return err
		}
		name := string(l.Name)
		switch l.Kind {
		case LineTable:
			table, committed = name, false
			if _, ok := tables[table]; !ok {
				tables[table] = map[string][][]string{}
			}
		case LineCommit:
			if table == "" {
				return fmt.Errorf("line %d: COMMIT outside a table", l.Num)
			}
			table, committed = "", true
		case LineChain:
			if table == "" {
				return fmt.Errorf("line %d: chain outside a table", l.Num)
			}
			tables[table][name] = nil // declared: flushed, then filled
		case LineDelete:
			if isBuiltin(table, name) {
				return fmt.Errorf("line %d: cannot delete built-in chain %s", l.Num, name)
			}
			delete(tables[table], name)
		case LineRule:
			if _, ok := tables[table][name]; !ok {
				return fmt.Errorf("line %d: chain %s does not exist", l.Num, name)
			}
			args, err := l.Args()
			if err != nil {
				return err
			}
			tables[table][name] = append(tables[table][name], args)
		}
	}
	if !committed {
		return fmt.Errorf("table %s: no COMMIT", table)
	}
	return nil
}

// checkJumps is iptables-restore's check at COMMIT: jumps must name
// existing chains (or targets).
func (tables fakeTables) checkJumps() error {
	for t, chains := range tables {
		for c, rules := range chains {
			for _, r := range rules {
				target := jumpTarget(r)
				if target == "" || isTarget(target) {
					continue
				}
				if _, ok := chains[target]; !ok {
					return fmt.Errorf("table %s chain %s: jump to missing chain %s", t, c, target)
				}
			}
		}
	}
	return nil
}

func jumpTarget(args []string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-j" || args[i] == "-g" {
			return args[i+1]
		}
	}
	return ""
}

func isTarget(t string) bool {
	switch t {
	case "ACCEPT", "DROP", "REJECT", "RETURN", "DNAT", "SNAT", "MASQUERADE", "MARK", "CONNMARK", "LOG":
		return true
	}
	return false
}

// Save implements Runner: the table in iptables-save's layout.
func (f *Fake) Save(_ context.Context, table string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	chains, ok := f.tables[table]
	if !ok {
		return nil, fmt.Errorf("no table %s", table)
	}
	names := make([]string, 0, len(chains))
	for c := range chains {
		names = append(names, c)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "*%s\n", table)
	for _, c := range names {
		policy := "-"
		if isBuiltin(table, c) {
			policy = "ACCEPT"
		}
		fmt.Fprintf(&b, ":%s %s [0:0]\n", c, policy)
	}
	for _, c := range names {
		for _, r := range chains[c] {
			fmt.Fprintf(&b, "-A %s %s\n", c, JoinArgs(r))
		}
	}
	b.WriteString("COMMIT\n")
	return []byte(b.String()), nil
}

// Rules returns a chain's rules (without "-A chain"), as Save writes
// them.
func (f *Fake) Rules(table, chain string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, r := range f.tables[table][chain] {
		out = append(out, JoinArgs(r))
	}
	return out
}

// ChainExists implements Runner.
func (f *Fake) ChainExists(table, chain string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.tables[table][chain]
	return ok, nil
}

// EnsureChain implements Runner.
func (f *Fake) EnsureChain(table, chain string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tables[table] == nil {
		f.tables[table] = map[string][][]string{}
	}
	if _, ok := f.tables[table][chain]; !ok {
		f.tables[table][chain] = nil
	}
	return nil
}

// EnsureRule implements Runner.
func (f *Fake) EnsureRule(prepend bool, table, chain string, rule ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	rules, ok := f.tables[table][chain]
	if !ok {
		return fmt.Errorf("chain %s/%s does not exist", table, chain)
	}
	if slices.ContainsFunc(rules, func(have []string) bool { return slices.Equal(have, rule) }) {
		return nil
	}
	r := slices.Clone(rule)
	if prepend {
		f.tables[table][chain] = append([][]string{r}, rules...)
	} else {
		f.tables[table][chain] = append(rules, r)
	}
	return nil
}

// DeleteRule implements Runner.
func (f *Fake) DeleteRule(table, chain string, rule ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	rules := f.tables[table][chain]
	for i, have := range rules {
		if slices.Equal(have, rule) {
			f.tables[table][chain] = append(rules[:i:i], rules[i+1:]...)
			return nil
		}
	}
	return nil
}

// DeleteChain implements Runner.
func (f *Fake) DeleteChain(table, chain string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.tables[table], chain)
	return nil
}
