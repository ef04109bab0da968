package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/herald-lb/herald/proxy/iptables"
	"github.com/herald-lb/herald/proxy/rules"
)

// builtinChains are the chains iptables-save lists with a policy.
var builtinChains = map[string]bool{"PREROUTING": true, "INPUT": true, "FORWARD": true, "OUTPUT": true, "POSTROUTING": true}

// isHeraldChain tells the chains herald creates: the fixed ones, the
// per-service ones and the canary.
func isHeraldChain(table, chain string) bool {
	return chain == rules.CanaryChain || rules.IsServiceChain(chain) || slices.Contains(rules.StaticChains(table), chain)
}

// heraldChains lists the per-service chains in iptables-save output.
func heraldChains(save []byte) []string {
	out := []string{}
	sc := bufio.NewScanner(bytes.NewReader(save))
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, ":") {
			continue
		}
		name, _, _ := strings.Cut(line[1:], " ")
		if rules.IsServiceChain(name) {
			out = append(out, name)
		}
	}
	return out
}

// savedJump is a rule in a built-in chain that jumps to a herald chain.
type savedJump struct {
	target string
	args   []string // the rule without "-A CHAIN", unquoted
}

// builtinJumps finds, per built-in chain, the rules that jump to herald
// chains, in their order.
func builtinJumps(save []byte) map[string][]savedJump {
	out := map[string][]savedJump{}
	sc := bufio.NewScanner(bytes.NewReader(save))
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "-A ")
		if !ok {
			continue
		}
		chain, rule, _ := strings.Cut(rest, " ")
		if !builtinChains[chain] {
			continue
		}
		args := splitRule(rule)
		for i := 0; i+1 < len(args); i++ {
			if (args[i] == "-j" || args[i] == "-g") && strings.HasPrefix(args[i+1], "HERALD-") {
				out[chain] = append(out[chain], savedJump{target: args[i+1], args: args})
				break
			}
		}
	}
	return out
}

// splitRule splits an iptables-save rule into arguments; iptables-save
// quotes arguments with spaces in double quotes and escapes quotes in
// them with a backslash.
func splitRule(s string) []string {
	var out []string
	var cur strings.Builder
	inQuote, have := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && inQuote && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case c == '"':
			inQuote, have = !inQuote, true
		case c == ' ' && !inQuote:
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}

// Cleanup removes everything herald's proxy installed in one family: the
// jumps from the built-in chains (whatever their exact form, so rules of
// older versions go too), then every herald chain in nat and filter in
// one restore per table (declaring a chain flushes it, so chains that
// jump to each other can all be deleted), then the canary in mangle.
// What is not herald's is left alone.
func Cleanup(ctx context.Context, r iptables.Runner) error {
	var errs []error
	for _, table := range []string{"nat", "filter"} {
		save, err := r.Save(ctx, table)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for chain, jumps := range builtinJumps(save) {
			for _, j := range jumps {
				if err := r.DeleteRule(table, chain, j.args...); err != nil {
					errs = append(errs, fmt.Errorf("%s/%s: %w", table, chain, err))
				}
			}
		}
		var chains []string
		sc := bufio.NewScanner(bytes.NewReader(save))
		sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, ":") {
				name, _, _ := strings.Cut(line[1:], " ")
				if isHeraldChain(table, name) {
					chains = append(chains, name)
				}
			}
		}
		if len(chains) == 0 {
			continue
		}
		var b strings.Builder
		b.WriteString("*" + table + "\n")
		for _, c := range chains {
			b.WriteString(":" + c + " - [0:0]\n")
		}
		for _, c := range chains {
			b.WriteString("-X " + c + "\n")
		}
		b.WriteString("COMMIT\n")
		if err := r.Restore(ctx, []byte(b.String())); err != nil {
			errs = append(errs, fmt.Errorf("deleting %d chains of %s: %w", len(chains), table, err))
		}
	}
	if err := r.DeleteChain("mangle", rules.CanaryChain); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
