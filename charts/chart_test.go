package charts

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/herald-lb/herald/config/manifests"
	"github.com/herald-lb/herald/proxy/kubeproxyconfig"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/diff"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from helm template")

var (
	root  = manifests.Root()
	chart = filepath.Join(root, "charts", "herald")
)

// The image config/base names, whose tag the chart's appVersion must be.
const imageRepository = "ghcr.io/herald-lb/herald"

// TestCRDsAreConfigs: the chart's crds/ are byte for byte the CRDs
// controller-gen writes into config/crd/bases (`make generate` copies
// them).
func TestCRDsAreConfigs(t *testing.T) {
	want := readDir(t, filepath.Join(root, "config", "crd", "bases"))
	got := readDir(t, filepath.Join(chart, "crds"))
	for name, b := range want {
		if g, ok := got[name]; !ok {
			t.Errorf("charts/herald/crds/%s is missing: run make generate", name)
		} else if !bytes.Equal(g, b) {
			t.Errorf("charts/herald/crds/%s differs from config/crd/bases/%s: run make generate (never edit either by hand)", name, name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("charts/herald/crds/%s is not in config/crd/bases: run make generate", name)
		}
	}
}

func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}

// TestOneVersion: the chart's default image is the one config/base runs
// (repository and tag, the tag being the chart's appVersion), so Helm
// and kustomize install the same herald.
func TestOneVersion(t *testing.T) {
	var meta struct {
		AppVersion string `json:"appVersion"`
	}
	readYAML(t, filepath.Join(chart, "Chart.yaml"), &meta)
	var values struct {
		Image struct {
			Repository string `json:"repository"`
			Tag        string `json:"tag"`
		} `json:"image"`
	}
	readYAML(t, filepath.Join(chart, "values.yaml"), &values)
	if values.Image.Repository != imageRepository || values.Image.Tag != "" {
		t.Errorf("values.yaml image %s:%s, want %s and an empty tag (the appVersion)", values.Image.Repository, values.Image.Tag, imageRepository)
	}
	want := imageRepository + ":" + meta.AppVersion
	for _, r := range manifests.Renderings {
		objs, err := manifests.DecodeFile(filepath.Join(root, r.File))
		if err != nil {
			t.Fatal(err)
		}
		for name, w := range manifests.Workloads(objs) {
			for _, c := range podSpec(w).Containers {
				if c.Image != want {
					t.Errorf("%s: %s runs %s; the chart's appVersion says %s: change both together", r.File, name, c.Image, want)
				}
			}
		}
	}
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func podSpec(obj any) corev1.PodSpec {
	switch w := obj.(type) {
	case *appsv1.Deployment:
		return w.Spec.Template.Spec
	case *appsv1.DaemonSet:
		return w.Spec.Template.Spec
	case *batchv1.Job:
		return w.Spec.Template.Spec
	}
	return corev1.PodSpec{}
}

// helmBinary is $HERALD_HELM, checked; the test skips without it. A
// relative path is taken from the repository's root (go test runs in the
// package's directory), a bare name from PATH.
func helmBinary(t *testing.T) string {
	t.Helper()
	p := os.Getenv("HERALD_HELM")
	if p == "" {
		t.Skip("HERALD_HELM is not set: the chart's helm tests need Helm; `make unit-test` and `make chart-test` (and so `make test`) install the pinned one into bin/ and set it")
	}
	if strings.Contains(p, "/") && !filepath.IsAbs(p) {
		p = filepath.Join(root, p)
	}
	out, err := exec.Command(p, "version", "--short").CombinedOutput()
	if err != nil {
		t.Fatalf("HERALD_HELM=%s does not run: %v\n%s", p, err, out)
	}
	if !strings.HasPrefix(string(out), "v3.") {
		t.Fatalf("HERALD_HELM=%s is Helm %s; the chart is tested with Helm 3 (Makefile HELM_VERSION)", p, strings.TrimSpace(string(out)))
	}
	return p
}

// helm runs a helm command with its own empty home (no repositories, no
// plugins, no cluster).
func helm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	bin := helmBinary(t)
	home := t.TempDir()
	cmd := exec.Command(bin, args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+filepath.Join(home, "no-kubeconfig"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.Bytes(), &helmError{args: args, err: err, stderr: stderr.String()}
	}
	return stdout.Bytes(), nil
}

type helmError struct {
	args   []string
	err    error
	stderr string
}

func (e *helmError) Error() string {
	return "helm " + strings.Join(e.args, " ") + ": " + e.err.Error() + "\n" + e.stderr
}

// A valueSet is a values file of testdata/values and what its rendering
// must run like.
type valueSet struct {
	name string
	// like are the kustomizations whose workloads and grants, together,
	// the rendering must equal (privileges, args, RBAC).
	like []string
	// check is what else the rendering must hold.
	check func(t *testing.T, objs []manifests.Object)
}

var valueSets = []valueSet{
	{name: "default", like: []string{"config/default"}, check: checkDefault},
	{name: "l2-only", like: []string{"config/overlays/l2-only"}},
	{name: "no-proxy", like: []string{"config/overlays/no-proxy"}},
	{name: "proxy-only", like: []string{"config/overlays/proxy-only"}, check: checkProxyOnly},
	{name: "proxy-standalone", like: []string{"config/overlays/no-proxy", "config/overlays/proxy-only"}},
	{name: "servicemonitor", check: checkServiceMonitor},
	{name: "custom", like: []string{"config/default"}, check: checkCustom},
	{name: "lab", check: checkLab},
	{name: "pod-security-off", like: []string{"config/default"}},
	{name: "conntrack", check: checkConntrack},
	{name: "kube-proxy-config", check: checkKubeProxyConfig},
}

// TestValueSets: every file in testdata/values has a valueSet here.
func TestValueSets(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(root, "charts", "testdata", "values", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, f := range files {
		got = append(got, strings.TrimSuffix(filepath.Base(f), ".yaml"))
	}
	for _, vs := range valueSets {
		want = append(want, vs.name)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("testdata/values has %v, the test knows %v", got, want)
	}
}

// TestLint: `helm lint --strict` is clean with the defaults and with every
// value set.
func TestLint(t *testing.T) {
	if out, err := helm(t, "lint", "--strict", "charts/herald"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, vs := range valueSets {
		if out, err := helm(t, "lint", "--strict", "charts/herald", "-f", valuesFile(vs.name)); err != nil {
			t.Errorf("%s: %v\n%s", vs.name, err, out)
		}
	}
}

func valuesFile(name string) string {
	return filepath.Join("charts", "testdata", "values", name+".yaml")
}

// template renders the chart with a values file, as release "herald" in
// herald-system.
func template(t *testing.T, extra ...string) []byte {
	t.Helper()
	out, err := helm(t, append([]string{"template", "herald", "charts/herald", "--namespace", "herald-system"}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestGolden: `helm template` renders testdata/golden/NAME.yaml from
// testdata/values/NAME.yaml, and NAME.notes.txt is its NOTES.txt; the
// output decodes strictly, keeps the least-privilege rules and runs like
// the matching kustomizations.
func TestGolden(t *testing.T) {
	helmBinary(t)
	kustomized := map[string][]manifests.Object{}
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			out := template(t, "-f", valuesFile(vs.name))
			golden(t, filepath.Join("golden", vs.name+".yaml"), out)
			golden(t, filepath.Join("golden", vs.name+".notes.txt"), notes(t, valuesFile(vs.name)))

			objs, err := manifests.Decode(out)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range manifests.CheckPrivileges(objs) {
				t.Error(p)
			}
			checkPodSecurity(t, valuesFile(vs.name), objs)
			if vs.like != nil {
				// The kustomizations have no Helm hooks to compare with.
				release, _ := manifests.SplitHooks(objs)
				var like []manifests.Object
				for _, dir := range vs.like {
					if kustomized[dir] == nil {
						b, err := manifests.Kustomize(filepath.Join(root, dir))
						if err != nil {
							t.Fatal(err)
						}
						if kustomized[dir], err = manifests.Decode(b); err != nil {
							t.Fatal(err)
						}
					}
					like = append(like, kustomized[dir]...)
				}
				for _, p := range manifests.ComparePrivileges(like, release, false) {
					t.Errorf("helm template with %s, compared with kustomize %s: %s", valuesFile(vs.name), strings.Join(vs.like, " + "), p)
				}
			}
			if vs.check != nil {
				vs.check(t, objs)
			}
		})
	}
}

// golden compares out with testdata/NAME, or writes it with -update.
func golden(t *testing.T, name string, out []byte) {
	t.Helper()
	path := filepath.Join(root, "charts", "testdata", name)
	if *update {
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (HERALD_HELM=bin/helm go test ./charts -update writes it)", err)
	}
	if !bytes.Equal(want, out) {
		t.Errorf("testdata/%s differs from what the chart renders now (if the change is meant, HERALD_HELM=bin/helm go test ./charts -update, and review the diff):\n%s",
			name, manifests.LineDiff(string(want), string(out)))
	}
}

// notes renders the chart's NOTES.txt: `helm template` leaves it out and
// `helm install --dry-run` needs a cluster, so a copy of the chart renders
// it into a ConfigMap.
func notes(t *testing.T, values string) []byte {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "herald")
	if err := os.CopyFS(dir, os.DirFS(chart)); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "templates", "NOTES.txt"), filepath.Join(dir, "notes.txt")); err != nil {
		t.Fatal(err)
	}
	const tmpl = `apiVersion: v1
kind: ConfigMap
metadata:
  name: notes
data:
  notes: {{ tpl (.Files.Get "notes.txt") . | quote }}
`
	if err := os.WriteFile(filepath.Join(dir, "templates", "zz-notes.yaml"), []byte(tmpl), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := helm(t, "template", "herald", dir, "--namespace", "herald-system", "-f", values, "--show-only", "templates/zz-notes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Decode(out)
	if err != nil || len(objs) != 1 {
		t.Fatalf("%d objects, %v", len(objs), err)
	}
	return []byte(objs[0].Obj.(*corev1.ConfigMap).Data["notes"])
}

// TestCRDsRendered: `helm install` creates exactly config/crd/bases' CRDs
// (helm template --include-crds shows what it sends).
func TestCRDsRendered(t *testing.T) {
	objs, err := manifests.Decode(template(t, "--include-crds"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := manifests.Decode(mustKustomize(t, "config/crd"))
	if err != nil {
		t.Fatal(err)
	}
	var got []manifests.Object
	for _, o := range objs {
		if _, ok := o.Obj.(*apiextensionsv1.CustomResourceDefinition); ok {
			got = append(got, o)
		}
	}
	if !reflect.DeepEqual(manifests.Names(got), manifests.Names(want)) {
		t.Fatalf("CRDs:\n%s", diff.Diff(manifests.Names(want), manifests.Names(got)))
	}
	for _, w := range want {
		g := manifests.Find(got, w.Kind, w.Name)
		if !reflect.DeepEqual(g, w.Obj) {
			t.Errorf("%s differs from config/crd's", w)
		}
	}
}

func mustKustomize(t *testing.T, dir string) []byte {
	t.Helper()
	b, err := manifests.Kustomize(filepath.Join(root, dir))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRefused: values that cannot work stop helm with a message naming
// them, from the schema or from the templates.
func TestRefused(t *testing.T) {
	helmBinary(t)
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"speaker.enabled=false"}, "proxy.mode=speaker runs the proxy in the speakers"},
		{[]string{"metrics.serviceMonitor.enabled=true", "metrics.service.enabled=false"}, "needs metrics.service.enabled=true"},
		{[]string{"controller.enabled=false", "speaker.enabled=false", "proxy.mode=disabled"}, "nothing to install"},
		{[]string{"proxy.mode=kube-proxy"}, "/proxy/mode"},
		{[]string{"speaker.logLevel=verbose"}, "/speaker/logLevel"},
		{[]string{"proxy.metricsBindAddress=metrics.local:10249"}, "/proxy/metricsBindAddress"},
		{[]string{"speaker.bgp=false"}, "/speaker/bgp"},
		{[]string{"speakr.enabled=false"}, "'speakr' not allowed"},
		{[]string{"apiServer.port=0"}, "/apiServer/port"},
		{[]string{"podSecurity.labelNamespace=yes"}, "/podSecurity/labelNamespace"},
	} {
		args := []string{"template", "herald", "charts/herald", "--namespace", "herald-system"}
		for _, s := range tc.set {
			args = append(args, "--set", s)
		}
		_, err := helm(t, args...)
		if err == nil {
			t.Errorf("--set %v: rendered; want a refusal mentioning %q", tc.set, tc.want)
			continue
		}
		if msg := err.(*helmError).stderr; !strings.Contains(msg, tc.want) {
			t.Errorf("--set %v: %s\nwant it to mention %q", tc.set, msg, tc.want)
		}
	}
}

func container(t *testing.T, objs []manifests.Object, kind, name string) corev1.Container {
	t.Helper()
	obj := manifests.Find(objs, kind, name)
	if obj == nil {
		t.Fatalf("no %s %s", kind, name)
	}
	return podSpec(obj).Containers[0]
}

func names(objs []manifests.Object, kind string) []string {
	var out []string
	for _, o := range objs {
		if o.Kind == kind {
			out = append(out, o.Name)
		}
	}
	slices.Sort(out)
	return out
}

// checkDefault: besides config/default's objects, only the headless
// metrics Services; no ConfigMap (the optional ones stay the user's).
func checkDefault(t *testing.T, objs []manifests.Object) {
	if got, want := names(objs, "Service"), []string{"herald-controller-metrics", "herald-speaker-metrics"}; !slices.Equal(got, want) {
		t.Errorf("Services %v, want %v", got, want)
	}
	for _, o := range objs {
		if s, ok := o.Obj.(*corev1.Service); ok && s.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("%s is not headless", o)
		}
	}
	if got := names(objs, "ConfigMap"); got != nil {
		t.Errorf("ConfigMaps %v", got)
	}
	if got := names(objs, "ServiceMonitor"); got != nil {
		t.Errorf("ServiceMonitors %v: off by default", got)
	}
}

// checkProxyOnly: the standalone proxy serves its metrics beyond the
// loopback, on its pod's port "metrics" and its metrics Service's.
func checkProxyOnly(t *testing.T, objs []manifests.Object) {
	if got, want := names(objs, "Service"), []string{"herald-proxy-metrics"}; !slices.Equal(got, want) {
		t.Errorf("Services %v, want %v", got, want)
	}
	c := container(t, objs, "DaemonSet", "herald-proxy")
	if !slices.Contains(c.Args, "--metrics-bind-address=0.0.0.0:10249") {
		t.Errorf("proxy args %q", c.Args)
	}
	if got := ports(c.Ports); !slices.Contains(got, "metrics=10249") {
		t.Errorf("proxy ports %v", got)
	}
	if got, want := servicePorts(t, objs, "herald-proxy-metrics"), []string{"metrics=10249"}; !slices.Equal(got, want) {
		t.Errorf("herald-proxy-metrics ports %v, want %v", got, want)
	}
}

// servicePorts are a Service's ports as name=targetPort.
func servicePorts(t *testing.T, objs []manifests.Object, name string) []string {
	t.Helper()
	s, _ := manifests.Find(objs, "Service", name).(*corev1.Service)
	if s == nil {
		t.Fatalf("no Service %s", name)
	}
	var out []string
	for _, p := range s.Spec.Ports {
		out = append(out, p.Name+"="+p.TargetPort.String())
	}
	return out
}

func ports(ps []corev1.ContainerPort) []string {
	var out []string
	for _, p := range ps {
		out = append(out, fmt.Sprintf("%s=%d", p.Name, p.ContainerPort))
	}
	return out
}

// checkServiceMonitor: one ServiceMonitor scraping the metrics ports of
// the release's metrics Services; the speakers' Service has their port
// alone, which serves the proxy's metrics too, even where the proxy's own
// listener is opened beyond the loopback (or they would be scraped twice).
func checkServiceMonitor(t *testing.T, objs []manifests.Object) {
	sm, ok := manifests.Find(objs, "ServiceMonitor", "herald").(*unstructured.Unstructured)
	if !ok {
		t.Fatal("no ServiceMonitor herald")
	}
	if sm.GetAPIVersion() != "monitoring.coreos.com/v1" || sm.GetNamespace() != "herald-system" || sm.GetLabels()["release"] != "prometheus" {
		t.Errorf("ServiceMonitor %s in %q, labels %v", sm.GetAPIVersion(), sm.GetNamespace(), sm.GetLabels())
	}
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	var ports []string
	for _, e := range endpoints {
		m := e.(map[string]any)
		ports = append(ports, m["port"].(string))
		if m["interval"] != "15s" {
			t.Errorf("endpoint %v: interval %v", m["port"], m["interval"])
		}
	}
	if want := []string{"metrics"}; !slices.Equal(ports, want) {
		t.Errorf("ServiceMonitor ports %v, want %v", ports, want)
	}
	selector, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	for _, o := range objs {
		s, ok := o.Obj.(*corev1.Service)
		if !ok {
			continue
		}
		for k, v := range selector {
			if s.Labels[k] != v {
				t.Errorf("%s: label %s=%q, the ServiceMonitor selects %q", o, k, s.Labels[k], v)
			}
		}
	}
	if got, want := servicePorts(t, objs, "herald-speaker-metrics"), []string{"metrics=7473"}; !slices.Equal(got, want) {
		t.Errorf("herald-speaker-metrics ports %v, want %v", got, want)
	}
	if c := container(t, objs, "DaemonSet", "herald-speaker"); !slices.Contains(c.Args, "--metrics-bind-address=0.0.0.0:10249") {
		t.Errorf("speaker args %q", c.Args)
	}
}

// checkCustom: the image, pull policy and secrets, resources and node
// placement reach every pod.
func checkCustom(t *testing.T, objs []manifests.Object) {
	for name, w := range manifests.Workloads(objs) {
		spec := podSpec(w)
		c := spec.Containers[0]
		if c.Image != "registry.example.com/net/herald:v0.1.0" || c.ImagePullPolicy != corev1.PullAlways {
			t.Errorf("%s: image %s, %s", name, c.Image, c.ImagePullPolicy)
		}
		if len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != "registry-example" {
			t.Errorf("%s: imagePullSecrets %v", name, spec.ImagePullSecrets)
		}
		if c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Cpu().String() != "100m" {
			t.Errorf("%s: resources %v", name, c.Resources)
		}
		if len(spec.NodeSelector) != 1 {
			t.Errorf("%s: nodeSelector %v", name, spec.NodeSelector)
		}
	}
	d, _ := manifests.Find(objs, "Deployment", "herald-controller").(*appsv1.Deployment)
	if d == nil || *d.Spec.Replicas != 2 || len(d.Spec.Template.Spec.Tolerations) != 1 || d.Spec.Template.Annotations["example.com/team"] != "network" {
		t.Errorf("controller: replicas, tolerations or annotations not set: %+v", d)
	}
	ds, _ := manifests.Find(objs, "DaemonSet", "herald-speaker").(*appsv1.DaemonSet)
	if ds == nil || ds.Spec.Template.Spec.Affinity == nil || ds.Spec.Template.Labels["example.com/team"] != "network" {
		t.Errorf("speaker: affinity or labels not set: %+v", ds)
	}
	if ds != nil && ds.Spec.Selector.MatchLabels["example.com/team"] != "" {
		t.Errorf("speaker: pod labels in the (immutable) selector")
	}
}

// checkConntrack: with proxy.conntrack.privilegedInit the speaker's pods
// start with the privileged init container conntrack, given every
// conntrack flag; the speaker gets only the one that differs from the
// defaults.
func checkConntrack(t *testing.T, objs []manifests.Object) {
	ds, _ := manifests.Find(objs, "DaemonSet", "herald-speaker").(*appsv1.DaemonSet)
	if ds == nil {
		t.Fatal("no speaker DaemonSet")
	}
	spec := ds.Spec.Template.Spec
	wantInit := []string{"conntrack", "--conntrack-max-per-core=32768", "--conntrack-min=131072", "--conntrack-tcp-timeout-established=24h0m0s",
		"--conntrack-tcp-timeout-close-wait=2h0m0s", "--conntrack-tcp-be-liberal=false", "--conntrack-udp-timeout=0s", "--conntrack-udp-timeout-stream=0s"}
	if len(spec.InitContainers) != 1 || !slices.Equal(spec.InitContainers[0].Args, wantInit) {
		t.Errorf("speaker init containers %+v, want one running %q", spec.InitContainers, wantInit)
	} else if sc := spec.InitContainers[0].SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Errorf("init container conntrack not privileged: %+v", sc)
	}
	var conntrack []string
	for _, a := range spec.Containers[0].Args {
		if strings.HasPrefix(a, "--conntrack-") {
			conntrack = append(conntrack, a)
		}
	}
	if want := []string{"--conntrack-tcp-timeout-close-wait=2h0m0s"}; !slices.Equal(conntrack, want) {
		t.Errorf("the speaker's conntrack flags %q, want %q", conntrack, want)
	}
}

