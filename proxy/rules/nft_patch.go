package rules

import (
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/herald-lb/herald/proxy/nft"
)

// A partial sync at 10,000 Services must not walk 10,000 Services: the
// walk alone (normalizing, hashing chain names, filling the maps) took
// 150 ms. A render therefore records what each Service port put in the
// table, and the next render, when only a few Services changed, renders
// those alone and patches the previous table: their old elements,
// chains and sets out, the new ones in. It computes the transaction too
// (NFTRuleset.Delta), so no diff walks the table either. The previous
// ruleset is only read: copies are made of what changes (the sorted
// element lists of touched sets, the chain list, the per-Service maps),
// which costs a few milliseconds at 10,000 Services.

// nftPatchState is what a render leaves for the next one to patch.
type nftPatchState struct {
	node nodeParams
	// services are the records of each Service's ports.
	services map[ServiceKey][]*nftPortRecord
	// counts holds, for each plain set, how many Service ports want each
	// element, parallel to the set's sorted elements.
	counts map[string][]int32
	// conflicts are map keys two Service ports wanted: the first by
	// name won, which only a walk in name order can decide again.
	conflicts int
	// dsr: some port has direct server return (nftPortRecord.dsr).
	dsr bool
}

// nftPortRecord is one Service port's share of a render.
type nftPortRecord struct {
	id     ServicePortName
	elems  []nftElemRef
	chains []*nft.Chain
	sets   []*nft.Set // affinity sets
	health *ServiceHealth
	// noLocalInt and noLocalExt are its Stats.NoLocalEndpoints*.
	noLocalInt, noLocalExt int
	// dsr: it has direct server return, whose maps a patch does not
	// handle (a render with such a port is full).
	dsr bool
}

type nftElemRef struct {
	set string
	key nft.Key
}

func (r *nftRenderer) patchState() *nftPatchState {
	ps := &nftPatchState{node: r.node, services: r.records, counts: map[string][]int32{}, conflicts: r.conflicts}
	for _, recs := range r.records {
		for _, rec := range recs {
			ps.dsr = ps.dsr || rec.dsr
		}
	}
	for _, s := range r.t.Sets {
		if s.Map || s.Endpoints || s.Dynamic || len(s.Elements) == 0 {
			continue
		}
		c := make([]int32, len(s.Elements))
		for i, e := range s.Elements {
			c[i] = r.keys[s.Name][e.Key]
		}
		ps.counts[s.Name] = c
	}
	return ps
}

// nftPatchShare bounds the changed Services a patch takes: past one in
// eight, walking everything again costs about the same.
const nftPatchShare = 8

