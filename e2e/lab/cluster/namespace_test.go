package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// TestMoveManifest moves the real install manifests into kube-system: no
// object stays in herald-system, every binding's subjects follow, and
// the speakers' pods carry kube-proxy's label beside their own.
func TestMoveManifest(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(DeployDir(filepath.Join(dir, "e2e")), "herald.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	moved, err := MoveManifest(data, HeraldNamespace, KubeSystem, speakerPodLabels(KubeSystem))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(moved), HeraldNamespace) {
		t.Fatal("the moved manifests still name herald-system")
	}
	docs := strings.Split(string(moved), "---\n")
	var namespaced, bindings, speakers int
	for _, doc := range docs[1:] {
		js, err := utilyaml.ToJSON([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name, Namespace string
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(js, &head); err != nil {
			t.Fatal(err)
		}
		if head.Metadata.Namespace != "" {
			namespaced++
			if head.Metadata.Namespace != KubeSystem {
				t.Errorf("%s %s in %s", head.Kind, head.Metadata.Name, head.Metadata.Namespace)
			}
		}
		switch head.Kind {
		case "Namespace":
			t.Errorf("Namespace %s in the manifests moved to kube-system, which is there already", head.Metadata.Name)
		case "RoleBinding", "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			if err := yaml.Unmarshal(js, &b); err != nil {
				t.Fatal(err)
			}
			for _, s := range b.Subjects {
				if s.Kind == "ServiceAccount" && s.Namespace != KubeSystem {
					t.Errorf("%s %s: subject %s/%s", head.Kind, b.Name, s.Namespace, s.Name)
				}
				bindings++
			}
		case "DaemonSet":
			var ds appsv1.DaemonSet
			if err := yaml.Unmarshal(js, &ds); err != nil {
				t.Fatal(err)
			}
			if ds.Name != HeraldSpeaker {
				continue
			}
			speakers++
			l := ds.Spec.Template.Labels
			if l["k8s-app"] != "kube-proxy" || l["app.kubernetes.io/component"] != "speaker" {
				t.Errorf("the speakers' pod labels: %v", l)
			}
		}
	}
	if namespaced < 5 || bindings < 3 || speakers != 1 {
		t.Errorf("%d namespaced objects, %d binding subjects, %d speaker DaemonSets: the manifests are not what this test knows", namespaced, bindings, speakers)
	}
}

func TestMoveManifestRefuses(t *testing.T) {
	for name, doc := range map[string]string{
		"a field it does not know": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: herald-system}\ndata: {ns: herald-system}\n",
		"no metadata":              "apiVersion: v1\nkind: ConfigMap\n",
		"a clashing label":         "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: herald-speaker, namespace: herald-system}\nspec: {template: {metadata: {labels: {k8s-app: other}}}}\n",
		"not YAML":                 "kind: [\n",
	} {
		if _, err := MoveManifest([]byte(doc), HeraldNamespace, KubeSystem, KubeProxyPodLabels); err == nil {
			t.Errorf("%s: moved", name)
		}
	}
}

func TestCheckHeraldNamespace(t *testing.T) {
	for _, c := range []struct {
		ns, proxy string
		bare, ok  bool
	}{
		{"", ProxyKubeProxy, false, true},
		{HeraldNamespace, ProxyKubeProxy, false, true},
		{KubeSystem, ProxyHerald, false, true},
		{KubeSystem, ProxyKubeProxy, false, false},
		{KubeSystem, ProxyHerald, true, false},
		{"elsewhere", ProxyHerald, false, false},
	} {
		if err := checkHeraldNamespace(c.ns, c.proxy, c.bare); (err == nil) != c.ok {
			t.Errorf("namespace %q, proxy %s, bare %v: %v", c.ns, c.proxy, c.bare, err)
		}
	}
	if v, _ := HelmValues("https://198.51.100.254:6443", ProxyHerald, KubeSystem); !strings.Contains(strings.Join(v, " "), "speaker.podLabels.k8s-app=kube-proxy") ||
		!strings.Contains(strings.Join(v, " "), "podSecurity.labelNamespace=false") {
		t.Errorf("helm values in kube-system: %v", v)
	}
	if m, _ := apiServerConfigMap("https://198.51.100.254:6443", true, KubeSystem); strings.Contains(m, "kind: Namespace") || !strings.Contains(m, "namespace: kube-system") {
		t.Errorf("herald's ConfigMaps in kube-system:\n%s", m)
	}
}
