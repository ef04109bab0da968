package tracer

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/herald-lb/herald/proxy/maglev"
	"github.com/herald-lb/herald/proxy/nft"
)

// NFT simulates the first packet of a new connection through an nftables
// table of the nft model (the proxy's nftables mode), with the hooks and
// outcome types of the iptables Tracer, so one oracle checks both modes:
// numgen picks and affinity set lookups are branches, as -m statistic and
// -m recent --rcheck are; a set update is reported in RecentSet and a
// lookup that matched in RecentChecked, by set name.
type NFT struct {
	t     *nft.Table
	local map[netip.Addr]bool
}

// NewNFT returns a tracer over t.
func NewNFT(t *nft.Table) *NFT { return &NFT{t: t, local: map[netip.Addr]bool{}} }

// SetLocalAddrs declares the node's own addresses (fib ... type local).
func (n *NFT) SetLocalAddrs(addrs ...netip.Addr) {
	for _, a := range addrs {
		n.local[a.Unmap()] = true
	}
}

// nftExit is how the evaluation of a rule or chain ended.
type nftExit int

const (
	nftNext   nftExit = iota // the rule did not decide: go on with the next one
	nftReturn                // leave the current chain (return, end of chain, or a goto's target finished)
	nftAccept
	nftDrop
	nftReject
	nftNAT // a nat statement: terminal, accepted
)

type nftBranch struct {
	p    packet
	exit nftExit
}

// Trace implements the same contract as Tracer.Trace.
func (n *NFT) Trace(f Flow) (Result, error) {
	res := Result{Flow: f}
	src, dst := f.Src.Unmap(), f.Dst.Unmap()
	switch {
	case !src.IsValid() || !dst.IsValid() || src.Is4() != dst.Is4():
		return res, fmt.Errorf("flow %v: source and destination must be valid addresses of one family", f)
	case (src.Is4() && n.t.Family != 4) || (src.Is6() && n.t.Family != 6):
		return res, fmt.Errorf("flow %v: the table is for the other address family", f)
	case f.Proto != "tcp" && f.Proto != "udp" && f.Proto != "sctp":
		return res, fmt.Errorf("flow %v: protocol must be tcp, udp or sctp", f)
	}
	p := packet{src: src, dst: dst, proto: f.Proto, sport: f.SrcPort, dport: f.Port, prob: 1,
		srcLocal: f.Origin == Node || n.local[src], dstLocal: f.DstLocal, iface: f.InIface}
	var pre []nft.Hook
	var types []nft.ChainType
	if f.Origin == Node {
		pre, types = []nft.Hook{nft.HookOutput, nft.HookOutput, nft.HookPostrouting}, []nft.ChainType{nft.TypeNAT, nft.TypeFilter, nft.TypeNAT}
	} else {
		// The filter chains of prerouting herald has run before conntrack
		// (raw priority), so before its nat chain.
		pre, types = []nft.Hook{nft.HookPrerouting, nft.HookPrerouting}, []nft.ChainType{nft.TypeFilter, nft.TypeNAT}
	}
	pkts, err := n.run([]packet{p}, pre, types, &res)
	if err != nil {
		return res, err
	}
	for i := range pkts {
		pkts[i].routeMark = pkts[i].mark
	}
	var locals, fwd []packet
	for _, q := range pkts {
		if q.dnat {
			q.dstLocal = n.local[q.dst]
		}
		if q.dstLocal {
			locals = append(locals, q)
		} else {
			fwd = append(fwd, q)
		}
	}
	in, err := n.run(locals, []nft.Hook{nft.HookInput}, []nft.ChainType{nft.TypeFilter}, &res)
	if err != nil {
		return res, err
	}
	out := fwd
	if f.Origin != Node {
		if out, err = n.run(fwd, []nft.Hook{nft.HookForward, nft.HookPostrouting}, []nft.ChainType{nft.TypeFilter, nft.TypeNAT}, &res); err != nil {
			return res, err
		}
	}
	for _, q := range in {
		res.Outcomes = append(res.Outcomes, outcome(q, Accept, true))
	}
	for _, q := range out {
		res.Outcomes = append(res.Outcomes, outcome(q, Accept, false))
	}
	return res, nil
}