// checkKubeProxyConfig: proxy.kubeProxyConfig reaches the speakers' proxy
// as a file --config reads, whole, and the pods keep their service
// account whatever the file's clientConnection says.
func checkKubeProxyConfig(t *testing.T, objs []manifests.Object) {
	cm, _ := manifests.Find(objs, "ConfigMap", "herald-kube-proxy-config").(*corev1.ConfigMap)
	if cm == nil {
		t.Fatal("no ConfigMap herald-kube-proxy-config")
	}
	c, err := kubeproxyconfig.Parse("config.conf", []byte(cm.Data["config.conf"]))
	if err != nil || c.ClusterCIDR != "10.244.0.0/16" {
		t.Errorf("the ConfigMap's file: %v", err)
	}
	ds, _ := manifests.Find(objs, "DaemonSet", "herald-speaker").(*appsv1.DaemonSet)
	if ds == nil {
		t.Fatal("no speaker DaemonSet")
	}
	spec := ds.Spec.Template.Spec
	args := spec.Containers[0].Args
	if !slices.Contains(args, "--config=/etc/herald/kube-proxy/config.conf") || !slices.Contains(args, "--kubeconfig=") {
		t.Errorf("speaker args %q", args)
	}
	mounted := slices.ContainsFunc(spec.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "kube-proxy-config" && m.MountPath == "/etc/herald/kube-proxy" && m.ReadOnly
	})
	volume := slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == "kube-proxy-config" && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name
	})
	if !mounted || !volume {
		t.Errorf("mounted %v, volume %v", mounted, volume)
	}
}

// checkLab: the lab's API server address and pod network reach the
// containers that need them.
func checkLab(t *testing.T, objs []manifests.Object) {
	env := func(c corev1.Container) map[string]string {
		m := map[string]string{}
		for _, e := range c.Env {
			m[e.Name] = e.Value
		}
		return m
	}
	for _, name := range []string{"herald-controller", "herald-speaker", manifests.LabelNamespaceHook} {
		kind := map[string]string{"herald-controller": "Deployment", "herald-speaker": "DaemonSet", manifests.LabelNamespaceHook: "Job"}[name]
		e := env(container(t, objs, kind, name))
		if e["KUBERNETES_SERVICE_HOST"] != "192.0.2.1" || e["KUBERNETES_SERVICE_PORT"] != "6443" {
			t.Errorf("%s: env %v", name, e)
		}
	}
	c := container(t, objs, "DaemonSet", "herald-speaker")
	if e := env(c); e["HERALD_CLUSTER_CIDR"] != "198.18.0.0/16,2001:db8:1::/48" {
		t.Errorf("speaker env %v", e)
	}
	if !slices.Contains(c.Args, "--log-level=debug") {
		t.Errorf("speaker args %q", c.Args)
	}
}
