package cluster

import (
	"strings"
	"testing"
)

func TestResolveK8sVersion(t *testing.T) {
	for _, c := range []struct{ opt, env, want, errHas string }{
		{"", "", "", ""},
		{"v1.31.14", "v1.37.2", "v1.31.14", ""},
		{"", "v1.37.2", "v1.37.2", ""},
		{"1.31", "", "", "cluster.Options.K8sVersion: kubernetes version \"1.31\""},
		{"", "v1.37", "", "HERALD_LAB_K8S_VERSION: kubernetes version \"v1.37\""},
	} {
		got, err := resolveK8sVersion(c.opt, c.env)
		if got != c.want || (err == nil) != (c.errHas == "") || (err != nil && !strings.Contains(err.Error(), c.errHas)) {
			t.Errorf("resolveK8sVersion(%q, %q) = %q, %v; want %q, an error with %q", c.opt, c.env, got, err, c.want, c.errHas)
		}
	}
}