// run passes packets through the base chains of each (hook, type) in
// priority order; dropped and rejected ones go to res.
func (n *NFT) run(pkts []packet, hooks []nft.Hook, types []nft.ChainType, res *Result) ([]packet, error) {
	for i, h := range hooks {
		var bases []*nft.Chain
		for _, c := range n.t.Chains {
			if c.Base != nil && c.Base.Hook == h && c.Base.Type == types[i] {
				bases = append(bases, c)
			}
		}
		slices.SortStableFunc(bases, func(a, b *nft.Chain) int { return a.Base.Priority - b.Base.Priority })
		for _, c := range bases {
			var next []packet
			for _, q := range pkts {
				if q.notrack && c.Base.Type == nft.TypeNAT {
					next = append(next, q) // nat sees tracked packets only
					continue
				}
				outs, err := n.walk(c, q, 0)
				if err != nil {
					return nil, err
				}
				for _, o := range outs {
					switch o.exit {
					case nftDrop:
						res.Outcomes = append(res.Outcomes, outcome(o.p, Drop, false))
					case nftReject:
						res.Outcomes = append(res.Outcomes, outcome(o.p, Reject, false))
					default:
						next = append(next, o.p)
					}
				}
			}
			pkts = next
		}
	}
	return pkts, nil
}

func (n *NFT) walk(c *nft.Chain, p packet, depth int) ([]nftBranch, error) {
	if depth > 32 {
		return nil, fmt.Errorf("chain nesting deeper than 32 at %s (loop?)", c.Name)
	}
	live := []packet{p}
	var done []nftBranch
	for idx, r := range c.Rules {
		if len(live) == 0 {
			break
		}
		var next []packet
		for _, q := range live {
			outs, err := n.rule(c, idx, r, q.clone(), 0, depth)
			if err != nil {
				return nil, err
			}
			for _, o := range outs {
				if o.exit == nftNext {
					next = append(next, o.p)
				} else {
					done = append(done, o)
				}
			}
		}
		live = next
	}
	for _, q := range live {
		done = append(done, nftBranch{q, nftReturn})
	}
	return done, nil
}

