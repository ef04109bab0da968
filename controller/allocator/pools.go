package allocator

import (
	"cmp"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"sort"

	"github.com/herald-lb/herald/config"
)

// poolState is a pool with its free addresses.
type poolState struct {
	cfg    *config.Pool
	ranges []*rangeState // in the order written: the allocation order
	has    [2]bool       // by famIdx: the pool holds addresses of the family
	total  [2]*big.Int
	inUse  [2]uint64
}

type rangeState struct {
	first, last u128
	v6          bool
	free        *freeSet
}

// indexEntry places one range of the whole pool set, for finding the pool
// of an address by binary search.
type indexEntry struct {
	first, last u128
	pool        *poolState
	r           *rangeState
}

func famIdx(f Family) int {
	if f == IPv6 {
		return 1
	}
	return 0
}

func (p *poolState) name() string { return p.cfg.Name }

func newPoolState(cfg *config.Pool) *poolState {
	p := &poolState{cfg: cfg, total: [2]*big.Int{new(big.Int), new(big.Int)}}
	for _, rg := range cfg.Ranges {
		v6 := rg.Is6()
		f := famIdx(IPv4)
		if v6 {
			f = famIdx(IPv6)
		}
		p.has[f] = true
		for _, piece := range withoutMapped(addrToU128(rg.First), addrToU128(rg.Last), v6) {
			first, last := piece[0], piece[1]
			skip := cfg.AvoidBuggyIPs && !v6
			p.ranges = append(p.ranges, &rangeState{first: first, last: last, v6: v6, free: newFreeSet(first, last, skip)})
			size := config.Range{First: first.addr(v6), Last: last.addr(v6)}.Size()
			if skip {
				size.Sub(size, new(big.Int).SetUint64(buggyCount(first.lo, last.lo)))
			}
			p.total[f].Add(p.total[f], size)
		}
	}
	return p
}

// The IPv4-mapped block ::ffff:0:0/96: Kubernetes reads such an address
// as IPv4, so an IPv6 range that spans it (::/80, ::/0) hands out the
// addresses around it, never those in it.
var mappedFirst, mappedLast = u128{lo: 0xffff_0000_0000}, u128{lo: 0xffff_ffff_ffff}

// withoutMapped splits an IPv6 range around the IPv4-mapped block: the
// pieces, in order, of [first, last] outside it.
func withoutMapped(first, last u128, v6 bool) [][2]u128 {
	if !v6 || last.less(mappedFirst) || mappedLast.less(first) {
		return [][2]u128{{first, last}}
	}
	var out [][2]u128
	if first.less(mappedFirst) {
		out = append(out, [2]u128{first, mappedFirst.sub(1)})
	}
	if mappedLast.less(last) {
		out = append(out, [2]u128{mappedLast.add(1), last})
	}
	return out
}

// buggyCount is the number of IPv4 addresses ending in .0 or .255 in
// [a, b], computed rather than counted.
func buggyCount(a, b uint64) uint64 {
	upTo := func(x uint64) uint64 { // in [0, x]
		n := 2*(x>>8) + 1 // each full /24 below x's, plus x's own .0
		if x&0xff == 0xff {
			n++
		}
		return n
	}
	if a == 0 {
		return upTo(b)
	}
	return upTo(b) - upTo(a-1)
}

// sameAddresses reports whether two pool definitions hand out the same
// addresses in the same order, so the free sets can be kept.
func sameAddresses(a, b *config.Pool) bool {
	return a.AvoidBuggyIPs == b.AvoidBuggyIPs && slices.Equal(a.Ranges, b.Ranges)
}

// allows reports whether the pool's serviceAllocation admits the Service:
// its namespace is listed or selected (when either is given) and its labels
// match a service selector (when any is given). Priority alone admits all.
func (p *poolState) allows(svc *Service) bool {
	al := p.cfg.Allocation
	if al == nil {
		return true
	}
	if len(al.Namespaces) > 0 || len(al.NamespaceSelectors) > 0 {
		if !slices.Contains(al.Namespaces, svc.Namespace) && !al.NamespaceSelectors.Any(svc.NamespaceLabels) {
			return false
		}
	}
	return al.ServiceSelectors.MatchesOrEmpty(svc.Labels)
}

