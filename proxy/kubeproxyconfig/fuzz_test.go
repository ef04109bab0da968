package kubeproxyconfig

import (
	"os"
	"testing"
)

// FuzzParse: no input panics the parser or the translation, whatever the
// YAML (go test -fuzz=FuzzParse ./proxy/kubeproxyconfig).
func FuzzParse(f *testing.F) {
	for _, p := range []string{"testdata/kubeadm-v1.34-config.conf", "testdata/kubeadm-v1.34-configmap.yaml"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{"", "a: [", "- 1", "conntrack: {maxPerCore: 1e99}", "apiVersion: v1\nkind: ConfigMap\ndata: {config.conf: '{'}",
		"&a [*a, *a]", "logging: {flushFrequency: 1.5, options: {json: {infoBufferSize: 1e400}}}", "featureGates: {a: null}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if c, err := Parse("fuzz", data); err == nil {
			_ = c.Translate()
		}
		if c, _, err := ParseFileOrConfigMap("fuzz", data); err == nil {
			_ = c.Translate()
		}
	})
}
