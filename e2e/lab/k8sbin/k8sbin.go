// Package k8sbin builds and caches the lab's multi-call Kubernetes binary
// (e2e/cmd/k8s: kube-apiserver, kube-controller-manager, kube-scheduler,
// kube-proxy, kubelet, kubectl).
//
// The binary lives under <e2e>/_cache/k8s/<key>/, where key is the pinned
// k8s.io/kubernetes version plus a hash of e2e/go.mod, e2e/go.sum, the
// multi-call main's sources and the `go build` flags. It is built only when
// no binary exists for the current key, so changing the pin (or the main,
// or how it is built) rebuilds it and nothing else does. Next to it, bin/ holds one symlink per component name, and
// <e2e>/_cache/bin points at the current key's bin/.
package k8sbin

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/herald-lb/herald/e2e/lab/filelock"
)

// ModulePath is the module path of the lab's Go module.
const ModulePath = "github.com/herald-lb/herald/e2e"

// MainPackage is the multi-call main, relative to the module directory.
const MainPackage = "cmd/k8s"

// Components are the names the multi-call binary answers to; each gets a
// symlink in the cache's bin directory.
var Components = []string{
	"kube-apiserver",
	"kube-controller-manager",
	"kube-scheduler",
	"kube-proxy",
	"kubelet",
	"kubectl",
}

// Options say where the lab module is and where to report progress.
type Options struct {
	// ModuleDir is the e2e module's directory. Empty: FindModuleDir(".").
	ModuleDir string
	// CacheDir holds the built binaries. Empty: <ModuleDir>/_cache.
	CacheDir string
	// Log receives progress lines. Nil: os.Stderr.
	Log io.Writer
	// Env is added to the environment of `go build` (e.g. GOCACHE=...).
	Env []string
	// ProgressEvery is how often a progress line is printed while
	// building. Zero: 15s.
	ProgressEvery time.Duration
	// Version is the k8s.io/kubernetes release to build (release.go).
	// Empty or the pinned one: the pinned release, from the lab module.
	Version string
}

// Bin is a built multi-call binary.
type Bin struct {
	// Version is the pinned k8s.io/kubernetes version, e.g. v1.34.10.
	Version string
	// Key names the cache entry: <Version>-<hash>.
	Key string
	// Path is the multi-call binary itself.
	Path string
	// Dir holds a symlink per component name (kube-apiserver, kubectl, ...).
	Dir string
	// Built is true when this call built the binary, false on a cache hit.
	Built bool
	// BuildTime is how long the build took (zero on a cache hit).
	BuildTime time.Duration
	// Substitutes are the staging modules of a release build
	// (Options.Version) taken from another patch release of its minor, as
	// "module vWANT -> vGOT", because the module proxy does not serve the
	// release's own (release.go).
	Substitutes []string
}

// Tool is the path of the named component's symlink, e.g. Tool("kubectl").
func (b *Bin) Tool(name string) string { return filepath.Join(b.Dir, name) }

// FindModuleDir walks up from dir to find the lab module: a directory whose
// go.mod declares ModulePath, or one with such an e2e/ subdirectory (so it
// works from the repository root too).
func FindModuleDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := abs; ; d = filepath.Dir(d) {
		for _, cand := range []string{d, filepath.Join(d, "e2e")} {
			if modulePathOf(filepath.Join(cand, "go.mod")) == ModulePath {
				return cand, nil
			}
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no %s module (e2e/go.mod) found above %s", ModulePath, abs)
		}
	}
}