// patchNFT renders opts.Changed alone and patches opts.Prev with it. It
// reports false when it cannot (no usable previous render, another node
// configuration, a key two Services want, a set that changes type, too
// many changes); the caller then renders in full.
func patchNFT(f Family, services []Service, endpoints map[ServicePortName][]Endpoint, np nodeParams, nodeProbs []Problem, opts NFTOptions) (NFTRuleset, bool) {
	prev := opts.Prev
	if prev == nil || prev.patch == nil || prev.Family != f || prev.Table == nil || opts.Changed == nil {
		return NFTRuleset{}, false
	}
	ps := prev.patch
	if ps.conflicts > 0 || ps.dsr || len(opts.Changed)*nftPatchShare > len(ps.services)+nftPatchShare || !reflect.DeepEqual(ps.node, np) {
		return NFTRuleset{}, false
	}

	// The changed Services, rendered on their own; the sets they may add
	// to are known by name, without elements. A Service the previous
	// render did not have counts as changed whether or not Changed says
	// so (Changed must name the deleted ones).
	changed, cloned := opts.Changed, false
	var subset []Service
	for i := range services {
		k := services[i].ID().Key()
		if _, known := ps.services[k]; !changed[k] && !known {
			if !cloned {
				changed, cloned = maps.Clone(opts.Changed), true
			}
			changed[k] = true
		}
		if changed[k] {
			subset = append(subset, services[i])
		}
	}
	if len(changed)*nftPatchShare > len(ps.services)+nftPatchShare {
		return NFTRuleset{}, false
	}
	opts.Changed = changed
	scratch := NFTRuleset{Family: f, Table: &nft.Table{Family: f}, ServiceChains: map[ServicePortName][]string{}, Slots: map[string]uint32{}}
	r := newNFTRenderer(f, np, &scratch, opts)
	for _, s := range prev.Table.Sets {
		r.sets[s.Name] = &nft.Set{Name: s.Name, Key: s.Key, Map: s.Map, Endpoints: s.Endpoints, Proto: s.Proto, Timeout: s.Timeout, Dynamic: s.Dynamic}
	}
	probs := eachServicePort(f, subset, endpoints, np, nil, r.recordService)
	if r.conflicts > 0 {
		return NFTRuleset{}, false
	}
	for _, recs := range r.records {
		for _, rec := range recs {
			if rec.dsr {
				return NFTRuleset{}, false
			}
		}
	}

	var old []*nftPortRecord
	for k := range opts.Changed {
		old = append(old, ps.services[k]...)
	}
	if len(old) == 0 && len(r.records) == 0 && len(probs) == 0 && !hasProblemsOf(prev.Problems, opts.Changed) && allKnown(ps, subset) {
		// Nothing of the changed Services was or is in this family's
		// table (the other family's Services, in a dual-stack proxy):
		// the previous render stands as it is, shared.
		out := *prev
		out.Delta = &nft.Changes{Mode: nft.Partial}
		return out, true
	}
	p := &nftPatcher{prev: prev, ps: ps, r: r, delta: nft.Changes{Mode: nft.Partial, DelElements: map[string][]nft.Element{}, AddElements: map[string][]nft.Element{}}}
	sets, ok := p.sets(old)
	if !ok {
		return NFTRuleset{}, false
	}
	chains := p.chains(old)

	rs := NFTRuleset{Family: f, Table: &nft.Table{Family: f, Chains: chains, Sets: sets}, NextSlot: r.next}
	rs.ServiceChains = maps.Clone(prev.ServiceChains)
	rs.Slots = maps.Clone(prev.Slots)
	for _, rec := range old {
		delete(rs.ServiceChains, rec.id)
		for _, c := range rec.chains {
			delete(rs.Slots, c.Name)
		}
	}
	maps.Copy(rs.ServiceChains, scratch.ServiceChains)
	maps.Copy(rs.Slots, scratch.Slots)

	rs.Problems = nodeProbs
	for _, pr := range prev.Problems {
		if pr.Service != (ServicePortName{}) && !opts.Changed[pr.Service.Key()] {
			rs.Problems = append(rs.Problems, pr)
		}
	}
	rs.Problems = append(rs.Problems, probs...)
	for _, h := range prev.Health {
		if !opts.Changed[h.Service.Key()] {
			rs.Health = append(rs.Health, h)
		}
	}
	rs.Health = append(rs.Health, scratch.Health...)

	rs.Stats = prev.Stats
	for _, rec := range old {
		rs.Stats.Services--
		rs.Stats.NoLocalEndpointsInternal -= rec.noLocalInt
		rs.Stats.NoLocalEndpointsExternal -= rec.noLocalExt
		for _, c := range rec.chains {
			rs.Stats.NATRulesTotal -= len(c.Rules)
		}
	}
	for _, recs := range r.records {
		for _, rec := range recs {
			rs.Stats.Services++
			rs.Stats.NoLocalEndpointsInternal += rec.noLocalInt
			rs.Stats.NoLocalEndpointsExternal += rec.noLocalExt
			for _, c := range rec.chains {
				rs.Stats.NATRulesTotal += len(c.Rules)
			}
		}
	}
	rs.Stats.NATRules = p.delta.Rules()
	rs.Stats.NATChains = len(chains)

	recs := maps.Clone(ps.services)
	for k := range opts.Changed {
		delete(recs, k)
	}
	for i := range subset {
		recs[subset[i].ID().Key()] = []*nftPortRecord{} // still there, maybe without a port here
	}
	maps.Copy(recs, r.records)
	rs.patch = &nftPatchState{node: np, services: recs, counts: p.counts}
	// A copy: a pointer into p would keep p, and through p.prev every
	// earlier render, alive.
	delta := p.delta
	rs.Delta = &delta
	return rs, true
}

func hasProblemsOf(probs []Problem, changed map[ServiceKey]bool) bool {
	for _, p := range probs {
		if p.Service != (ServicePortName{}) && changed[p.Service.Key()] {
			return true
		}
	}
	return false
}

// allKnown reports whether the previous render knew every Service of
// subset that is still there.
func allKnown(ps *nftPatchState, subset []Service) bool {
	for i := range subset {
		if _, ok := ps.services[subset[i].ID().Key()]; !ok {
			return false
		}
	}
	return true
}

type nftPatcher struct {
	prev   *NFTRuleset
	ps     *nftPatchState
	r      *nftRenderer // the changed Services' render
	delta  nft.Changes
	counts map[string][]int32
}