// lowestFree returns the lowest free address of the family, in range order.
// The number of ranges is bounded by the configuration (at most 256 per
// pool), not by the number of addresses.
func (p *poolState) lowestFree(fam Family) (netip.Addr, bool) {
	v6 := fam == IPv6
	for _, r := range p.ranges {
		if r.v6 != v6 {
			continue
		}
		if x, ok := r.free.lowest(); ok {
			return x.addr(v6), true
		}
	}
	return netip.Addr{}, false
}

// autoOrder sorts pools as automatic assignment tries them: pools with a
// serviceAllocation first (those with a priority, lowest first, then those
// without), then the others; ties by name.
func autoOrder(pools []*poolState) {
	rank := func(p *poolState) (int, int) {
		al := p.cfg.Allocation
		switch {
		case al != nil && al.HasPriority:
			return 0, al.Priority
		case al != nil:
			return 1, 0
		}
		return 2, 0
	}
	slices.SortFunc(pools, func(a, b *poolState) int {
		ga, pa := rank(a)
		gb, pb := rank(b)
		if c := cmp.Compare(ga, gb); c != 0 {
			return c
		}
		if c := cmp.Compare(pa, pb); c != 0 {
			return c
		}
		return cmp.Compare(a.name(), b.name())
	})
}

// lookup finds the range holding a, whether or not a is usable in it.
func (a *Allocator) lookup(ip netip.Addr) (indexEntry, bool) {
	idx := a.index4
	if ip.Is6() {
		idx = a.index6
	}
	x := addrToU128(ip)
	i := sort.Search(len(idx), func(i int) bool { return !idx[i].last.less(x) })
	if i < len(idx) && !x.less(idx[i].first) {
		return idx[i], true
	}
	return indexEntry{}, false
}

// poolOf returns the pool that can hand out ip (avoidBuggyIPs honoured).
func (a *Allocator) poolOf(ip netip.Addr) *poolState {
	e, ok := a.lookup(ip)
	if !ok || !e.r.free.usable(addrToU128(ip)) {
		return nil
	}
	return e.pool
}

func buildIndex(pools map[string]*poolState) (v4, v6 []indexEntry) {
	for _, p := range pools {
		for _, r := range p.ranges {
			e := indexEntry{first: r.first, last: r.last, pool: p, r: r}
			if r.v6 {
				v6 = append(v6, e)
			} else {
				v4 = append(v4, e)
			}
		}
	}
	byFirst := func(a, b indexEntry) int { return a.first.cmp(b.first) }
	slices.SortFunc(v4, byFirst)
	slices.SortFunc(v6, byFirst)
	return v4, v6
}

// checkPools refuses a pool set the parser would never produce: missing or
// repeated names, malformed ranges, an address in two ranges.
func checkPools(pools []*config.Pool) error {
	seen := map[string]bool{}
	type owned struct {
		r    config.Range
		pool string
	}
	var all []owned
	for _, p := range pools {
		if p == nil || p.Name == "" {
			return fmt.Errorf("a pool has no name")
		}
		if seen[p.Name] {
			return fmt.Errorf("pool %s is given twice", p.Name)
		}
		seen[p.Name] = true
		for _, r := range p.Ranges {
			f, l := r.First, r.Last
			if !f.IsValid() || !l.IsValid() || f.Is4() != l.Is4() || f.Zone() != "" || l.Zone() != "" || f.Is4In6() || l.Is4In6() || l.Less(f) {
				return fmt.Errorf("pool %s: malformed range %s-%s", p.Name, f, l)
			}
			all = append(all, owned{r, p.Name})
		}
	}
	slices.SortFunc(all, func(a, b owned) int {
		if a.r.First.Is4() != b.r.First.Is4() {
			if a.r.First.Is4() {
				return -1
			}
			return 1
		}
		return a.r.First.Compare(b.r.First)
	})
	for i := 1; i < len(all); i++ {
		if all[i-1].r.Overlaps(all[i].r) {
			return fmt.Errorf("pool %s (%s) overlaps pool %s (%s): an address belongs to one pool only", all[i].pool, all[i].r, all[i-1].pool, all[i-1].r)
		}
	}
	return nil
}

