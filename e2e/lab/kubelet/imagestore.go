package kubelet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// imageConfig is what image mode needs of an image: its ID and the parts
// of its configuration that decide how a container starts.
type imageConfig struct {
	ID         string
	Entrypoint []string
	Cmd        []string
	Env        []string
	User       string
	WorkingDir string
}

// imageStore reads images from podman's local storage (there is no
// registry in the lab: `make image` builds herald's there) and keeps an
// unpacked copy of each image ID's filesystem in dir, shared by the
// lab's kubelets. The copies are only ever a read-only overlay layer.
type imageStore struct {
	podman string
	dir    string
}

// inspect reads an image's configuration; an image podman does not hold
// is an ErrImagePull, as on a node that may not pull.
func (s imageStore) inspect(ctx context.Context, ref string) (imageConfig, error) {
	cmd := exec.CommandContext(ctx, s.podman, "image", "inspect", "--format", "json", ref)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return imageConfig{}, &containerError{Reason: ReasonErrImagePull, Message: fmt.Sprintf(
			"image %q is not in podman's local storage (image mode runs only local images; `make image` builds herald's): %s",
			ref, strings.TrimSpace(stderr.String()))}
	}
	return parseImageInspect(out)
}

// parseImageInspect reads `podman image inspect --format json` output.
func parseImageInspect(out []byte) (imageConfig, error) {
	var list []struct {
		ID     string `json:"Id"`
		Config struct {
			Entrypoint []string
			Cmd        []string
			Env        []string
			User       string
			WorkingDir string
		}
	}
	if err := json.Unmarshal(out, &list); err != nil {
		return imageConfig{}, fmt.Errorf("podman image inspect: %w", err)
	}
	if len(list) != 1 {
		return imageConfig{}, fmt.Errorf("podman image inspect: %d images", len(list))
	}
	// The ID names a directory of the cache.
	if id := list[0].ID; id == "" || strings.ContainsAny(id, "/.") {
		return imageConfig{}, fmt.Errorf("podman image inspect: image ID %q", id)
	}
	c := list[0].Config
	return imageConfig{ID: list[0].ID, Entrypoint: c.Entrypoint, Cmd: c.Cmd, Env: c.Env, User: c.User, WorkingDir: c.WorkingDir}, nil
}

// rootfs returns the directory holding the image's filesystem, copying it
// out of podman's storage the first time (`podman image mount`, `cp -a`
// for owners, modes, links and file capabilities, then unmount). The
// copy is made under a lock and renamed into place, so kubelets starting
// together copy once and never see half an image.
func (s imageStore) rootfs(ctx context.Context, img imageConfig) (string, error) {
	dest := filepath.Join(s.dir, img.ID)
	if _, err := os.Stat(dest); err == nil {
		return dest, nil
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(s.dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return "", err
	}
	if _, err := os.Stat(dest); err == nil {
		return dest, nil // another kubelet copied it meanwhile
	}
	mounted, err := exec.CommandContext(ctx, s.podman, "image", "mount", img.ID).Output()
	if err != nil {
		return "", fmt.Errorf("podman image mount %s: %w", img.ID, exitDetail(err))
	}
	defer func() { _ = exec.Command(s.podman, "image", "unmount", img.ID).Run() }()
	tmp := dest + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	src := strings.TrimSpace(string(mounted))
	if out, err := exec.CommandContext(ctx, "cp", "-a", src+"/.", tmp).CombinedOutput(); err != nil {
		_ = os.RemoveAll(tmp)
		return "", fmt.Errorf("copying image %s: %v: %s", img.ID, err, out)
	}
	if err := os.Rename(tmp, dest); err != nil {
		return "", err
	}
	return dest, nil
}

// exitDetail adds a failed command's stderr to its error.
func exitDetail(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return err
}
