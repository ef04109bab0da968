package kubelet

import (
	"net/netip"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// Addresses are handed out in turn, not lowest-free: a replacement pod
// does not get the address its predecessor just released.
func TestAllocateIPInTurn(t *testing.T) {
	k := &Kubelet{ips: map[netip.Addr]types.UID{}}
	k.cfg.PodCIDR = netip.MustParsePrefix("198.18.1.0/29") // .1 gateway, .2-.6 usable, .7 broadcast
	k.cfg.PodGateway = netip.MustParseAddr("198.18.1.1")
	got := func(uid string) string {
		t.Helper()
		a, err := k.allocateIP(types.UID(uid))
		if err != nil {
			return err.Error()
		}
		return a.String()
	}
	if a := got("a"); a != "198.18.1.2" {
		t.Fatalf("first %s", a)
	}
	k.releaseIP("a")
	if b := got("b"); b != "198.18.1.3" {
		t.Errorf("after a release: %s, want the next address", b)
	}
	for _, u := range []string{"c", "d", "e"} {
		got(u)
	}
	// .2 was released; the turn wraps past the broadcast address to it.
	if f := got("f"); f != "198.18.1.2" {
		t.Errorf("wrapped: %s", f)
	}
	if g := got("g"); g != "pod CIDR 198.18.1.0/29 is full" {
		t.Errorf("full CIDR: %s", g)
	}
	if again := got("c"); again != "198.18.1.4" {
		t.Errorf("a pod asking again keeps its address: %s", again)
	}
}
