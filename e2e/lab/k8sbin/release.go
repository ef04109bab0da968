package k8sbin

// Release builds: the multi-call binary from another k8s.io/kubernetes
// release than the one e2e/go.mod pins, for the compatibility runs (make
// compat). The lab module cannot require two releases, so each release
// gets a throwaway module of its own, <cache>/k8s-release/<key>/mod: the
// multi-call main's sources and a go.mod requiring that release, with the
// same `replace` per staging module that e2e/go.mod has for the pin. The
// binary sits next to it, in <cache>/k8s-release/<key>/k8s, with the same
// bin/ symlinks; <cache>/bin stays the pinned release's.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// VersionEnv chooses the k8s.io/kubernetes release of the lab's control
// plane (and of the kubelet, kube-proxy and kubectl built with it) when
// Options.Version is empty. Empty: the pinned release.
const VersionEnv = "HERALD_LAB_K8S_VERSION"

// ReleaseModulePath is the module path of a release build's throwaway
// module.
const ReleaseModulePath = "herald-lab.invalid/k8s-release"

// releaseDir is the directory under the cache holding the release builds.
// It is not under k8s/, whose entries Ensure prunes for every other key
// than the pinned one.
const releaseDir = "k8s-release"

var releaseVersionRE = regexp.MustCompile(`^v1\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)

// ParseRelease checks that v names a Kubernetes release (v1.MINOR.PATCH;
// no pre-releases, whose staging modules carry other versions) and returns
// its minor and patch numbers.
func ParseRelease(v string) (minor, patch int, err error) {
	m := releaseVersionRE.FindStringSubmatch(v)
	if m == nil {
		return 0, 0, fmt.Errorf("kubernetes version %q: want a release such as v1.34.10", v)
	}
	minor, _ = strconv.Atoi(m[1])
	patch, _ = strconv.Atoi(m[2])
	return minor, patch, nil
}

// StagingVersion is the version of the staging modules (k8s.io/api,
// k8s.io/client-go, ...) published with kubernetes release v:
// v1.N.P -> v0.N.P.
func StagingVersion(v string) (string, error) {
	minor, patch, err := ParseRelease(v)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("v0.%d.%d", minor, patch), nil
}

// ReleaseTags are the build tags selecting the multi-call main's variant
// for release v: before v1.34, kubelet's command took no context and
// kubectl had no early -v handling (e2e/cmd/k8s/compat_*.go).
func ReleaseTags(v string) ([]string, error) {
	minor, _, err := ParseRelease(v)
	if err != nil {
		return nil, err
	}
	if minor < 34 {
		return []string{"k8s_pre_1_34"}, nil
	}
	return nil, nil
}

// RenderGoMod is the throwaway module's go.mod for release v, given the
// release's own go.mod: the release's `go` line, a requirement on it, and
// each module it replaces with its ./staging/src copy pinned to the
// staging version instead (those paths exist only in kubernetes'
// repository), or to the version subs names for it (a staging module the
// module proxy does not serve at the release's version; see Substitute).
// Replacements by another module version are kept; any other local path
// is refused, as it cannot be resolved here.
func RenderGoMod(v string, release []byte, subs map[string]string) ([]byte, error) {
	staging, err := StagingVersion(v)
	if err != nil {
		return nil, err
	}
	goLine := ""
	replaces := map[string]string{}
	inBlock := false
	for i, raw := range strings.Split(string(release), "\n") {
		line := strings.TrimSpace(raw)
		if c := strings.Index(line, "//"); c >= 0 {
			line = strings.TrimSpace(line[:c])
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
			continue
		case inBlock && f[0] == ")":
			inBlock = false
			continue
		case !inBlock && f[0] == "go" && len(f) == 2:
			goLine = f[1]
			continue
		case !inBlock && f[0] == "replace" && len(f) == 2 && f[1] == "(":
			inBlock = true
			continue
		case !inBlock && f[0] == "replace":
			f = f[1:]
		case !inBlock:
			continue
		}
		// A replacement: OLD [VERSION] => NEW [VERSION].
		arrow := -1
		for j, w := range f {
			if w == "=>" {
				arrow = j
			}
		}
		if arrow < 1 || arrow > 2 || len(f)-arrow < 2 || len(f)-arrow > 3 {
			return nil, fmt.Errorf("kubernetes %s go.mod line %d: cannot read the replacement %q", v, i+1, line)
		}
		oldPath, newPath := f[0], f[arrow+1]
		switch {
		case len(f)-arrow == 3:
			replaces[oldPath] = newPath + " " + f[arrow+2]
		case newPath == "./staging/src/"+oldPath && subs[oldPath] != "":
			replaces[oldPath] = oldPath + " " + subs[oldPath]
		case newPath == "./staging/src/"+oldPath:
			replaces[oldPath] = oldPath + " " + staging
		default:
			return nil, fmt.Errorf("kubernetes %s go.mod line %d: %s is replaced by the local path %s, which is not a staging module", v, i+1, oldPath, newPath)
		}
	}
	if goLine == "" {
		return nil, fmt.Errorf("kubernetes %s go.mod has no go line", v)
	}
	if len(replaces) == 0 {
		return nil, fmt.Errorf("kubernetes %s go.mod replaces no staging module", v)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "// The lab's multi-call Kubernetes binary from kubernetes %s (herald e2e/lab/k8sbin; throwaway).\n", v)
	fmt.Fprintf(&b, "module %s\n\ngo %s\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n", ReleaseModulePath, goLine, v)
	for _, p := range slices.Sorted(maps.Keys(replaces)) {
		fmt.Fprintf(&b, "\t%s => %s\n", p, replaces[p])
	}
	b.WriteString(")\n")
	return []byte(b.String()), nil
}

// StagingModules are the modules release go.mod replaces with its
// ./staging/src copies, sorted.
func StagingModules(release []byte) []string {
	var mods []string
	for _, line := range strings.Split(string(release), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "replace" {
			f = f[1:]
		}
		if len(f) >= 3 && f[1] == "=>" && f[2] == "./staging/src/"+f[0] {
			mods = append(mods, f[0])
		}
	}
	sort.Strings(mods)
	return mods
}

// SubstituteCandidates are the versions to try, in order, for a staging
// module the module proxy does not serve at version want: those of the
// same minor among served, the nearest older patch first, then newer ones.
// A release's staging modules change little between patches of a minor;
// the exact version is always preferred.
func SubstituteCandidates(want string, served []string) []string {
	var wMinor, wPatch int
	if _, err := fmt.Sscanf(want, "v0.%d.%d", &wMinor, &wPatch); err != nil {
		return nil
	}
	var older, newer []int
	for _, s := range served {
		var minor, patch int
		if n, err := fmt.Sscanf(s, "v0.%d.%d", &minor, &patch); err != nil || n != 2 || minor != wMinor ||
			s != fmt.Sprintf("v0.%d.%d", minor, patch) || patch == wPatch {
			continue
		}
		if patch < wPatch {
			older = append(older, patch)
		} else {
			newer = append(newer, patch)
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(older)))
	sort.Ints(newer)
	var out []string
	for _, p := range append(older, newer...) {
		out = append(out, fmt.Sprintf("v0.%d.%d", wMinor, p))
	}
	return out
}

// ReleaseBuildArgs are BuildArgs with the release's build tags.
func ReleaseBuildArgs(v string, date time.Time, out string) ([]string, error) {
	tags, err := ReleaseTags(v)
	if err != nil {
		return nil, err
	}
	args := BuildArgs(v, date, out)
	if len(tags) > 0 {
		args = append(args[:1:1], append([]string{"-tags", strings.Join(tags, ",")}, args[1:]...)...)
	}
	return args, nil
}

// releaseInfo is what the module proxy says about a kubernetes release.
type releaseInfo struct {
	Version string
	Time    *time.Time
	GoMod   string
}

// lookupRelease fetches the release's go.mod (not its sources) through the
// go command, and its commit time for the build date.
func lookupRelease(ctx context.Context, v, dir string, env []string) (releaseInfo, []byte, error) {
	var ri releaseInfo
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-json", "k8s.io/kubernetes@"+v)
	cmd.Dir, cmd.Env = dir, env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return ri, nil, fmt.Errorf("go list -m k8s.io/kubernetes@%s: %w: %s", v, err, strings.TrimSpace(stderr.String()))
	}
	if err := json.Unmarshal(out, &ri); err != nil {
		return ri, nil, err
	}
	if ri.Version != v || ri.GoMod == "" {
		return ri, nil, fmt.Errorf("go list -m k8s.io/kubernetes@%s answered version %q, go.mod %q", v, ri.Version, ri.GoMod)
	}
	gomod, err := os.ReadFile(ri.GoMod)
	return ri, gomod, err
}

// mainSources are the multi-call main's files (without tests), relative
// to the module directory, sorted.
func mainSources(moduleDir string) ([]string, error) {
	all, err := filepath.Glob(filepath.Join(moduleDir, MainPackage, "*.go"))
	if err != nil {
		return nil, err
	}
	sort.Strings(all)
	var files []string
	for _, m := range all {
		if strings.HasSuffix(m, "_test.go") {
			continue
		}
		rel, err := filepath.Rel(moduleDir, m)
		if err != nil {
			return nil, err
		}
		files = append(files, rel)
	}
	return files, nil
}

// ensureRelease is Ensure for a release other than the pin.
func ensureRelease(ctx context.Context, opts Options, v string) (*Bin, error) {
	env := append(os.Environ(), opts.Env...)
	root := filepath.Join(opts.CacheDir, releaseDir)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	info, releaseMod, err := lookupRelease(ctx, v, root, env)
	if err != nil {
		return nil, err
	}
	// The key is the release's intent, before any substitute: which
	// modules the proxy serves is found out when building.
	gomod, err := RenderGoMod(v, releaseMod, nil)
	if err != nil {
		return nil, err
	}
	mains, err := mainSources(opts.ModuleDir)
	if err != nil {
		return nil, err
	}
	date := time.Unix(0, 0)
	if info.Time != nil {
		date = *info.Time
	}
	// The key covers what the binary is built from: the rendered go.mod,
	// the main's sources and the recipe (with a fixed date, as CacheKey).
	recipeArgs, err := ReleaseBuildArgs(v, time.Unix(0, 0), "k8s")
	if err != nil {
		return nil, err
	}
	sum, err := hashFiles(opts.ModuleDir, fmt.Sprintf("recipe %q %q\ngo.mod %s\n", BuildEnv, recipeArgs, gomod), mains)
	if err != nil {
		return nil, err
	}
	key := v + "-" + sum
	entry := filepath.Join(root, key)
	b := &Bin{Version: v, Key: key, Path: filepath.Join(entry, "k8s"), Dir: filepath.Join(entry, "bin")}

	// One lock per release: a lab of one release does not wait for the
	// build of another.
	unlock, err := lockFile(ctx, filepath.Join(root, ".lock-"+v), opts.Log)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if fi, err := os.Stat(b.Path); err != nil || !fi.Mode().IsRegular() {
		start := time.Now()
		if err := buildRelease(ctx, opts, env, v, date, releaseMod, mains, entry); err != nil {
			return nil, err
		}
		b.Built, b.BuildTime = true, time.Since(start)
		fmt.Fprintf(opts.Log, "k8sbin: built %s (kubernetes %s) in %s\n", b.Path, v, b.BuildTime.Round(100*time.Millisecond))
		pruneRelease(root, v, key, opts.Log)
	} else {
		fmt.Fprintf(opts.Log, "k8sbin: using cached %s (kubernetes %s)\n", b.Path, v)
	}
	if subs, err := os.ReadFile(filepath.Join(entry, substitutesFile)); err == nil && len(subs) > 0 {
		b.Substitutes = strings.Split(strings.TrimSpace(string(subs)), "\n")
		fmt.Fprintf(opts.Log, "k8sbin: kubernetes %s built with staging modules of other patch releases: %s\n", v, strings.Join(b.Substitutes, ", "))
	}
	if err := linkTools(b); err != nil {
		return nil, err
	}
	return b, nil
}

// substitutesFile, in a release's cache entry, lists the staging modules
// built at another version than the release's, one "module vWANT -> vGOT"
// a line.
const substitutesFile = "substitutes.txt"

// buildRelease writes the throwaway module into entry/mod, resolves its
// requirements (go mod tidy, through the module proxy) and builds the
// binary into entry/k8s.
func buildRelease(ctx context.Context, opts Options, env []string, v string, date time.Time, releaseMod []byte, mains []string, entry string) error {
	subs, notes, err := findSubstitutes(ctx, env, filepath.Dir(entry), v, StagingModules(releaseMod), opts.Log)
	if err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintf(opts.Log, "k8sbin: the module proxy does not serve the release's own version of a staging module; built with another patch release of it: %s\n", n)
	}
	if err := os.MkdirAll(entry, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(entry, substitutesFile), []byte(strings.Join(notes, "\n")), 0o644); err != nil {
		return err
	}
	gomod, err := RenderGoMod(v, releaseMod, subs)
	if err != nil {
		return err
	}
	mod := filepath.Join(entry, "mod")
	if err := os.RemoveAll(mod); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(mod, MainPackage), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), gomod, 0o644); err != nil {
		return err
	}
	for _, f := range mains {
		data, err := os.ReadFile(filepath.Join(opts.ModuleDir, f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(mod, f), data, 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(opts.Log, "k8sbin: building the multi-call Kubernetes binary from kubernetes %s (not the pinned release) in the module %s\n", v, mod)
	fmt.Fprintf(opts.Log, "k8sbin: a cold build takes several minutes; later runs use the cache until the release's go.mod, %s or the build flags change\n", MainPackage)
	// tidy resolves every module the release needs (go.sum) as `go build`
	// with -mod=readonly, the default, would not.
	tidy := exec.CommandContext(ctx, "go", "mod", "tidy")
	tidy.Dir, tidy.Env = mod, append(env, BuildEnv...)
	if out, err := tidy.CombinedOutput(); err != nil {
		return fmt.Errorf("go mod tidy in %s: %w\n%s", mod, err, out)
	}
	out := filepath.Join(entry, "k8s")
	args, err := ReleaseBuildArgs(v, date, out+".tmp")
	if err != nil {
		return err
	}
	bopts := opts
	bopts.ModuleDir = mod
	return goWithProgress(ctx, bopts, env, args, "./"+MainPackage, out)
}

// downloadResult is one module of `go mod download -json`'s answer.
type downloadResult struct {
	Path, Version, Error string
}

// download fetches module@version for each of mods into the module cache
// and returns the error of each one that failed (by "path@version").
func download(ctx context.Context, env []string, dir string, mods ...string) (map[string]string, error) {
	cmd := exec.CommandContext(ctx, "go", append([]string{"mod", "download", "-json"}, mods...)...)
	cmd.Dir, cmd.Env = dir, env
	out, runErr := cmd.Output() // non-zero when any failed; each says why
	failed := map[string]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	n := 0
	for dec.More() {
		var r downloadResult
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("go mod download: %w", err)
		}
		n++
		if r.Error != "" {
			failed[r.Path+"@"+r.Version] = r.Error
		}
	}
	if n != len(mods) {
		return nil, fmt.Errorf("go mod download %s: %d answers for %d modules (%v)", strings.Join(mods, " "), n, len(mods), runErr)
	}
	return failed, nil
}

// findSubstitutes checks that the module proxy serves each staging module
// of release v at the release's staging version and, for each it does
// not, picks the first of SubstituteCandidates it serves. It returns the
// substitutes and a note on each; a module with none keeps its version.
func findSubstitutes(ctx context.Context, env []string, dir, v string, mods []string, log io.Writer) (map[string]string, []string, error) {
	staging, err := StagingVersion(v)
	if err != nil {
		return nil, nil, err
	}
	want := make([]string, len(mods))
	for i, m := range mods {
		want[i] = m + "@" + staging
	}
	failed, err := download(ctx, env, dir, want...)
	if err != nil {
		return nil, nil, err
	}
	subs := map[string]string{}
	var notes []string
	for _, m := range mods {
		why, ok := failed[m+"@"+staging]
		if !ok {
			continue
		}
		list := exec.CommandContext(ctx, "go", "list", "-m", "-versions", m)
		list.Dir, list.Env = dir, env
		out, _ := list.Output()
		for _, c := range SubstituteCandidates(staging, strings.Fields(string(out))) {
			if bad, err := download(ctx, env, dir, m+"@"+c); err == nil && len(bad) == 0 {
				subs[m] = c
				break
			}
		}
		if subs[m] == "" {
			// Not every staging module is built into the binary
			// (sample-apiserver is not): go mod tidy fails on this
			// one only if it is.
			fmt.Fprintf(log, "k8sbin: the module proxy serves no version of %s %s: %s\n", m, staging[:strings.LastIndex(staging, ".")], why)
			continue
		}
		notes = append(notes, fmt.Sprintf("%s %s -> %s", m, staging, subs[m]))
	}
	return subs, notes, nil
}

// pruneRelease removes the other builds of release v (older recipes or
// mains), keeping the other releases' builds.
func pruneRelease(root, v, key string, log io.Writer) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || e.Name() == key || !strings.HasPrefix(e.Name(), v+"-") {
			continue
		}
		if err := os.RemoveAll(filepath.Join(root, e.Name())); err == nil {
			fmt.Fprintf(log, "k8sbin: removed the outdated %s\n", filepath.Join(root, e.Name()))
		}
	}
}
