package rules

import (
	"bytes"

	"github.com/herald-lb/herald/proxy/iptables"
)

// ChainDigests identifies the content of chains as last written, by
// "table/chain": a hash of the chain's declaration and rules in restore
// input.
type ChainDigests map[string]uint64

// Prune drops from restore input the chains whose content is exactly as
// last written (their declaration, which would flush them, and their
// rules), so a partial sync sends only what changed: after a one-endpoint
// change that is the Service's own chains, not the dispatch chains with
// a rule per Service that a render always contains. With iptables-nft the
// cost of a restore grows with what it is given, so this is what keeps a
// partial sync small at 10,000 Services.
//
// It returns the pruned input (data itself when nothing is dropped), the
// digests of every chain in data (to merge into last once the restore
// succeeded, see ChainDigests.Apply) and how many "-A" lines it dropped
// per table. Lines other than chain declarations and "-A" rules ("-X"
// deletions, table headers, COMMIT, lines iptables.Lines cannot read)
// are kept. A chain whose rules are not all after its declaration, or
// that appears twice, is never dropped.
func Prune(data []byte, last ChainDigests) (out []byte, cur ChainDigests, dropped map[string]int) {
	p := pruner{last: last, cur: ChainDigests{}, dropped: map[string]int{}, index: map[string]int{}}
	if last != nil {
		// Only a known chain can be dropped: without last, no line needs
		// to know its chain.
		p.owner = make([]int32, bytes.Count(data, []byte("\n"))+1)
	}
	for l, err := range iptables.Lines(data) {
		if err == nil {
			p.line(l)
		}
	}
	return p.output(data), p.cur, p.dropped
}

// pruner is Prune's state: the chains of the input, in order, each with a
// running digest of its lines, decided table by table at COMMIT.
type pruner struct {
	last, cur ChainDigests
	dropped   map[string]int
	table     string
	key       []byte         // scratch for "table/chain" lookups
	index     map[string]int // the current table's chains, by key
	chains    []prunedChain
	first     int     // the current table's first chain
	owner     []int32 // per line: 1 + the chain it is part of, or 0
	dropBytes int
}

type prunedChain struct {
	key   string
	h     uint64
	rules int
	size  int  // bytes of its lines
	keep  bool // seen in a shape Prune does not rewrite
	drop  bool
}

func (p *pruner) line(l iptables.Line) {
	switch l.Kind {
	case iptables.LineTable:
		p.table = string(l.Name)
	case iptables.LineCommit:
		p.commit()
	case iptables.LineChain:
		if i, ok := p.index[string(p.keyOf(l.Name))]; ok {
			p.chains[i].keep = true
			return
		}
		key := string(p.key)
		p.index[key] = len(p.chains)
		p.chains = append(p.chains, prunedChain{key: key, h: fnvOffset64})
		p.add(len(p.chains)-1, l)
	case iptables.LineRule:
		// Rules for a chain not declared here append to a chain in the
		// kernel: always kept, never part of a digest.
		if i, ok := p.index[string(p.keyOf(l.Name))]; ok {
			p.chains[i].rules++
			p.add(i, l)
		}
	case iptables.LineDelete:
		if i, ok := p.index[string(p.keyOf(l.Name))]; ok {
			p.chains[i].keep = true
		}
	}
}

// keyOf is "table/chain" in the scratch buffer, for lookups that do not
// allocate.
func (p *pruner) keyOf(chain []byte) []byte {
	p.key = append(append(append(p.key[:0], p.table...), '/'), chain...)
	return p.key
}

// add makes line l part of chain i.
func (p *pruner) add(i int, l iptables.Line) {
	c := &p.chains[i]
	c.h = fnvAdd(c.h, l.Raw)
	c.size += len(l.Raw)
	if p.owner != nil {
		p.owner[l.Num-1] = int32(i + 1)
	}
}

// commit decides the current table's chains: digested, and dropped when
// exactly as last written.
func (p *pruner) commit() {
	for i := p.first; i < len(p.chains); i++ {
		c := &p.chains[i]
		p.cur[c.key] = c.h
		if c.keep || p.last == nil {
			continue
		}
		if old, ok := p.last[c.key]; ok && old == c.h {
			c.drop = true
			p.dropped[p.table] += c.rules
			p.dropBytes += c.size
		}
	}
	p.first = len(p.chains)
	clear(p.index)
}

// output is data without the dropped chains' lines: data itself when
// nothing is dropped.
func (p *pruner) output(data []byte) []byte {
	if p.dropBytes == 0 {
		return data
	}
	out := make([]byte, 0, len(data)-p.dropBytes)
	for n := 0; len(data) > 0; n++ {
		end := len(data)
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			end = i + 1
		}
		if o := p.owner[n]; o == 0 || !p.chains[o-1].drop {
			out = append(out, data[:end]...)
		}
		data = data[end:]
	}
	return out
}

// FNV-1a 64 (hash/fnv's New64a), kept as one running value per chain so
// a chain's lines need not be gathered before they are hashed.
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

func fnvAdd(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime64
	}
	return h
}

// Apply records a successful restore of input whose chains had the
// digests cur: full replaces everything known (chains not in a full
// restore are gone or stale), a partial one adds to it. Chains the input
// deleted ("-X") are forgotten.
func (d ChainDigests) Apply(cur ChainDigests, full bool, deleted []string) ChainDigests {
	if full || d == nil {
		d = ChainDigests{}
	}
	for k, v := range cur {
		d[k] = v
	}
	for _, c := range deleted {
		delete(d, "nat/"+c)
	}
	return d
}
