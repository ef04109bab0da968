package proxy

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/herald-lb/herald/proxy/rules"
)

func TestEndpointHintsAreCarried(t *testing.T) {
	sl := slice("shop", "web", "web-1", 8080, "http", corev1.ProtocolTCP,
		ep{"10.244.1.20", testNode, true}, ep{"10.244.2.20", otherNode, true}, ep{"10.244.3.20", otherNode, true})
	sl.Endpoints[0].Hints = &discoveryv1.EndpointHints{
		ForZones: []discoveryv1.ForZone{{Name: "zone-b"}, {Name: "zone-a"}},
		ForNodes: []discoveryv1.ForNode{{Name: testNode}},
	}
	sl.Endpoints[1].Hints = &discoveryv1.EndpointHints{} // present, but empty
	got := Endpoints("shop", "web", []*discoveryv1.EndpointSlice{sl})[rules.ServicePortName{Namespace: "shop", Name: "web", Port: "http"}]
	if len(got) != 3 {
		t.Fatalf("endpoints %+v", got)
	}
	if e := got[0]; !slices.Equal(e.ZoneHints, []string{"zone-b", "zone-a"}) || !slices.Equal(e.NodeHints, []string{testNode}) {
		t.Errorf("hinted endpoint %+v", e)
	}
	for _, e := range got[1:] {
		if e.ZoneHints != nil || e.NodeHints != nil {
			t.Errorf("endpoint without hints got some: %+v", e)
		}
	}
}

// zoned is this test node labelled with a zone ("" for no label).
func zoned(zone string) *corev1.Node {
	n := node(testNode, testNodeIP.String())
	if zone != "" {
		n.Labels = map[string]string{corev1.LabelTopologyZone: zone, "other": "label"}
	}
	return n
}

// TestZoneLabelDecidesTheHintedEndpoints follows the node's zone label
// through the tracker and the syncer: each change of the label is a full
// sync that narrows the Service to the endpoints hinted for the new
// zone; no label means every endpoint; other label changes sync nothing.
func TestZoneLabelDecidesTheHintedEndpoints(t *testing.T) {
	for _, m := range []string{"iptables", "nftables"} {
		t.Run(m, func(t *testing.T) { zoneLabelFollowed(t, m) })
	}
}

func zoneLabelFollowed(t *testing.T, mode string) {
	e := newEnv(t)
	// rules is the text of what the kernel holds; an endpoint is in it as
	// its DNAT target (iptables) or its endpoints-map element (nftables).
	rules, spell := func() string { return e.save("nat") }, "--to-destination %s:8080"
	if mode == "nftables" {
		var k *fakeNFT
		e, k = newNFTEnv(t)
		rules, spell = func() string { return k.table.Text() }, "%s . 8080"
	}
	e.tracker.UpdateService(clusterIPService("shop", "web", "10.96.0.10"))
	sl := slice("shop", "web", "web-1", 8080, "http", corev1.ProtocolTCP,
		ep{"10.244.1.20", testNode, true}, ep{"10.244.2.20", otherNode, true})
	sl.Endpoints[0].Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-b"}}}
	sl.Endpoints[1].Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}}
	e.tracker.UpdateSlice(sl)
	endpointsIn := func() []string {
		var out []string
		for _, ip := range []string{"10.244.1.20", "10.244.2.20"} {
			if strings.Contains(rules(), fmt.Sprintf(spell, ip)) {
				out = append(out, ip)
			}
		}
		return out
	}
	e.sync(false)
	if got := endpointsIn(); !slices.Equal(got, []string{"10.244.1.20", "10.244.2.20"}) {
		t.Fatalf("node without a zone: endpoints %v, want both", got)
	}
	for _, step := range []struct {
		zone string
		want []string
	}{{"zone-a", []string{"10.244.2.20"}}, {"zone-b", []string{"10.244.1.20"}}, {"zone-c", []string{"10.244.1.20", "10.244.2.20"}}, {"", []string{"10.244.1.20", "10.244.2.20"}}} {
		kicks := e.kicks
		e.tracker.UpdateNode(zoned(step.zone))
		if e.kicks != kicks+1 || e.tracker.Node().Zone != step.zone {
			t.Fatalf("zone %q: %d kicks, node %+v", step.zone, e.kicks-kicks, e.tracker.Node())
		}
		res := e.sync(false)
		if len(res.Families) != 1 || !res.Families[0].Full {
			t.Fatalf("zone %q: a zone change must be a full sync: %+v", step.zone, res)
		}
		if got := endpointsIn(); !slices.Equal(got, step.want) {
			t.Errorf("zone %q: endpoints %v, want %v", step.zone, got, step.want)
		}
	}
	// Another label, or the same zone again, asks for nothing.
	e.tracker.UpdateNode(zoned("zone-a"))
	e.sync(false)
	n := zoned("zone-a")
	n.Labels["another"] = "change"
	e.tracker.UpdateNode(n)
	if res := e.sync(false); !res.Idle {
		t.Errorf("after a change of another label: %+v", res)
	}
	// A slice whose hints alone change is a change of the Service: with
	// nothing left for zone-a, every endpoint again.
	sl = sl.DeepCopy()
	sl.Endpoints[1].Hints.ForZones[0].Name = "zone-b"
	e.tracker.UpdateSlice(sl)
	if res := e.sync(false); res.Idle {
		t.Fatal("a change of hints synced nothing")
	}
	if got := endpointsIn(); !slices.Equal(got, []string{"10.244.1.20", "10.244.2.20"}) {
		t.Errorf("no endpoint for the zone: endpoints %v, want both", got)
	}
}
