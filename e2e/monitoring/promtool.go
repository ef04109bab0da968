package monitoring

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/herald-lb/herald/e2e/lab/filelock"
)

// Promtool returns the path of promtool, taken from Debian's prometheus
// package without installing it (which would start a Prometheus server):
// `apt-get download` fetches the package from the machine's mirror,
// `dpkg-deb -x` unpacks it, and the binary is cached under
// cacheDir/promtool-<package version>/.
func Promtool(ctx context.Context, cacheDir string) (string, error) {
	out, err := exec.CommandContext(ctx, "apt-cache", "policy", "prometheus").Output()
	if err != nil {
		return "", fmt.Errorf("apt-cache policy prometheus: %w", err)
	}
	version := ""
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Candidate:"); ok {
			version = strings.TrimSpace(v)
		}
	}
	if version == "" || version == "(none)" {
		return "", fmt.Errorf("apt knows no prometheus package (apt-cache policy: %q)", out)
	}
	dir := filepath.Join(cacheDir, "promtool-"+strings.NewReplacer(":", "_", "/", "_").Replace(version))
	bin := filepath.Join(dir, "promtool")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", err
	}
	unlock, err := filelock.Acquire(ctx, filepath.Join(cacheDir, ".promtool.lock"), nil)
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(bin); err == nil {
		return bin, nil // another test fetched it meanwhile
	}
	tmp, err := os.MkdirTemp(cacheDir, ".promtool-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	for _, argv := range [][]string{
		{"apt-get", "download", "prometheus=" + version},
		{"sh", "-c", "dpkg-deb -x prometheus_*.deb root"},
	} {
		c := exec.CommandContext(ctx, argv[0], argv[1:]...)
		c.Dir = tmp
		if out, err := c.CombinedOutput(); err != nil {
			return "", fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, out)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(filepath.Join(tmp, "root", "usr", "bin", "promtool"), bin); err != nil {
		return "", fmt.Errorf("the prometheus package has no usr/bin/promtool: %w", err)
	}
	return bin, nil
}