func modulePathOf(gomod string) string {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

// PinnedVersion reads the k8s.io/kubernetes version required by the lab
// module's go.mod.
func PinnedVersion(moduleDir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(moduleDir, "go.mod"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "require" {
			f = f[1:]
		}
		if len(f) >= 2 && f[0] == "k8s.io/kubernetes" && strings.HasPrefix(f[1], "v") {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("%s/go.mod does not require k8s.io/kubernetes", moduleDir)
}

// CacheKey is the cache entry name for the module at moduleDir:
// <kubernetes version>-<first 16 hex of sha256(go.mod, go.sum, main
// sources, build flags)>.
func CacheKey(moduleDir string) (version, key string, err error) {
	version, err = PinnedVersion(moduleDir)
	if err != nil {
		return "", "", err
	}
	mains, err := mainSources(moduleDir)
	if err != nil {
		return "", "", err
	}
	files := append([]string{"go.mod", "go.sum"}, mains...)
	// The build recipe: how the binary is built is as much part of it as
	// the sources.
	recipe := fmt.Sprintf("recipe %q %q\n", BuildEnv, BuildArgs(version, time.Unix(0, 0), "k8s"))
	sum, err := hashFiles(moduleDir, recipe, files)
	if err != nil {
		return "", "", err
	}
	return version, version + "-" + sum, nil
}

// hashFiles is the first 16 hex digits of sha256 over recipe and the
// named files of moduleDir (names and contents).
func hashFiles(moduleDir, recipe string, files []string) (string, error) {
	h := sha256.New()
	h.Write([]byte(recipe))
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(moduleDir, f))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", filepath.ToSlash(f), len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// resolve fills in the defaults: the log, the module found from the
// working directory, its _cache; both directories made absolute, so that
// the binaries can be run from any directory.
func (opts *Options) resolve() error {
	if opts.Log == nil {
		opts.Log = os.Stderr
	}
	if opts.ModuleDir == "" {
		d, err := FindModuleDir(".")
		if err != nil {
			return err
		}
		opts.ModuleDir = d
	}
	if opts.CacheDir == "" {
		opts.CacheDir = filepath.Join(opts.ModuleDir, "_cache")
	}
	var err error
	if opts.ModuleDir, err = filepath.Abs(opts.ModuleDir); err != nil {
		return err
	}
	opts.CacheDir, err = filepath.Abs(opts.CacheDir)
	return err
}

// Ensure returns the multi-call binary for the current pin (or for
// Options.Version), building it first if the cache has none. Concurrent callers (also in other
// processes) serialise on a lock file, so only one of them builds.
func Ensure(ctx context.Context, opts Options) (*Bin, error) {
	if err := opts.resolve(); err != nil {
		return nil, err
	}
	version, key, err := CacheKey(opts.ModuleDir)
	if err != nil {
		return nil, err
	}
	if opts.Version != "" && opts.Version != version {
		if _, _, err := ParseRelease(opts.Version); err != nil {
			return nil, err
		}
		return ensureRelease(ctx, opts, opts.Version)
	}
	root := filepath.Join(opts.CacheDir, "k8s")
	entry := filepath.Join(root, key)
	b := &Bin{
		Version: version,
		Key:     key,
		Path:    filepath.Join(entry, "k8s"),
		Dir:     filepath.Join(entry, "bin"),
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	unlock, err := lockFile(ctx, filepath.Join(root, ".lock"), opts.Log)
	if err != nil {
		return nil, err
	}
	defer unlock()

	if fi, err := os.Stat(b.Path); err != nil || !fi.Mode().IsRegular() {
		if err := os.MkdirAll(entry, 0o755); err != nil {
			return nil, err
		}
		start := time.Now()
		if err := build(ctx, opts, version, b.Path); err != nil {
			return nil, err
		}
		b.Built, b.BuildTime = true, time.Since(start)
		fmt.Fprintf(opts.Log, "k8sbin: built %s (kubernetes %s) in %s\n", b.Path, version, b.BuildTime.Round(100*time.Millisecond))
		pruneOthers(root, key, opts.Log)
	}
	if err := linkTools(b); err != nil {
		return nil, err
	}
	if err := replaceSymlink(filepath.Join("k8s", key, "bin"), filepath.Join(opts.CacheDir, "bin")); err != nil {
		return nil, err
	}
	if !b.Built {
		fmt.Fprintf(opts.Log, "k8sbin: using cached %s (kubernetes %s)\n", b.Path, version)
	}
	return b, nil
}

// pruneOthers removes the cache entries of other keys (older pins), about
// 130 MB each. Processes still running an old binary are unaffected.
func pruneOthers(root, key string, log io.Writer) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || e.Name() == key || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if err := os.RemoveAll(filepath.Join(root, e.Name())); err == nil {
			fmt.Fprintf(log, "k8sbin: removed the outdated %s\n", filepath.Join(root, e.Name()))
		}
	}
}

// linkTools (re)creates bin/<component> -> ../k8s for every component.
func linkTools(b *Bin) error {
	if err := os.MkdirAll(b.Dir, 0o755); err != nil {
		return err
	}
	for _, name := range Components {
		if err := replaceSymlink(filepath.Join("..", "k8s"), filepath.Join(b.Dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// replaceSymlink atomically makes link point at target.
func replaceSymlink(target, link string) error {
	if cur, err := os.Readlink(link); err == nil && cur == target {
		return nil
	}
	tmp := fmt.Sprintf("%s.tmp%d", link, os.Getpid())
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, link)
}

// lockFile takes an exclusive lock on path, telling the user when it has
// to wait for another builder.
func lockFile(ctx context.Context, path string, log io.Writer) (func(), error) {
	return filelock.Acquire(ctx, path, func() { fmt.Fprintf(log, "k8sbin: waiting for another build (lock %s)\n", path) })
}

// moduleInfo is what `go list -m -json` says about the kubernetes module.
type moduleInfo struct {
	Version string
	Time    *time.Time
}

// LDFlags are the linker flags that stamp the component version like the
// upstream build does (hack/lib/version.sh), so /version, `kubectl version`
// and version skew checks see the real release instead of v0.0.0-master.
// The build date is the release's commit time, which keeps the build
// reproducible.
func LDFlags(version string, date time.Time) string {
	major, minor := "", ""
	if parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3); len(parts) >= 2 {
		major, minor = parts[0], parts[1]
	}
	vars := []struct{ k, v string }{
		{"gitVersion", version},
		{"gitMajor", major},
		{"gitMinor", minor},
		{"gitTreeState", "clean"},
		{"buildDate", date.UTC().Format("2006-01-02T15:04:05Z")},
	}
	flags := []string{"-s", "-w"}
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		for _, kv := range vars {
			flags = append(flags, fmt.Sprintf("-X %s.%s=%s", pkg, kv.k, kv.v))
		}
	}
	return strings.Join(flags, " ")
}

// BuildEnv is added to the environment of `go build` (after Options.Env,
// so it wins): static binaries, as upstream builds them.
var BuildEnv = []string{"CGO_ENABLED=0"}

// BuildArgs are the arguments of `go build` (after "go"), run in the
// module directory. They are part of the cache key (with a fixed date),
// so changing how the binary is built rebuilds it.
func BuildArgs(version string, date time.Time, out string) []string {
	return []string{"build", "-v", "-trimpath", "-buildvcs=false",
		"-ldflags", LDFlags(version, date), "-o", out, "./" + MainPackage}
}

func build(ctx context.Context, opts Options, version, out string) error {
	env := append(os.Environ(), opts.Env...)
	log := opts.Log
	fmt.Fprintf(log, "k8sbin: building the multi-call Kubernetes binary (kubernetes %s: %s) into %s\n",
		version, strings.Join(Components, ", "), out)
	fmt.Fprintf(log, "k8sbin: a cold build takes several minutes; later runs use the cache until e2e/go.mod, go.sum, %s or the build flags change\n", MainPackage)
	tmp := out + ".tmp"
	args := BuildArgs(version, releaseDate(ctx, opts.ModuleDir, env), tmp)
	return goWithProgress(ctx, opts, env, args, "./"+MainPackage, out)
}

// releaseDate is the pinned kubernetes module's release time (the build
// date the binaries report), or the epoch when go list cannot tell.
func releaseDate(ctx context.Context, moduleDir string, env []string) time.Time {
	list := exec.CommandContext(ctx, "go", "list", "-m", "-json", "k8s.io/kubernetes")
	list.Dir, list.Env = moduleDir, env
	if js, err := list.Output(); err == nil {
		var mi moduleInfo
		if json.Unmarshal(js, &mi) == nil && mi.Time != nil {
			return *mi.Time
		}
	}
	return time.Unix(0, 0)
}

// goWithProgress runs the go command args (a -v build of pkg whose -o is
// out+".tmp") in the module directory, printing a progress line every
// Options.ProgressEvery, and renames the result to out once it succeeded.
func goWithProgress(ctx context.Context, opts Options, env, args []string, pkg, out string) error {
	log := opts.Log
	// How many packages pkg depends on, for the progress lines.
	total := 0
	deps := exec.CommandContext(ctx, "go", "list", "-deps", "-test", pkg)
	deps.Dir, deps.Env = opts.ModuleDir, env
	if o, err := deps.Output(); err == nil {
		total = bytes.Count(o, []byte("\n"))
	}

	tmp := out + ".tmp"
	_ = os.Remove(tmp)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir, cmd.Env = opts.ModuleDir, append(env, BuildEnv...)
	// go build -v prints each package it compiles on stderr; count them for
	// progress and keep everything else (errors) for the failure message.
	pr, pw := io.Pipe()
	cmd.Stderr, cmd.Stdout = pw, pw
	var (
		mu       sync.Mutex
		compiled int
		last     string
		other    []string
	)
	scanDone := make(chan struct{})
	go func() {
		defer close(scanDone)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			line := sc.Text()
			mu.Lock()
			if isPackagePath(line) {
				compiled++
				last = line
			} else {
				other = append(other, line)
			}
			mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		pw.Close()
		return fmt.Errorf("go build: %w", err)
	}
	every := opts.ProgressEvery
	if every <= 0 {
		every = 15 * time.Second
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	tick := time.NewTicker(every)
	defer tick.Stop()
	var err error
loop:
	for {
		select {
		case err = <-waitErr:
			break loop
		case <-tick.C:
			mu.Lock()
			n, l := compiled, last
			mu.Unlock()
			of := ""
			if total > 0 {
				of = fmt.Sprintf(" of %d dependencies", total)
			}
			fmt.Fprintf(log, "k8sbin: %s elapsed, %d packages compiled%s (latest %s)\n",
				time.Since(start).Round(time.Second), n, of, l)
		}
	}
	pw.Close()
	<-scanDone
	if err != nil {
		_ = os.Remove(tmp)
		mu.Lock()
		defer mu.Unlock()
		tail := other
		if len(tail) > 60 {
			tail = tail[len(tail)-60:]
		}
		return fmt.Errorf("go %s %s in %s: %w\n%s", args[0], pkg, opts.ModuleDir, err, strings.Join(tail, "\n"))
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	mu.Lock()
	fmt.Fprintf(log, "k8sbin: compiled %d packages, linked in %s total\n", compiled, time.Since(start).Round(time.Second))
	mu.Unlock()
	return nil
}

// isPackagePath tells a `go build -v` progress line (an import path) from
// compiler output.
func isPackagePath(line string) bool {
	return line != "" && !strings.ContainsAny(line, " \t:")
}
