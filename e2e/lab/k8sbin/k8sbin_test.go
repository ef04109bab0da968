package k8sbin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func fakeModule(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	write := func(p, s string) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module "+ModulePath+"\n\ngo 1.26\n\nrequire k8s.io/kubernetes v1.34.10\n")
	write("go.sum", "")
	write(MainPackage+"/main.go", "package main\n")
	return dir
}

func TestCacheKey(t *testing.T) {
	dir := fakeModule(t)
	v, k1, err := CacheKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if v != "v1.34.10" || !strings.HasPrefix(k1, "v1.34.10-") {
		t.Fatalf("version %q key %q", v, k1)
	}
	_, k2, _ := CacheKey(dir)
	if k1 != k2 {
		t.Fatal("key not stable")
	}
	os.WriteFile(filepath.Join(dir, MainPackage, "main_test.go"), []byte("package main\n"), 0o644)
	if _, k, _ := CacheKey(dir); k != k1 {
		t.Error("a test file changed the key")
	}
	os.WriteFile(filepath.Join(dir, MainPackage, "main.go"), []byte("package main\n// x\n"), 0o644)
	if _, k, _ := CacheKey(dir); k == k1 {
		t.Error("changing the main did not change the key")
	}
	os.WriteFile(filepath.Join(dir, "go.sum"), []byte("x"), 0o644)
	_, k3, _ := CacheKey(dir)
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module "+ModulePath+"\nrequire k8s.io/kubernetes v1.34.11\n"), 0o644)
	if v, k, _ := CacheKey(dir); k == k3 || v != "v1.34.11" {
		t.Errorf("changing the pin: version %q key %q", v, k)
	}
}

func TestFindModuleDir(t *testing.T) {
	dir := fakeModule(t)
	if got, err := FindModuleDir(filepath.Join(dir, MainPackage)); err != nil || got != dir {
		t.Errorf("from below: %q %v", got, err)
	}
	root := t.TempDir()
	if err := os.Rename(dir, filepath.Join(root, "e2e")); err != nil {
		t.Fatal(err)
	}
	if got, err := FindModuleDir(root); err != nil || got != filepath.Join(root, "e2e") {
		t.Errorf("from the repository root: %q %v", got, err)
	}
}

func TestEnsureCacheHit(t *testing.T) {
	dir := fakeModule(t)
	_, key, _ := CacheKey(dir)
	entry := filepath.Join(dir, "_cache", "k8s", key)
	os.MkdirAll(entry, 0o755)
	os.WriteFile(filepath.Join(entry, "k8s"), []byte("#!/bin/sh\n"), 0o755)
	var log strings.Builder
	b, err := Ensure(t.Context(), Options{ModuleDir: dir, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if b.Built {
		t.Error("rebuilt although cached")
	}
	for _, c := range Components {
		if target, err := filepath.EvalSymlinks(b.Tool(c)); err != nil || target != b.Path {
			t.Errorf("%s -> %q (%v)", c, target, err)
		}
	}
	if target, err := filepath.EvalSymlinks(filepath.Join(dir, "_cache", "bin", "kubectl")); err != nil || target != b.Path {
		t.Errorf("_cache/bin/kubectl -> %q (%v)", target, err)
	}
}

func TestLDFlags(t *testing.T) {
	f := LDFlags("v1.34.10", time.Date(2026, 7, 22, 22, 5, 6, 0, time.UTC))
	for _, want := range []string{
		"-X k8s.io/component-base/version.gitVersion=v1.34.10",
		"-X k8s.io/client-go/pkg/version.gitMinor=34",
		"-X k8s.io/component-base/version.buildDate=2026-07-22T22:05:06Z",
	} {
		if !strings.Contains(f, want) {
			t.Errorf("ldflags lack %q: %s", want, f)
		}
	}
}

func TestPruneOthers(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"v1.34.9-aaaa", "v1.34.10-bbbb"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.WriteFile(filepath.Join(root, ".lock"), nil, 0o644)
	var log strings.Builder
	pruneOthers(root, "v1.34.10-bbbb", &log)
	if _, err := os.Stat(filepath.Join(root, "v1.34.9-aaaa")); !os.IsNotExist(err) {
		t.Error("old entry kept")
	}
	for _, keep := range []string{"v1.34.10-bbbb", ".lock"} {
		if _, err := os.Stat(filepath.Join(root, keep)); err != nil {
			t.Errorf("%s removed: %v", keep, err)
		}
	}
}
