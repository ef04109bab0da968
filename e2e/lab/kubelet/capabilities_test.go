package kubelet

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestCapabilities(t *testing.T) {
	yes := true
	for name, tc := range map[string]struct {
		sc   *v1.SecurityContext
		want []string
		all  bool
	}{
		"no securityContext: the runtime's defaults": {nil, runtimeDefaultCaps, false},
		"privileged":         {&v1.SecurityContext{Privileged: &yes}, nil, true},
		"drop ALL, add two":  {&v1.SecurityContext{Capabilities: &v1.Capabilities{Drop: []v1.Capability{"ALL"}, Add: []v1.Capability{"NET_RAW", "CAP_NET_ADMIN"}}}, []string{"NET_ADMIN", "NET_RAW"}, false},
		"drop one":           {&v1.SecurityContext{Capabilities: &v1.Capabilities{Drop: []v1.Capability{"net_raw"}}}, without(runtimeDefaultCaps, "NET_RAW"), false},
		"add ALL":            {&v1.SecurityContext{Capabilities: &v1.Capabilities{Add: []v1.Capability{"ALL"}}}, nil, true},
		"drop ALL, add none": {&v1.SecurityContext{Capabilities: &v1.Capabilities{Drop: []v1.Capability{"ALL"}}}, nil, false},
	} {
		got, all := capabilities(tc.sc)
		if all != tc.all || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v all=%v, want %v all=%v", name, got, all, tc.want, tc.all)
		}
	}
}

func without(list []string, drop string) []string {
	var out []string
	for _, c := range list {
		if c != drop {
			out = append(out, c)
		}
	}
	return out
}

// TestProcessGetsOnlyItsCapabilities: a program started with NET_ADMIN
// may change a link in its namespace, one with NET_RAW alone may not,
// and each has exactly its set in /proc/self/status.
func TestProcessGetsOnlyItsCapabilities(t *testing.T) {
	ns := testNetns(t)
	if _, err := os.Stat(Setpriv); err != nil {
		t.Skipf("no %s: %v", Setpriv, err)
	}
	for _, tc := range []struct {
		caps   []string
		capEff string
		ok     bool
	}{
		{[]string{"NET_ADMIN", "NET_RAW"}, "0000000000003000", true},
		{[]string{"NET_RAW"}, "0000000000002000", false},
	} {
		dir := t.TempDir()
		log := filepath.Join(dir, "c.log")
		program, args := withCapabilities(tc.caps, "/bin/sh", []string{"-c", "grep CapEff /proc/self/status; ip link set lo down && echo changed; true"})
		p, err := startProcess("c", ns, program, args, []string{"PATH=" + DefaultPath}, dir, log)
		if err != nil {
			t.Fatal(err)
		}
		waitExit(t, p)
		data, _ := os.ReadFile(log)
		out := string(data)
		if !strings.Contains(out, "CapEff:\t"+tc.capEff) {
			t.Errorf("%v: want CapEff %s in:\n%s", tc.caps, tc.capEff, out)
		}
		if got := strings.Contains(out, "\nchanged\n"); got != tc.ok {
			t.Errorf("%v: changed a link = %v, want %v:\n%s", tc.caps, got, tc.ok, out)
		}
	}
}