// sets patches every set the changed Services touched and returns the
// new sorted set list; false when the patch cannot be made.
func (p *nftPatcher) sets(old []*nftPortRecord) ([]*nft.Set, bool) {
	dels := map[string]map[nft.Key]int32{}
	for _, rec := range old {
		for _, e := range rec.elems {
			if dels[e.set] == nil {
				dels[e.set] = map[nft.Key]int32{}
			}
			dels[e.set][e.key]++
		}
	}
	touched := map[string]bool{}
	for name := range dels {
		touched[name] = true
	}
	for name, s := range p.r.sets {
		if len(s.Elements) > 0 {
			touched[name] = true
		}
	}
	p.counts = maps.Clone(p.ps.counts)
	replaced := map[string]*nft.Set{}
	var added []*nft.Set
	for name := range touched {
		prevSet := p.prev.Table.Set(name)
		cur := p.r.sets[name]
		if cur == nil {
			cur = prevSet // only deletions
		}
		ns, ok := p.patchSet(prevSet, cur, dels[name], p.r.keys[name])
		if !ok {
			return nil, false
		}
		switch {
		case prevSet == nil && len(ns.Elements) > 0:
			added = append(added, ns)
			p.delta.AddSets = append(p.delta.AddSets, ns)
		case prevSet == nil:
		case ns.Endpoints && len(ns.Elements) == 0:
			// As a full render, which makes these maps when used.
			replaced[name] = nil
			p.delta.DelSets = append(p.delta.DelSets, name)
			delete(p.delta.DelElements, name)
		default:
			replaced[name] = ns
		}
	}

	// Affinity sets: kept when still there (their entries are the packet
	// path's), added and deleted with their Services.
	oldAff := map[string]*nft.Set{}
	for _, rec := range old {
		for _, s := range rec.sets {
			oldAff[s.Name] = s
		}
	}
	newAff := map[string]bool{}
	for _, recs := range p.r.records {
		for _, rec := range recs {
			for _, s := range rec.sets {
				newAff[s.Name] = true
				prevSet := p.prev.Table.Set(s.Name)
				switch {
				case prevSet == nil:
					added = append(added, s)
					p.delta.AddSets = append(p.delta.AddSets, s)
				case prevSet.Timeout != s.Timeout || !prevSet.Dynamic:
					return nil, false // a type change: the full diff recreates
				}
			}
		}
	}
	for name := range oldAff {
		if !newAff[name] {
			replaced[name] = nil
			p.delta.DelSets = append(p.delta.DelSets, name)
		}
	}

	out := make([]*nft.Set, 0, len(p.prev.Table.Sets)+len(added))
	for _, s := range p.prev.Table.Sets {
		ns, ok := replaced[s.Name]
		switch {
		case !ok:
			out = append(out, s)
		case ns != nil:
			out = append(out, ns)
		}
	}
	out = append(out, added...)
	slices.SortFunc(out, func(a, b *nft.Set) int { return strings.Compare(a.Name, b.Name) })
	slices.Sort(p.delta.DelSets)
	return out, true
}

