package manifests

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/diff"
)

// The workloads herald installs, by "Kind namespace/name".
const (
	Controller = "Deployment herald-system/herald-controller"
	Speaker    = "DaemonSet herald-system/herald-speaker"
	Proxy      = "DaemonSet herald-system/herald-proxy"
)

// LabelNamespaceHook names the Helm chart's Pod Security hook: its Job,
// ServiceAccount, Role and RoleBinding.
const LabelNamespaceHook = "herald-label-namespace"

// CheckPrivileges checks the least-privilege rules of docs/install.md
// ("Privileges") on every workload and grant of a set of manifests and
// returns what breaks them. Workloads are named "Kind herald-system/name"
// (the manifests' namespace).
func CheckPrivileges(objs []Object) []string {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	for name, w := range Workloads(objs) {
		p, err := WorkloadPrivileges(w)
		if err != nil {
			add("%s: %v", name, err)
			continue
		}
		if len(p.Containers) != 1 {
			add("%s: %d containers, want 1", name, len(p.Containers))
			continue
		}
		bad = append(bad, checkInitContainers(name, p.InitContainers)...)
		if p.HostPID || p.HostIPC {
			add("%s: hostPID or hostIPC", name)
		}
		if c := p.Containers[0]; len(c.Command) != 0 {
			add("%s: command %q: the image's entrypoint runs herald", name, c.Command)
		}
		if p.ServiceAccount == LabelNamespaceHook {
			add("%s: runs as the Pod Security hook's ServiceAccount, which may patch the namespace", name)
		}
		switch name {
		case Speaker, Proxy:
			bad = append(bad, checkNodeAgent(name, p)...)
		case Controller:
			bad = append(bad, checkController(name, p)...)
		default:
			add("%s: a workload these rules do not know", name)
		}
	}
	for name, g := range Grants(objs) {
		var rules []rbacv1.PolicyRule
		switch r := g.(type) {
		case []rbacv1.PolicyRule:
			rules = r
		case clusterRoleGrant:
			rules = r.Rules
			if r.Aggregation != nil {
				add("%s aggregates other roles", name)
			}
		default:
			continue
		}
		for _, r := range rules {
			bad = append(bad, checkRule(name, r)...)
		}
	}
	slices.Sort(bad)
	return bad
}

