// Package nft is the proxy's nftables ruleset as plain Go values: one
// table per address family with its chains, rules, sets and verdict maps.
// The rules package renders Services into it; this package prints it in
// nft syntax (golden files, `nft -c` checks, logs), compares two of them
// (what a sync must change) and, in the netlink file, programs the
// difference into the kernel in one transaction. The model is small on
// purpose: only the matches and statements herald's rules use, each a
// type with its nft spelling, so the tracer can simulate it and the
// netlink encoder can translate it one to one.
package nft

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/herald-lb/herald/internal/ipfamily"
)

// TableName is herald's table in each family.
const TableName = "herald"

// Hook is a netfilter hook a base chain is attached to.
type Hook string

// The hooks herald uses.
const (
	HookPrerouting  Hook = "prerouting"
	HookInput       Hook = "input"
	HookForward     Hook = "forward"
	HookOutput      Hook = "output"
	HookPostrouting Hook = "postrouting"
)

// ChainType is the type of a base chain.
type ChainType string

// The chain types herald uses.
const (
	TypeNAT    ChainType = "nat"
	TypeFilter ChainType = "filter"
)

// Priorities of base chains, as nft names them.
const (
	PriorityRaw    = -300
	PriorityMangle = -150
	PriorityDstNAT = -100
	PriorityFilter = 0
	PrioritySrcNAT = 100
)

// Base makes a chain a base chain.
type Base struct {
	Type     ChainType
	Hook     Hook
	Priority int
}

// Chain is a chain with its rules.
type Chain struct {
	Name string
	// Base is nil for a regular chain.
	Base  *Base
	Rules []Rule
}

// Rule is a list of expressions, evaluated in order, and a comment.
type Rule struct {
	Exprs   []Expr
	Comment string
}

// Field is a packet field a match or a key reads.
type Field int

// The fields.
const (
	Saddr Field = iota
	Daddr
	L4Proto
	Dport
	// Slot is the number a DNATMap draws: the endpoints map's key.
	Slot
	// Sport is the source port (of any protocol with ports).
	Sport
)

// Proto is a layer-4 protocol.
type Proto uint8

// The protocols Services use (IANA numbers, as the kernel keys them).
const (
	TCP  Proto = 6
	UDP  Proto = 17
	SCTP Proto = 132
)

func (p Proto) String() string {
	switch p {
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	case SCTP:
		return "sctp"
	}
	return fmt.Sprint(uint8(p))
}

// Key is one element key of a set or map: the fields its type names,
// the others zero. A type with two address fields (the hairpin set's
// saddr . daddr) keeps the first in Addr, the second in Addr2.
type Key struct {
	Addr, Addr2 netip.Addr
	Proto       Proto
	Port        uint16
	Slot        uint32
}

// addr returns the key's address for the i-th address field of a type.
func (k Key) addr(i int) netip.Addr {
	if i == 0 {
		return k.Addr
	}
	return k.Addr2
}

// SetAddr sets the i-th address field.
func (k *Key) SetAddr(i int, a netip.Addr) {
	if i == 0 {
		k.Addr = a
	} else {
		k.Addr2 = a
	}
}

// KeyType lists the fields a set's keys are made of, in order.
type KeyType []Field

// VerdictKind is what a verdict does.
type VerdictKind int

// The verdicts.
const (
	Accept VerdictKind = iota
	Drop
	Return
	Jump
	Goto
)

// Verdict ends (or diverts) the evaluation of a rule.
type Verdict struct {
	Kind  VerdictKind
	Chain string // Jump, Goto
}

func (v Verdict) String() string {
	switch v.Kind {
	case Accept:
		return "accept"
	case Drop:
		return "drop"
	case Return:
		return "return"
	case Jump:
		return "jump " + v.Chain
	case Goto:
		return "goto " + v.Chain
	}
	return fmt.Sprintf("verdict(%d)", int(v.Kind))
}

// Element is a set element, with its verdict in a verdict map or its
// address and port in an endpoints map.
type Element struct {
	Key     Key
	Verdict Verdict
	To      netip.AddrPort
	// Mark is the value of a marks map's element.
	Mark uint32
}

// Set is a named set or, with Map, a verdict map, or with Endpoints a
// map from Slot to address . port (DNATMap's) for protocol Proto, or
// with Marks a map from its key (a Slot, MarkHash's; or with Dynamic a
// flow, MarkLookup's and UpdateMap's) to a packet mark.
type Set struct {
	Name      string
	Key       KeyType
	Map       bool
	Endpoints bool
	Marks     bool
	Proto     Proto
	// Timeout and Dynamic make a set the packet path adds to (session
	// affinity): elements expire Timeout after their last update.
	Timeout time.Duration
	Dynamic bool
	// Size bounds a dynamic set's elements (0: the kernel's default).
	Size uint32
	// Elements are sorted by key (Sort).
	Elements []Element
}

// Table is herald's whole ruleset in one family.
type Table struct {
	Family ipfamily.Family
	Chains []*Chain
	Sets   []*Set

	// Indexes by name, built by Sort (or on first lookup): a table of
	// 10,000 Services has over 100,000 chains.
	chainIdx map[string]*Chain
	setIdx   map[string]*Set
}

func (t *Table) index() {
	t.chainIdx = make(map[string]*Chain, len(t.Chains))
	for _, c := range t.Chains {
		t.chainIdx[c.Name] = c
	}
	t.setIdx = make(map[string]*Set, len(t.Sets))
	for _, s := range t.Sets {
		t.setIdx[s.Name] = s
	}
}

// Chain returns the named chain, nil when there is none. Add chains
// before the first lookup (or call Sort again after).
func (t *Table) Chain(name string) *Chain {
	if t.chainIdx == nil {
		t.index()
	}
	return t.chainIdx[name]
}

// Set returns the named set, nil when there is none.
func (t *Table) Set(name string) *Set {
	if t.setIdx == nil {
		t.index()
	}
	return t.setIdx[name]
}

// Sort orders chains (base chains first) and sets by name and every
// set's elements by key, so that equal tables print alike.
func (t *Table) Sort() {
	slices.SortFunc(t.Chains, func(a, b *Chain) int {
		return cmp.Or(cmp.Compare(boolInt(a.Base == nil), boolInt(b.Base == nil)), strings.Compare(a.Name, b.Name))
	})
	slices.SortFunc(t.Sets, func(a, b *Set) int { return strings.Compare(a.Name, b.Name) })
	for _, s := range t.Sets {
		slices.SortFunc(s.Elements, func(a, b Element) int { return CompareKeys(a.Key, b.Key) })
	}
	t.index()
}

// CompareKeys orders keys by address, protocol, port and slot.
func CompareKeys(a, b Key) int {
	return cmp.Or(a.Addr.Compare(b.Addr), a.Addr2.Compare(b.Addr2), cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Slot, b.Slot))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
