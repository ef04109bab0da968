// Package ipfamily is the one IP family type herald's packages share.
package ipfamily

import (
	"fmt"
	"net/netip"
)

// Family is IPv4 or IPv6; the values are those of spec.ipFamilies'
// spelling without the prefix, so Family(4) is IPv4.
type Family uint8

// The families.
const (
	IPv4 Family = 4
	IPv6 Family = 6
)

func (f Family) String() string {
	switch f {
	case IPv4:
		return "IPv4"
	case IPv6:
		return "IPv6"
	}
	return fmt.Sprintf("Family(%d)", uint8(f))
}

// Of returns the family of an address; callers unmap IPv4-mapped
// addresses first where they mean IPv4.
func Of(a netip.Addr) Family {
	if a.Is4() {
		return IPv4
	}
	return IPv6
}

// Has reports whether a valid (already unmapped) address belongs to the
// family.
func (f Family) Has(a netip.Addr) bool {
	return a.IsValid() && ((f == IPv4 && a.Is4()) || (f == IPv6 && a.Is6()))
}
