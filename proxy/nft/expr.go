package nft

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/herald-lb/herald/internal/ipfamily"
)

// Expr is one match or statement of a rule. Text spells it in nft syntax
// for the table's family.
type Expr interface {
	Text(f ipfamily.Family) string
}

// MatchAddr matches the source or destination address against a prefix
// (a single address is a full-length prefix).
type MatchAddr struct {
	Field  Field // Saddr or Daddr
	Prefix netip.Prefix
	Not    bool
}

// MatchSet matches the packet's fields against a named set (an affinity
// set of client addresses, the health-check ports, the LB addresses
// behind a firewall).
type MatchSet struct {
	Key KeyType
	Set string
}

// MatchProto matches the layer-4 protocol.
type MatchProto struct{ Proto Proto }

// MatchDport matches the destination port (of any protocol with ports).
type MatchDport struct{ Port uint16 }

// MatchFibLocal matches packets whose source or destination address is
// one of the node's own (fib ... type local; iptables' addrtype LOCAL).
type MatchFibLocal struct {
	Field Field // Saddr or Daddr
}

// MatchIifname matches the interface the packet came in on: by its whole
// name, or with Prefix by how the name begins (nft's "veth*"). It is how
// kube-proxy's BridgeInterface and InterfaceNamePrefix local-traffic modes
// tell a pod's packets.
type MatchIifname struct {
	Name   string
	Prefix bool
	Not    bool
}

// MatchMark matches packets with (or, with Not, without) the mark bit.
type MatchMark struct {
	Bit uint32
	Not bool
}

// CtState is a conntrack state.
type CtState string

// The states herald matches.
const (
	CtInvalid     CtState = "invalid"
	CtEstablished CtState = "established"
	CtRelated     CtState = "related"
	CtNew         CtState = "new"
)

// MatchCtState matches packets in any of the conntrack states.
type MatchCtState struct{ States []CtState }

// MatchCtDNAT matches packets of connections conntrack has DNATed (ct
// status dnat): a Service's traffic, as opposed to traffic that only
// looks like it (a node reaching its own address, which is also a
// hostNetwork endpoint's).
type MatchCtDNAT struct{}

// Counter counts the packets and bytes that reach it.
type Counter struct{}

// Reject refuses the packet with an ICMP (ICMPv6) port unreachable, for
// TCP too, as the iptables mode's REJECT does, so both modes answer a
// Service without endpoints alike.
type Reject struct{}

// DNAT rewrites the destination.
type DNAT struct{ To netip.AddrPort }

// Masquerade rewrites the source to the outgoing interface's address.
type Masquerade struct{ FullyRandom bool }

// MarkOr sets the mark bit.
type MarkOr struct{ Bit uint32 }

// MarkXor flips the mark bit (clears it on packets that have it).
type MarkXor struct{ Bit uint32 }

// VmapLookup looks the packet's fields up in a verdict map and applies
// the element's verdict; no element, no verdict.
type VmapLookup struct {
	Key KeyType
	Map string
}

// NumgenMatch draws a random number below Mod and matches when it is 0:
// rule i of a chain of n such rules (Mod n-i) picks 1 of n connections
// that reach the chain, as iptables' statistic cascade does. Each rule
// draws anew.
type NumgenMatch struct{ Mod uint32 }

// DNATMap draws a random number in [Offset, Offset+Mod) and DNATs to the
// address and port the endpoints map Map gives for it; no element, no
// match. One rule picks among a Service's endpoints, and replacing an
// endpoint changes map elements only: no rule, so the kernel need not
// validate the table again (which costs about 0.2 us per rule).
type DNATMap struct {
	Mod, Offset uint32
	Map         string
}

// DNATHash DNATs to the address and port the endpoints map Map gives for
// the flow's slot: jhash over source address and port, destination
// address and port, with Seed, scaled onto Mod (maglev.FlowHash and
// maglev.Scale compute the same in Go). Unlike DNATMap's random draw, a
// flow gets the same slot on every node whose rule has the same Seed and
// Mod: the consistent backend choice. Seed must not be 0: the kernel
// would draw a random seed of its own for the rule.
type DNATHash struct {
	Mod, Seed uint32
	Map       string
}

