package proxy

import (
	"context"
	"time"

	"github.com/herald-lb/herald/proxy/nft"
	"github.com/herald-lb/herald/proxy/rules"
)

// nftFamily is one family in the nftables mode: one table, programmed
// over netlink, and the last one written.
type nftFamily struct {
	family rules.Family
	kernel NFTProgrammer
	// last is the table the last successful transaction wrote; nil until
	// the first, and after a failed one (the next recreates the table).
	last *nft.Table
	// lastRender is the render last came from, whose per-service chains
	// the next partial render reuses.
	lastRender *rules.NFTRuleset
}

// NFTBackend programs family as an nftables table through k.
func NFTBackend(family rules.Family, k NFTProgrammer) Backend {
	return Backend{Family: family, w: &nftFamily{family: family, kernel: k}}
}

func (f *nftFamily) mode() Mode { return ModeNFTables }

// sync renders the family as an nftables table and applies what differs
// from the last one written, in one transaction. A full sync rewrites
// every chain and map (the affinity sets keep their entries); after a
// failure, at start and when the table went missing it is recreated
// whole.
func (f *nftFamily) sync(_ context.Context, now func() time.Time, fr *FamilyResult, snap Snapshot, node rules.NodeConfig) error {
	t := now()
	opts := rules.NFTOptions{Changed: snap.Changed}
	if !fr.Full {
		// Unchanged Services' chains are the last render's, as built.
		opts.Prev = f.lastRender
	}
	rs := rules.RenderNFTWith(f.family, snap.Services, snap.Endpoints, node, opts)
	fr.problems = rs.Problems
	fr.Stats = rs.Stats
	mode := nft.Partial
	if fr.Full {
		mode = nft.Full
		if f.last == nil {
			mode = nft.Recreate
		}
	}
	var ch nft.Changes
	if rs.Delta != nil && mode == nft.Partial {
		// The render patched the last one and knows what it changed.
		ch = *rs.Delta
	} else {
		// Only the changed Services' chains are compared; the others'
		// are the same as last time, as in the iptables mode's partial
		// render.
		touched := map[string]bool{}
		for id, chains := range rs.ServiceChains {
			if snap.Changed[id.Key()] {
				for _, c := range chains {
					touched[c] = true
				}
			}
		}
		ch = nft.DiffWith(f.last, rs.Table, mode, func(c string) bool {
			return rules.IsNFTServiceChain(c) && !touched[c]
		})
	}
	fr.Stats.NATRules = ch.Rules()
	added, deleted := ch.Elements()
	fr.Bytes = added + deleted // elements written, the nft mode's measure of work besides rules
	fr.Render = now().Sub(t)
	t = now()
	if !ch.Empty() {
		if err := f.kernel.Apply(f.family, rs.Table, ch); err != nil {
			f.last, f.lastRender = nil, nil
			fr.Restore = now().Sub(t)
			return err
		}
	}
	fr.Restore = now().Sub(t)
	f.last, f.lastRender = rs.Table, &rs
	fr.health = rs.Health
	return nil
}

// present is the nftables mode's canary: herald's table exists. An
// error counts as missing, which costs a recreate and nothing else.
func (f *nftFamily) present() (bool, string) {
	if ok, err := f.kernel.Exists(f.family); err == nil && ok {
		return true, ""
	}
	f.last, f.lastRender = nil, nil
	return false, "table " + nft.TableName + " is gone: the ruleset was flushed"
}
