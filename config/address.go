package config

import (
	"fmt"
	"math/big"
	"net/netip"
	"strings"
)

// Range is an inclusive range of addresses of one family. A CIDR entry is
// kept as the range it covers.
type Range struct {
	First, Last netip.Addr
}

// Is6 reports whether the range holds IPv6 addresses.
func (r Range) Is6() bool { return r.First.Is6() }

// Contains reports whether a is inside the range.
func (r Range) Contains(a netip.Addr) bool {
	return a.BitLen() == r.First.BitLen() && r.First.Compare(a) <= 0 && a.Compare(r.Last) <= 0
}

// Overlaps reports whether the two ranges share an address.
func (r Range) Overlaps(o Range) bool {
	return r.First.BitLen() == o.First.BitLen() && r.First.Compare(o.Last) <= 0 && o.First.Compare(r.Last) <= 0
}

// Size is the number of addresses in the range.
func (r Range) Size() *big.Int {
	first := new(big.Int).SetBytes(r.First.AsSlice())
	last := new(big.Int).SetBytes(r.Last.AsSlice())
	return last.Sub(last, first).Add(last, big.NewInt(1))
}

// Prefixes returns the fewest CIDRs that exactly cover the range.
func (r Range) Prefixes() []netip.Prefix {
	var out []netip.Prefix
	first := r.First
	for {
		bits := first.BitLen()
		// Grow the block while it stays aligned at first and inside the range.
		p := netip.PrefixFrom(first, bits)
		for l := bits - 1; l >= 0; l-- {
			cand := netip.PrefixFrom(first, l).Masked()
			if cand.Addr() != first || lastOf(cand).Compare(r.Last) > 0 {
				break
			}
			p = cand
		}
		out = append(out, p)
		end := lastOf(p)
		if end.Compare(r.Last) >= 0 {
			return out
		}
		first = end.Next()
	}
}

func (r Range) String() string {
	if ps := r.Prefixes(); len(ps) == 1 {
		return ps[0].String()
	}
	return r.First.String() + "-" + r.Last.String()
}

// lastOf returns the highest address of a masked prefix.
func lastOf(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// ParseAddressEntry parses one entry of IPAddressPool spec.addresses: a CIDR
// with no host bits set, or "first-last" with both ends of one family and
// first <= last. It accepts exactly what the CRD's CEL rules accept.
func ParseAddressEntry(s string) (Range, error) {
	if s == "" {
		return Range{}, fmt.Errorf("must not be empty")
	}
	if strings.Contains(s, "-") {
		return parseRange(s)
	}
	if !strings.Contains(s, "/") {
		if a, err := netip.ParseAddr(s); err == nil && plainAddr(a) == nil {
			return Range{}, fmt.Errorf("%q is a single address: write it as a CIDR (%s/%d) or a range", s, s, a.BitLen())
		}
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return Range{}, fmt.Errorf("%q is not a CIDR such as 192.0.2.0/24 or a range such as 192.0.2.10-192.0.2.20", s)
	}
	if err := plainAddr(p.Addr()); err != nil {
		return Range{}, fmt.Errorf("%q: %v", s, err)
	}
	if m := p.Masked(); m != p {
		return Range{}, fmt.Errorf("%q has bits set past its /%d prefix: use its network address, %s", s, p.Bits(), m)
	}
	return Range{First: p.Addr(), Last: lastOf(p)}, nil
}

func parseRange(s string) (Range, error) {
	parts := strings.Split(s, "-")
	if len(parts) != 2 {
		return Range{}, fmt.Errorf("%q is not a range: write two addresses joined by one '-', such as 192.0.2.10-192.0.2.20", s)
	}
	var ends [2]netip.Addr
	for i, part := range parts {
		part = strings.TrimSpace(part)
		a, err := netip.ParseAddr(part)
		if err != nil {
			return Range{}, fmt.Errorf("%q is not a range of two addresses: %q is not an IP address", s, part)
		}
		if err := plainAddr(a); err != nil {
			return Range{}, fmt.Errorf("%q: %v", s, err)
		}
		ends[i] = a
	}
	if ends[0].Is4() != ends[1].Is4() {
		return Range{}, fmt.Errorf("%q mixes IPv4 and IPv6: both ends of a range must be of the same family", s)
	}
	if ends[0].Compare(ends[1]) > 0 {
		return Range{}, fmt.Errorf("%q starts after it ends: write it as %s-%s", s, ends[1], ends[0])
	}
	return Range{First: ends[0], Last: ends[1]}, nil
}

// plainAddr refuses the address forms Kubernetes' CEL ip() refuses, so the
// parser and the CRD agree.
func plainAddr(a netip.Addr) error {
	if a.Zone() != "" {
		return fmt.Errorf("an address may not carry a zone (%%%s)", a.Zone())
	}
	if a.Is4In6() {
		return fmt.Errorf("IPv4-mapped IPv6 address %s is not allowed: write %s", a, a.Unmap())
	}
	return nil
}

// parseIP parses a single plain address (BGPPeer addresses and router IDs).
func parseIP(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q is not an IPv4 or IPv6 address", s)
	}
	if err := plainAddr(a); err != nil {
		return netip.Addr{}, err
	}
	return a, nil
}