// SetConfig is SetPools with the pools of a parsed configuration.
func (a *Allocator) SetConfig(cfg *config.Config) ([]Displaced, error) {
	pools := make([]*config.Pool, 0, len(cfg.Pools))
	for _, n := range cfg.PoolNames() {
		pools = append(pools, cfg.Pools[n])
	}
	return a.SetPools(pools)
}

// SetPools replaces the pool set. Services keep their IPs when the IPs are
// still in one pool that admits them (the pool they are attributed to may
// change when a range moved between pools); the others are released and
// returned, sorted by key, for the caller to assign again. Pools whose
// addresses did not change keep their state as is. A malformed set (which
// the config parser never produces: overlapping ranges, repeated names) is
// refused with an error and changes nothing.
func (a *Allocator) SetPools(pools []*config.Pool) ([]Displaced, error) {
	if err := checkPools(pools); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()

	next := make(map[string]*poolState, len(pools))
	for _, cfg := range pools {
		if old := a.pools[cfg.Name]; old != nil && sameAddresses(old.cfg, cfg) {
			old.cfg = cfg
			next[cfg.Name] = old
			continue
		}
		next[cfg.Name] = newPoolState(cfg)
	}
	v4, v6 := buildIndex(next)
	probe := &Allocator{index4: v4, index6: v6}

	keys := make([]Key, 0, len(a.held))
	for k := range a.held {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, Key.Compare)
	var displaced []Displaced
	for _, k := range keys {
		h := a.held[k]
		var target *poolState
		split := false
		for i, ip := range h.ips {
			p := probe.poolOf(ip)
			if p == nil || (i > 0 && p != target) {
				split = true
				break
			}
			target = p
		}
		var reason Reason
		switch {
		case split:
			reason = ReasonIPNotInPool
		case !target.allows(&h.svc):
			reason = ReasonPoolNotAllowed
		default:
			h.pool = target.name()
			continue
		}
		// Released against the old pools: a kept pool gets the address
		// back, a replaced one is dropped anyway.
		displaced = append(displaced, Displaced{Key: k, Pool: h.pool, IPs: slices.Clone(h.ips), Reason: reason})
		a.release(h)
	}

	a.pools = next
	a.index4, a.index6 = v4, v6
	a.order = a.order[:0]
	for _, p := range next {
		a.order = append(a.order, p)
		p.inUse = [2]uint64{}
	}
	autoOrder(a.order)
	// Every IP still held is in a pool now; new free sets learn it is taken
	// (kept ones already know).
	for ip, st := range a.ips {
		e, _ := a.lookup(ip)
		e.r.free.take(addrToU128(ip))
		st.pool = e.pool.name()
		e.pool.inUse[famIdx(FamilyOf(ip))]++
	}
	return displaced, nil
}

// Stats returns the counts of every pool, sorted by name.
func (a *Allocator) Stats() []PoolStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]PoolStats, 0, len(a.pools))
	for _, p := range a.pools {
		out = append(out, p.stats())
	}
	slices.SortFunc(out, func(x, y PoolStats) int { return cmp.Compare(x.Pool, y.Pool) })
	return out
}

// PoolStats returns the counts of one pool.
func (a *Allocator) PoolStats(name string) (PoolStats, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.pools[name]
	if p == nil {
		return PoolStats{}, false
	}
	return p.stats(), true
}

func (p *poolState) stats() PoolStats {
	return PoolStats{
		Pool: p.name(),
		IPv4: FamilyStats{Total: new(big.Int).Set(p.total[0]), InUse: p.inUse[0]},
		IPv6: FamilyStats{Total: new(big.Int).Set(p.total[1]), InUse: p.inUse[1]},
	}
}
