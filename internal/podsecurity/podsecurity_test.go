package podsecurity

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	psaapi "k8s.io/pod-security-admission/api"
)

// The names are Pod Security admission's own.
func TestNamesAreUpstreams(t *testing.T) {
	for got, want := range map[string]string{
		EnforceLabel: psaapi.EnforceLevelLabel, AuditLabel: psaapi.AuditLevelLabel, WarnLabel: psaapi.WarnLevelLabel,
		string(Privileged): string(psaapi.LevelPrivileged), string(Baseline): string(psaapi.LevelBaseline), string(Restricted): string(psaapi.LevelRestricted),
	} {
		if got != want {
			t.Errorf("%q, Pod Security admission says %q", got, want)
		}
	}
	for _, s := range []string{"privileged", "baseline", "restricted", "Privileged", "", "latest", "privileged "} {
		_, err := ParseLevel(s)
		_, upstream := psaapi.ParseLevel(s)
		if (err == nil) != (upstream == nil) {
			t.Errorf("ParseLevel(%q): %v; Pod Security admission: %v", s, err, upstream)
		}
	}
	if _, err := ParseLevel("priviledged"); err == nil || !strings.Contains(err.Error(), `"priviledged" is not a Pod Security level`) {
		t.Errorf("ParseLevel(priviledged): %v", err)
	}
}

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name    string
		current map[string]string
		level   Level
		want    []Change
	}{
		{"a bare namespace (helm --create-namespace)", map[string]string{"name": "herald-system"}, Privileged, []Change{
			{AuditLabel, "", "privileged"}, {EnforceLabel, "", "privileged"}, {WarnLabel, "", "privileged"},
		}},
		{"no labels at all", nil, Baseline, []Change{
			{AuditLabel, "", "baseline"}, {EnforceLabel, "", "baseline"}, {WarnLabel, "", "baseline"},
		}},
		{"restricted by its owner, versions pinned", map[string]string{
			EnforceLabel: "restricted", EnforceLabel + "-version": "v1.30", WarnLabel: "privileged",
		}, Privileged, []Change{
			{AuditLabel, "", "privileged"}, {EnforceLabel, "restricted", "privileged"},
		}},
		{"already labelled", Labels(Privileged), Privileged, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Plan(tc.current, tc.level); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Plan(%v, %s) = %v, want %v", tc.current, tc.level, got, tc.want)
			}
		})
	}
	if got, want := (Change{EnforceLabel, "", "privileged"}).String(), "pod-security.kubernetes.io/enforce=privileged (was unset)"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

func TestApply(t *testing.T) {
	ctx := context.Background()
	owned := map[string]string{
		"team":                        "network",
		EnforceLabel:                  "restricted",
		EnforceLabel + "-version":     "v1.30",
		"kubernetes.io/metadata.name": "herald-system",
	}
	cs := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "herald-system", Labels: maps.Clone(owned)}})
	changes, err := Apply(ctx, cs.CoreV1().Namespaces(), "herald-system", Privileged)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 3 {
		t.Errorf("changes %v, want the three modes", changes)
	}
	ns, err := cs.CoreV1().Namespaces().Get(ctx, "herald-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := maps.Clone(owned)
	maps.Copy(want, Labels(Privileged))
	if !reflect.DeepEqual(ns.Labels, want) {
		t.Errorf("labels %v, want %v", ns.Labels, want)
	}

	// Again: nothing to change, so no write at all.
	cs.ClearActions()
	changes, err = Apply(ctx, cs.CoreV1().Namespaces(), "herald-system", Privileged)
	if err != nil || changes != nil {
		t.Errorf("second Apply: %v, %v; want no change", changes, err)
	}
	for _, a := range cs.Actions() {
		if a.GetVerb() != "get" {
			t.Errorf("second Apply wrote: %v", a)
		}
	}
}

func TestApplyErrors(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	if _, err := Apply(ctx, cs.CoreV1().Namespaces(), "herald-system", Privileged); !apierrors.IsNotFound(err) || !strings.HasPrefix(err.Error(), "namespace herald-system: ") {
		t.Errorf("a missing namespace: %v", err)
	}

	cs = fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "herald-system"}})
	denied := apierrors.NewForbidden(corev1.Resource("namespaces"), "herald-system", errors.New("RBAC: not allowed"))
	cs.PrependReactor("patch", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, denied })
	_, err := Apply(ctx, cs.CoreV1().Namespaces(), "herald-system", Privileged)
	if !apierrors.IsForbidden(err) || !strings.HasPrefix(err.Error(), "namespace herald-system: labelling it privileged: ") {
		t.Errorf("a forbidden patch: %v", err)
	}
}
