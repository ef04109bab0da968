// Package maglev builds the Maglev lookup table (Eisenbud et al., "Maglev: A
// Fast and Reliable Software Network Load Balancer", NSDI 2016, section 3.4)
// of one Service port: M slots, each owned by one endpoint, so that a flow
// hashed to slot h%M reaches the same endpoint on every node. The table is a
// pure function of the endpoint set: nodes that see the same endpoints build
// byte-identical tables, whatever order the endpoints arrived in.
//
// The hashes and seeds below are a contract between nodes, including nodes
// running different herald versions during a rolling upgrade: changing them
// remaps every flow. TestTableFingerprint pins them.
package maglev

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
)

// sizes are the table sizes, smallest first. Entry k is the smallest prime
// >= 100 * 2^k, so a Service of up to 2^k endpoints gets at least 100 slots
// per endpoint (the paper's ratio for near-minimal disruption) and at most
// about 200. The size is fixed by the endpoint count alone (every node agrees
// on it), and it moves only when the count crosses a power of two: a size
// change remaps almost every slot, so it should be rare. The last entry,
// 65537, is the paper's own size and the cap: it keeps 100 slots per endpoint
// up to 655 endpoints, and beyond that the table stays at 65537 slots (one
// nftables map element per slot), with balance still within one slot and
// disruption growing as slots per endpoint fall (see TestDisruption).
var sizes = [...]uint32{101, 211, 401, 809, 1601, 3203, 6421, 12809, 25601, 51203, 65537}

// MaxEndpoints is the most endpoints a table holds: each must own a slot.
const MaxEndpoints = 65537

// Fixed seeds for the two endpoint hashes ("herald:o", "herald:s"). They
// must be the same on every node, so they are not configurable.
const (
	seedOffset = 0x686572616c643a6f
	seedSkip   = 0x686572616c643a73
)

// ErrNoEndpoints: a table needs at least one endpoint.
var ErrNoEndpoints = errors.New("maglev: no endpoints")

// Size is the table size for n distinct endpoints.
func Size(n int) uint32 {
	for k, m := range sizes {
		if n <= 1<<k {
			return m
		}
	}
	return sizes[len(sizes)-1]
}

// Table is one Service port's lookup table. It is immutable once built.
type Table struct {
	endpoints []netip.AddrPort // sorted, distinct
	owner     []uint32         // slot -> index into endpoints
}

// New builds the table for endpoints. Order and duplicates in the input do
// not matter. The input slice is not modified.
func New(endpoints []netip.AddrPort) (*Table, error) {
	eps := slices.Clone(endpoints)
	slices.SortFunc(eps, netip.AddrPort.Compare)
	eps = slices.Compact(eps)
	switch {
	case len(eps) == 0:
		return nil, ErrNoEndpoints
	case len(eps) > MaxEndpoints:
		return nil, fmt.Errorf("maglev: %d endpoints, at most %d fit a table", len(eps), MaxEndpoints)
	}
	m := Size(len(eps))

	// Each endpoint's preference list is permutation[j] = (offset + j*skip)
	// mod m, a full permutation of the slots because m is prime and
	// 0 < skip < m. It is walked with a cursor instead of being stored: the
	// paper's N x M matrix would be 65 M entries for 1000 endpoints.
	type cursor struct{ next, skip uint32 }
	cur := make([]cursor, len(eps))
	var buf [64]byte // an IPv6 AddrPort with a zone fits
	for i, ep := range eps {
		key := ep.AppendTo(buf[:0])
		cur[i] = cursor{
			next: uint32(hash(key, seedOffset) % uint64(m)),
			skip: uint32(hash(key, seedSkip)%uint64(m-1)) + 1,
		}
	}

	const free = ^uint32(0)
	owner := make([]uint32, m)
	for i := range owner {
		owner[i] = free
	}
	// Endpoints take turns claiming their next preferred free slot, so no
	// endpoint owns more than one slot more than any other.
	for filled := uint32(0); ; {
		for i := range cur {
			c := &cur[i]
			for owner[c.next] != free {
				c.next = step(c.next, c.skip, m)
			}
			owner[c.next] = uint32(i)
			c.next = step(c.next, c.skip, m)
			if filled++; filled == m {
				return &Table{endpoints: eps, owner: owner}, nil
			}
		}
	}
}

// step is (pos + skip) mod m for pos, skip < m without a division.
func step(pos, skip, m uint32) uint32 {
	pos += skip
	if pos >= m {
		pos -= m
	}
	return pos
}

// hash is 64-bit FNV-1a started from a seeded basis, then MurmurHash3's
// fmix64: FNV alone leaves keys that differ only in their last bytes (the
// port) close together in the low bits that mod m keeps.
func hash(key []byte, seed uint64) uint64 {
	h := uint64(14695981039346656037) ^ seed
	for _, b := range key {
		h ^= uint64(b)
		h *= 1099511628211
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// Size is the number of slots, M.
func (t *Table) Size() int { return len(t.owner) }

// Endpoints are the distinct endpoints, sorted; Owner indexes them. The
// slice is shared: callers must not modify it.
func (t *Table) Endpoints() []netip.AddrPort { return t.endpoints }

// Owner is the index in Endpoints of the endpoint owning slot i (0 <= i < M).
func (t *Table) Owner(i int) int { return int(t.owner[i]) }

// Slot is the slot of a 32-bit flow hash the way the kernel maps a hash
// onto M values for nftables' jhash and iptables' HMARK (reciprocal_scale:
// h * M / 2^32, not h mod M), so Go code (tests, the tracer) picks the
// slot the data path picks.
func (t *Table) Slot(h uint32) int {
	return int(Scale(h, uint32(len(t.owner))))
}

// Lookup is the endpoint for a flow hash: the owner of Slot(h).
func (t *Table) Lookup(h uint32) netip.AddrPort {
	return t.endpoints[t.owner[t.Slot(h)]]
}
