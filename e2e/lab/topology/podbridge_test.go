package topology

import (
	"slices"
	"testing"
)

// TestPodBridgeMACIsFixed: each node's pod bridge is created with a MAC
// of its own, so that removing a pod's port never changes it.
func TestPodBridgeMACIsFixed(t *testing.T) {
	l, err := Plan("hle", 10)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, n := range l.Nodes {
		mac := PodBridgeMAC(n)
		if other, dup := seen[mac]; dup {
			t.Errorf("%s and %s share the pod bridge MAC %s", n.Name, other, mac)
		}
		seen[mac] = n.Name
		if mac[:3] != "02:" {
			t.Errorf("%s: %s is not a locally administered unicast MAC", n.Name, mac)
		}
		want := []string{"ip", "link", "add", "cbr0", "address", mac, "type", "bridge"}
		if !slices.ContainsFunc(Commands(l), func(c Cmd) bool { return c.Netns == n.Netns && slices.Equal(c.Args, want) }) {
			t.Errorf("%s: no command %v", n.Name, want)
		}
	}
	if got := PodBridgeMAC(l.Nodes[0]); got != "02:00:c6:12:01:01" {
		t.Errorf("node1's pod bridge MAC %s, want 02:00:c6:12:01:01 (its gateway 198.18.1.1)", got)
	}
}
