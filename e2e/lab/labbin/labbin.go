// Package labbin builds the lab's own programs: lab-kubelet and echoserver
// from the e2e module, herald from the repository's root module. They go
// into <e2e>/_cache/lab/bin (git-ignored; see DefaultBinDir for a checkout
// sharing another's cache). Each call runs `go build`,
// which takes a second or two when nothing changed (the Go build cache
// holds the compiled packages), so the binaries always match the sources
// and there is no cache key to get wrong.
package labbin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/herald-lb/herald/e2e/lab/k8sbin"
)

// Program names, which are also the binaries' file names.
const (
	Kubelet    = "lab-kubelet"
	EchoServer = "echoserver"
	Herald     = "herald"
	// Prober probes addresses from a process of its own (lab/prober).
	Prober = "lab-prober"
	// Real nodes' programs: the runc wrapper, and containerd with its
	// runc shim and client from the e2e/containerd module.
	LabRunc    = "lab-runc"
	Containerd = "containerd"
	Shim       = "containerd-shim-runc-v2"
	Ctr        = "ctr"
)

// ContainerdModule is the module directory, relative to the e2e module,
// that pins containerd.
const ContainerdModule = "containerd"

// Target is one program to build.
type Target struct {
	Name string
	// Root selects the repository's root module instead of the e2e module;
	// Module, a module below the e2e module (ContainerdModule).
	Root   bool
	Module string
	// Package is the main package relative to its module, e.g. ./cmd/herald.
	Package string
	// RealNode marks the programs only real nodes run (Options.RealNodes).
	RealNode bool
	// Tags are build tags (containerd's leave out what needs cgo).
	Tags string
}

// containerdTags leave out the snapshotters that need cgo or tools the
// lab does not have; real nodes use overlayfs.
const containerdTags = "no_btrfs no_devmapper no_zfs"

// Targets are the lab's programs.
var Targets = []Target{
	{Name: Kubelet, Package: "./cmd/lab-kubelet"},
	{Name: EchoServer, Package: "./cmd/echoserver"},
	{Name: Herald, Root: true, Package: "./cmd/herald"},
	{Name: Prober, Package: "./cmd/lab-prober"},
	{Name: LabRunc, Package: "./cmd/lab-runc", RealNode: true},
	{Name: Containerd, Module: ContainerdModule, Package: "github.com/containerd/containerd/v2/cmd/containerd", RealNode: true, Tags: containerdTags},
	{Name: Shim, Module: ContainerdModule, Package: "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2", RealNode: true, Tags: containerdTags},
	{Name: Ctr, Module: ContainerdModule, Package: "github.com/containerd/containerd/v2/cmd/ctr", RealNode: true, Tags: containerdTags},
}

// Options say where the modules are and where the binaries go.
type Options struct {
	// ModuleDir is the e2e module. Empty: k8sbin.FindModuleDir(".").
	ModuleDir string
	// BinDir receives the binaries. Empty: <ModuleDir>/_cache/lab/bin.
	BinDir string
	// Log receives one line per build. Nil: discard.
	Log io.Writer
	// Only limits the build to these program names. Empty: all Targets
	// (those of real nodes only with RealNodes).
	Only []string
	// RealNodes builds the real nodes' programs too.
	RealNodes bool
}

// Bins are built programs.
type Bins struct {
	Dir string
	// Paths maps a program name to its binary.
	Paths map[string]string
}

// Path is the binary of the named program ("" if it was not built).
func (b *Bins) Path(name string) string { return b.Paths[name] }

// DefaultBinDir is where the binaries of the e2e module at mod go:
// <mod>/_cache/lab/bin, or, when <mod>/_cache is a symbolic link (a
// second checkout sharing the first one's cache, to build Kubernetes
// once), a directory of this checkout's own beside it. The programs are
// built before a lab waits for the machine's lock, so with one directory
// a lab still waiting would replace the binaries of the lab running,
// whose next pod start would run the other checkout's herald.
func DefaultBinDir(mod string) string {
	bin := filepath.Join(mod, "_cache", "lab", "bin")
	if fi, err := os.Lstat(filepath.Join(mod, "_cache")); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		sum := sha256.Sum256([]byte(filepath.Clean(mod)))
		bin += "-" + hex.EncodeToString(sum[:4])
	}
	return bin
}

// Ensure builds the programs and returns their paths.
func Ensure(ctx context.Context, opts Options) (*Bins, error) {
	if opts.ModuleDir == "" {
		d, err := k8sbin.FindModuleDir(".")
		if err != nil {
			return nil, err
		}
		opts.ModuleDir = d
	}
	mod, err := filepath.Abs(opts.ModuleDir)
	if err != nil {
		return nil, err
	}
	if opts.BinDir == "" {
		opts.BinDir = DefaultBinDir(mod)
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if err := os.MkdirAll(opts.BinDir, 0o755); err != nil {
		return nil, err
	}
	bins := &Bins{Dir: opts.BinDir, Paths: map[string]string{}}
	for _, t := range Targets {
		if len(opts.Only) > 0 && !contains(opts.Only, t.Name) || len(opts.Only) == 0 && t.RealNode && !opts.RealNodes {
			continue
		}
		dir := mod
		switch {
		case t.Root:
			dir = filepath.Dir(mod)
		case t.Module != "":
			dir = filepath.Join(mod, t.Module)
		}
		out := filepath.Join(opts.BinDir, t.Name)
		if err := build(ctx, dir, t, out, opts.Log); err != nil {
			return nil, err
		}
		bins.Paths[t.Name] = out
	}
	return bins, nil
}

// build runs go build into a temporary file and renames it into place, so
// a concurrent user of the old binary is not disturbed.
func build(ctx context.Context, dir string, t Target, out string, log io.Writer) error {
	start := time.Now()
	pkg := t.Package
	tmp := fmt.Sprintf("%s.tmp%d", out, os.Getpid())
	args := []string{"build", "-trimpath", "-o", tmp}
	if t.Tags != "" {
		args = append(args, "-tags", t.Tags)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
	cmd.Dir = dir
	// Static and -trimpath, as herald's image, containerd's release
	// builds and the lab's Kubernetes binaries (k8sbin) are built: none
	// needs cgo, and the packages they share with those builds and with
	// make's are then compiled once, not once per way of building.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("labbin: go build %s in %s: %v\n%s", pkg, dir, err, strings.TrimSpace(buf.String()))
	}
	if err := os.Rename(tmp, out); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	fmt.Fprintf(log, "labbin: built %s in %s\n", out, time.Since(start).Round(time.Millisecond))
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
