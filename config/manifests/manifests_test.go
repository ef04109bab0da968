package manifests

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/diff"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite config/deploy and config/proxy-only from the kustomizations (make manifests)")

// TestRenderings: config/deploy/herald.yaml and config/proxy-only/proxy.yaml
// are exactly what kustomize renders from config/default and
// config/overlays/proxy-only; `make manifests` (go test -update) rewrites
// them.
func TestRenderings(t *testing.T) {
	for _, r := range Renderings {
		t.Run(r.File, func(t *testing.T) {
			want, err := r.Render()
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(Root(), r.File)
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, want, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run make manifests)", err)
			}
			if string(got) != string(want) {
				t.Errorf("%s is not the rendering of %s: run make manifests (edit config/base, config/default or config/overlays, never the rendered file)\n%s",
					r.File, r.Kustomization, LineDiff(string(want), string(got)))
			}
			if entries, err := os.ReadDir(filepath.Dir(path)); err == nil {
				for _, e := range entries {
					if e.Name() != filepath.Base(path) {
						t.Errorf("%s: %s is not generated; `kubectl apply -f %s` would apply it too", filepath.Dir(r.File), e.Name(), filepath.Dir(r.File))
					}
				}
			}
		})
	}
}

// TestCRDKustomization: config/crd/kustomization.yaml names every CRD
// that controller-gen writes into config/crd/bases, and nothing else.
func TestCRDKustomization(t *testing.T) {
	var k struct {
		Resources []string `json:"resources"`
	}
	b, err := os.ReadFile(filepath.Join(Root(), "config/crd/kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(Root(), "config/crd/bases/*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range files {
		want = append(want, "bases/"+filepath.Base(f))
	}
	got := slices.Clone(k.Resources)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("config/crd/kustomization.yaml lists %v, config/crd/bases has %v", k.Resources, want)
	}
}

var (
	crds = []string{
		"CustomResourceDefinition bfdprofiles.herald.io",
		"CustomResourceDefinition bgpadvertisements.herald.io",
		"CustomResourceDefinition bgppeers.herald.io",
		"CustomResourceDefinition communities.herald.io",
		"CustomResourceDefinition ipaddresspools.herald.io",
		"CustomResourceDefinition l2advertisements.herald.io",
		"CustomResourceDefinition nodeannouncements.herald.io",
		"CustomResourceDefinition serviceannouncements.herald.io",
	}
	controllerObjects = []string{
		"ClusterRole herald-controller", "ClusterRoleBinding herald-controller",
		"Role herald-system/herald-controller", "RoleBinding herald-system/herald-controller",
		"ServiceAccount herald-system/herald-controller", Controller,
	}
	speakerObjects = []string{
		"ClusterRole herald-speaker", "ClusterRoleBinding herald-speaker",
		"Role herald-system/herald-speaker", "RoleBinding herald-system/herald-speaker",
		"ServiceAccount herald-system/herald-speaker", Speaker,
	}
	proxyObjects = []string{
		"ClusterRole herald-proxy", "ClusterRoleBinding herald-proxy",
		"Role herald-system/herald-proxy", "RoleBinding herald-system/herald-proxy",
		"ServiceAccount herald-system/herald-proxy", Proxy,
	}
)

// TestKustomizations renders config/default and every overlay, decodes
// the output strictly as Kubernetes objects and checks what each must
// hold: its objects, the flags that make the variant, and the
// privileges of every workload.
func TestKustomizations(t *testing.T) {
	defaultObjs := render(t, "config/default")
	entries, err := os.ReadDir(filepath.Join(Root(), "config/overlays"))
	if err != nil {
		t.Fatal(err)
	}
	var overlays []string
	for _, e := range entries {
		overlays = append(overlays, e.Name())
	}
	if want := []string{"l2-only", "no-proxy", "proxy-only"}; !slices.Equal(overlays, want) {
		t.Errorf("config/overlays has %v; this test knows %v: add the new one here", overlays, want)
	}

	all := concat([]string{"Namespace herald-system"}, crds, controllerObjects, speakerObjects)
	for _, tc := range []struct {
		dir     string
		objects []string
		// args is the speaker's command line (nil: no speaker).
		args []string
	}{
		{"config/default", all, []string{"speaker", "--metrics-addr=:7473", "--memberlist-port=7946", "--healthz-bind-address=0.0.0.0:10256", "--metrics-bind-address=127.0.0.1:10249"}},
		{"config/overlays/l2-only", all, []string{"speaker", "--metrics-addr=:7473", "--memberlist-port=7946", "--healthz-bind-address=0.0.0.0:10256", "--metrics-bind-address=127.0.0.1:10249", "--bgp=false"}},
		{"config/overlays/no-proxy", all, []string{"speaker", "--metrics-addr=:7473", "--memberlist-port=7946", "--proxy=false"}},
		{"config/overlays/proxy-only", concat([]string{"Namespace herald-system"}, proxyObjects), nil},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			objs := render(t, tc.dir)
			want := slices.Clone(tc.objects)
			slices.Sort(want)
			if got := Names(objs); !slices.Equal(got, want) {
				t.Errorf("objects:\n%s", diff.Diff(want, got))
			}
			for _, p := range CheckPrivileges(objs) {
				t.Error(p)
			}
			checkNamespaceLabels(t, objs)
			for _, o := range objs {
				if c := containerOf(o.Obj); c != nil && c.Image != "ghcr.io/herald-lb/herald:dev" {
					t.Errorf("%s: image %s, want the base's ghcr.io/herald-lb/herald:dev", o, c.Image)
				}
			}
			if tc.args == nil {
				return
			}
			ds, _ := Find(objs, "DaemonSet", "herald-speaker").(*appsv1.DaemonSet)
			if ds == nil {
				t.Fatal("no speaker DaemonSet")
			}
			c := ds.Spec.Template.Spec.Containers[0]
			if !slices.Equal(c.Args, tc.args) {
				t.Errorf("speaker args %q, want %q", c.Args, tc.args)
			}
			proxyInProcess := !slices.Contains(c.Args, "--proxy=false")
			var ports, envFrom []string
			for _, p := range c.Ports {
				ports = append(ports, p.Name)
			}
			for _, e := range c.EnvFrom {
				envFrom = append(envFrom, e.ConfigMapRef.Name)
			}
			if got := slices.Contains(ports, "proxy-healthz"); got != proxyInProcess {
				t.Errorf("speaker ports %v: proxy-healthz present %v, want %v", ports, got, proxyInProcess)
			}
			if got := slices.Contains(envFrom, "herald-proxy"); got != proxyInProcess {
				t.Errorf("speaker envFrom %v: herald-proxy present %v, want %v", envFrom, got, proxyInProcess)
			}
			// Apart from the flags and what goes with them, the variants
			// run exactly the default's pods and grants.
			if tc.dir != "config/default" {
				for _, p := range ComparePrivileges(defaultObjs, objs, true) {
					if !strings.Contains(p, "only in") {
						t.Errorf("compared with config/default: %s", p)
					}
				}
			}
		})
	}
}

func render(t *testing.T, dir string) []Object {
	t.Helper()
	out, err := Kustomize(filepath.Join(Root(), dir))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(out)
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	return objs
}

func concat(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

func containerOf(obj any) *corev1.Container {
	switch w := obj.(type) {
	case *appsv1.Deployment:
		return &w.Spec.Template.Spec.Containers[0]
	case *appsv1.DaemonSet:
		return &w.Spec.Template.Spec.Containers[0]
	}
	return nil
}
