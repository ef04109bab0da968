package cluster

import (
	"strings"
	"testing"
)

func TestHelmValues(t *testing.T) {
	vals, err := HelmValues("https://198.51.100.254:42731", ProxyHerald, HeraldNamespace)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(vals, " ")
	for _, want := range []string{"image.repository=ghcr.io/herald-lb/herald", "image.tag=dev", "image.pullPolicy=Never",
		"apiServer.host=198.51.100.254", "apiServer.port=42731", `proxy.clusterCIDR=198.18.0.0/16\,2001:db8:1::/48`, "proxy.conntrack.privilegedInit=true"} {
		if !strings.Contains(got, want) {
			t.Errorf("values lack %s: %s", want, got)
		}
	}
	if strings.Contains(got, "proxy.mode") {
		t.Errorf("herald as the proxy: %s", got)
	}
	vals, _ = HelmValues("https://198.51.100.254:6443", ProxyKubeProxy, HeraldNamespace)
	if !strings.Contains(strings.Join(vals, " "), "proxy.mode=disabled") {
		t.Errorf("with kube-proxy, herald's proxy must be off: %v", vals)
	}
	if _, err := HelmValues("https://nohost", ProxyHerald, HeraldNamespace); err == nil {
		t.Error("a URL without a port: no error")
	}
}
