package rules

import (
	"bytes"
	"hash/fnv"
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
// It returns the pruned input, the digests of every chain in data (to
// merge into last once the restore succeeded, see ChainDigests.Apply) and
// how many "-A" lines it dropped per table. Lines other than chain
// declarations and "-A" rules ("-X" deletions, table headers, COMMIT)
// are kept. A chain whose rules are not all after its declaration, or
// that appears twice, is never dropped.
func Prune(data []byte, last ChainDigests) (out []byte, cur ChainDigests, dropped map[string]int) {
	cur, dropped = ChainDigests{}, map[string]int{}
	type chain struct {
		decl  int   // line index of ":name ..."
		rules []int // line indexes of "-A name ..."
		h     uint64
		keep  bool // seen in a shape Prune does not rewrite
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	table := ""
	chains := map[string]*chain{}
	var order []string
	drop := make([]bool, len(lines))
	flushTable := func() {
		for _, name := range order {
			c := chains[name]
			hs := fnv.New64a()
			hs.Write(lines[c.decl])
			for _, i := range c.rules {
				hs.Write(lines[i])
			}
			c.h = hs.Sum64()
			key := table + "/" + name
			cur[key] = c.h
			if c.keep || last == nil {
				continue
			}
			if old, ok := last[key]; ok && old == c.h {
				drop[c.decl] = true
				for _, i := range c.rules {
					drop[i] = true
				}
				dropped[table] += len(c.rules)
			}
		}
		chains, order = map[string]*chain{}, nil
	}
	for i, l := range lines {
		switch {
		case bytes.HasPrefix(l, []byte("*")):
			table = string(bytes.TrimSpace(l[1:]))
		case bytes.Equal(bytes.TrimSpace(l), []byte("COMMIT")):
			flushTable()
		case bytes.HasPrefix(l, []byte(":")):
			name := string(firstField(l[1:]))
			if c := chains[name]; c != nil {
				c.keep = true
				continue
			}
			chains[name] = &chain{decl: i}
			order = append(order, name)
		case bytes.HasPrefix(l, []byte("-A ")):
			if c := chains[string(firstField(l[3:]))]; c != nil {
				c.rules = append(c.rules, i)
			}
			// Rules for a chain not declared here append to a chain in
			// the kernel: always kept, never part of a digest.
		case bytes.HasPrefix(l, []byte("-X ")):
			if c := chains[string(firstField(l[3:]))]; c != nil {
				c.keep = true
			}
		}
	}
	for i, l := range lines {
		if !drop[i] {
			out = append(out, l...)
		}
	}
	return out, cur, dropped
}

func firstField(b []byte) []byte {
	if i := bytes.IndexAny(b, " \t\n"); i >= 0 {
		return b[:i]
	}
	return b
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
