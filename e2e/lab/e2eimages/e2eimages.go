// Package e2eimages makes the container images Kubernetes' upstream e2e
// tests run (agnhost, pause, and the few others the sig-network tests
// name) in root's podman storage, under the exact references the pinned
// framework uses (k8s.io/kubernetes/test/utils/image), so the lab
// kubelet's image mode runs them as a node would run the real ones.
// There is no registry: each is built here, from the pinned module's
// programs (agnhost, regression-issue-74839), CoreDNS as the lab's
// cluster DNS builds it, and our own (e2e/cmd/pause) on the Debian base hack/image.sh makes, with the tools of upstream's
// image installed from Debian's packages. What differs from upstream, and
// what is missing, is said per image (Spec.Missing, Spec.Differs) and in
// docs/testing.md.
//
// Each image carries the hash of its inputs (InputsLabel: the
// Containerfile, the digests of the files it is built from, the base
// image's ID); Ensure builds only what is missing or whose inputs
// changed, so a second run takes seconds (the go builds, which the Go
// build cache makes cheap, and the hashing).
//
// Everything with side effects (go, podman, hack/image.sh) is behind
// Runner; the Containerfiles, references and decisions are plain
// functions tested without root.
package e2eimages

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/herald-lb/herald/e2e/lab/filelock"
	"github.com/herald-lb/herald/e2e/lab/k8sbin"
)

// KubernetesModule is the module whose files (agnhost's porter
// certificate) go into the images.
const KubernetesModule = "k8s.io/kubernetes"

// Options say what to build and where.
type Options struct {
	// ModuleDir is the e2e module. Empty: found from the working
	// directory (k8sbin.FindModuleDir).
	ModuleDir string
	// RepoDir is the repository (for hack/image.sh). Empty: ModuleDir's
	// parent.
	RepoDir string
	// CacheDir holds the built binaries and build contexts. Empty:
	// <ModuleDir>/_cache/e2eimages.
	CacheDir string
	// Only limits the work to these image names (Agnhost, Pause, ...).
	// Empty: all.
	Only []string
	// Rebuild builds even the images that are up to date.
	Rebuild bool
	// Refs are the references to build under. Nil: FrameworkRefs().
	Refs Refs
	// Runner does the side effects. Nil: Host{Log: Log}.
	Runner Runner
	// Log receives progress and a line per image. Nil: discard.
	Log io.Writer
}

// Image is one image Ensure made sure of.
type Image struct {
	Name, Ref string
	// ID is the image's ID in podman's storage.
	ID string
	// Inputs is the hash of its inputs (its InputsLabel).
	Inputs string
	// Built tells whether this call built it; Why says why (or why not).
	Built bool
	Why   string
	// Took is the time spent on it, building included.
	Took time.Duration
	// Missing and Differs compare it with upstream's image.
	Missing, Differs []string
}

// Result is what Ensure did.
type Result struct {
	Images []Image
	// LeftOut are the framework's images that were not built.
	LeftOut []LeftOut
	// Took is the whole call's time.
	Took time.Duration
}

// Image returns the image of that name.
func (r *Result) Image(name string) (Image, bool) {
	for _, im := range r.Images {
		if im.Name == name {
			return im, true
		}
	}
	return Image{}, false
}

// Built counts the images this call built.
func (r *Result) Built() int {
	n := 0
	for _, im := range r.Images {
		if im.Built {
			n++
		}
	}
	return n
}

func (o *Options) setDefaults() error {
	if o.ModuleDir == "" {
		d, err := k8sbin.FindModuleDir(".")
		if err != nil {
			return err
		}
		o.ModuleDir = d
	}
	mod, err := filepath.Abs(o.ModuleDir)
	if err != nil {
		return err
	}
	o.ModuleDir = mod
	if o.RepoDir == "" {
		o.RepoDir = filepath.Dir(mod)
	}
	if o.CacheDir == "" {
		o.CacheDir = filepath.Join(mod, "_cache", "e2eimages")
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Refs == nil {
		o.Refs = FrameworkRefs()
	}
	if o.Runner == nil {
		if os.Geteuid() != 0 {
			return errors.New("e2eimages: needs root: the lab kubelet runs images from root's podman storage")
		}
		o.Runner = Host{Log: o.Log}
	}
	return nil
}

// Select returns the specs named in only (all when only is empty), and
// an error naming any name that is no image.
func Select(specs []Spec, only []string) ([]Spec, error) {
	if len(only) == 0 {
		return specs, nil
	}
	var out []Spec
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
		if slices.Contains(only, s.Name) {
			out = append(out, s)
		}
	}
	for _, n := range only {
		if !slices.Contains(names, n) {
			return nil, fmt.Errorf("e2eimages: no image %q (there are %s)", n, strings.Join(names, ", "))
		}
	}
	return out, nil
}

