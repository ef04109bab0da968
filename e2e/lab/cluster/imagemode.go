package cluster

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// imagesDir, in the lab's state directory, caches the unpacked images the
// kubelets run in image mode.
const imagesDir = "images"

// checkImage fails early, with the way out, when image mode would leave
// herald's pods waiting in ErrImagePull.
func checkImage(ctx context.Context, ref string) error {
	for _, tool := range []string{"podman", "runc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("image mode needs %s (hack/bootstrap.sh installs it): %w", tool, err)
		}
	}
	out, err := exec.CommandContext(ctx, "podman", "image", "exists", ref).CombinedOutput()
	if err != nil {
		return fmt.Errorf("image mode runs %s from podman's local storage, which lacks it (%v %s): run `make image` first", ref, err, strings.TrimSpace(string(out)))
	}
	return nil
}
