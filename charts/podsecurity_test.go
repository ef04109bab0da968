package charts

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/herald-lb/herald/config/manifests"
	"github.com/herald-lb/herald/internal/podsecurity"
)

// checkPodSecurity: the chart makes no Namespace (it would clash with
// helm install --create-namespace); when its pods need more than
// restricted, its only hook, run before install, upgrade and rollback,
// labels the release's namespace with the least level they need (unless
// podSecurity.labelNamespace is false), from a pod that restricted admits,
// with the right to get and patch that namespace only.
func checkPodSecurity(t *testing.T, values string, objs []manifests.Object) {
	t.Helper()
	release, hooks := manifests.SplitHooks(objs)
	least, err := manifests.LeastPodSecurity(release)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		PodSecurity *struct {
			LabelNamespace *bool `json:"labelNamespace"`
		} `json:"podSecurity"`
	}
	readYAML(t, filepath.Join(root, values), &v)
	label := v.PodSecurity == nil || v.PodSecurity.LabelNamespace == nil || *v.PodSecurity.LabelNamespace
	if ns := names(objs, "Namespace"); ns != nil {
		t.Errorf("Namespaces %v: a Namespace in the chart clashes with helm install --create-namespace", ns)
	}
	if !label || least == podsecurity.Restricted {
		if hooks != nil {
			t.Errorf("hooks %v; want none (podSecurity.labelNamespace %v, the pods need %s)", manifests.Names(hooks), label, least)
		}
		return
	}
	hook := "herald-system/" + manifests.LabelNamespaceHook
	want := []string{"Job " + hook, "Role " + hook, "RoleBinding " + hook, "ServiceAccount " + hook}
	if got := manifests.Names(hooks); !slices.Equal(got, want) {
		t.Fatalf("hooks %v, want %v", got, want)
	}
	for _, h := range hooks {
		a := h.Obj.(interface{ GetAnnotations() map[string]string }).GetAnnotations()
		weight := "-1"
		if h.Kind == "Job" {
			weight = "0" // after its RBAC
		}
		if a[manifests.HookAnnotation] != "pre-install,pre-upgrade,pre-rollback" || a["helm.sh/hook-weight"] != weight ||
			a["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded,hook-failed" {
			t.Errorf("%s: hook annotations %v", h, a)
		}
	}
	job := manifests.Find(hooks, "Job", manifests.LabelNamespaceHook).(*batchv1.Job)
	spec := job.Spec.Template.Spec
	if c := spec.Containers; len(c) != 1 || !slices.Equal(c[0].Args, []string{"label-namespace", "--pod-security=" + string(least)}) {
		t.Errorf("the hook's %d containers, the first's args %q; want one, herald label-namespace --pod-security=%s", len(c), c[0].Args, least)
	}
	if spec.ServiceAccountName != manifests.LabelNamespaceHook || len(spec.InitContainers) != 0 || spec.HostNetwork || len(spec.Volumes) != 0 {
		t.Errorf("the hook's pod: %+v", spec)
	}
	for name, w := range manifests.Workloads(release) {
		ws := podSpec(w)
		if ws.Containers[0].Image != spec.Containers[0].Image || !reflect.DeepEqual(ws.ImagePullSecrets, spec.ImagePullSecrets) {
			t.Errorf("the hook runs %s %v, %s runs %s %v", spec.Containers[0].Image, spec.ImagePullSecrets, name, ws.Containers[0].Image, ws.ImagePullSecrets)
		}
	}
	if ps, err := manifests.EvaluatePodSecurity(job); err != nil || ps.Level != podsecurity.Restricted {
		t.Errorf("the hook's pod needs %s (%v, refused: %v); it must run in a namespace not labelled yet, whatever the cluster's default", ps.Level, err, ps.Refused)
	}
	role := manifests.Find(hooks, "Role", manifests.LabelNamespaceHook).(*rbacv1.Role)
	wantRules := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, ResourceNames: []string{"herald-system"}, Verbs: []string{"get", "patch"}}}
	if !reflect.DeepEqual(role.Rules, wantRules) {
		t.Errorf("the hook's Role grants %+v, want %+v", role.Rules, wantRules)
	}
	rb := manifests.Find(hooks, "RoleBinding", manifests.LabelNamespaceHook).(*rbacv1.RoleBinding)
	if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != manifests.LabelNamespaceHook ||
		!reflect.DeepEqual(rb.Subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: manifests.LabelNamespaceHook, Namespace: "herald-system"}}) {
		t.Errorf("the hook's RoleBinding: %+v %+v", rb.RoleRef, rb.Subjects)
	}
}

// TestPodSecurityHookReusedValues: `helm upgrade --reuse-values` renders
// with the values of the release being upgraded, which lack podSecurity
// when it was made by an older chart: the hook still runs.
func TestPodSecurityHookReusedValues(t *testing.T) {
	helmBinary(t)
	dir := filepath.Join(t.TempDir(), "herald")
	if err := os.CopyFS(dir, os.DirFS(chart)); err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	readYAML(t, filepath.Join(dir, "values.yaml"), &values)
	if _, ok := values["podSecurity"]; !ok {
		t.Fatal("values.yaml has no podSecurity")
	}
	delete(values, "podSecurity")
	b, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "values.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := helm(t, "template", "herald", dir, "--namespace", "herald-system")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	if _, hooks := manifests.SplitHooks(objs); !strings.Contains(strings.Join(manifests.Names(hooks), " "), "Job herald-system/"+manifests.LabelNamespaceHook) {
		t.Errorf("without podSecurity in the values, hooks %v; want the Pod Security hook", manifests.Names(hooks))
	}
}
