package kubeclient

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const twoContexts = `apiVersion: v1
kind: Config
clusters:
- name: a
  cluster: {server: "https://192.0.2.1:6443"}
- name: b
  cluster: {server: "https://192.0.2.2:6443"}
users:
- name: u
  user: {token: t}
contexts:
- name: ctx-a
  context: {cluster: a, user: u}
- name: ctx-b
  context: {cluster: b, user: u}
current-context: ctx-a
`

func TestContextSelectsCluster(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(twoContexts), 0o600); err != nil {
		t.Fatal(err)
	}
	for ctx, want := range map[string]string{"": "https://192.0.2.1:6443", "ctx-b": "https://192.0.2.2:6443"} {
		rc, err := Flags{Kubeconfig: path, Context: ctx}.Config()
		if err != nil {
			t.Fatalf("context %q: %v", ctx, err)
		}
		if rc.Host != want {
			t.Errorf("context %q: host %s, want %s", ctx, rc.Host, want)
		}
	}
	if _, err := (Flags{Kubeconfig: path, Context: "nope"}).Config(); err == nil || !strings.Contains(err.Error(), "--context") {
		t.Errorf("unknown context: %v", err)
	}
}
