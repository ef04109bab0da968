package manifests

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// The uninstall check's grants: exactly these pass, anything wider fails.
func TestCheckRulePodsAndDaemonSets(t *testing.T) {
	pods := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}
	ds := func(names ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, ResourceNames: names, Verbs: []string{"get", "list", "watch"}}
	}
	for _, tc := range []struct {
		grant string
		rule  rbacv1.PolicyRule
		ok    bool
	}{
		{"Role herald-system/herald-speaker", pods, true},
		{"Role herald-system/herald-speaker", ds("herald-speaker"), true},
		{"Role herald-system/herald-proxy", ds("herald-proxy"), true},
		{"Role herald-system/herald-proxy", ds("herald-speaker"), false},
		{"Role herald-system/herald-speaker", ds(), false},
		{"Role herald-system/herald-speaker", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}}, false},
		{"Role herald-system/herald-speaker", rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, ResourceNames: []string{"herald-speaker"}, Verbs: []string{"get", "update"}}, false},
		{"ClusterRole herald-speaker", pods, false},
		{"Role herald-system/herald-controller", pods, false},
	} {
		if bad := checkRule(tc.grant, tc.rule); (len(bad) == 0) != tc.ok {
			t.Errorf("%s %+v: %v, want ok=%v", tc.grant, tc.rule, bad, tc.ok)
		}
	}
}

// The grants on Namespaces: exactly these pass.
func TestCheckRuleNamespaces(t *testing.T) {
	rule := func(verbs []string, names ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces"}, ResourceNames: names, Verbs: verbs}
	}
	getPatch, listWatch := []string{"get", "patch"}, []string{"list", "watch"}
	for _, tc := range []struct {
		grant string
		rule  rbacv1.PolicyRule
		ok    bool
	}{
		{"ClusterRole herald-controller", rule(listWatch), true},
		{"ClusterRole herald-controller", rule([]string{"list", "watch", "patch"}), false},
		{"ClusterRole herald-speaker", rule(listWatch), false},
		{"Role herald-system/herald-label-namespace", rule(getPatch, "herald-system"), true},
		{"Role lb/herald-label-namespace", rule(getPatch, "lb"), true},
		{"Role herald-system/herald-label-namespace", rule(getPatch, "kube-system"), false},
		{"Role herald-system/herald-label-namespace", rule(getPatch), false},
		{"Role herald-system/herald-label-namespace", rule([]string{"get", "patch", "delete"}, "herald-system"), false},
		{"ClusterRole herald-label-namespace", rule(getPatch, "herald-system"), false},
		{"Role herald-system/herald-controller", rule(getPatch, "herald-system"), false},
	} {
		if bad := checkRule(tc.grant, tc.rule); (len(bad) == 0) != tc.ok {
			t.Errorf("%s %+v: %v, want ok=%v", tc.grant, tc.rule, bad, tc.ok)
		}
	}
}