// rule evaluates r's expressions from i on; a fall-off result means the
// packet goes on with the next rule.
func (n *NFT) rule(c *nft.Chain, idx int, r nft.Rule, p packet, i int, depth int) ([]nftBranch, error) {
	for ; i < len(r.Exprs); i++ {
		e := r.Exprs[i]
		switch x := e.(type) {
		case nft.MatchAddr:
			a := p.dst
			if x.Field == nft.Saddr {
				a = p.src
			}
			if x.Prefix.Contains(a) == x.Not {
				return []nftBranch{{p, nftNext}}, nil
			}
		case nft.MatchProto:
			if p.proto != x.Proto.String() {
				return []nftBranch{{p, nftNext}}, nil
			}
		case nft.MatchDport:
			if p.dport != x.Port {
				return []nftBranch{{p, nftNext}}, nil
			}
		case nft.MatchFibLocal:
			l := p.dstLocal
			if x.Field == nft.Saddr {
				l = p.srcLocal
			}
			if !l {
				return []nftBranch{{p, nftNext}}, nil
			}
		case nft.MatchMark:
			if (p.mark&x.Bit != 0) == x.Not {
				return []nftBranch{{p, nftNext}}, nil
			}
		case nft.MatchMarkValue:
			if (p.mark&x.Mask == x.Value) == x.Not {
				return []nftBranch{{p, nftNext}}, nil
			}
		case nft.MatchIifname:
			in := p.iface == x.Name || (x.Prefix && strings.HasPrefix(p.iface, x.Name))
			if in == x.Not {
				return []nftBranch{{p, nftNext}}, nil
			}
		case nft.MatchCtDNAT:
			if !p.dnat {
				return []nftBranch{{p, nftNext}}, nil
			}
		case nft.MatchCtState:
			// Every traced packet opens a new connection.
			if !slices.Contains(x.States, nft.CtNew) {
				return []nftBranch{{p, nftNext}}, nil
			}
		case nft.MatchSet:
			s := n.t.Set(x.Set)
			if s == nil {
				return nil, fmt.Errorf("%s rule %d: lookup in missing set %q", c.Name, idx+1, x.Set)
			}
			if s.Dynamic {
				// An affinity set: whether this client is remembered is
				// unknown, so both ways.
				hit, miss := p.clone(), p.clone()
				hit.affinity = true
				hit.recentChecked = append(hit.recentChecked, x.Set)
				outs, err := n.rule(c, idx, r, hit, i+1, depth)
				if err != nil {
					return nil, err
				}
				return append(outs, nftBranch{miss, nftNext}), nil
			}
			if _, ok := n.lookup(s, x.Key, p); !ok {
				return []nftBranch{{p, nftNext}}, nil
			}
		case nft.NumgenMatch:
			if x.Mod == 0 {
				return nil, fmt.Errorf("%s rule %d: numgen mod 0", c.Name, idx+1)
			}
			// Matches with probability 1/Mod: both ways.
			hit, miss := p.clone(), p.clone()
			hit.prob /= float64(x.Mod)
			miss.prob *= 1 - 1/float64(x.Mod)
			outs, err := n.rule(c, idx, r, hit, i+1, depth)
			if err != nil {
				return nil, err
			}
			if x.Mod == 1 {
				return outs, nil
			}
			return append(outs, nftBranch{miss, nftNext}), nil
		case nft.Counter:
		case nft.MarkOr:
			p.mark |= x.Bit
		case nft.MarkXor:
			p.mark ^= x.Bit
		case nft.UpdateSet:
			p.recentSet = append(p.recentSet, x.Set)
		case nft.Reject:
			return []nftBranch{{p, nftReject}}, nil
		case nft.DNAT:
			p.dst, p.dport, p.dnat = x.To.Addr(), x.To.Port(), true
			p.trail = append(p.trail, fmt.Sprintf("%s#%d %s", c.Name, idx+1, r.Text(n.t.Family)))
			return []nftBranch{{p, nftNAT}}, nil
		case nft.DNATMap:
			return n.dnatMap(c, idx, r, x, p)
		case nft.DNATHash:
			return n.dnatHash(c, idx, r, x, p)
		case nft.MarkHash:
			el, ok, err := n.hashElement(c, idx, x.Map, false, x.Mod, x.Seed, p)
			if err != nil {
				return nil, err
			}
			if !ok {
				return []nftBranch{{p, nftNext}}, nil
			}
			p.mark = el.Mark
			p.trail = append(p.trail, fmt.Sprintf("%s#%d %s -> 0x%08x", c.Name, idx+1, r.Text(n.t.Family), el.Mark))
		case nft.MarkAnd:
			p.mark &= x.Mask
		case nft.MarkLookup:
			// The first packet of a flow: nothing pinned yet.
			return []nftBranch{{p, nftNext}}, nil
		case nft.UpdateMap:
			p.trail = append(p.trail, fmt.Sprintf("%s#%d %s", c.Name, idx+1, r.Text(n.t.Family)))
		case nft.NoTrack:
			p.notrack = true
			p.trail = append(p.trail, fmt.Sprintf("%s#%d %s", c.Name, idx+1, r.Text(n.t.Family)))
		case nft.Masquerade:
			p.masq = true
			p.trail = append(p.trail, fmt.Sprintf("%s#%d %s", c.Name, idx+1, r.Text(n.t.Family)))
			return []nftBranch{{p, nftNAT}}, nil
		case nft.VmapLookup:
			s := n.t.Set(x.Map)
			if s == nil || !s.Map {
				return nil, fmt.Errorf("%s rule %d: vmap lookup in missing map %q", c.Name, idx+1, x.Map)
			}
			el, ok := n.lookup(s, x.Key, p)
			if !ok {
				return []nftBranch{{p, nftNext}}, nil
			}
			p.trail = append(p.trail, fmt.Sprintf("%s#%d %s -> %s", c.Name, idx+1, r.Text(n.t.Family), el.Verdict))
			return n.verdict(c, idx, r, el.Verdict, p, i, depth)
		case nft.Verdict:
			p.trail = append(p.trail, fmt.Sprintf("%s#%d %s", c.Name, idx+1, r.Text(n.t.Family)))
			return n.verdict(c, idx, r, x, p, i, depth)
		default:
			return nil, fmt.Errorf("%s rule %d: the tracer cannot simulate %T", c.Name, idx+1, e)
		}
	}
	return []nftBranch{{p, nftNext}}, nil
}

// dnatMap branches over every number DNATMap may draw, each with
// probability 1/Mod; a number without an element leaves the rule
// unmatched.
func (n *NFT) dnatMap(c *nft.Chain, idx int, r nft.Rule, x nft.DNATMap, p packet) ([]nftBranch, error) {
	m := n.t.Set(x.Map)
	if m == nil || !m.Endpoints {
		return nil, fmt.Errorf("%s rule %d: dnat through missing endpoints map %q", c.Name, idx+1, x.Map)
	}
	if x.Mod == 0 {
		return nil, fmt.Errorf("%s rule %d: numgen mod 0", c.Name, idx+1)
	}
	var outs []nftBranch
	for slot := x.Offset; slot < x.Offset+x.Mod; slot++ {
		q := p.clone()
		q.prob /= float64(x.Mod)
		el, ok := n.element(m, nft.Key{Slot: slot})
		if !ok {
			outs = append(outs, nftBranch{q, nftNext})
			continue
		}
		q.dst, q.dport, q.dnat = el.To.Addr(), el.To.Port(), true
		q.trail = append(q.trail, fmt.Sprintf("%s#%d %s -> %s", c.Name, idx+1, r.Text(n.t.Family), el.To))
		outs = append(outs, nftBranch{q, nftNAT})
	}
	return outs, nil
}

