package proxy

import (
	"github.com/herald-lb/herald/proxy/nft"
	"github.com/herald-lb/herald/proxy/rules"
)

// syncFamilyNFT renders one family as an nftables table and applies what
// differs from the last one written, in one transaction. A full sync
// rewrites every chain and map (the affinity sets keep their entries);
// after a failure, at start and when the table went missing it is
// recreated whole.
func (s *Syncer) syncFamilyNFT(f *famState, fr *FamilyResult, snap Snapshot, node rules.NodeConfig) error {
	t := s.now()
	opts := rules.NFTOptions{Changed: snap.Changed}
	if !fr.Full {
		// Unchanged Services' chains are the last render's, as built.
		opts.Prev = f.nftLastRender
	}
	rs := rules.RenderNFTWith(f.Family, snap.Services, snap.Endpoints, node, opts)
	fr.problems = rs.Problems
	fr.Stats = rs.Stats
	mode := nft.Partial
	if fr.Full {
		mode = nft.Full
		if f.nftLast == nil {
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
		ch = nft.DiffWith(f.nftLast, rs.Table, mode, func(c string) bool {
			return rules.IsNFTServiceChain(c) && !touched[c]
		})
	}
	fr.Stats.NATRules = ch.Rules()
	added, deleted := ch.Elements()
	fr.Bytes = added + deleted // elements written, the nft mode's measure of work besides rules
	fr.Render = s.now().Sub(t)
	t = s.now()
	if !ch.Empty() {
		if err := f.NFT.Apply(f.Family, rs.Table, ch); err != nil {
			f.nftLast, f.nftLastRender = nil, nil
			fr.Restore = s.now().Sub(t)
			return err
		}
	}
	fr.Restore = s.now().Sub(t)
	f.nftLast, f.nftLastRender = rs.Table, &rs
	fr.health = rs.Health
	return nil
}

// nftTablePresent is the nftables mode's canary: herald's table exists.
// An error counts as missing, which costs a recreate and nothing else.
func (s *Syncer) nftTablePresent(f *famState) bool {
	ok, err := f.NFT.Exists(f.Family)
	return err == nil && ok
}
