package manifests

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
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

// TestNodeAgentVolumes: besides the xtables lock, only the chart's
// kube-proxy configuration ConfigMap, mounted read-only, passes.
func TestNodeAgentVolumes(t *testing.T) {
	lock := corev1.HostPathFileOrCreate
	xtables := corev1.Volume{Name: "xtables-lock", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/run/xtables.lock", Type: &lock}}}
	xtablesMount := corev1.VolumeMount{Name: "xtables-lock", MountPath: "/run/xtables.lock"}
	cm := corev1.Volume{Name: KubeProxyConfigVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "herald-kube-proxy-config"}}}}
	host := corev1.Volume{Name: KubeProxyConfigVolume, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc"}}}
	mount := corev1.VolumeMount{Name: KubeProxyConfigVolume, MountPath: "/etc/herald/kube-proxy", ReadOnly: true}
	writable := mount
	writable.ReadOnly = false
	for _, tc := range []struct {
		name    string
		volumes []corev1.Volume
		mounts  []corev1.VolumeMount
		ok      bool
	}{
		{"the lock", []corev1.Volume{xtables}, []corev1.VolumeMount{xtablesMount}, true},
		{"and the ConfigMap", []corev1.Volume{xtables, cm}, []corev1.VolumeMount{xtablesMount, mount}, true},
		{"writable", []corev1.Volume{xtables, cm}, []corev1.VolumeMount{xtablesMount, writable}, false},
		{"from the host", []corev1.Volume{xtables, host}, []corev1.VolumeMount{xtablesMount, mount}, false},
	} {
		p := Privileges{HostNetwork: true, PriorityClassName: "system-node-critical", Volumes: tc.volumes,
			SecurityContext: &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []ContainerPrivileges{{VolumeMounts: tc.mounts, SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{
				Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN", "NET_RAW"}}}}}}
		if bad := checkNodeAgent(Speaker, p); (len(bad) == 0) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, bad, tc.ok)
		}
	}
}
