package k8sbin

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestE2ETestKey(t *testing.T) {
	dir := fakeModule(t)
	if _, _, err := E2ETestKey(dir); err == nil || !strings.Contains(err.Error(), E2ETestPackage) {
		t.Fatalf("no suite sources: got %v, want an error naming %s", err, E2ETestPackage)
	}
	suite := filepath.Join(dir, E2ETestPackage)
	if err := os.MkdirAll(suite, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(suite, "suite_test.go"), []byte("package upstream\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	v, k1, err := E2ETestKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if v != "v1.34.10" || !strings.HasPrefix(k1, "v1.34.10-") {
		t.Fatalf("version %q key %q", v, k1)
	}
	_, comp, _ := CacheKey(dir)
	if comp == k1 {
		t.Fatal("e2e.test and the components share a key")
	}
	// The components do not depend on the suite; e2e.test does, tests
	// included.
	if err := os.WriteFile(filepath.Join(suite, "suite_test.go"), []byte("package upstream\n// changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, k2, _ := E2ETestKey(dir)
	_, comp2, _ := CacheKey(dir)
	if k2 == k1 {
		t.Fatal("changing the suite's test file kept e2e.test's key")
	}
	if comp2 != comp {
		t.Fatal("changing the suite changed the components' key")
	}
}

func TestEnsureE2ETestCacheHit(t *testing.T) {
	dir := fakeModule(t)
	suite := filepath.Join(dir, E2ETestPackage)
	if err := os.MkdirAll(suite, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(suite, "suite_test.go"), []byte("package upstream\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, key, err := E2ETestKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "_cache", "e2e.test", key, "e2e.test")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	got, err := EnsureE2ETest(context.Background(), Options{ModuleDir: dir, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if got.Built || got.Path != bin {
		t.Fatalf("got %+v, want the cached %s", got, bin)
	}
	if !strings.Contains(log.String(), "using cached") {
		t.Fatalf("log %q", log.String())
	}
}