// Ensure makes sure podman's storage holds every selected image, built
// from today's inputs, and says what it did.
func Ensure(ctx context.Context, opts Options) (*Result, error) {
	start := time.Now()
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	specs, err := Select(Specs(opts.Refs), opts.Only)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.CacheDir, 0o755); err != nil {
		return nil, err
	}
	unlock, err := lock(ctx, filepath.Join(opts.CacheDir, ".lock"), opts.Log)
	if err != nil {
		return nil, err
	}
	defer unlock()

	e := &ensurer{opts: opts, r: opts.Runner, digests: map[string]string{}, baseIDs: map[string]string{}}
	res := &Result{LeftOut: LeftOutImages()}
	for _, s := range specs {
		im, err := e.image(ctx, s)
		if err != nil {
			return nil, fmt.Errorf("e2eimages: %s: %w", s.Ref, err)
		}
		res.Images = append(res.Images, im)
	}
	res.Took = time.Since(start)
	fmt.Fprintf(opts.Log, "e2eimages: %d images ready in %s (%d built, %d up to date)\n",
		len(res.Images), res.Took.Round(100*time.Millisecond), res.Built(), len(res.Images)-res.Built())
	return res, nil
}

// ensurer holds what one Ensure call learnt: each context file's digest
// (binaries are built once even when two images use them) and each base
// image's ID.
type ensurer struct {
	opts      Options
	r         Runner
	k8sDir    string
	digests   map[string]string // context file name → digest
	sources   map[string]string // context file name → path
	baseIDs   map[string]string
	baseTried bool
}

// image makes sure of one image.
func (e *ensurer) image(ctx context.Context, s Spec) (Image, error) {
	start := time.Now()
	im := Image{Name: s.Name, Ref: s.Ref, Missing: s.Missing, Differs: s.Differs}
	files, err := e.contextFiles(ctx, s)
	if err != nil {
		return im, err
	}
	bases := map[string]string{}
	for _, b := range s.Bases {
		if bases[b], err = e.base(ctx, b); err != nil {
			return im, err
		}
	}
	im.Inputs = InputHash(s.Containerfile, files, bases)
	cur, err := e.r.Inspect(ctx, s.Ref)
	if err != nil {
		return im, err
	}
	im.Built, im.Why = Decide(cur, im.Inputs, e.opts.Rebuild)
	if !im.Built {
		im.ID, im.Took = cur.ID, time.Since(start)
		fmt.Fprintf(e.opts.Log, "e2eimages: %s: %s, id %.12s\n", s.Ref, im.Why, im.ID)
		return im, nil
	}
	fmt.Fprintf(e.opts.Log, "e2eimages: building %s: %s\n", s.Ref, im.Why)
	dir, err := e.buildContext(s)
	if err != nil {
		return im, err
	}
	buildStart := time.Now()
	if im.ID, err = e.r.Build(ctx, dir, s.Ref, map[string]string{InputsLabel: im.Inputs}); err != nil {
		return im, err
	}
	_ = os.RemoveAll(dir)
	if cur.Exists && cur.ID != im.ID {
		// The replaced image would stay behind untagged; one that is
		// still in use or tagged elsewhere stays, which is fine.
		if err := e.r.Remove(ctx, cur.ID); err != nil {
			fmt.Fprintf(e.opts.Log, "e2eimages: kept the replaced image: %v\n", err)
		}
	}
	im.Took = time.Since(start)
	fmt.Fprintf(e.opts.Log, "e2eimages: built %s in %s (podman build %s), id %.12s\n",
		s.Ref, im.Took.Round(100*time.Millisecond), time.Since(buildStart).Round(100*time.Millisecond), im.ID)
	return im, nil
}

