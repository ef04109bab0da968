package config

import (
	"strings"
	"testing"
)

// FuzzParseAddressEntry checks that any input either fails cleanly or gives
// a well-formed range whose own text parses back to the same range.
func FuzzParseAddressEntry(f *testing.F) {
	for _, s := range []string{
		"192.0.2.0/24", "192.0.2.5/24", "192.0.2.10-192.0.2.20", "192.0.2.20-192.0.2.10",
		"2001:db8::/64", "2001:db8::1-2001:db8::ff", "::ffff:192.0.2.1-::ffff:192.0.2.2",
		"fe80::1%eth0-fe80::2", "192.0.2.1-2001:db8::1", "0.0.0.0/0", "::/0", "-", "--", "/", "192.0.2.1",
		"1.2.3.4/33", " 192.0.2.1 - 192.0.2.2 ", "192.0.2.010/32",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseAddressEntry(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("%q: empty error", s)
			}
			return
		}
		if !r.First.IsValid() || !r.Last.IsValid() || r.First.BitLen() != r.Last.BitLen() || r.First.Compare(r.Last) > 0 {
			t.Fatalf("%q: bad range %v-%v", s, r.First, r.Last)
		}
		// The CRD checks the addresses as written: a range's two ends, a
		// CIDR's network address. A CIDR's last address may be an
		// IPv4-mapped one (::/80 ends at ::ffff:255.255.255.255), as
		// ::/0 holds every such address; that is not a written form.
		if r.First.Zone() != "" || r.First.Is4In6() || (strings.Contains(s, "-") && r.Last.Is4In6()) {
			t.Fatalf("%q: accepted a form the CRD refuses: %v", s, r)
		}
		again, err := ParseAddressEntry(r.String())
		if err != nil || again != r {
			t.Fatalf("%q: String %q does not round-trip: %v %v", s, r.String(), again, err)
		}
		if r.Size().Sign() <= 0 {
			t.Fatalf("%q: size %v", s, r.Size())
		}
		if ps := r.Prefixes(); len(ps) == 0 || len(ps) > 2*r.First.BitLen() {
			t.Fatalf("%q: %d prefixes", s, len(ps))
		}
		checkPrefixesCover(t, r)
	})
}

// FuzzParseCommunity checks that accepted communities print in a canonical
// form that parses back to the same value, and that nothing panics.
func FuzzParseCommunity(f *testing.F) {
	for _, s := range []string{"64512:100", "65535:65535", "65536:1", "large:1:2:3", "large:4294967296:1:1",
		"large:1:2", "1:2:3", "no-export", ":", "large:", "007:08", "+1:1", "1_0:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCommunity(s)
		if err != nil {
			return
		}
		if strings.ContainsAny(s, "+-_ ") {
			t.Fatalf("%q accepted with a sign, underscore or space", s)
		}
		again, err := ParseCommunity(c.String())
		if err != nil || again != c {
			t.Fatalf("%q: %q does not round-trip: %v %v", s, c.String(), again, err)
		}
		// Aliases and numbers must never be confused.
		if _, err := resolveCommunity(s, nil); err != nil {
			t.Fatalf("%q parses as a number but not as an advertisement value: %v", s, err)
		}
	})
}
