package maglev

import (
	"net/netip"
	"testing"
)

// TestJHashVectors: lookup3's own published values (hashlittle, which
// the kernel's jhash is on a little-endian CPU), covering the empty key,
// whole blocks and a tail of every length through the seed.
func TestJHashVectors(t *testing.T) {
	const text = "Four score and seven years ago"
	for _, tc := range []struct {
		key  string
		seed uint32
		want uint32
	}{
		{"", 0, 0xdeadbeef},
		{"", 0xdeadbeef, 0xbd5b7dde},
		{text, 0, 0x17770551},
		{text, 1, 0xcd628161},
	} {
		if got := JHash([]byte(tc.key), tc.seed); got != tc.want {
			t.Errorf("JHash(%q, %#x) = %#x, want %#x", tc.key, tc.seed, got, tc.want)
		}
	}
}

// TestFlowKeyLayout: the registers nftables fills for the concatenation,
// port bytes in network order and each port's register zero-padded.
func TestFlowKeyLayout(t *testing.T) {
	k, ok := FlowKey(netip.MustParseAddrPort("192.0.2.1:4660"), netip.MustParseAddrPort("198.51.100.7:80"))
	want := []byte{192, 0, 2, 1, 0x12, 0x34, 0, 0, 198, 51, 100, 7, 0, 80, 0, 0}
	if !ok || string(k) != string(want) {
		t.Errorf("IPv4 key %v, want %v", k, want)
	}
	k6, ok := FlowKey(netip.MustParseAddrPort("[2001:db8::1]:1"), netip.MustParseAddrPort("[2001:db8::2]:2"))
	if !ok || len(k6) != 40 || k6[16] != 0 || k6[17] != 1 || k6[38] != 0 || k6[37] != 2 {
		t.Errorf("IPv6 key %v", k6)
	}
	if _, ok := FlowKey(netip.MustParseAddrPort("192.0.2.1:1"), netip.MustParseAddrPort("[2001:db8::2]:2")); ok {
		t.Error("a key of two families")
	}
	if k, ok := FlowKey(netip.MustParseAddrPort("[::ffff:192.0.2.1]:4660"), netip.MustParseAddrPort("198.51.100.7:80")); !ok || len(k) != 16 {
		t.Errorf("a v4-mapped source: %v %v, want the IPv4 key", k, ok)
	}
}

// TestScaleIsSlot: Scale is the table's own slot choice.
func TestScaleIsSlot(t *testing.T) {
	eps := []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:80"), netip.MustParseAddrPort("10.0.0.2:80")}
	tb, err := New(eps)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []uint32{0, 1, 1 << 31, 0xffffffff, 0x9e3779b9} {
		if got, want := Scale(h, uint32(tb.Size())), uint32(tb.Slot(h)); got != want {
			t.Errorf("Scale(%#x) = %d, Slot = %d", h, got, want)
		}
	}
}
