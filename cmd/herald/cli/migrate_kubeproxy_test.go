package cli

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/*.golden")

const kubeadmDir = "../../../proxy/kubeproxyconfig/testdata/"

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *updateGolden {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// TestMigrateKubeProxyKubeadm: kubeadm v1.34's ConfigMap and its bare
// config.conf give the same values; the localhost NodePorts default is a
// warning, so the exit status is 1.
func TestMigrateKubeProxyKubeadm(t *testing.T) {
	var first string
	for _, in := range []string{"kubeadm-v1.34-configmap.yaml", "kubeadm-v1.34-config.conf"} {
		o, err := parseMigrate([]string{"--from-kube-proxy", "-f", kubeadmDir + in}, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		var out, report bytes.Buffer
		if code := migrateKubeProxyMain(context.Background(), o, &out, &report); code != 1 {
			t.Errorf("%s: exit %d, want 1\n%s", in, code, report.String())
		}
		// The values are what the chart reads.
		var v map[string]any
		if err := yaml.UnmarshalStrict(out.Bytes(), &v); err != nil {
			t.Errorf("%s: the values are not YAML: %v", in, err)
		}
		values := out.String()[strings.Index(out.String(), "\nproxy:"):]
		if first == "" {
			first = values
			golden(t, "migrate-kube-proxy-kubeadm.golden", append(out.Bytes(), "--- standard error\n"+report.String()...))
		} else if values != first {
			t.Errorf("%s: values differ from the ConfigMap's:\n%s\n%s", in, values, first)
		}
	}
}

// TestMigrateKubeProxyFromCluster reads the ConfigMap through the API.
func TestMigrateKubeProxyFromCluster(t *testing.T) {
	conf, err := os.ReadFile(kubeadmDir + "kubeadm-v1.34-config.conf")
	if err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy"},
		Data: map[string]string{"config.conf": strings.Replace(string(conf), `mode: ""`, "mode: ipvs", 1)}})
	c, source, err := kubeProxyFromCluster(context.Background(), cs, "kube-system/kube-proxy")
	if err != nil || source != "ConfigMap kube-system/kube-proxy, key config.conf" || c.Mode != "ipvs" {
		t.Fatalf("%q %v", source, err)
	}
	if tr := c.Translate(); tr.Errors() != 1 {
		t.Errorf("ipvs mode: %d errors", tr.Errors())
	}
	for ref, want := range map[string]string{
		"kube-proxy":        `--kube-proxy-configmap: "kube-proxy" is not NAMESPACE/NAME`,
		"kube-system/other": `reading kube-proxy's ConfigMap: configmaps "other" not found`,
	} {
		if _, _, err := kubeProxyFromCluster(context.Background(), cs, ref); err == nil || err.Error() != want {
			t.Errorf("%s: %v", ref, err)
		}
	}
}

// TestMigrateKubeProxyExitCodes: 0 when everything translates, 1 with a
// refused field (the values still written), 2 when the file is not a
// KubeProxyConfiguration.
func TestMigrateKubeProxyExitCodes(t *testing.T) {
	dir := t.TempDir()
	head := "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
	for _, tc := range []struct {
		body   string
		code   int
		out    []string
		report string
	}{
		{"mode: nftables\nclusterCIDR: 198.18.0.0/16\nconntrack: {maxPerCore: 0, tcpBeLiberal: true, udpTimeout: 10s}\nnftables: {syncPeriod: 1m}\nhostnameOverride: node-1\n", 0,
			[]string{"  clusterCIDR: 198.18.0.0/16\n", "  conntrack:\n    maxPerCore: 0\n    tcpBeLiberal: true\n    udpTimeout: 10s\n", "  extraArgs:\n  - --proxy-mode=nftables\n  - --sync-period=1m0s\n  - --nodeport-addresses=primary\n",
				"#   herald proxy --proxy-mode=nftables --sync-period=1m0s --hostname-override=node-1 --cluster-cidr=198.18.0.0/16 --nodeport-addresses=primary --conntrack-max-per-core=0 --conntrack-tcp-be-liberal=true --conntrack-udp-timeout=10s\n"},
			"note: hostnameOverride: --hostname-override not in the values: the chart gives each pod its node's name"},
		{"mode: ipvs\niptables: {localhostNodePorts: false}\n", 1, []string{"herald proxy (no flags", "\n{}\n"}, "error: mode: herald programs iptables or nftables, not IPVS"},
		{"mode: iptables\nbogus: 1\n", 2, nil, "bogus: unknown field"},
	} {
		path := filepath.Join(dir, "config.conf")
		if err := os.WriteFile(path, []byte(head+tc.body), 0o644); err != nil {
			t.Fatal(err)
		}
		var out, report bytes.Buffer
		code := migrateKubeProxyMain(context.Background(), migrateOptions{fromKubeProxy: true, files: files{path}}, &out, &report)
		if code != tc.code || !strings.Contains(report.String(), tc.report) {
			t.Errorf("%q: exit %d, want %d; report lacks %q:\n%s", tc.body, code, tc.code, tc.report, report.String())
		}
		for _, w := range tc.out {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%q: output lacks %q:\n%s", tc.body, w, out.String())
			}
		}
	}
}

// TestSpeakerKubeProxyConfig: the chart's speaker arguments with
// proxy.kubeProxyConfig: the speaker's proxy reads kubeadm's file, and the
// speaker keeps its in-cluster connection.
func TestSpeakerKubeProxyConfig(t *testing.T) {
	t.Setenv("NODE_NAME", "node1")
	t.Setenv("NODE_IP", "198.51.100.11")
	t.Setenv("HERALD_CLUSTER_CIDR", "")
	c, err := parseSpeaker([]string{"--config=" + kubeadmDir + "kubeadm-v1.34-config.conf", "--kubeconfig="}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.speaker.Kubeconfig != "" || c.proxy.Kubeconfig != "" || len(c.proxy.ClusterCIDRs) != 1 || c.proxy.ClusterCIDRs[0].String() != "10.244.0.0/16" {
		t.Errorf("speaker kubeconfig %q, proxy %+v", c.speaker.Kubeconfig, c.proxy)
	}
}
