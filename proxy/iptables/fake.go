package iptables

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Fake is an in-memory Runner: tables of chains of rules, loaded with the
// same --noflush semantics as iptables-restore (a chain declared in the
// input is replaced; chains not declared are kept; -X deletes). It
// rejects input that the real tool would reject for structure (rules
// outside a table, a jump to a chain that does not exist, no COMMIT).
type Fake struct {
	mu     sync.Mutex
	tables map[string]map[string][]string
	// Restores records every input, in order.
	Restores [][]byte
	// FailRestore, when set, makes Restore fail with it.
	FailRestore error
}

var builtin = map[string][]string{
	"nat":    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
	"filter": {"INPUT", "FORWARD", "OUTPUT"},
	"mangle": {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"},
}

// NewFake makes a Fake with the built-in chains.
func NewFake() *Fake {
	f := &Fake{tables: map[string]map[string][]string{}}
	for t, chains := range builtin {
		f.tables[t] = map[string][]string{}
		for _, c := range chains {
			f.tables[t][c] = nil
		}
	}
	return f
}

func isBuiltin(table, chain string) bool {
	for _, c := range builtin[table] {
		if c == chain {
			return true
		}
	}
	return false
}

// Restore implements Runner.
func (f *Fake) Restore(_ context.Context, data []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Restores = append(f.Restores, append([]byte(nil), data...))
	if f.FailRestore != nil {
		return f.FailRestore
	}
	// Work on a copy: a failed restore changes nothing, like the real
	// tool's atomic commit.
	work := map[string]map[string][]string{}
	for t, chains := range f.tables {
		work[t] = map[string][]string{}
		for c, rules := range chains {
			work[t][c] = append([]string(nil), rules...)
		}
	}
	var table string
	committed := true
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1024*1024), 64*1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "*"):
			table = line[1:]
			if _, ok := work[table]; !ok {
				work[table] = map[string][]string{}
			}
			committed = false
		case line == "COMMIT":
			if table == "" {
				return fmt.Errorf("line %d: COMMIT outside a table", n)
			}
			table, committed = "", true
		case strings.HasPrefix(line, ":"):
			if table == "" {
				return fmt.Errorf("line %d: chain outside a table", n)
			}
			name := strings.Fields(line[1:])[0]
			work[table][name] = nil // declared: flushed, then filled
		case strings.HasPrefix(line, "-X "):
			name := strings.TrimSpace(line[3:])
			if isBuiltin(table, name) {
				return fmt.Errorf("line %d: cannot delete built-in chain %s", n, name)
			}
			delete(work[table], name)
		case strings.HasPrefix(line, "-A "):
			f := strings.Fields(line)
			if len(f) < 2 {
				return fmt.Errorf("line %d: %q", n, line)
			}
			if _, ok := work[table][f[1]]; !ok {
				return fmt.Errorf("line %d: chain %s does not exist", n, f[1])
			}
			work[table][f[1]] = append(work[table][f[1]], strings.Join(f[2:], " "))
		default:
			return fmt.Errorf("line %d: unsupported line %q", n, line)
		}
	}
	if !committed {
		return fmt.Errorf("table %s: no COMMIT", table)
	}
	// Jumps must name existing chains (or targets).
	for t, chains := range work {
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
	f.tables = work
	return nil
}

func jumpTarget(rule string) string {
	f := strings.Fields(rule)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "-j" || f[i] == "-g" {
			return f[i+1]
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
			fmt.Fprintf(&b, "-A %s %s\n", c, r)
		}
	}
	b.WriteString("COMMIT\n")
	return []byte(b.String()), nil
}

// Rules returns a chain's rules (without "-A chain").
func (f *Fake) Rules(table, chain string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.tables[table][chain]...)
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
		f.tables[table] = map[string][]string{}
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
	r := strings.Join(rule, " ")
	for _, have := range rules {
		if have == r {
			return nil
		}
	}
	if prepend {
		f.tables[table][chain] = append([]string{r}, rules...)
	} else {
		f.tables[table][chain] = append(rules, r)
	}
	return nil
}

// DeleteRule implements Runner.
func (f *Fake) DeleteRule(table, chain string, rule ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := strings.Join(rule, " ")
	rules := f.tables[table][chain]
	for i, have := range rules {
		if have == r {
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
