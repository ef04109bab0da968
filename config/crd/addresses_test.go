package crd

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/herald-lb/herald/config"
)

// Substrings of the AddressEntry rule messages.
const (
	errFormat = "must be a CIDR such as 192.0.2.0/24 or a range"
	errHost   = "no bits set past its prefix length"
	errFamily = "both ends of a range must be of the same IP family"
	errOrder  = "the start of a range must not be greater than its end"
)

// TestAddressEntryRules pins down what the API server accepts as an
// IPAddressPool address, including the corners of the Kubernetes CEL ip()
// and cidr() functions (Go's net/netip underneath, minus zones and
// IPv4-mapped IPv6). Each refused entry must produce exactly one error, so a
// rule that misfires or fails to evaluate shows up here.
func TestAddressEntryRules(t *testing.T) {
	v := newValidator(t)
	for _, tc := range []struct {
		entry string
		want  string // "" when accepted
	}{
		// CIDRs.
		{"192.0.2.0/24", ""},
		{"192.0.2.7/32", ""},
		{"198.18.0.0/15", ""},
		{"0.0.0.0/0", ""},
		{"2001:db8::/32", ""},
		{"2001:db8::1/128", ""},
		{"::/0", ""},
		{"::1/128", ""},
		{"::/128", ""},
		{"2001:0db8:0000:0000:0000:0000:0000:0000/32", ""}, // full form with zero padding
		{"2001:DB8::/32", ""},                              // upper-case hex is accepted
		{"2001:db8::c000:200/120", ""},
		{"192.0.2.5/24", errHost},
		{"198.18.0.0/14", errHost},
		{"2001:db8::1/64", errHost},
		{"2001:db8::/16", errHost},
		{"192.0.2.0/33", errFormat},
		{"2001:db8::/129", errFormat},
		{"192.0.2.0/024", errFormat},  // leading zero in the prefix length
		{"192.0.2.000/24", errFormat}, // leading zeros in an octet
		{"192.0.02.0/24", errFormat},
		{"::ffff:192.0.2.0/120", errFormat}, // IPv4-mapped IPv6 is refused by cidr()
		{"192.0.2.0", errFormat},            // a bare address is neither
		{"2001:db8::1", errFormat},
		{" 192.0.2.0/24", errFormat}, // spaces are only tolerated around '-'
		{"192.0.2.0/24 ", errFormat},
		{"192.0.2.0 /24", errFormat},
		{"fe80::/64%eth0", errFormat},
		{"pool", errFormat},

		// IPv4 ranges.
		{"192.0.2.10-192.0.2.20", ""},
		{"192.0.2.10-192.0.2.10", ""}, // one address
		{"192.0.2.10 - 192.0.2.20", ""},
		{"192.0.2.10 -192.0.2.20", ""},
		{"192.0.2.255-192.0.3.0", ""},
		{"192.0.2.127-192.0.2.128", ""}, // ends differ in the high bit of the last octet
		{"198.18.0.0-198.19.255.255", ""},
		{"0.0.0.0-255.255.255.255", ""},
		{"192.0.2.20-192.0.2.10", errOrder},
		{"192.0.2.1-192.0.2.0", errOrder}, // ends differ in the last bit only
		{"192.0.2.128-192.0.2.127", errOrder},
		{"198.51.100.0-192.0.2.255", errOrder},
		{"255.255.255.255-0.0.0.0", errOrder},
		{"192.0.2.9-192.0.2.10", ""}, // a string compare would refuse this
		{"192.0.2.10-192.0.2.9", errOrder},
		{"192.0.2.01-192.0.2.20", errFormat}, // leading zeros are refused by ip()
		{"192.0.2.1-192.0.2.2-192.0.2.3", errFormat},
		{"192.0.2.1-", errFormat},
		{"-192.0.2.1", errFormat},
		{"192.0.2.0/24-192.0.2.255", errFormat},
		{"192.0.2.1..192.0.2.5", errFormat},

		// IPv6 ranges.
		{"2001:db8::1-2001:db8::ffff", ""},
		{"2001:db8::ffff-2001:db8::1:0", ""}, // "1:0" sorts before "ffff" as text
		{"2001:db8::1:0-2001:db8::ffff", errOrder},
		{"2001:db8::8000:0-2001:db8::7fff:ffff", errOrder},
		{"2001:db8:1::-2001:db8:0:ffff:ffff:ffff:ffff:ffff", errOrder}, // compress differently
		{"2001:db8:0:ffff:ffff:ffff:ffff:ffff-2001:db8:1::", ""},
		{"2001:db8:0:0:0:0:0:1-2001:db8::2", ""}, // full 8-group start
		{"2001:db8::2-2001:db8:0:0:0:0:0:1", errOrder},
		{"2001:0db8:0000:0000:0000:0000:0000:0001-2001:db8::1", ""}, // equal ends, written differently
		{"2001:DB8::1-2001:db8::2", ""},                             // upper-case hex
		{"2001:db8::2-2001:DB8::1", errOrder},
		{"2001:db8::a-2001:db8::A", ""},
		{"::-::1", ""},
		{"::1-::", errOrder},
		{"::-::", ""},
		{"::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ""},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff-::", errOrder},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ""},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff-ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe", errOrder},
		{"2001:db8:: - 2001:db8::ff", ""},
		{"2001:db8::c000:201-2001:db8::192.0.2.5", ""}, // dotted tail on a non-mapped address is fine
		{"2001:db8::192.0.2.5-2001:db8::c000:201", errOrder},
		{"::ffff:192.0.2.1-::ffff:192.0.2.5", errFormat}, // IPv4-mapped IPv6 is refused by ip()
		{"fe80::1%eth0-fe80::2%eth0", errFormat},         // zones are refused by ip()
		{"2001:db8::1-2001:db8::g", errFormat},
		{"2001:db8:::1-2001:db8::2", errFormat},

		// Mixed families.
		{"192.0.2.1-2001:db8::1", errFamily},
		{"2001:db8::1-192.0.2.1", errFamily},
		{"::-0.0.0.0", errFamily},
	} {
		t.Run(strings.ReplaceAll(tc.entry, "/", "_"), func(t *testing.T) {
			// The parser promises to accept exactly what the schema accepts.
			if _, err := config.ParseAddressEntry(tc.entry); (err == nil) != (tc.want == "") {
				t.Errorf("config.ParseAddressEntry(%q) = %v, but the schema accepts: %v", tc.entry, err, tc.want == "")
			}
			errs := v.Validate(context.Background(), pool(tc.entry))
			if tc.want == "" {
				if len(errs) > 0 {
					t.Fatalf("%q refused:%s", tc.entry, render(errs))
				}
				return
			}
			if len(errs) != 1 || errs[0].Field != "spec.addresses[0]" || !strings.Contains(errs[0].Detail, tc.want) {
				t.Fatalf("%q: want exactly one error on spec.addresses[0] containing %q, got:%s", tc.entry, tc.want, render(errs))
			}
		})
	}
}

