package labtest

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/cluster"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// TestLabRouter: the router namespace runs FRR (zebra, bgpd, bfdd) with
// the lab's BGP configuration, BIRD is installed for tests that want a
// second implementation, and the remote client reaches the LAN through
// the router.
func TestLabRouter(t *testing.T) {
	lab := harness.Start(t)
	f := lab.Lab.Router
	if f == nil {
		t.Fatal("the lab started no FRR")
	}
	for _, r := range f.Records() {
		if !r.Alive() {
			t.Errorf("FRR daemon %s (pid %d) is not running", r.Name, r.PID)
		}
	}
	out, err := f.Vtysh(lab.Ctx, "show running-config")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"router bgp 64512", "bgp router-id " + topology.RouterLANv4.String(),
		"bgp listen range " + topology.LANv4.String() + " peer-group NODES",
		"bgp listen range " + topology.LANv6.String() + " peer-group NODES6"} {
		if !strings.Contains(out, want) {
			t.Errorf("FRR running config lacks %q:\n%s", want, out)
		}
	}
	var sum map[string]any
	if err := f.VtyshJSON(lab.Ctx, "show bgp summary json", &sum); err != nil {
		t.Errorf("show bgp summary json: %v", err)
	}
	if _, err := f.Vtysh(lab.Ctx, "show bfd peers"); err != nil {
		t.Errorf("bfdd does not answer: %v", err)
	}
	if cluster.RouterASN != 64512 {
		t.Errorf("RouterASN changed without updating this test")
	}
	if out, err := exec.Command("bird", "--version").CombinedOutput(); err != nil || !strings.Contains(string(out), "BIRD version 2") {
		t.Errorf("BIRD 2 is not installed: %v %s", err, out)
	}
	// remote -> router -> node: the remote client's only path.
	n := lab.Layout.Nodes[0]
	if out, err := lab.Exec("remote", "ip", "route", "get", n.IPv4.String()); err != nil || !strings.Contains(out, "via "+topology.RouterRemV4.String()) {
		t.Errorf("remote's route to %s: %v %s", n.IPv4, err, out)
	}
	if out, err := lab.Exec(n.Name, "ip", "route", "get", topology.RemoteV4IP.String()); err != nil || !strings.Contains(out, "via "+topology.RouterLANv4.String()) {
		t.Errorf("%s's route to the remote client: %v %s", n.Name, err, out)
	}
}