// dnatHash is the kernel's own pick for DNATHash, computed: one branch,
// no chance; a slot without an element leaves the rule unmatched.
func (n *NFT) dnatHash(c *nft.Chain, idx int, r nft.Rule, x nft.DNATHash, p packet) ([]nftBranch, error) {
	el, ok, err := n.hashElement(c, idx, x.Map, true, x.Mod, x.Seed, p)
	if err != nil {
		return nil, err
	}
	if !ok {
		return []nftBranch{{p, nftNext}}, nil
	}
	p.dst, p.dport, p.dnat = el.To.Addr(), el.To.Port(), true
	p.trail = append(p.trail, fmt.Sprintf("%s#%d %s -> %s", c.Name, idx+1, r.Text(n.t.Family), el.To))
	return []nftBranch{{p, nftNAT}}, nil
}

// hashElement is the element of the endpoints map (endpoints) or marks
// map named name for p's flow slot; ok is false without one.
func (n *NFT) hashElement(c *nft.Chain, idx int, name string, endpoints bool, mod, seed uint32, p packet) (nft.Element, bool, error) {
	m := n.t.Set(name)
	if m == nil || (endpoints && !m.Endpoints) || (!endpoints && !m.Marks) {
		return nft.Element{}, false, fmt.Errorf("%s rule %d: missing map %q (endpoints %v)", c.Name, idx+1, name, endpoints)
	}
	slot, err := n.flowSlot(c, idx, mod, seed, p)
	if err != nil {
		return nft.Element{}, false, err
	}
	el, ok := n.element(m, nft.Key{Slot: slot})
	return el, ok, nil
}

// flowSlot is the slot the kernel's jhash of p's flow, with seed and
// mod, picks (DNATHash and MarkHash).
func (n *NFT) flowSlot(c *nft.Chain, idx int, mod, seed uint32, p packet) (uint32, error) {
	if mod == 0 || seed == 0 {
		return 0, fmt.Errorf("%s rule %d: jhash mod %d seed %d", c.Name, idx+1, mod, seed)
	}
	h, ok := maglev.FlowHash(netip.AddrPortFrom(p.src, p.sport), netip.AddrPortFrom(p.dst, p.dport), seed)
	if !ok {
		return 0, fmt.Errorf("%s rule %d: jhash over addresses of two families", c.Name, idx+1)
	}
	return maglev.Scale(h, mod), nil
}

// verdict applies v met at expression i of a rule. A jump's target that
// finishes goes on with the rule's next expression; a goto's target that
// finishes leaves this chain too.
func (n *NFT) verdict(c *nft.Chain, idx int, r nft.Rule, v nft.Verdict, p packet, i int, depth int) ([]nftBranch, error) {
	switch v.Kind {
	case nft.Accept:
		return []nftBranch{{p, nftAccept}}, nil
	case nft.Drop:
		return []nftBranch{{p, nftDrop}}, nil
	case nft.Return:
		return []nftBranch{{p, nftReturn}}, nil
	}
	target := n.t.Chain(v.Chain)
	if target == nil {
		return nil, fmt.Errorf("%s rule %d: %s to missing chain %q", c.Name, idx+1, v, v.Chain)
	}
	outs, err := n.walk(target, p, depth+1)
	if err != nil {
		return nil, err
	}
	if v.Kind == nft.Goto {
		return outs, nil
	}
	var all []nftBranch
	for _, o := range outs {
		if o.exit != nftReturn {
			all = append(all, o)
			continue
		}
		more, err := n.rule(c, idx, r, o.p, i+1, depth)
		if err != nil {
			return nil, err
		}
		all = append(all, more...)
	}
	return all, nil
}

// lookup finds the packet's key in s.
func (n *NFT) lookup(s *nft.Set, key nft.KeyType, p packet) (nft.Element, bool) {
	var k nft.Key
	addrs := 0
	for _, f := range key {
		switch f {
		case nft.Saddr:
			k.SetAddr(addrs, p.src)
			addrs++
		case nft.Daddr:
			k.SetAddr(addrs, p.dst)
			addrs++
		case nft.L4Proto:
			switch p.proto {
			case "tcp":
				k.Proto = nft.TCP
			case "udp":
				k.Proto = nft.UDP
			case "sctp":
				k.Proto = nft.SCTP
			}
		case nft.Dport:
			k.Port = p.dport
		}
	}
	return n.element(s, k)
}

// element finds the element with key k.
func (n *NFT) element(s *nft.Set, k nft.Key) (nft.Element, bool) {
	for _, e := range s.Elements {
		if e.Key == k {
			return e, true
		}
	}
	return nft.Element{}, false
}
