package config

import (
	"math/big"
	"net/netip"
	"testing"
)

func TestParseAddressEntry(t *testing.T) {
	cases := []struct {
		in          string
		first, last string
		size        string
		prefixes    int
	}{
		{"192.0.2.0/24", "192.0.2.0", "192.0.2.255", "256", 1},
		{"192.0.2.7/32", "192.0.2.7", "192.0.2.7", "1", 1},
		{"0.0.0.0/0", "0.0.0.0", "255.255.255.255", "4294967296", 1},
		{"192.0.2.10-192.0.2.20", "192.0.2.10", "192.0.2.20", "11", 4},
		{"192.0.2.10 - 192.0.2.10", "192.0.2.10", "192.0.2.10", "1", 1},
		{"2001:db8::/126", "2001:db8::", "2001:db8::3", "4", 1},
		{"2001:DB8::/127", "2001:db8::", "2001:db8::1", "2", 1},
		{"2001:db8::ffff-2001:db8::1:0", "2001:db8::ffff", "2001:db8::1:0", "2", 2},
		{"::/0", "::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "340282366920938463463374607431768211456", 1},
	}
	for _, tc := range cases {
		r, err := ParseAddressEntry(tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if r.First != netip.MustParseAddr(tc.first) || r.Last != netip.MustParseAddr(tc.last) {
			t.Errorf("%q = %s..%s", tc.in, r.First, r.Last)
		}
		want, _ := new(big.Int).SetString(tc.size, 10)
		if r.Size().Cmp(want) != 0 {
			t.Errorf("%q size %s, want %s", tc.in, r.Size(), tc.size)
		}
		if got := len(r.Prefixes()); got != tc.prefixes {
			t.Errorf("%q: %d prefixes %v, want %d", tc.in, got, r.Prefixes(), tc.prefixes)
		}
		checkPrefixesCover(t, r)
	}
}

// checkPrefixesCover asserts the prefixes tile the range exactly, in order.
func checkPrefixesCover(t *testing.T, r Range) {
	t.Helper()
	next := r.First
	for _, p := range r.Prefixes() {
		if p.Addr() != next || p != p.Masked() {
			t.Fatalf("%s: prefix %s does not start at %s", r, p, next)
		}
		next = lastOf(p).Next()
	}
	if next.IsValid() && next != r.Last.Next() {
		t.Fatalf("%s: prefixes end before %s", r, r.Last)
	}
}

func TestRangeRelations(t *testing.T) {
	a, _ := ParseAddressEntry("192.0.2.0/25")
	b, _ := ParseAddressEntry("192.0.2.127-192.0.2.130")
	c, _ := ParseAddressEntry("192.0.2.128/25")
	v6, _ := ParseAddressEntry("::/0")
	if !a.Overlaps(b) || !b.Overlaps(c) || a.Overlaps(c) || a.Overlaps(v6) || v6.Overlaps(a) {
		t.Error("overlap relation wrong")
	}
	if !a.Contains(netip.MustParseAddr("192.0.2.127")) || a.Contains(netip.MustParseAddr("192.0.2.128")) || v6.Contains(netip.MustParseAddr("192.0.2.1")) {
		t.Error("contains wrong")
	}
}

func TestParseCommunity(t *testing.T) {
	for in, want := range map[string]string{
		"0:0": "0:0", "65535:65535": "65535:65535", "007:1": "7:1",
		"large:0:0:0": "large:0:0:0", "large:4294967295:4294967295:1": "large:4294967295:4294967295:1",
	} {
		c, err := ParseCommunity(in)
		if err != nil || c.String() != want {
			t.Errorf("%q = %v, %v; want %s", in, c, err, want)
		}
	}
	for _, bad := range []string{"", ":", "1:", ":1", "-1:1", "+1:1", "1:65536", "1:2:3", "large:1:2", "large:1:2:3:4", "large:-1:2:3", "1 :2", "0x1:2", "large:1:2:4294967296"} {
		if c, err := ParseCommunity(bad); err == nil {
			t.Errorf("%q accepted as %v", bad, c)
		}
	}
}