func checkRule(name string, r rbacv1.PolicyRule) []string {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	for _, v := range slices.Concat(r.Verbs, r.Resources, r.APIGroups) {
		if v == "*" {
			add("%s: wildcard in %+v", name, r)
		}
	}
	for _, v := range []string{"escalate", "bind", "impersonate", "deletecollection"} {
		if slices.Contains(r.Verbs, v) {
			add("%s: %s in %+v", name, v, r)
		}
	}
	// The node agents read their own pod and follow their own DaemonSet
	// (the uninstall check), in herald's namespace only.
	if slices.Contains(r.Resources, "pods") || slices.Contains(r.Resources, "daemonsets") {
		agent := map[string]string{"Role herald-system/herald-speaker": "herald-speaker", "Role herald-system/herald-proxy": "herald-proxy"}[name]
		switch {
		case agent == "":
			add("%s: pods or DaemonSets: %+v", name, r)
		case slices.Equal(r.APIGroups, []string{""}) && slices.Equal(r.Resources, []string{"pods"}) && len(r.ResourceNames) == 0 && slices.Equal(r.Verbs, []string{"get"}):
		case slices.Equal(r.APIGroups, []string{"apps"}) && slices.Equal(r.Resources, []string{"daemonsets"}) &&
			slices.Equal(r.ResourceNames, []string{agent}) && slices.Equal(r.Verbs, []string{"get", "list", "watch"}):
		default:
			add("%s: pods or DaemonSets beyond getting pods and reading %s: %+v", name, agent, r)
		}
	}
	// Namespaces: the controller lists and watches them (their labels feed
	// serviceAllocation.namespaceSelectors); only the chart's Pod Security
	// hook gets and patches one, its own, by name, while it runs; the node
	// agents get kube-system, by name (its UID seeds --dsr's backend
	// choice).
	if slices.Contains(r.Resources, "namespaces") {
		hookNS, isHook := strings.CutSuffix(strings.TrimPrefix(name, "Role "), "/"+LabelNamespaceHook)
		switch {
		case name == "ClusterRole herald-controller" && slices.Equal(r.APIGroups, []string{""}) && slices.Equal(r.Resources, []string{"namespaces"}) &&
			len(r.ResourceNames) == 0 && slices.Equal(r.Verbs, []string{"list", "watch"}):
		case (name == "ClusterRole herald-speaker" || name == "ClusterRole herald-proxy") && slices.Equal(r.APIGroups, []string{""}) &&
			slices.Equal(r.Resources, []string{"namespaces"}) && slices.Equal(r.ResourceNames, []string{"kube-system"}) && slices.Equal(r.Verbs, []string{"get"}):
		case isHook && strings.HasPrefix(name, "Role ") && slices.Equal(r.APIGroups, []string{""}) && slices.Equal(r.Resources, []string{"namespaces"}) &&
			slices.Equal(r.ResourceNames, []string{hookNS}) && slices.Equal(r.Verbs, []string{"get", "patch"}):
		default:
			add("%s: namespaces beyond the controller's list and watch, the node agents' get of kube-system, and the Pod Security hook's get and patch of its own: %+v", name, r)
		}
	}
	if !slices.Contains(r.Resources, "secrets") {
		return bad
	}
	// Only the controller reads Secrets it does not own (the BGPPeers'
	// passwordSecrets, which the parser checks), and only in herald's
	// namespace; it creates two and updates one. The node agents read
	// two, by name.
	switch {
	case strings.HasPrefix(name, "ClusterRole "):
		add("%s: Secrets cluster-wide: %+v", name, r)
	case name == "Role herald-system/herald-controller":
		switch {
		case len(r.ResourceNames) == 0 && slices.Equal(r.Verbs, []string{"get", "list", "watch"}):
		case len(r.ResourceNames) == 0 && slices.Equal(r.Verbs, []string{"create"}):
		case slices.Equal(r.ResourceNames, []string{"herald-bgp-passwords"}) && slices.Equal(r.Verbs, []string{"update"}):
		default:
			add("%s: Secrets beyond reading, creating, and updating herald-bgp-passwords: %+v", name, r)
		}
	default:
		if !slices.Equal(r.ResourceNames, []string{"herald-memberlist", "herald-bgp-passwords"}) || !slices.Equal(r.Verbs, []string{"get", "list", "watch"}) {
			add("%s: Secrets beyond reading herald-memberlist and herald-bgp-passwords: %+v", name, r)
		}
	}
	return bad
}