// MarkHash sets the packet's mark to the value the marks map Map gives
// for the flow's slot, computed as DNATHash computes it (same Mod and
// Seed, same slot). A slot without an element leaves the mark alone and
// the rule unmatched. It is how a node sends a flow whose endpoint runs
// elsewhere into the tunnel to that endpoint's node (policy routing on
// the mark), before conntrack sees it.
type MarkHash struct {
	Mod, Seed uint32
	Map       string
}

// MarkLookup sets the packet's mark to the value the marks map Map holds
// for the packet's Key; no element, no match (the mark unchanged).
type MarkLookup struct {
	Key KeyType
	Map string
}

// UpdateMap adds the packet's Key to the dynamic marks map Map, with the
// packet's mark as its value, or refreshes its timeout.
type UpdateMap struct {
	Key KeyType
	Map string
}

// MatchMarkValue matches packets whose mark, masked, is (or with Not is
// not) Value.
type MatchMarkValue struct {
	Mask, Value uint32
	Not         bool
}

// NoTrack exempts the packet from connection tracking: a flow a node
// only forwards into the tunnel is tracked by the endpoint's node, which
// sees both of its directions; this node sees one.
type NoTrack struct{}

// MarkAnd keeps only the mark bits in Mask.
type MarkAnd struct{ Mask uint32 }

// UpdateSet adds the source or destination address to a dynamic set, or
// refreshes its timeout (session affinity).
type UpdateSet struct {
	Field Field
	Set   string
}

// Text implementations.

func addrKeyword(f ipfamily.Family) string {
	if f == ipfamily.IPv6 {
		return "ip6"
	}
	return "ip"
}

func fieldText(f ipfamily.Family, fl Field) string {
	switch fl {
	case Saddr:
		return addrKeyword(f) + " saddr"
	case Daddr:
		return addrKeyword(f) + " daddr"
	case L4Proto:
		return "meta l4proto"
	case Dport:
		return "th dport"
	case Sport:
		return "th sport"
	}
	return fmt.Sprintf("field(%d)", int(fl))
}

func prefixText(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}

// Text implements Expr.
func (m MatchAddr) Text(f ipfamily.Family) string {
	op := " "
	if m.Not {
		op = " != "
	}
	return fieldText(f, m.Field) + op + prefixText(m.Prefix)
}

// Text implements Expr.
func (m MatchSet) Text(f ipfamily.Family) string { return keyText(f, m.Key) + " @" + m.Set }

// Text implements Expr.
func (m MatchProto) Text(ipfamily.Family) string { return "meta l4proto " + m.Proto.String() }

// Text implements Expr.
func (m MatchDport) Text(ipfamily.Family) string { return fmt.Sprintf("th dport %d", m.Port) }

// Text implements Expr.
func (m MatchFibLocal) Text(ipfamily.Family) string {
	if m.Field == Saddr {
		return "fib saddr type local"
	}
	return "fib daddr type local"
}

// Text implements Expr.
func (m MatchIifname) Text(ipfamily.Family) string {
	op, name := " ", m.Name
	if m.Not {
		op = " != "
	}
	if m.Prefix {
		name += "*"
	}
	return "iifname" + op + strconv.Quote(name)
}

// Text implements Expr.
func (m MatchMark) Text(ipfamily.Family) string {
	op := "!="
	if m.Not {
		op = "=="
	}
	return fmt.Sprintf("meta mark & 0x%08x %s 0x00000000", m.Bit, op)
}

// Text implements Expr.
func (MatchCtDNAT) Text(ipfamily.Family) string { return "ct status dnat" }

