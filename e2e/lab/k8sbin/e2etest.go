package k8sbin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// E2ETestPackage is the lab module's package that links Kubernetes'
// upstream e2e framework and sig-network tests (e2e/conformance/upstream);
// `go test -c` of it is the e2e.test binary `make conformance` runs.
const E2ETestPackage = "conformance/upstream"

// E2ETestTag is the build tag the suite's test file carries, so that a
// plain `go test ./...` of the lab module leaves it alone.
const E2ETestTag = "e2eupstream"

// E2ETest is a built e2e.test binary.
type E2ETest struct {
	// Version is the pinned k8s.io/kubernetes version the suite comes from.
	Version string
	// Key names the cache entry: <Version>-<hash>.
	Key string
	// Path is the binary.
	Path string
	// Built is true when this call built it, false on a cache hit.
	Built bool
	// BuildTime is how long the build took (zero on a cache hit).
	BuildTime time.Duration
}

// E2ETestArgs are the arguments of the go command that builds e2e.test
// into out, stamped with the release's version like the components.
func E2ETestArgs(version string, date time.Time, out string) []string {
	return []string{"test", "-c", "-v", "-tags=" + E2ETestTag, "-trimpath", "-buildvcs=false",
		"-ldflags", LDFlags(version, date), "-o", out, "./" + E2ETestPackage}
}

// E2ETestKey is the cache entry name of e2e.test: the pinned version and a
// hash of go.mod, go.sum, the suite package's sources (tests included) and
// the build recipe.
func E2ETestKey(moduleDir string) (version, key string, err error) {
	version, err = PinnedVersion(moduleDir)
	if err != nil {
		return "", "", err
	}
	srcs, err := filepath.Glob(filepath.Join(moduleDir, E2ETestPackage, "*.go"))
	if err != nil {
		return "", "", err
	}
	if len(srcs) == 0 {
		return "", "", fmt.Errorf("no Go sources in %s", filepath.Join(moduleDir, E2ETestPackage))
	}
	sort.Strings(srcs)
	files := []string{"go.mod", "go.sum"}
	for _, s := range srcs {
		rel, _ := filepath.Rel(moduleDir, s)
		files = append(files, rel)
	}
	recipe := fmt.Sprintf("e2e.test recipe %q %q\n", BuildEnv, E2ETestArgs(version, time.Unix(0, 0), "e2e.test"))
	sum, err := hashFiles(moduleDir, recipe, files)
	if err != nil {
		return "", "", err
	}
	return version, version + "-" + sum, nil
}

// EnsureE2ETest returns e2e.test for the current pin and suite sources,
// building it first when the cache (<CacheDir>/e2e.test/<key>/) has none;
// other keys' entries are removed after a build. It shares the lock of
// the component build, so two callers never compile at once.
func EnsureE2ETest(ctx context.Context, opts Options) (*E2ETest, error) {
	if err := opts.resolve(); err != nil {
		return nil, err
	}
	version, key, err := E2ETestKey(opts.ModuleDir)
	if err != nil {
		return nil, err
	}
	root := filepath.Join(opts.CacheDir, "e2e.test")
	entry := filepath.Join(root, key)
	t := &E2ETest{Version: version, Key: key, Path: filepath.Join(entry, "e2e.test")}
	if err := os.MkdirAll(filepath.Join(opts.CacheDir, "k8s"), 0o755); err != nil {
		return nil, err
	}
	unlock, err := lockFile(ctx, filepath.Join(opts.CacheDir, "k8s", ".lock"), opts.Log)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if fi, err := os.Stat(t.Path); err == nil && fi.Mode().IsRegular() {
		fmt.Fprintf(opts.Log, "k8sbin: using cached %s (kubernetes %s)\n", t.Path, version)
		return t, nil
	}
	if err := os.MkdirAll(entry, 0o755); err != nil {
		return nil, err
	}
	env := append(os.Environ(), opts.Env...)
	fmt.Fprintf(opts.Log, "k8sbin: building e2e.test (kubernetes %s, package ./%s) into %s; about a minute after the components were built, several minutes cold\n",
		version, E2ETestPackage, t.Path)
	start := time.Now()
	args := E2ETestArgs(version, releaseDate(ctx, opts.ModuleDir, env), t.Path+".tmp")
	if err := goWithProgress(ctx, opts, env, args, "./"+E2ETestPackage, t.Path); err != nil {
		return nil, err
	}
	t.Built, t.BuildTime = true, time.Since(start)
	fmt.Fprintf(opts.Log, "k8sbin: built %s in %s\n", t.Path, t.BuildTime.Round(100*time.Millisecond))
	pruneOthers(root, key, opts.Log)
	return t, nil
}
