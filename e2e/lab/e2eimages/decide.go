package e2eimages

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sort"
)

// InputsLabel is the label holding the hash of an image's inputs
// (InputHash); an image whose label equals the hash of today's inputs is
// not built again.
const InputsLabel = "io.herald.e2eimages.inputs"

// recipe changes when the way images are built changes in a way the
// Containerfiles do not show (the build flags, the hash's layout).
const recipe = "herald-e2eimages/1"

// InputHash is the hash of everything an image is made of: its
// Containerfile, the SHA-256 of each file of its build context (name →
// hex digest) and the ID of each base image (reference → ID).
func InputHash(containerfile string, files, bases map[string]string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\ncontainerfile %d\n%s", recipe, len(containerfile), containerfile)
	for _, k := range sortedKeys(files) {
		fmt.Fprintf(h, "file %q %s\n", k, files[k])
	}
	for _, k := range sortedKeys(bases) {
		fmt.Fprintf(h, "base %q %s\n", k, bases[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Current is what podman's storage holds under a reference.
type Current struct {
	Exists bool
	ID     string
	Labels map[string]string
}

// Decide tells whether an image must be built, and why: it is missing,
// its inputs label is absent or differs from want, or rebuild asks for
// it. An image without the label (say, the real one from a registry) is
// replaced too: what the tests run must be what this package made.
func Decide(cur Current, want string, rebuild bool) (build bool, why string) {
	got := cur.Labels[InputsLabel]
	switch {
	case !cur.Exists:
		return true, "missing"
	case rebuild:
		return true, "rebuild asked for"
	case got == "":
		return true, "present without the " + InputsLabel + " label (not made here)"
	case got != want:
		return true, fmt.Sprintf("inputs changed (%.12s, now %.12s)", got, want)
	}
	return false, "up to date (" + want[:min(12, len(want))] + ")"
}

// fileDigest is the hex SHA-256 of a file's content.
func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