// checkNodeAgent: the speaker's and the proxy's pods, as docs/install.md
// ("Privileges") says: host network, not privileged, ALL capabilities
// dropped and NET_ADMIN, NET_RAW added, RuntimeDefault seccomp, the
// node's xtables lock and nothing else from the host,
// system-node-critical.
func checkNodeAgent(name string, p Privileges) []string {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	c := p.Containers[0]
	if !p.HostNetwork {
		add("%s: not hostNetwork", name)
	}
	if p.PriorityClassName != "system-node-critical" {
		add("%s: priorityClassName %q, want system-node-critical", name, p.PriorityClassName)
	}
	wantPod := &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	if !reflect.DeepEqual(p.SecurityContext, wantPod) {
		add("%s: pod securityContext:\n%s", name, diff.Diff(wantPod, p.SecurityContext))
	}
	want := &corev1.SecurityContext{Capabilities: &corev1.Capabilities{
		Drop: []corev1.Capability{"ALL"},
		Add:  []corev1.Capability{"NET_ADMIN", "NET_RAW"},
	}}
	if !reflect.DeepEqual(c.SecurityContext, want) {
		add("%s: container securityContext:\n%s", name, diff.Diff(want, c.SecurityContext))
	}
	lock := corev1.HostPathFileOrCreate
	wantVolumes := []corev1.Volume{{Name: "xtables-lock", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/run/xtables.lock", Type: &lock}}}}
	// The chart's kube-proxy configuration file is a ConfigMap of the
	// release, mounted read-only: nothing from the host.
	volumes := slices.DeleteFunc(slices.Clone(p.Volumes), func(v corev1.Volume) bool {
		return v.Name == KubeProxyConfigVolume && v.ConfigMap != nil
	})
	if !reflect.DeepEqual(volumes, wantVolumes) {
		add("%s: volumes:\n%s", name, diff.Diff(wantVolumes, p.Volumes))
	}
	wantMounts := []corev1.VolumeMount{{Name: "xtables-lock", MountPath: "/run/xtables.lock"}}
	mounts := slices.DeleteFunc(slices.Clone(c.VolumeMounts), func(m corev1.VolumeMount) bool {
		return m.Name == KubeProxyConfigVolume && m.ReadOnly
	})
	if !reflect.DeepEqual(mounts, wantMounts) {
		add("%s: volumeMounts:\n%s", name, diff.Diff(wantMounts, c.VolumeMounts))
	}
	return bad
}

// KubeProxyConfigVolume is the chart's volume of proxy.kubeProxyConfig.
const KubeProxyConfigVolume = "kube-proxy-config"

// checkInitContainers: the node agents may have one, `conntrack`,
// privileged because only a privileged container's /proc/sys is
// writable, running `herald conntrack` (which writes the conntrack
// settings and exits) from the image's entrypoint, with nothing mounted.
// The controller has none.
func checkInitContainers(name string, cs []ContainerPrivileges) []string {
	var bad []string
	if name != Speaker && name != Proxy && len(cs) > 0 {
		return []string{fmt.Sprintf("%s: %d init containers, want none", name, len(cs))}
	}
	if len(cs) > 1 {
		return []string{fmt.Sprintf("%s: %d init containers, want at most one (conntrack)", name, len(cs))}
	}
	for _, c := range cs {
		privileged := true
		want := &corev1.SecurityContext{Privileged: &privileged}
		switch {
		case c.Name != "conntrack" || len(c.Command) != 0 || len(c.Args) == 0 || c.Args[0] != "conntrack":
			bad = append(bad, fmt.Sprintf("%s: init container %s runs %q %q: the only one allowed is conntrack, running `herald conntrack` from the image's entrypoint", name, c.Name, c.Command, c.Args))
		case !reflect.DeepEqual(c.SecurityContext, want) || len(c.VolumeMounts) != 0:
			bad = append(bad, fmt.Sprintf("%s: init container conntrack: securityContext %v and %d volume mounts, want privileged and none", name, c.SecurityContext, len(c.VolumeMounts)))
		}
	}
	return bad
}

// checkController: the controller runs as nobody, with no capability, on
// a read-only root filesystem, with RuntimeDefault seccomp, in the pod
// network.
func checkController(name string, p Privileges) []string {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	c := p.Containers[0]
	if p.HostNetwork || len(p.Volumes) != 0 || len(c.VolumeMounts) != 0 {
		add("%s: hostNetwork %v, volumes %v", name, p.HostNetwork, p.Volumes)
	}
	nobody, yes, no := int64(65534), true, false
	wantPod := &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &nobody, RunAsGroup: &nobody,
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	if !reflect.DeepEqual(p.SecurityContext, wantPod) {
		add("%s: pod securityContext:\n%s", name, diff.Diff(wantPod, p.SecurityContext))
	}
	want := &corev1.SecurityContext{
		AllowPrivilegeEscalation: &no,
		ReadOnlyRootFilesystem:   &yes,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	if !reflect.DeepEqual(c.SecurityContext, want) {
		add("%s: container securityContext:\n%s", name, diff.Diff(want, c.SecurityContext))
	}
	return bad
}

// ComparePrivileges lists how the workloads and grants that both sets
// have differ (in args too, unless ignoreArgs), and the workloads and
// grants only one of them has.
func ComparePrivileges(a, b []Object, ignoreArgs bool) []string {
	var bad []string
	wa, wb := Workloads(a), Workloads(b)
	for name, oa := range wa {
		ob, ok := wb[name]
		if !ok {
			bad = append(bad, fmt.Sprintf("%s: only in the first set", name))
			continue
		}
		pa, _ := WorkloadPrivileges(oa)
		pb, _ := WorkloadPrivileges(ob)
		if ignoreArgs {
			for _, p := range []*Privileges{&pa, &pb} {
				for i := range p.Containers {
					p.Containers[i].Args = nil
				}
			}
		}
		if !reflect.DeepEqual(pa, pb) {
			bad = append(bad, fmt.Sprintf("%s: privileges differ:\n%s", name, diff.Diff(pa, pb)))
		}
	}
	for name := range wb {
		if _, ok := wa[name]; !ok {
			bad = append(bad, fmt.Sprintf("%s: only in the second set", name))
		}
	}
	ga, gb := Grants(a), Grants(b)
	for name, g := range ga {
		h, ok := gb[name]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("%s: only in the first set", name))
		case !reflect.DeepEqual(g, h):
			bad = append(bad, fmt.Sprintf("%s differs:\n%s", name, diff.Diff(g, h)))
		}
	}
	for name := range gb {
		if _, ok := ga[name]; !ok {
			bad = append(bad, fmt.Sprintf("%s: only in the second set", name))
		}
	}
	slices.Sort(bad)
	return bad
}