// patchSet merges a set's previous elements, less those the changed
// Services had (dels: key -> how many of their ports), with those they
// have now (cur's elements; adds counts them per key). It records the
// elements the kernel must lose and gain.
func (p *nftPatcher) patchSet(prevSet, cur *nft.Set, dels map[nft.Key]int32, adds map[nft.Key]int32) (*nft.Set, bool) {
	ns := &nft.Set{Name: cur.Name, Key: cur.Key, Map: cur.Map, Endpoints: cur.Endpoints, Proto: cur.Proto, Timeout: cur.Timeout, Dynamic: cur.Dynamic}
	isMap := cur.Map || cur.Endpoints
	var prevEls []nft.Element
	var prevCounts []int32
	if prevSet != nil {
		prevEls, prevCounts = prevSet.Elements, p.ps.counts[prevSet.Name]
	}
	var newEls []nft.Element
	if cur != prevSet {
		newEls = slices.Clone(cur.Elements)
		slices.SortFunc(newEls, func(a, b nft.Element) int { return nft.CompareKeys(a.Key, b.Key) })
	}
	// The keys that change, in order; between them the previous elements
	// are copied in runs (a sync touches a few keys of 100,000).
	keys := make([]nft.Key, 0, len(dels)+len(newEls))
	for k := range dels {
		keys = append(keys, k)
	}
	for _, e := range newEls {
		if _, ok := dels[e.Key]; !ok {
			keys = append(keys, e.Key)
		}
	}
	slices.SortFunc(keys, nft.CompareKeys)
	ns.Elements = make([]nft.Element, 0, len(prevEls)+len(newEls))
	var counts []int32
	if !isMap {
		counts = make([]int32, 0, len(prevEls)+len(newEls))
	}
	var del, add []nft.Element
	i, j := 0, 0
	for _, k := range keys {
		n, _ := slices.BinarySearchFunc(prevEls[i:], k, func(e nft.Element, k nft.Key) int { return nft.CompareKeys(e.Key, k) })
		ns.Elements = append(ns.Elements, prevEls[i:i+n]...)
		if !isMap {
			counts = append(counts, prevCounts[i:i+n]...)
		}
		i += n
		inPrev := i < len(prevEls) && prevEls[i].Key == k
		inNew := j < len(newEls) && newEls[j].Key == k
		switch {
		case inPrev && !inNew:
			e := prevEls[i]
			c := int32(1)
			if !isMap {
				c = prevCounts[i]
			}
			if c -= dels[k]; c > 0 {
				ns.Elements = append(ns.Elements, e)
				if !isMap {
					counts = append(counts, c)
				}
			} else {
				del = append(del, e)
			}
		case inNew && !inPrev:
			e := newEls[j]
			ns.Elements = append(ns.Elements, e)
			if !isMap {
				counts = append(counts, adds[k])
			}
			add = append(add, e)
		case inNew && inPrev:
			e, ne := prevEls[i], newEls[j]
			if isMap {
				if dels[k] == 0 {
					return nil, false // another Service's key: first-wins needs the full walk
				}
				ns.Elements = append(ns.Elements, ne)
				if e.Verdict != ne.Verdict || e.To != ne.To {
					del, add = append(del, e), append(add, ne)
				}
			} else {
				ns.Elements = append(ns.Elements, e)
				counts = append(counts, prevCounts[i]-dels[k]+adds[k])
			}
		}
		if inPrev {
			i++
		}
		if inNew {
			j++
		}
	}
	ns.Elements = append(ns.Elements, prevEls[i:]...)
	if !isMap {
		counts = append(counts, prevCounts[i:]...)
	}
	if !isMap && !cur.Dynamic {
		if len(ns.Elements) > 0 {
			p.counts[ns.Name] = counts
		} else {
			delete(p.counts, ns.Name)
		}
	}
	if len(del) > 0 {
		p.delta.DelElements[ns.Name] = del
	}
	if len(add) > 0 {
		p.delta.AddElements[ns.Name] = add
	}
	return ns, true
}

// chains swaps the changed Services' chains and returns the new sorted
// chain list.
func (p *nftPatcher) chains(old []*nftPortRecord) []*nft.Chain {
	oldChains := map[string]*nft.Chain{}
	for _, rec := range old {
		for _, c := range rec.chains {
			oldChains[c.Name] = c
		}
	}
	fresh := slices.Clone(p.r.t.Chains)
	slices.SortFunc(fresh, func(a, b *nft.Chain) int { return strings.Compare(a.Name, b.Name) })
	kept := map[string]bool{}
	for _, c := range fresh {
		kept[c.Name] = true
		oc, had := oldChains[c.Name]
		if !had {
			p.delta.AddChains = append(p.delta.AddChains, c)
			p.delta.Rewrite = append(p.delta.Rewrite, c)
		} else if !sameNFTRules(p.prev.Family, oc, c) {
			p.delta.Rewrite = append(p.delta.Rewrite, c)
		}
	}
	for name := range oldChains {
		if !kept[name] {
			p.delta.DelChains = append(p.delta.DelChains, name)
		}
	}
	slices.Sort(p.delta.DelChains)

	// The previous list less the old chains, merged with the new ones
	// (base chains, none of them a Service's, stay first).
	out := make([]*nft.Chain, 0, len(p.prev.Table.Chains)+len(fresh))
	j := 0
	for _, c := range p.prev.Table.Chains {
		if _, gone := oldChains[c.Name]; gone {
			continue
		}
		for c.Base == nil && j < len(fresh) && strings.Compare(fresh[j].Name, c.Name) < 0 {
			out = append(out, fresh[j])
			j++
		}
		out = append(out, c)
	}
	return append(out, fresh[j:]...)
}

// sameNFTRules compares two chains' rules by their nft spelling.
func sameNFTRules(f Family, a, b *nft.Chain) bool {
	return slices.EqualFunc(a.Rules, b.Rules, func(x, y nft.Rule) bool { return x.Text(f) == y.Text(f) })
}