// Text implements Expr.
func (m MatchCtState) Text(ipfamily.Family) string {
	s := make([]string, len(m.States))
	for i, st := range m.States {
		s[i] = string(st)
	}
	return "ct state " + strings.Join(s, ",")
}

// Text implements Expr.
func (Counter) Text(ipfamily.Family) string { return "counter" }

// Text implements Expr.
func (Reject) Text(f ipfamily.Family) string {
	if f == ipfamily.IPv6 {
		return "reject with icmpv6 port-unreachable"
	}
	return "reject with icmp port-unreachable"
}

// Text implements Expr.
func (d DNAT) Text(f ipfamily.Family) string {
	return "dnat " + addrKeyword(f) + " to " + d.To.String()
}

// Text implements Expr.
func (m Masquerade) Text(ipfamily.Family) string {
	if m.FullyRandom {
		return "masquerade fully-random"
	}
	return "masquerade"
}

// Text implements Expr.
func (m MarkOr) Text(ipfamily.Family) string {
	return fmt.Sprintf("meta mark set meta mark | 0x%08x", m.Bit)
}

// Text implements Expr.
func (m MarkXor) Text(ipfamily.Family) string {
	return fmt.Sprintf("meta mark set meta mark ^ 0x%08x", m.Bit)
}

func keyText(f ipfamily.Family, k KeyType) string {
	s := make([]string, len(k))
	for i, fl := range k {
		s[i] = fieldText(f, fl)
	}
	return strings.Join(s, " . ")
}

// Text implements Expr.
func (v VmapLookup) Text(f ipfamily.Family) string { return keyText(f, v.Key) + " vmap @" + v.Map }

// Text implements Expr.
func (n NumgenMatch) Text(ipfamily.Family) string {
	return fmt.Sprintf("numgen random mod %d 0", n.Mod)
}

// Text implements Expr.
func (d DNATMap) Text(f ipfamily.Family) string {
	off := ""
	if d.Offset != 0 {
		off = fmt.Sprintf(" offset %d", d.Offset)
	}
	return fmt.Sprintf("dnat %s to numgen random mod %d%s map @%s", addrKeyword(f), d.Mod, off, d.Map)
}

// FlowKey is the key DNATHash hashes.
var FlowKey = KeyType{Saddr, Sport, Daddr, Dport}

// Text implements Expr.
func (d DNATHash) Text(f ipfamily.Family) string {
	return fmt.Sprintf("dnat %s to jhash %s mod %d seed 0x%08x map @%s", addrKeyword(f), keyText(f, FlowKey), d.Mod, d.Seed, d.Map)
}

// Text implements Expr.
func (m MarkHash) Text(f ipfamily.Family) string {
	return fmt.Sprintf("meta mark set jhash %s mod %d seed 0x%08x map @%s", keyText(f, FlowKey), m.Mod, m.Seed, m.Map)
}

// Text implements Expr.
func (m MarkLookup) Text(f ipfamily.Family) string {
	return "meta mark set " + keyText(f, m.Key) + " map @" + m.Map
}

// Text implements Expr.
func (u UpdateMap) Text(f ipfamily.Family) string {
	return "update @" + u.Map + " { " + keyText(f, u.Key) + " : meta mark }"
}

// Text implements Expr.
func (m MatchMarkValue) Text(ipfamily.Family) string {
	op := "=="
	if m.Not {
		op = "!="
	}
	return fmt.Sprintf("meta mark & 0x%08x %s 0x%08x", m.Mask, op, m.Value)
}

// Text implements Expr.
func (NoTrack) Text(ipfamily.Family) string { return "notrack" }

// Text implements Expr.
func (m MarkAnd) Text(ipfamily.Family) string {
	return fmt.Sprintf("meta mark set meta mark & 0x%08x", m.Mask)
}

// Text implements Expr.
func (u UpdateSet) Text(f ipfamily.Family) string {
	return "update @" + u.Set + " { " + fieldText(f, u.Field) + " }"
}

// Text implements Expr.
func (v Verdict) Text(ipfamily.Family) string { return v.String() }
