package ipfamily

import (
	"net/netip"
	"testing"
)

func TestFamily(t *testing.T) {
	v4, v6, mapped := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("::ffff:192.0.2.1")
	if Of(v4) != IPv4 || Of(v6) != IPv6 || Of(mapped.Unmap()) != IPv4 {
		t.Error("Of")
	}
	if !IPv4.Has(v4) || IPv4.Has(v6) || !IPv6.Has(v6) || IPv6.Has(netip.Addr{}) || IPv4.Has(mapped) {
		t.Error("Has")
	}
	if IPv4.String() != "IPv4" || IPv6.String() != "IPv6" || Family(5).String() != "Family(5)" {
		t.Error("String")
	}
}
