package e2e

import "testing"

// TestSoakProbeServicesSpread: the soak's probe targets cover the kinds
// in their shares and every group evenly, with no Service twice.
func TestSoakProbeServicesSpread(t *testing.T) {
	for _, c := range []struct{ services, groups, probes int }{{500, 10, 20}, {100, 10, 20}, {100, 4, 20}} {
		svcs, err := soakServices(c.services, c.groups)
		if err != nil {
			t.Fatal(err)
		}
		got := soakProbeServices(svcs, c.probes)
		perKind, perGroup, seen := map[string]int{}, map[int]int{}, map[string]bool{}
		for _, sv := range got {
			if seen[sv.name] {
				t.Errorf("%+v: %s picked twice", c, sv.name)
			}
			seen[sv.name] = true
			perKind[sv.kind.name]++
			perGroup[sv.group]++
		}
		if len(got) != c.probes {
			t.Errorf("%+v: %d targets, want %d", c, len(got), c.probes)
		}
		{
			want := map[string]int{"l2v4": 6, "l2v6": 4, "bgpv4": 6, "bgpv6": 4}
			for k, n := range want {
				if perKind[k] != n {
					t.Errorf("%+v: %d targets of kind %s, want %d", c, perKind[k], k, n)
				}
			}
			lo, hi := c.probes, 0
			for g := range c.groups {
				lo, hi = min(lo, perGroup[g]), max(hi, perGroup[g])
			}
			if hi-lo > 1 {
				t.Errorf("%+v: targets per group from %d to %d, want an even spread: %v", c, lo, hi, perGroup)
			}
		}
	}
}
