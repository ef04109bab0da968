package kubelet

import (
	"flag"
	"io"
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// TestNodeZoneLabel: the zone the lab gives a node reaches the lab
// kubelet's command line and, from there, the Node it registers.
func TestNodeZoneLabel(t *testing.T) {
	for _, zone := range []string{"zone-b", ""} {
		in := Config{NodeName: "node2", NodeNetns: "n2", NodeZone: zone,
			NodeIP:     netip.MustParseAddr("198.51.100.12"),
			PodCIDR:    netip.MustParsePrefix("198.18.2.0/24"),
			PodGateway: netip.MustParseAddr("198.18.2.1")}
		var out Config
		fs := flag.NewFlagSet("lab-kubelet", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		BindFlags(fs, &out)
		if err := fs.Parse(in.Args()); err != nil {
			t.Fatalf("zone %q: the kubelet's own arguments do not parse: %v", zone, err)
		}
		n := (&Kubelet{cfg: out}).nodeObject()
		got, ok := n.Labels[v1.LabelTopologyZone]
		if got != zone || ok != (zone != "") {
			t.Errorf("zone %q: the Node's zone label is %q (present %v)", zone, got, ok)
		}
	}
}
