package nft

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/herald-lb/herald/internal/ipfamily"
)

// FamilyKeyword is the nft family of herald's table in f: one table per
// family, as kube-proxy's nftables mode has, so that rules never need an
// l3proto guard.
func FamilyKeyword(f ipfamily.Family) string {
	if f == ipfamily.IPv6 {
		return "ip6"
	}
	return "ip"
}

// Text prints the table as `nft -f` input that creates it from nothing
// (the table, then its sets and maps, then its chains), in a stable order
// for golden files. Call Sort first for a canonical order.
func (t *Table) Text() string {
	var b strings.Builder
	f := t.Family
	fmt.Fprintf(&b, "table %s %s {\n", FamilyKeyword(f), TableName)
	for _, s := range t.Sets {
		b.WriteString(s.text(f))
	}
	for _, c := range t.Chains {
		fmt.Fprintf(&b, "\tchain %s {\n", c.Name)
		if c.Base != nil {
			fmt.Fprintf(&b, "\t\ttype %s hook %s priority %d; policy accept;\n", c.Base.Type, c.Base.Hook, c.Base.Priority)
		}
		for _, r := range c.Rules {
			b.WriteString("\t\t" + r.Text(f) + "\n")
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// Text spells the rule as nft does, the comment last.
func (r Rule) Text(f ipfamily.Family) string {
	parts := make([]string, 0, len(r.Exprs)+1)
	for _, e := range r.Exprs {
		parts = append(parts, e.Text(f))
	}
	if r.Comment != "" {
		parts = append(parts, "comment "+strconv.Quote(r.Comment))
	}
	return strings.Join(parts, " ")
}

func typeText(f ipfamily.Family, k KeyType) string {
	s := make([]string, len(k))
	for i, fl := range k {
		switch fl {
		case Saddr, Daddr:
			if f == ipfamily.IPv6 {
				s[i] = "ipv6_addr"
			} else {
				s[i] = "ipv4_addr"
			}
		case L4Proto:
			s[i] = "inet_proto"
		case Dport, Sport:
			s[i] = "inet_service"
		case Slot:
			s[i] = "integer"
		}
	}
	return strings.Join(s, " . ")
}

// KeyText spells an element key of type k.
func KeyText(k KeyType, key Key) string {
	s := make([]string, len(k))
	addrs := 0
	for i, fl := range k {
		switch fl {
		case Saddr, Daddr:
			s[i] = key.addr(addrs).String()
			addrs++
		case L4Proto:
			s[i] = key.Proto.String()
		case Dport, Sport:
			s[i] = strconv.Itoa(int(key.Port))
		case Slot:
			s[i] = strconv.FormatUint(uint64(key.Slot), 10)
		}
	}
	return strings.Join(s, " . ")
}

func (s *Set) text(f ipfamily.Family) string {
	var b strings.Builder
	kind, typ, props := s.declaration(f)
	fmt.Fprintf(&b, "\t%s %s {\n\t\t%s\n", kind, s.Name, typ)
	for _, p := range props {
		fmt.Fprintf(&b, "\t\t%s\n", p)
	}
	if len(s.Elements) > 0 {
		els := make([]string, len(s.Elements))
		for i, e := range s.Elements {
			els[i] = s.elementText(e)
		}
		fmt.Fprintf(&b, "\t\telements = { %s }\n", strings.Join(els, ",\n\t\t\t     "))
	}
	b.WriteString("\t}\n")
	return b.String()
}

// ChangesText spells ch as one `nft -f` transaction, the same objects in
// the same order as Kernel.Apply sends them over netlink: what kube-proxy's
// nftables mode would hand the nft binary. It exists to measure the two
// ways against each other (proxy/nft's apply benchmark) and to show a
// transaction in a log or a test failure.
func ChangesText(want *Table, ch Changes) string {
	var b strings.Builder
	f := want.Family
	tbl := FamilyKeyword(f) + " " + TableName
	if ch.Mode == Recreate {
		fmt.Fprintf(&b, "add table %s\ndelete table %s\n", tbl, tbl)
	}
	fmt.Fprintf(&b, "add table %s\n", tbl)
	for _, s := range ch.AddSets {
		b.WriteString("add " + s.headerText(f) + "\n")
	}
	for _, n := range ch.FlushSets {
		kind := "set"
		if s := want.Set(n); s != nil && s.Map {
			kind = "map"
		}
		fmt.Fprintf(&b, "flush %s %s %s\n", kind, tbl, n)
	}
	for _, c := range ch.AddChains {
		fmt.Fprintf(&b, "add chain %s %s%s\n", tbl, c.Name, baseText(c))
	}
	for name, els := range ch.DelElements {
		s := want.Set(name)
		for _, e := range els {
			key := KeyType{}
			if s != nil {
				key = s.Key
			}
			fmt.Fprintf(&b, "delete element %s %s { %s }\n", tbl, name, KeyText(key, e.Key))
		}
	}
	created := map[string]bool{}
	for _, c := range ch.AddChains {
		created[c.Name] = true
	}
	for _, c := range ch.Rewrite {
		if !created[c.Name] && ch.Mode != Recreate {
			fmt.Fprintf(&b, "flush chain %s %s\n", tbl, c.Name)
		}
		for _, r := range c.Rules {
			fmt.Fprintf(&b, "add rule %s %s %s\n", tbl, c.Name, r.Text(f))
		}
	}
	for name, els := range ch.AddElements {
		s := want.Set(name)
		parts := make([]string, len(els))
		for i, e := range els {
			parts[i] = s.elementText(e)
		}
		fmt.Fprintf(&b, "add element %s %s { %s }\n", tbl, name, strings.Join(parts, ", "))
	}
	for _, n := range ch.DelChains {
		fmt.Fprintf(&b, "flush chain %s %s\n", tbl, n)
	}
	for _, n := range ch.DelChains {
		fmt.Fprintf(&b, "delete chain %s %s\n", tbl, n)
	}
	for _, n := range ch.DelSets {
		fmt.Fprintf(&b, "delete set %s %s\n", tbl, n)
	}
	return b.String()
}

func baseText(c *Chain) string {
	if c.Base == nil {
		return ""
	}
	return fmt.Sprintf(" { type %s hook %s priority %d; policy accept; }", c.Base.Type, c.Base.Hook, c.Base.Priority)
}

// headerText is a set's declaration without its elements, as one line
// after "add ": "set ip herald NAME { type ...; flags ...; timeout ...; }".
func (s *Set) headerText(f ipfamily.Family) string {
	kind, typ, props := s.declaration(f)
	out := fmt.Sprintf("%s %s %s %s { %s;", kind, FamilyKeyword(f), TableName, s.Name, typ)
	for _, p := range props {
		out += " " + p + ";"
	}
	return out + " }"
}

// declaration is a set's kind (set or map), type ("type ..." or
// "typeof ...") and the properties after the type (flags, timeout), in
// nft's spelling.
func (s *Set) declaration(f ipfamily.Family) (kind, typ string, props []string) {
	kind, typ = "set", "type "+typeText(f, s.Key)
	switch {
	case s.Map:
		kind, typ = "map", typ+" : verdict"
	case s.Endpoints:
		// nft checks a map's key against the expression looking it up,
		// and numgen's result is an integer of no named type. The port
		// is the protocol's: nft 1.0.6 refuses "th dport" with a DNAT
		// after "meta l4proto tcp" once the map is in the kernel.
		kind, typ = "map", "typeof numgen random mod 1 : "+addrKeyword(f)+" daddr . "+s.Proto.String()+" dport"
	case s.Marks && slices.Equal(s.Key, KeyType{Slot}):
		kind, typ = "map", "typeof numgen random mod 1 : meta mark"
	case s.Marks:
		kind, typ = "map", typ+" : mark"
	}
	var flags []string
	if s.Dynamic {
		flags = append(flags, "dynamic")
	}
	if s.Timeout > 0 {
		flags = append(flags, "timeout")
	}
	if len(flags) > 0 {
		props = append(props, "flags "+strings.Join(flags, ","))
	}
	if s.Timeout > 0 {
		props = append(props, fmt.Sprintf("timeout %ds", int(s.Timeout.Seconds())))
	}
	if s.Size > 0 {
		props = append(props, fmt.Sprintf("size %d", s.Size))
	}
	return kind, typ, props
}

// elementText spells an element of s: its key, and its value in a map.
func (s *Set) elementText(e Element) string {
	switch {
	case s.Map:
		return KeyText(s.Key, e.Key) + " : " + e.Verdict.String()
	case s.Endpoints:
		return KeyText(s.Key, e.Key) + " : " + e.To.Addr().String() + " . " + strconv.Itoa(int(e.To.Port()))
	case s.Marks:
		return KeyText(s.Key, e.Key) + " : " + fmt.Sprintf("0x%08x", e.Mark)
	}
	return KeyText(s.Key, e.Key)
}
