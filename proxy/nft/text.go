package nft

import (
	"fmt"
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
		case Dport:
			s[i] = "inet_service"
		}
	}
	return strings.Join(s, " . ")
}

// KeyText spells an element key of type k.
func KeyText(k KeyType, key Key) string {
	s := make([]string, len(k))
	for i, fl := range k {
		switch fl {
		case Saddr, Daddr:
			s[i] = key.Addr.String()
		case L4Proto:
			s[i] = key.Proto.String()
		case Dport:
			s[i] = strconv.Itoa(int(key.Port))
		}
	}
	return strings.Join(s, " . ")
}

func (s *Set) text(f ipfamily.Family) string {
	var b strings.Builder
	kind := "set"
	typ := typeText(f, s.Key)
	if s.Map {
		kind, typ = "map", typ+" : verdict"
	}
	fmt.Fprintf(&b, "\t%s %s {\n\t\ttype %s\n", kind, s.Name, typ)
	var flags []string
	if s.Dynamic {
		flags = append(flags, "dynamic")
	}
	if s.Timeout > 0 {
		flags = append(flags, "timeout")
	}
	if len(flags) > 0 {
		fmt.Fprintf(&b, "\t\tflags %s\n", strings.Join(flags, ","))
	}
	if s.Timeout > 0 {
		fmt.Fprintf(&b, "\t\ttimeout %ds\n", int(s.Timeout.Seconds()))
	}
	if len(s.Elements) > 0 {
		els := make([]string, len(s.Elements))
		for i, e := range s.Elements {
			els[i] = KeyText(s.Key, e.Key)
			if s.Map {
				els[i] += " : " + e.Verdict.String()
			}
		}
		fmt.Fprintf(&b, "\t\telements = { %s }\n", strings.Join(els, ",\n\t\t\t     "))
	}
	b.WriteString("\t}\n")
	return b.String()
}