// contextFiles builds the spec's binaries and finds its module files,
// returning each context file's digest.
func (e *ensurer) contextFiles(ctx context.Context, s Spec) (map[string]string, error) {
	if e.sources == nil {
		e.sources = map[string]string{}
	}
	files := map[string]string{}
	for _, b := range s.Binaries {
		if _, ok := e.digests[b.File]; !ok {
			out := filepath.Join(e.opts.CacheDir, "bin", b.File)
			if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
				return nil, err
			}
			t := time.Now()
			if err := e.r.GoBuild(ctx, e.opts.ModuleDir, b, out); err != nil {
				return nil, err
			}
			fmt.Fprintf(e.opts.Log, "e2eimages: go build %s: %s\n", b.Package, time.Since(t).Round(100*time.Millisecond))
			if err := e.addFile(b.File, out); err != nil {
				return nil, err
			}
		}
		files[b.File] = e.digests[b.File]
	}
	for _, p := range s.Programs {
		if _, ok := e.digests[p.File]; !ok {
			path, err := e.r.Program(ctx, e.opts.ModuleDir, p.Name)
			if err != nil {
				return nil, err
			}
			if err := e.addFile(p.File, path); err != nil {
				return nil, err
			}
		}
		files[p.File] = e.digests[p.File]
	}
	for _, f := range s.Files {
		if _, ok := e.digests[f.Name]; !ok {
			if e.k8sDir == "" {
				dir, err := e.r.ModuleDir(ctx, e.opts.ModuleDir, KubernetesModule)
				if err != nil {
					return nil, err
				}
				e.k8sDir = dir
			}
			if err := e.addFile(f.Name, filepath.Join(e.k8sDir, filepath.FromSlash(f.Path))); err != nil {
				return nil, err
			}
		}
		files[f.Name] = e.digests[f.Name]
	}
	return files, nil
}

func (e *ensurer) addFile(name, path string) error {
	d, err := fileDigest(path)
	if err != nil {
		return err
	}
	e.digests[name], e.sources[name] = d, path
	return nil
}

// base returns the ID of a base image, making DebianBase with
// hack/image.sh when it is missing.
func (e *ensurer) base(ctx context.Context, ref string) (string, error) {
	if id, ok := e.baseIDs[ref]; ok {
		return id, nil
	}
	cur, err := e.r.Inspect(ctx, ref)
	if err != nil {
		return "", err
	}
	if !cur.Exists && ref == DebianBase && !e.baseTried {
		e.baseTried = true
		fmt.Fprintf(e.opts.Log, "e2eimages: base %s missing: making it with hack/image.sh (mmdebstrap)\n", ref)
		t := time.Now()
		if err := e.r.MakeBase(ctx, e.opts.RepoDir); err != nil {
			return "", err
		}
		fmt.Fprintf(e.opts.Log, "e2eimages: made %s in %s\n", ref, time.Since(t).Round(100*time.Millisecond))
		if cur, err = e.r.Inspect(ctx, ref); err != nil {
			return "", err
		}
	}
	if !cur.Exists {
		return "", fmt.Errorf("base image %s is not in podman's storage", ref)
	}
	e.baseIDs[ref] = cur.ID
	return cur.ID, nil
}

// buildContext writes the spec's Containerfile and copies its files into
// a fresh directory.
func (e *ensurer) buildContext(s Spec) (string, error) {
	dir := filepath.Join(e.opts.CacheDir, "context", s.Name)
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "Containerfile"), []byte(s.Containerfile), 0o644); err != nil {
		return "", err
	}
	var names []string
	for _, b := range s.Binaries {
		names = append(names, b.File)
	}
	for _, p := range s.Programs {
		names = append(names, p.File)
	}
	for _, f := range s.Files {
		names = append(names, f.Name)
	}
	for _, n := range names {
		if err := copyFile(e.sources[n], filepath.Join(dir, n)); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// copyFile copies src to dst with src's mode bits.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Report writes what Ensure did, an image a line, then how each image
// differs from upstream's and which images were left out.
func (r *Result) Report(w io.Writer) {
	fmt.Fprintf(w, "\n%-62s %-11s %8s  %s\n", "image", "", "took", "id")
	for _, im := range r.Images {
		state := "up to date"
		if im.Built {
			state = "built"
		}
		fmt.Fprintf(w, "%-62s %-11s %8s  %.12s\n", im.Ref, state, im.Took.Round(100*time.Millisecond), im.ID)
	}
	fmt.Fprintf(w, "total %s\n", r.Took.Round(100*time.Millisecond))
	for _, im := range r.Images {
		for _, m := range im.Missing {
			fmt.Fprintf(w, "%s: missing: %s\n", im.Name, m)
		}
		for _, d := range im.Differs {
			fmt.Fprintf(w, "%s: differs: %s\n", im.Name, d)
		}
	}
	for _, l := range r.LeftOut {
		fmt.Fprintf(w, "not built: %s: %s\n", l.Ref, l.Why)
	}
}

// lock takes an exclusive lock on path, so two callers (make e2e-images
// and a test, say) do not build the same images at once; it says so when
// it has to wait.
func lock(ctx context.Context, path string, log io.Writer) (func(), error) {
	return filelock.Acquire(ctx, path, func() { fmt.Fprintf(log, "e2eimages: waiting for another build (lock %s)\n", path) })
}
