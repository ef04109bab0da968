package cluster

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// decodeManifest splits a multi-document YAML into its objects' JSON, by
// kind.
func decodeManifest(t *testing.T, m string) map[string]json.RawMessage {
	t.Helper()
	out := map[string]json.RawMessage{}
	for _, doc := range strings.Split(m, "\n---\n") {
		js, err := utilyaml.ToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("%v in:\n%s", err, doc)
		}
		var tm metav1.TypeMeta
		if err := json.Unmarshal(js, &tm); err != nil {
			t.Fatal(err)
		}
		if _, dup := out[tm.Kind]; dup {
			t.Fatalf("two objects of kind %s", tm.Kind)
		}
		out[tm.Kind] = js
	}
	return out
}

func TestKubeProxyManifest(t *testing.T) {
	m, err := KubeProxyManifest("v1.34.10", "https://198.51.100.254:6443", clusterCIDRs())
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeManifest(t, m)
	if len(objs) != 3 {
		t.Fatalf("want a ServiceAccount, a ClusterRoleBinding and a DaemonSet, got %d objects", len(objs))
	}
	var sa v1.ServiceAccount
	var crb rbacv1.ClusterRoleBinding
	var ds appsv1.DaemonSet
	for kind, into := range map[string]any{"ServiceAccount": &sa, "ClusterRoleBinding": &crb, "DaemonSet": &ds} {
		// Strict: a misspelt field fails here instead of being dropped.
		dec := json.NewDecoder(bytes.NewReader(objs[kind]))
		dec.DisallowUnknownFields()
		if err := dec.Decode(into); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
	}
	if sa.Namespace != "kube-system" || sa.Name != "kube-proxy" {
		t.Errorf("ServiceAccount %s/%s", sa.Namespace, sa.Name)
	}
	if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != "system:node-proxier" || len(crb.Subjects) != 1 ||
		crb.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Name: "kube-proxy", Namespace: "kube-system"}) {
		t.Errorf("ClusterRoleBinding %+v %+v", crb.RoleRef, crb.Subjects)
	}
	spec := ds.Spec.Template.Spec
	if ds.Namespace != KubeProxyNamespace || ds.Name != KubeProxyName || !spec.HostNetwork || spec.ServiceAccountName != "kube-proxy" ||
		ds.Spec.Selector.MatchLabels["k8s-app"] != "kube-proxy" || ds.Spec.Template.Labels["k8s-app"] != "kube-proxy" {
		t.Errorf("DaemonSet %s/%s: hostNetwork %v, service account %q, selector %v, labels %v",
			ds.Namespace, ds.Name, spec.HostNetwork, spec.ServiceAccountName, ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	if c.Image != "registry.k8s.io/kube-proxy:v1.34.10" {
		t.Errorf("image %s", c.Image)
	}
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Errorf("not privileged: %+v", c.SecurityContext)
	}
	for _, want := range []string{
		"--hostname-override=$(NODE_NAME)",
		"--proxy-mode=iptables",
		"--cluster-cidr=198.18.0.0/16,2001:db8:1::/48",
		"--healthz-bind-address=0.0.0.0:10256",
		"--metrics-bind-address=127.0.0.1:10249",
		"--conntrack-max-per-core=0",
	} {
		if !slices.Contains(c.Command, want) {
			t.Errorf("command %q lacks %s", c.Command, want)
		}
	}
	// kube-proxy writes its default conntrack timeouts, each node
	// namespace's own, as on a real node.
	for _, arg := range c.Command {
		if strings.HasPrefix(arg, "--conntrack-tcp-timeout") {
			t.Errorf("command %q keeps kube-proxy from writing its timeouts: %s", c.Command, arg)
		}
	}
	if c.Command[0] != "/usr/local/bin/kube-proxy" || len(c.Args) != 0 {
		t.Errorf("command %q args %q", c.Command, c.Args)
	}
	env := map[string]v1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if e := env["NODE_NAME"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("NODE_NAME %+v", e)
	}
	if env["KUBERNETES_SERVICE_HOST"].Value != "198.51.100.254" || env["KUBERNETES_SERVICE_PORT"].Value != "6443" {
		t.Errorf("API server env %+v %+v", env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"])
	}

	for _, bad := range [][2]string{{"v1.34.10", "https://198.51.100.254"}, {"", "https://198.51.100.254:6443"}} {
		if _, err := KubeProxyManifest(bad[0], bad[1], clusterCIDRs()); err == nil {
			t.Errorf("KubeProxyManifest(%q, %q) took it", bad[0], bad[1])
		}
	}
}

func TestAPIServerConfigMap(t *testing.T) {
	for _, heraldProxy := range []bool{true, false} {
		m, err := apiServerConfigMap("https://198.51.100.254:6443", heraldProxy, HeraldNamespace)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, doc := range strings.Split(m, "\n---\n") {
			js, err := utilyaml.ToJSON([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			var cm v1.ConfigMap
			if err := json.Unmarshal(js, &cm); err != nil {
				t.Fatal(err)
			}
			names = append(names, cm.Kind+" "+cm.Name)
			if cm.Name == "herald-apiserver" && (cm.Data["KUBERNETES_SERVICE_HOST"] != "198.51.100.254" || cm.Data["KUBERNETES_SERVICE_PORT"] != "6443") {
				t.Errorf("herald-apiserver: %v", cm.Data)
			}
		}
		want := []string{"Namespace herald-system", "ConfigMap herald-apiserver"}
		if heraldProxy {
			want = append(want, "ConfigMap herald-proxy")
		}
		if !slices.Equal(names, want) {
			t.Errorf("herald's proxy %v: %v, want %v", heraldProxy, names, want)
		}
	}
}

func TestResolveProxy(t *testing.T) {
	for _, c := range []struct{ opt, env, want, errHas string }{
		{"", "", ProxyHerald, ""},
		{"", "kube-proxy", ProxyKubeProxy, ""},
		{"herald", "kube-proxy", ProxyHerald, ""},
		{"kube-proxy", "", ProxyKubeProxy, ""},
		{"", "ipvs", "", "HERALD_LAB_PROXY=ipvs: unknown service proxy \"ipvs\": want herald or kube-proxy"},
		{"kubeproxy", "", "", "cluster.Options.Proxy: unknown service proxy"},
	} {
		got, err := resolveProxy(c.opt, c.env)
		if got != c.want || (c.errHas == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.errHas)) {
			t.Errorf("resolveProxy(%q, %q) = %q, %v; want %q, an error with %q", c.opt, c.env, got, err, c.want, c.errHas)
		}
	}
	if got := (&State{}).ProxyOf(); got != ProxyHerald {
		t.Errorf("a lab recorded without a proxy runs %q, want herald's", got)
	}
}

func TestUpFlags(t *testing.T) {
	parse := func(args ...string) (Options, error) {
		fs := flag.NewFlagSet("up", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var o Options
		o.BindFlags(fs)
		return o, fs.Parse(args)
	}
	o, err := parse()
	if err != nil || o.Proxy != "" || o.Nodes != DefaultNodes || o.Prefix != DefaultPrefix || o.Bare || o.ImageMode || o.WaitForOthers {
		t.Errorf("defaults: %+v %v", o, err)
	}
	o, err = parse("--proxy=kube-proxy", "--nodes", "2", "--bare", "--image-mode", "--prefix", "hkp", "--state", "/tmp/x", "--e2e", "/e2e", "--wait")
	if err != nil || o.Proxy != ProxyKubeProxy || o.Nodes != 2 || !o.Bare || !o.ImageMode || o.Prefix != "hkp" || o.StateDir != "/tmp/x" || o.ModuleDir != "/e2e" || !o.WaitForOthers {
		t.Errorf("all flags: %+v %v", o, err)
	}
	if o, err = parse("--proxy", "herald"); err != nil || o.Proxy != ProxyHerald {
		t.Errorf("--proxy herald: %q %v", o.Proxy, err)
	}
	_, err = parse("--proxy=ipvs")
	if err == nil || !strings.Contains(err.Error(), `invalid value "ipvs" for flag -proxy`) || !strings.Contains(err.Error(), "want herald or kube-proxy") {
		t.Errorf("--proxy=ipvs: %v", err)
	}
}
