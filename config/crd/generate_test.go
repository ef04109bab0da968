package crd

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestGeneratedFilesAreCurrent regenerates the CRDs and deepcopy code into a
// temporary directory, with the same controller-gen invocation as
// `make generate`, and fails when the committed files differ: the other
// tests here only prove anything about the markers if bases/ matches them.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: not running controller-gen")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	// go test puts its own go first on PATH, so this is the same toolchain.
	cmd := exec.Command("go", "tool", "controller-gen",
		"object", "paths=./config/v1beta1/...", "crd:crdVersions=v1",
		"output:crd:artifacts:config="+filepath.Join(tmp, "crd"),
		"output:object:dir="+filepath.Join(tmp, "obj"))
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}

	compareDir(t, root, filepath.Join("config", "crd", "bases"), filepath.Join(tmp, "crd"))
	compareFile(t, root, filepath.Join("config", "v1beta1", "zz_generated.deepcopy.go"), filepath.Join(tmp, "obj", "zz_generated.deepcopy.go"))
}

// compareDir requires dir (relative to root) to hold exactly the files
// controller-gen wrote to gen, with the same contents.
func compareDir(t *testing.T, root, dir, gen string) {
	t.Helper()
	have, want := fileNames(t, filepath.Join(root, dir)), fileNames(t, gen)
	for _, name := range have {
		if !slices.Contains(want, name) {
			t.Errorf("%s is not generated any more: delete it and run make generate", filepath.Join(dir, name))
		}
	}
	for _, name := range want {
		if !slices.Contains(have, name) {
			t.Errorf("%s is missing: run make generate", filepath.Join(dir, name))
			continue
		}
		compareFile(t, root, filepath.Join(dir, name), filepath.Join(gen, name))
	}
}

func compareFile(t *testing.T, root, rel, gen string) {
	t.Helper()
	have, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Errorf("%v: run make generate", err)
		return
	}
	want, err := os.ReadFile(gen)
	if err != nil {
		t.Fatalf("controller-gen wrote no %s: %v", filepath.Base(gen), err)
	}
	if !bytes.Equal(have, want) {
		t.Errorf("%s is stale: run make generate\n%s", rel, firstDifference(have, want))
	}
}

func fileNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names
}

// firstDifference shows the first line where the committed file and the
// generated one part, which is usually enough to see which marker moved.
func firstDifference(have, want []byte) string {
	h, w := strings.Split(string(have), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < max(len(h), len(w)); i++ {
		var hl, wl string
		if i < len(h) {
			hl = h[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if hl != wl {
			return fmt.Sprintf("  line %d\n  committed: %.200s\n  generated: %.200s", i+1, hl, wl)
		}
	}
	return "  (files differ only in length)"
}