// TestAddressEntryLimits checks the OpenAPI bounds around the CEL rules: the
// server skips CEL once a length limit is broken.
func TestAddressEntryLimits(t *testing.T) {
	v := newValidator(t)
	for _, tc := range []struct {
		name string
		obj  map[string]any
		want string
	}{
		{"empty entry", pool(""), "should be at least 1 chars long"},
		{"entry too long", pool("2001:db8::1 - " + strings.Repeat(" ", 80) + "2001:db8::2"), "Too long"},
		{"no entries", pool(), "should have at least 1 items"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := v.Validate(context.Background(), tc.obj)
			if !strings.Contains(render(errs), tc.want) {
				t.Fatalf("want an error containing %q, got:%s", tc.want, render(errs))
			}
		})
	}
}

// TestAddressEntriesAtMaxItems evaluates the costliest rule on the largest
// pool the schema allows, within the API server's runtime budget.
func TestAddressEntriesAtMaxItems(t *testing.T) {
	v := newValidator(t)
	var entries []string
	for i := range 256 {
		// Long IPv6 ranges whose ends share 127 bits: the worst case.
		entries = append(entries, "2001:0db8:0000:0000:0000:0000:00"+hex2(i)+":fffe - 2001:0db8:0000:0000:0000:0000:00"+hex2(i)+":ffff")
	}
	if errs := v.Validate(context.Background(), pool(entries...)); len(errs) > 0 {
		t.Fatalf("refused:%s", render(errs))
	}
}

func hex2(i int) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[i>>4], digits[i&15]})
}

// pool returns an IPAddressPool with the given address entries.
func pool(entries ...string) map[string]any {
	addresses := []any{}
	for _, e := range entries {
		addresses = append(addresses, e)
	}
	return map[string]any{
		"apiVersion": "herald.io/v1beta1",
		"kind":       "IPAddressPool",
		"metadata":   map[string]any{"name": "test", "namespace": "herald-system"},
		"spec":       map[string]any{"addresses": addresses},
	}
}

// TestRangeOrderMatchesNetip compares the range-ordering rule with
// netip.Addr.Compare on pseudo-random pairs that share a prefix of random
// length, so that every bit position decides the order somewhere. Ends are
// written in canonical, fully expanded and upper-case forms.
func TestRangeOrderMatchesNetip(t *testing.T) {
	v := newValidator(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 400 {
		a, b := randomPair(rng, i%2 == 0)
		entry := spell(rng, a) + "-" + spell(rng, b)
		errs := v.Validate(context.Background(), pool(entry))
		wantOK := a.Compare(b) <= 0
		if _, err := config.ParseAddressEntry(entry); (err == nil) != wantOK {
			t.Errorf("config.ParseAddressEntry(%q) = %v, want ok %v", entry, err, wantOK)
		}
		switch {
		case wantOK && len(errs) > 0:
			t.Errorf("%q refused:%s", entry, render(errs))
		case !wantOK && (len(errs) != 1 || !strings.Contains(errs[0].Detail, errOrder)):
			t.Errorf("%q: want only %q, got:%s", entry, errOrder, render(errs))
		}
	}
}

// randomPair returns two addresses of one family whose first n bits agree,
// n random; the pair is never IPv4-mapped IPv6, which ip() refuses.
func randomPair(rng *rand.Rand, v4 bool) (netip.Addr, netip.Addr) {
	size := 16
	if v4 {
		size = 4
	}
	for {
		x, y := make([]byte, size), make([]byte, size)
		for i := range x {
			x[i], y[i] = byte(rng.UintN(256)), byte(rng.UintN(256))
		}
		keep := rng.IntN(size*8 + 1) // y takes x's first keep bits
		for bit := range keep {
			mask := byte(0x80) >> (bit % 8)
			y[bit/8] = y[bit/8]&^mask | x[bit/8]&mask
		}
		a, _ := netip.AddrFromSlice(x)
		b, _ := netip.AddrFromSlice(y)
		if !a.Is4In6() && !b.Is4In6() {
			return a, b
		}
	}
}

func spell(rng *rand.Rand, a netip.Addr) string {
	if a.Is4() {
		return a.String()
	}
	switch rng.IntN(3) {
	case 0:
		return a.StringExpanded()
	case 1:
		return strings.ToUpper(a.String())
	}
	return a.String()
}
