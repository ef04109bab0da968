package manifests

import (
	"maps"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/herald-lb/herald/internal/podsecurity"
)

// TestPodSecurityLevels: what Pod Security admission says of each
// workload, as docs/install.md ("Pod Security") says it: the node agents
// need privileged, for the reasons listed; the controller alone would run
// under restricted.
func TestPodSecurityLevels(t *testing.T) {
	objs := append(render(t, "config/default"), render(t, "config/overlays/proxy-only")...)
	for _, tc := range []struct {
		workload string
		level    podsecurity.Level
		// baseline is what the baseline level refuses (every part must be
		// in the refusal).
		baseline []string
	}{
		{Speaker, podsecurity.Privileged, []string{"host namespaces (hostNetwork=true)", `hostPath volumes (volume "xtables-lock")`,
			`non-default capabilities (container "speaker" must not include "NET_ADMIN", "NET_RAW" in securityContext.capabilities.add)`,
			`hostPort (container "speaker" uses hostPort`}},
		{Proxy, podsecurity.Privileged, []string{"host namespaces (hostNetwork=true)", `hostPath volumes (volume "xtables-lock")`,
			`non-default capabilities (container "proxy" must not include "NET_ADMIN", "NET_RAW" in securityContext.capabilities.add)`,
			`hostPort (container "proxy" uses hostPort`}},
		{Controller, podsecurity.Restricted, nil},
	} {
		w := Workloads(objs)[tc.workload]
		if w == nil {
			t.Fatalf("no %s", tc.workload)
		}
		ps, err := EvaluatePodSecurity(w)
		if err != nil {
			t.Fatal(err)
		}
		if ps.Level != tc.level {
			t.Errorf("%s: least level %s, want %s; refused: %v", tc.workload, ps.Level, tc.level, ps.Refused)
		}
		for _, want := range tc.baseline {
			if !strings.Contains(ps.Refused[podsecurity.Baseline], want) {
				t.Errorf("%s: baseline refuses it for %q; want %q in it", tc.workload, ps.Refused[podsecurity.Baseline], want)
			}
		}
		t.Logf("%s: %s; baseline refuses: %s", tc.workload, ps.Level, ps.Refused[podsecurity.Baseline])
	}
}

// checkNamespaceLabels: the Namespace of a set of manifests carries the
// Pod Security labels of the least level its workloads need, every mode
// the same, and no other Pod Security label.
func checkNamespaceLabels(t *testing.T, objs []Object) {
	t.Helper()
	ns, _ := Find(objs, "Namespace", "herald-system").(*corev1.Namespace)
	if ns == nil {
		t.Fatal("no Namespace herald-system")
	}
	least, err := LeastPodSecurity(objs)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for k, v := range ns.Labels {
		if strings.HasPrefix(k, "pod-security.kubernetes.io/") {
			got[k] = v
		}
	}
	if want := podsecurity.Labels(least); !maps.Equal(got, want) {
		t.Errorf("Namespace herald-system: Pod Security labels %v; its workloads need %s: want %v", got, least, want)
	}
}

func TestLeastPodSecurity(t *testing.T) {
	objs := render(t, "config/default")
	var controllerOnly []Object
	for _, o := range objs {
		if o.String() != Speaker {
			controllerOnly = append(controllerOnly, o)
		}
	}
	for _, tc := range []struct {
		name string
		objs []Object
		want podsecurity.Level
	}{
		{"config/default", objs, podsecurity.Privileged},
		{"without the speaker", controllerOnly, podsecurity.Restricted},
		{"nothing", nil, podsecurity.Restricted},
	} {
		if got, err := LeastPodSecurity(tc.objs); err != nil || got != tc.want {
			t.Errorf("%s: %s, %v; want %s", tc.name, got, err, tc.want)
		}
	}
	if _, err := EvaluatePodSecurity(&corev1.Pod{}); err == nil || !reflect.DeepEqual(err.Error(), "*v1.Pod is not a Deployment, DaemonSet or Job") {
		t.Errorf("a Pod: %v", err)
	}
}
