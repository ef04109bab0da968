package proxy

import (
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
	return savedChains(save, rules.IsServiceChain)
}

// savedChains lists the chains declared in iptables-save output that
// match. It is never nil. A line iptables.Lines cannot read is skipped:
// iptables-save does not write one, and it would not be herald's.
func savedChains(save []byte, match func(chain string) bool) []string {
	out := []string{}
	for l, err := range iptables.Lines(save) {
		if err == nil && l.Kind == iptables.LineChain && match(string(l.Name)) {
			out = append(out, string(l.Name))
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
	for l, err := range iptables.Lines(save) {
		if err != nil || l.Kind != iptables.LineRule || !builtinChains[string(l.Name)] {
			continue
		}
		args, err := l.Args()
		if err != nil {
			continue
		}
		if target := heraldTarget(args); target != "" {
			chain := string(l.Name)
			out[chain] = append(out[chain], savedJump{target: target, args: args})
		}
	}
	return out
}

// heraldTarget is the herald chain a rule jumps or goes to, or "".
func heraldTarget(args []string) string {
	for i := 0; i+1 < len(args); i++ {
		if (args[i] == "-j" || args[i] == "-g") && strings.HasPrefix(args[i+1], "HERALD-") {
			return args[i+1]
		}
	}
	return ""
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
		chains := savedChains(save, func(c string) bool { return isHeraldChain(table, c) })
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
