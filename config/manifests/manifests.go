// Package manifests renders herald's install manifests as users render
// them, kustomize's way (the library `kubectl kustomize` embeds), and
// decodes them into typed Kubernetes objects, so that tests keep the
// kustomize bases and overlays (config/base, config/default,
// config/overlays), the files rendered from them (config/deploy,
// config/proxy-only) and the Helm chart (charts/herald) in step. Nothing in
// herald's binary imports it.
package manifests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// ModulePath is the root module's path, as its go.mod says.
const ModulePath = "github.com/herald-lb/herald"

// Root is the repository's root directory: the nearest directory at or
// above the working directory whose go.mod is herald's root module, so
// tests of any package can use it. It is found from the working
// directory, not from this file's path, because builds with -trimpath
// (make's, the image's) record no source paths.
func Root() string {
	dir, err := os.Getwd()
	if err != nil {
		panic("manifests: " + err.Error())
	}
	for d := dir; ; d = filepath.Dir(d) {
		if isRootModule(filepath.Join(d, "go.mod")) {
			return d
		}
		if filepath.Dir(d) == d {
			panic(fmt.Sprintf("manifests: no go.mod of %s at or above %s", ModulePath, dir))
		}
	}
}

// isRootModule says whether the go.mod at path declares herald's root
// module (the e2e module's go.mod declares another).
func isRootModule(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`) == ModulePath
		}
	}
	return false
}

// A Rendering is a kustomization whose output is kept in the repository
// as a plain file, for `kubectl apply -f` without kustomize.
type Rendering struct {
	// Kustomization is the directory rendered, relative to the root.
	Kustomization string
	// File is where its output is kept, relative to the root.
	File string
	// Apply is the command line the header suggests.
	Apply string
}

// Renderings are the files `make manifests` writes and the tests check.
var Renderings = []Rendering{
	{Kustomization: "config/default", File: "config/deploy/herald.yaml", Apply: "kubectl apply --server-side -f config/deploy"},
	{Kustomization: "config/overlays/proxy-only", File: "config/proxy-only/proxy.yaml", Apply: "kubectl apply --server-side -f config/proxy-only"},
}

// Header is the comment at the top of a rendered file.
func (r Rendering) Header() string {
	return fmt.Sprintf(`# Generated from %s by `+"`make manifests`"+` (kustomize): do not edit; edit
# config/base, config/default or config/overlays and run `+"`make manifests`"+`.
# A test fails when this file differs from `+"`kubectl kustomize %s`"+`.
#
#   %s
#
# docs/install.md explains every object.
`, r.Kustomization, r.Kustomization, r.Apply)
}

// Render is the file's expected content: the header, then the
// kustomization's output.
func (r Rendering) Render() ([]byte, error) {
	out, err := Kustomize(filepath.Join(Root(), r.Kustomization))
	if err != nil {
		return nil, err
	}
	return append([]byte(r.Header()), out...), nil
}

// Kustomize renders a kustomization directory, as `kubectl kustomize DIR`
// does: with the legacy order (namespaces, CRDs, service accounts and
// RBAC before the workloads), its default.
func Kustomize(dir string) ([]byte, error) {
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionLegacy
	k := krusty.MakeKustomizer(opts)
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	return m.AsYaml()
}

// Object is one decoded manifest.
type Object struct {
	Kind      string
	Namespace string
	Name      string
	// Obj is the typed object (*appsv1.DaemonSet, ...) for the kinds
	// client-go and apiextensions know, else *unstructured.Unstructured.
	Obj kruntime.Object
}

func (o Object) String() string {
	if o.Namespace == "" {
		return o.Kind + " " + o.Name
	}
	return o.Kind + " " + o.Namespace + "/" + o.Name
}

var (
	scheme = func() *kruntime.Scheme {
		s := kruntime.NewScheme()
		if err := errors.Join(clientgoscheme.AddToScheme(s), apiextensionsv1.AddToScheme(s)); err != nil {
			panic(err)
		}
		return s
	}()
	// strict refuses unknown and duplicated fields, as the API server's
	// strict field validation does.
	strict = serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
)

// Decode reads a multi-document YAML stream into objects. Documents of
// kinds the scheme knows are decoded strictly (a misspelt or misplaced
// field is an error); others (a ServiceMonitor) must at least have an
// apiVersion, a kind and a name.
func Decode(data []byte) ([]Object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []Object
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if isEmpty(doc) {
			continue
		}
		obj, _, err := strict.Decode(doc, nil, nil)
		if kruntime.IsNotRegisteredError(err) {
			u := &unstructured.Unstructured{}
			if err := utilyaml.Unmarshal(doc, &u.Object); err != nil {
				return nil, fmt.Errorf("document %d: %w", i, err)
			}
			if u.GetAPIVersion() == "" || u.GetKind() == "" || u.GetName() == "" {
				return nil, fmt.Errorf("document %d: no apiVersion, kind or metadata.name:\n%s", i, doc)
			}
			obj, err = u, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w\n%s", i, err, doc)
		}
		m, err := metaOf(obj)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		kind := obj.GetObjectKind().GroupVersionKind().Kind
		if kind == "" {
			return nil, fmt.Errorf("document %d: no kind", i)
		}
		out = append(out, Object{Kind: kind, Namespace: m.GetNamespace(), Name: m.GetName(), Obj: obj})
	}
}

func isEmpty(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && line != "---" && !strings.HasPrefix(line, "#") {
			return false
		}
	}
	return true
}

func metaOf(obj kruntime.Object) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no metadata", obj)
	}
	return m, nil
}

// DecodeFile is Decode of a file.
func DecodeFile(path string) ([]Object, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	objs, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return objs, nil
}

// Find returns the object of that kind and name (any namespace), or nil.
func Find(objs []Object, kind, name string) kruntime.Object {
	for _, o := range objs {
		if o.Kind == kind && o.Name == name {
			return o.Obj
		}
	}
	return nil
}

// Names lists "Kind namespace/name" of every object, sorted.
func Names(objs []Object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.String())
	}
	slices.Sort(out)
	return out
}

// Privileges is what a review of a workload's rights looks at: who it
// runs as, in which of the node's namespaces, with which capabilities and
// host paths, and what it runs.
type Privileges struct {
	ServiceAccount               string
	AutomountServiceAccountToken *bool
	HostNetwork                  bool
	HostPID                      bool
	HostIPC                      bool
	PriorityClassName            string
	SecurityContext              *corev1.PodSecurityContext
	Volumes                      []corev1.Volume
	InitContainers               []ContainerPrivileges
	Containers                   []ContainerPrivileges
}

// ContainerPrivileges is a container's part of Privileges.
type ContainerPrivileges struct {
	Name            string
	Command         []string
	Args            []string
	SecurityContext *corev1.SecurityContext
	VolumeMounts    []corev1.VolumeMount
}

// WorkloadPrivileges is the Privileges of a Deployment's or DaemonSet's
// pods.
func WorkloadPrivileges(obj kruntime.Object) (Privileges, error) {
	var spec corev1.PodSpec
	switch w := obj.(type) {
	case *appsv1.Deployment:
		spec = w.Spec.Template.Spec
	case *appsv1.DaemonSet:
		spec = w.Spec.Template.Spec
	default:
		return Privileges{}, fmt.Errorf("%T is not a Deployment or a DaemonSet", obj)
	}
	p := Privileges{
		ServiceAccount:               spec.ServiceAccountName,
		AutomountServiceAccountToken: spec.AutomountServiceAccountToken,
		HostNetwork:                  spec.HostNetwork,
		HostPID:                      spec.HostPID,
		HostIPC:                      spec.HostIPC,
		PriorityClassName:            spec.PriorityClassName,
		SecurityContext:              spec.SecurityContext,
		Volumes:                      spec.Volumes,
	}
	for _, c := range spec.InitContainers {
		p.InitContainers = append(p.InitContainers, containerPrivileges(c))
	}
	for _, c := range spec.Containers {
		p.Containers = append(p.Containers, containerPrivileges(c))
	}
	return p, nil
}

func containerPrivileges(c corev1.Container) ContainerPrivileges {
	return ContainerPrivileges{Name: c.Name, Command: c.Command, Args: c.Args, SecurityContext: c.SecurityContext, VolumeMounts: c.VolumeMounts}
}

// Grants is every RBAC object of a set of manifests, by "Kind
// namespace/name": the rules of a Role ([]rbacv1.PolicyRule) or a
// ClusterRole (with its aggregation), the role and subjects of a binding.
func Grants(objs []Object) map[string]any {
	out := map[string]any{}
	for _, o := range objs {
		switch r := o.Obj.(type) {
		case *rbacv1.Role:
			out[o.String()] = r.Rules
		case *rbacv1.ClusterRole:
			out[o.String()] = clusterRoleGrant{r.Rules, r.AggregationRule}
		case *rbacv1.RoleBinding:
			out[o.String()] = bindingGrant{r.RoleRef, r.Subjects}
		case *rbacv1.ClusterRoleBinding:
			out[o.String()] = bindingGrant{r.RoleRef, r.Subjects}
		}
	}
	return out
}

type clusterRoleGrant struct {
	Rules       []rbacv1.PolicyRule
	Aggregation *rbacv1.AggregationRule
}

type bindingGrant struct {
	RoleRef  rbacv1.RoleRef
	Subjects []rbacv1.Subject
}

// Workloads is every Deployment and DaemonSet of a set of manifests, by
// "Kind namespace/name".
func Workloads(objs []Object) map[string]kruntime.Object {
	out := map[string]kruntime.Object{}
	for _, o := range objs {
		switch o.Obj.(type) {
		case *appsv1.Deployment, *appsv1.DaemonSet:
			out[o.String()] = o.Obj
		}
	}
	return out
}

// HookAnnotation marks a Helm hook: Helm creates it before or after the
// release's objects and does not keep it in the release.
const HookAnnotation = "helm.sh/hook"

// SplitHooks separates a chart's Helm hooks from the objects its release
// keeps.
func SplitHooks(objs []Object) (release, hooks []Object) {
	for _, o := range objs {
		if m, err := metaOf(o.Obj); err == nil && m.GetAnnotations()[HookAnnotation] != "" {
			hooks = append(hooks, o)
		} else {
			release = append(release, o)
		}
	}
	return release, hooks
}

// LineDiff describes where two texts first differ, with a few lines of
// context, for golden-file failures.
func LineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	i := 0
	for i < len(w) && i < len(g) && w[i] == g[i] {
		i++
	}
	if i == len(w) && i == len(g) {
		return "(no difference)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "first difference at line %d (want %d lines, got %d):\n", i+1, len(w), len(g))
	from := max(0, i-3)
	for j := from; j < i; j++ {
		fmt.Fprintf(&b, "    %s\n", w[j])
	}
	for j := i; j < min(len(w), i+4); j++ {
		fmt.Fprintf(&b, "  - %s\n", w[j])
	}
	for j := i; j < min(len(g), i+4); j++ {
		fmt.Fprintf(&b, "  + %s\n", g[j])
	}
	return b.String()
}
