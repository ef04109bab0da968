package clusterdns

import (
	"net/netip"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestServiceIP(t *testing.T) {
	if got := ServiceIP(netip.MustParsePrefix("198.19.0.0/16")); got != netip.MustParseAddr("198.19.0.10") {
		t.Fatalf("got %s", got)
	}
	if got := ServiceIP(netip.MustParsePrefix("2001:db8:2::/112")); got != netip.MustParseAddr("2001:db8:2::a") {
		t.Fatalf("got %s", got)
	}
}

func TestParseKubeadmVersion(t *testing.T) {
	v, err := parseKubeadmVersion([]byte("const (\n\t// CoreDNSVersion is ...\n\tCoreDNSVersion = \"v1.12.1\"\n)\n"), "constants.go")
	if err != nil || v != "v1.12.1" {
		t.Fatalf("got %q, %v", v, err)
	}
	if _, err := parseKubeadmVersion([]byte("package constants\n"), "constants.go"); err == nil || !strings.Contains(err.Error(), "constants.go") {
		t.Fatalf("no version: got %v", err)
	}
}

func TestManifests(t *testing.T) {
	m := Manifests(Config{Image: Image("v1.12.1"), ServiceIP: netip.MustParseAddr("198.19.0.10"), APIServerHost: "198.51.100.254", APIServerPort: "6443"})
	docs := strings.Split(m, "\n---\n")
	if len(docs) != 6 {
		t.Fatalf("%d documents, want 6", len(docs))
	}
	kinds := map[string]map[string]any{}
	for _, d := range docs {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(d), &obj); err != nil {
			t.Fatalf("%v in\n%s", err, d)
		}
		kinds[obj["kind"].(string)] = obj
	}
	cm := kinds["ConfigMap"]["data"].(map[string]any)["Corefile"].(string)
	if strings.TrimSpace(cm) != strings.TrimSpace(Corefile) {
		t.Fatalf("the ConfigMap's Corefile differs:\n%s", cm)
	}
	svc := kinds["Service"]["spec"].(map[string]any)
	if svc["clusterIP"] != "198.19.0.10" {
		t.Fatalf("clusterIP %v", svc["clusterIP"])
	}
	dep := kinds["Deployment"]["spec"].(map[string]any)
	c := dep["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	if c["image"] != "registry.k8s.io/coredns/coredns:v1.12.1" {
		t.Fatalf("image %v", c["image"])
	}
	if dep["replicas"].(float64) != 2 {
		t.Fatalf("replicas %v", dep["replicas"])
	}
	if !strings.Contains(m, `{name: KUBERNETES_SERVICE_HOST, value: "198.51.100.254"}`) {
		t.Fatal("no API server address")
	}
}
