package nft

import (
	"slices"
)

// Mode says how much of the table a sync rewrites.
type Mode int

const (
	// Partial rewrites the chains whose rules changed, adds and deletes
	// what appeared or went, and changes only the map elements that
	// differ from the table last applied.
	Partial Mode = iota
	// Full rewrites every chain and refills every set and map, keeping
	// the affinity sets' entries (the periodic resync).
	Full
	// Recreate deletes the table and creates it again in the same
	// transaction (first sync, table lost, previous sync failed): what
	// the kernel holds is not known, and nothing may be left over.
	Recreate
)

func (m Mode) String() string {
	return [...]string{"partial", "full", "recreate"}[m]
}

// Changes is what one transaction does to herald's table, in the order
// the kernel needs it: sets and chains exist before rules and elements
// name them; references go before what they point to is deleted.
type Changes struct {
	Mode Mode
	// AddSets are created (or, existing alike, kept); FlushSets are
	// emptied before their elements are added again.
	AddSets   []*Set
	FlushSets []string
	// AddChains are created empty (existing ones are kept).
	AddChains []*Chain
	// Rewrite are flushed (unless just created) and get their rules.
	Rewrite []*Chain
	// DelElements and AddElements per set: a changed map value is a
	// delete and an add.
	DelElements map[string][]Element
	AddElements map[string][]Element
	// DelChains are flushed, then deleted; DelSets deleted after them.
	DelChains []string
	DelSets   []string
}

// Empty reports whether the transaction would do nothing.
func (c Changes) Empty() bool {
	return c.Mode == Partial && len(c.AddSets) == 0 && len(c.FlushSets) == 0 && len(c.AddChains) == 0 &&
		len(c.Rewrite) == 0 && len(c.DelElements) == 0 && len(c.AddElements) == 0 && len(c.DelChains) == 0 && len(c.DelSets) == 0
}

// Rules counts the rules the transaction writes.
func (c Changes) Rules() int {
	n := 0
	for _, ch := range c.Rewrite {
		n += len(ch.Rules)
	}
	return n
}

// Elements counts the elements it adds and deletes.
func (c Changes) Elements() (added, deleted int) {
	for _, e := range c.AddElements {
		added += len(e)
	}
	for _, e := range c.DelElements {
		deleted += len(e)
	}
	return added, deleted
}

// Diff computes the transaction that turns prev (the table last applied;
// ignored unless mode is Partial or Full) into want. Both are sorted
// tables (Table.Sort).
func Diff(prev, want *Table, mode Mode) Changes { return DiffWith(prev, want, mode, nil) }

// DiffWith is Diff with a hint for partial syncs: a chain present in both
// tables for which unchanged(name) is true is taken as unchanged without
// comparing its rules (the chains of Services the sync did not touch),
// which keeps a one-endpoint change at 10,000 Services from comparing
// 100,000 chains. nil compares every chain.
func DiffWith(prev, want *Table, mode Mode, unchanged func(chain string) bool) Changes {
	c := Changes{Mode: mode, DelElements: map[string][]Element{}, AddElements: map[string][]Element{}}
	if prev == nil && mode != Recreate {
		mode, c.Mode = Recreate, Recreate
	}
	prevChains := map[string]*Chain{}
	prevSets := map[string]*Set{}
	if mode != Recreate {
		for _, ch := range prev.Chains {
			prevChains[ch.Name] = ch
		}
		for _, s := range prev.Sets {
			prevSets[s.Name] = s
		}
	}
	for _, s := range want.Sets {
		old, had := prevSets[s.Name]
		if had && !sameSetType(old, s) {
			// A set cannot change type in place, and deleting and
			// adding it under one name in one transaction would need
			// every rule using it rewritten in between: recreate.
			return DiffWith(nil, want, Recreate, nil)
		}
		if !had || mode != Partial {
			c.AddSets = append(c.AddSets, s)
		}
		switch {
		case s.Dynamic:
			// Entries are the packet path's (affinity, DSR's pinned
			// flows); never touched.
		case !had || mode == Full:
			if had {
				c.FlushSets = append(c.FlushSets, s.Name)
			}
			if len(s.Elements) > 0 {
				c.AddElements[s.Name] = slices.Clone(s.Elements)
			}
		default:
			del, add := diffElements(old.Elements, s.Elements, s.Map || s.Endpoints)
			if len(del) > 0 {
				c.DelElements[s.Name] = del
			}
			if len(add) > 0 {
				c.AddElements[s.Name] = add
			}
		}
	}
	for _, ch := range want.Chains {
		old, had := prevChains[ch.Name]
		if had && !sameBase(old.Base, ch.Base) {
			// The kernel refuses a base chain's new priority in place.
			return DiffWith(nil, want, Recreate, nil)
		}
		if !had {
			c.AddChains = append(c.AddChains, ch)
		}
		switch {
		case !had || mode != Partial:
			c.Rewrite = append(c.Rewrite, ch)
		case unchanged != nil && unchanged(ch.Name):
		case !sameRules(old, ch, want):
			c.Rewrite = append(c.Rewrite, ch)
		}
	}
	if mode != Recreate {
		for _, ch := range prev.Chains {
			if want.Chain(ch.Name) == nil {
				c.DelChains = append(c.DelChains, ch.Name)
			}
		}
		for _, s := range prev.Sets {
			if want.Set(s.Name) == nil {
				c.DelSets = append(c.DelSets, s.Name)
			}
		}
	}
	return c
}

func sameSetType(a, b *Set) bool {
	return slices.Equal(a.Key, b.Key) && a.Map == b.Map && a.Endpoints == b.Endpoints && a.Marks == b.Marks && a.Proto == b.Proto && a.Timeout == b.Timeout && a.Dynamic == b.Dynamic && a.Size == b.Size
}

func sameBase(a, b *Base) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// sameRules compares two chains' rules by their nft spelling, which holds
// every field of every expression.
func sameRules(a, b *Chain, t *Table) bool {
	if len(a.Rules) != len(b.Rules) {
		return false
	}
	for i := range a.Rules {
		if a.Rules[i].Text(t.Family) != b.Rules[i].Text(t.Family) {
			return false
		}
	}
	return true
}

// diffElements returns the elements to delete and to add; both lists
// are sorted by key. A map element whose value changed is in both.
func diffElements(old, cur []Element, isMap bool) (del, add []Element) {
	i, j := 0, 0
	for i < len(old) || j < len(cur) {
		switch {
		case j == len(cur) || (i < len(old) && CompareKeys(old[i].Key, cur[j].Key) < 0):
			del = append(del, old[i])
			i++
		case i == len(old) || CompareKeys(old[i].Key, cur[j].Key) > 0:
			add = append(add, cur[j])
			j++
		default:
			if isMap && (old[i].Verdict != cur[j].Verdict || old[i].To != cur[j].To || old[i].Mark != cur[j].Mark) {
				del = append(del, old[i])
				add = append(add, cur[j])
			}
			i++
			j++
		}
	}
	return del, add
}
