package e2eimages

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/herald-lb/herald/e2e/lab/clusterdns"
)

// Runner is every side effect Ensure has beyond reading and writing its
// own files: go, podman and hack/image.sh. Tests give it a fake.
type Runner interface {
	// ModuleDir is the directory of module path (as `go list -m`
	// resolves it from the e2e module moduleDir).
	ModuleDir(ctx context.Context, moduleDir, path string) (string, error)
	// GoBuild builds b from the e2e module into out.
	GoBuild(ctx context.Context, moduleDir string, b Binary, out string) error
	// Program makes the named program (CoreDNS) and returns its path.
	Program(ctx context.Context, moduleDir, name string) (string, error)
	// Inspect says what podman's storage holds under ref.
	Inspect(ctx context.Context, ref string) (Current, error)
	// Build builds the Containerfile in dir as ref, with labels, and
	// returns the image ID.
	Build(ctx context.Context, dir, ref string, labels map[string]string) (string, error)
	// Remove removes an image by ID (the one a rebuild replaced).
	Remove(ctx context.Context, id string) error
	// MakeBase makes the Debian base image with the repository's
	// hack/image.sh.
	MakeBase(ctx context.Context, repoDir string) error
}

// Host is the Runner of a real machine: go, and rootful podman with the
// flags hack/image.sh uses. Output of the builds goes to Log.
type Host struct {
	Log io.Writer
}

// PodmanBuildFlags are what podman build needs here (see hack/image.sh):
// no pulls (there is no registry), runc (crun needs CAP_SYS_RESOURCE and
// refuses hybrid cgroups), rlimits no higher than root has, and the
// host's network for apt.
var PodmanBuildFlags = []string{"--pull=never", "--runtime", "runc",
	"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096", "--network", "host"}

func (h Host) log() io.Writer {
	if h.Log == nil {
		return io.Discard
	}
	return h.Log
}

// run runs a command, its output to the log; a failure's error carries
// the output's last lines.
func (h Host) run(cmd *exec.Cmd) error {
	var tail bytes.Buffer
	w := io.MultiWriter(h.log(), &tail)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Run(); err != nil {
		lines := strings.Split(strings.TrimSpace(tail.String()), "\n")
		return fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, strings.Join(lines[max(0, len(lines)-30):], "\n"))
	}
	return nil
}

func (Host) ModuleDir(ctx context.Context, moduleDir, path string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", path)
	cmd.Dir = moduleDir
	out, err := cmd.Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		return "", fmt.Errorf("go list -m %s in %s: %q %w", path, moduleDir, out, err)
	}
	return dir, nil
}

// GoBuild builds into a temporary file renamed into place, statically
// (CGO_ENABLED=0) and with -trimpath, so the binary, and with it the
// image's hash, does not depend on where the checkout is.
func (h Host) GoBuild(ctx context.Context, moduleDir string, b Binary, out string) error {
	tmp := fmt.Sprintf("%s.tmp%d", out, os.Getpid())
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", b.LDFlags, "-o", tmp, b.Package)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if err := h.run(cmd); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, out)
}

// Program builds CoreDNS of the version kubeadm installs with the pinned
// release into <moduleDir>/_cache, where the lab's cluster DNS takes it
// from too (a few minutes the first time, from the Go module proxy).
func (h Host) Program(ctx context.Context, moduleDir, name string) (string, error) {
	if name != CoreDNS {
		return "", fmt.Errorf("no program %q", name)
	}
	version, err := clusterdns.KubeadmVersion(ctx, moduleDir)
	if err != nil {
		return "", err
	}
	logf := func(format string, args ...any) { fmt.Fprintf(h.log(), "e2eimages: "+format+"\n", args...) }
	return clusterdns.EnsureBinary(ctx, filepath.Join(moduleDir, "_cache"), version, logf)
}

func (Host) Inspect(ctx context.Context, ref string) (Current, error) {
	if err := exec.CommandContext(ctx, "podman", "image", "exists", ref).Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 {
			return Current{}, nil
		}
		return Current{}, fmt.Errorf("podman image exists %s: %w", ref, err)
	}
	out, err := exec.CommandContext(ctx, "podman", "image", "inspect", "--format", "json", ref).Output()
	if err != nil {
		return Current{}, fmt.Errorf("podman image inspect %s: %w", ref, err)
	}
	return parseInspect(out)
}

// parseInspect reads `podman image inspect --format json` of one image.
func parseInspect(out []byte) (Current, error) {
	var list []struct {
		ID     string `json:"Id"`
		Labels map[string]string
	}
	if err := json.Unmarshal(out, &list); err != nil {
		return Current{}, fmt.Errorf("podman image inspect: %w", err)
	}
	if len(list) != 1 || list[0].ID == "" {
		return Current{}, fmt.Errorf("podman image inspect: want one image, got %s", out)
	}
	return Current{Exists: true, ID: list[0].ID, Labels: list[0].Labels}, nil
}

func (h Host) Build(ctx context.Context, dir, ref string, labels map[string]string) (string, error) {
	iid := dir + ".iid" // outside the build context
	defer os.Remove(iid)
	args := append([]string{"build"}, PodmanBuildFlags...)
	for _, k := range sortedKeys(labels) {
		args = append(args, "--label", k+"="+labels[k])
	}
	args = append(args, "--iidfile", iid, "--tag", ref, "--file", filepath.Join(dir, "Containerfile"), dir)
	fmt.Fprintf(h.log(), "podman %s\n", strings.Join(args, " "))
	if err := h.run(exec.CommandContext(ctx, "podman", args...)); err != nil {
		return "", err
	}
	id, err := os.ReadFile(iid)
	if err != nil {
		return "", err
	}
	return strings.TrimPrefix(strings.TrimSpace(string(id)), "sha256:"), nil
}

func (Host) Remove(ctx context.Context, id string) error {
	out, err := exec.CommandContext(ctx, "podman", "image", "rm", id).CombinedOutput()
	if err != nil {
		return fmt.Errorf("podman image rm %s: %v: %s", id, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// MakeBase runs hack/image.sh in its base-only mode: it makes
// DebianBase from Debian packages (mmdebstrap) if it is missing.
func (h Host) MakeBase(ctx context.Context, repoDir string) error {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(repoDir, "hack", "image.sh"))
	cmd.Env = append(os.Environ(), "HERALD_IMAGE_BASE_ONLY=debian")
	fmt.Fprintf(h.log(), "HERALD_IMAGE_BASE_ONLY=debian bash %s\n", cmd.Args[1])
	return h.run(cmd)
}
