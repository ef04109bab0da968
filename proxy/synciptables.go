package proxy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/herald-lb/herald/proxy/iptables"
	"github.com/herald-lb/herald/proxy/rules"
)

// iptablesFamily is one family in the iptables mode: iptables-restore
// through runner, and what the last restores left in the kernel.
type iptablesFamily struct {
	family rules.Family
	runner iptables.Runner
	// chunkChains is rules.Options.ChunkChains for full syncs: 0 restores
	// a large nat table in chunks (rules.Ruleset.NATChunks), negative in
	// one input. Chunks are for iptables-nft, whose restore is quadratic
	// in its input; iptables-legacy rewrites the whole table on every
	// restore, so chunks only slow it down (10,000 Services: 4.4 s in one
	// restore, 69 s in chunks).
	chunkChains int
	// chains are the per-service nat chains in the kernel after the last
	// successful restore; nil until the first one (then iptables-save
	// tells what an earlier run left).
	chains []string
	// digests are the chains as the last restores wrote them; a partial
	// sync leaves out those it would write unchanged.
	digests rules.ChainDigests
}

// IPTablesBackend programs family through r (iptables-restore). A
// chunkChains of 0 restores a large nat table in chunks, negative in
// one input (for iptables-legacy; see iptablesFamily.chunkChains).
func IPTablesBackend(family rules.Family, r iptables.Runner, chunkChains int) Backend {
	return Backend{Family: family, w: &iptablesFamily{family: family, runner: r, chunkChains: chunkChains}}
}

func (f *iptablesFamily) mode() Mode { return ModeIPTables }

// sync renders the family as iptables-restore input and restores it: a
// full sync after housekeeping (and, the first time, reading which
// chains an earlier run left), else only the changed Services' chains
// and those whose digest changed.
func (f *iptablesFamily) sync(ctx context.Context, now func() time.Time, fr *FamilyResult, snap Snapshot, node rules.NodeConfig) error {
	opts := rules.Options{Existing: f.chains, ChunkChains: f.chunkChains}
	if fr.Full {
		t := now()
		if err := Housekeeping(ctx, f.runner); err != nil {
			return fmt.Errorf("housekeeping: %w", err)
		}
		fr.Housekeeping = now().Sub(t)
		if f.chains == nil {
			// First sync: chains an earlier run left behind are stale
			// unless rendered again.
			t = now()
			save, err := f.runner.Save(ctx, "nat")
			if err != nil {
				return err
			}
			opts.Existing = heraldChains(save)
			fr.Save = now().Sub(t)
		}
	} else {
		opts.Changed = snap.Changed
	}
	t := now()
	rs := rules.RenderWith(f.family, snap.Services, snap.Endpoints, node, opts)
	fr.problems = rs.Problems
	fr.Stats = rs.Stats
	last := f.digests
	if fr.Full {
		last = nil // a full sync rewrites every chain, as a repair
	}
	// Only a full render is chunked, and it prunes nothing: each chunk's
	// digests are of chains no other chunk has.
	inputs := rs.Inputs()
	cur := rules.ChainDigests{}
	for i, in := range inputs {
		data, c, dropped := rules.Prune(in, last)
		fr.Stats.NATRules -= dropped["nat"]
		inputs[i] = data
		fr.Bytes += len(data)
		for k, v := range c {
			cur[k] = v
		}
	}
	fr.Render = now().Sub(t)
	fr.Chunks = len(inputs)
	for i, in := range inputs {
		t = now()
		err := f.runner.Restore(ctx, in)
		fr.Restore += now().Sub(t)
		if err != nil {
			if i > 0 {
				// The chunks before it are in: the kernel holds chains of
				// this render beside the old ones (all complete, the old
				// dispatch chains still in charge). The full sync that
				// follows must know them all to delete what it no longer
				// uses, and must not trust the digests.
				f.chains = unionChains(opts.Existing, rs.NATChains)
				f.digests = nil
			}
			if len(inputs) > 1 {
				return fmt.Errorf("restore %d of %d: %w", i+1, len(inputs), err)
			}
			return err
		}
	}
	f.digests = f.digests.Apply(cur, fr.Full, rs.Deleted)
	f.chains = rs.NATChains
	if f.chains == nil {
		f.chains = []string{}
	}
	fr.health = rs.Health
	return nil
}

// unionChains is every chain in a or b, once.
func unionChains(a, b []string) []string {
	out := make([]string, 0, len(a)+len(b))
	seen := make(map[string]bool, len(a)+len(b))
	for _, l := range [][]string{a, b} {
		for _, c := range l {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	return out
}

// present checks the canary chain in every table it lives in; an error
// counts as missing, which costs a full sync and nothing else.
func (f *iptablesFamily) present() (bool, string) {
	for _, t := range rules.CanaryTables {
		ok, err := f.runner.ChainExists(t, rules.CanaryChain)
		if err != nil || !ok {
			return false, "canary chain " + rules.CanaryChain + " is gone: the tables were flushed"
		}
	}
	return true, ""
}

// Housekeeping makes sure herald's base chains exist and the built-in
// chains jump to them, in the order rules.Jumps gives, and creates the
// canary chain. It goes before a full restore so that the restore
// replaces chains that are already hooked in.
func Housekeeping(ctx context.Context, r iptables.Runner) error {
	jumps := rules.Jumps()
	var errs []error
	for _, j := range jumps {
		if err := r.EnsureChain(j.Table, j.Target); err != nil {
			errs = append(errs, fmt.Errorf("chain %s/%s: %w", j.Table, j.Target, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// Prepending in reverse leaves them at the top in the listed order.
	for i := len(jumps) - 1; i >= 0; i-- {
		j := jumps[i]
		if err := r.EnsureRule(true, j.Table, j.Chain, j.Args()...); err != nil {
			errs = append(errs, fmt.Errorf("jump %s/%s -> %s: %w", j.Table, j.Chain, j.Target, err))
		}
	}
	for _, t := range rules.CanaryTables {
		if err := r.EnsureChain(t, rules.CanaryChain); err != nil {
			errs = append(errs, fmt.Errorf("canary %s/%s: %w", t, rules.CanaryChain, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return repairJumpOrder(ctx, r)
}

// repairJumpOrder puts the filter table's jumps back in order when one of
// them was deleted and re-inserted at the top (EnsureRule only adds what
// is missing). The firewall DROP must come before the ACCEPTs. Only the
// filter table has several herald jumps per built-in chain, and it is
// small, so reading it costs little.
func repairJumpOrder(ctx context.Context, r iptables.Runner) error {
	save, err := r.Save(ctx, "filter")
	if err != nil {
		return err
	}
	have := builtinJumps(save)
	var errs []error
	for _, chain := range []string{"INPUT", "FORWARD", "OUTPUT"} {
		var want []rules.Jump
		var wantTargets []string
		for _, j := range rules.Jumps() {
			if j.Table == "filter" && j.Chain == chain {
				want = append(want, j)
				wantTargets = append(wantTargets, j.Target)
			}
		}
		var got []string
		for _, j := range have[chain] {
			got = append(got, j.target)
		}
		if slices.Equal(got, wantTargets) {
			continue
		}
		// Delete every herald jump there (duplicates too), then insert
		// the list again.
		for _, j := range have[chain] {
			if err := r.DeleteRule("filter", chain, j.args...); err != nil {
				errs = append(errs, err)
			}
		}
		for i := len(want) - 1; i >= 0; i-- {
			if err := r.EnsureRule(true, "filter", chain, want[i].Args()...); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
