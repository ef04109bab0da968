package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/herald-lb/herald/e2e/lab/kubelet"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

func TestNetns(t *testing.T) {
	l, err := topology.Plan("hlab", 3)
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string][2]string{
		"default/web":           {"node2", ""},
		"herald-system/speaker": {"node3", "host"},
		"default/pending":       {"", ""},
		"default/elsewhere":     {"node9", "host"},
	}
	lookup := func(_ context.Context, ns, name string) (string, bool, error) {
		p, ok := pods[ns+"/"+name]
		if !ok {
			return "", false, errors.New("not found")
		}
		return p[0], p[1] == "host", nil
	}
	for target, want := range map[string]string{
		"node1":                     "hlab-node1",
		"node3":                     "hlab-node3",
		"client":                    "hlab-client",
		"router":                    "hlab-router",
		"remote":                    "hlab-remote",
		"pod/web":                   kubelet.PodNetnsName("hlab", "default", "web"),
		"pod/default/web":           kubelet.PodNetnsName("hlab", "default", "web"),
		"pod/herald-system/speaker": "hlab-node3",
	} {
		got, err := Netns(context.Background(), l, target, lookup)
		if err != nil || got != want {
			t.Errorf("Netns(%q) = %q, %v; want %q", target, got, err, want)
		}
	}
	for target, msg := range map[string]string{
		"node4":         "want a node (node1..node3)",
		"pod/":          "want pod/NAME",
		"pod/a/b/c":     "want pod/NAME",
		"pod/missing":   "not found",
		"pod/pending":   "not scheduled",
		"pod/elsewhere": "not a lab node",
		"":              "want a node",
	} {
		_, err := Netns(context.Background(), l, target, lookup)
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("Netns(%q): error %v, want one containing %q", target, err, msg)
		}
	}
}
