package nft

import (
	"testing"

	"github.com/herald-lb/herald/internal/ipfamily"
)

// TestDNATHashText: the consistent pick as nft spells it (nft -c accepts
// it; the kernel lists it with the protocol in place of th).
func TestDNATHashText(t *testing.T) {
	d := DNATHash{Mod: 401, Seed: 0x5eed1234, Map: "eps"}
	for f, want := range map[ipfamily.Family]string{
		ipfamily.IPv4: "dnat ip to jhash ip saddr . th sport . ip daddr . th dport mod 401 seed 0x5eed1234 map @eps",
		ipfamily.IPv6: "dnat ip6 to jhash ip6 saddr . th sport . ip6 daddr . th dport mod 401 seed 0x5eed1234 map @eps",
	} {
		if got := d.Text(f); got != want {
			t.Errorf("%v: %q, want %q", f, got, want)
		}
	}
}
