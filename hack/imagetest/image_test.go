// Package imagetest checks a built herald image (make image) by running
// it with podman: what `herald version` says against the image's labels,
// the iptables tools the proxy runs, and the proxy's backend detection
// against rules of each kind in a network namespace of its own. It needs
// root and the image, so it runs only when asked:
//
//	HERALD_IMAGE_TEST=1 go test -count=1 -v ./hack/imagetest
//
// HERALD_IMAGE names the image (ghcr.io/herald-lb/herald:dev).
package imagetest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// runFlags are what podman needs on our machines (hack/image.sh).
var runFlags = []string{"--runtime", "runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"}

func image(t *testing.T) string {
	t.Helper()
	if os.Getenv("HERALD_IMAGE_TEST") != "1" {
		t.Skip("set HERALD_IMAGE_TEST=1 to check the built image (make image first; needs root and podman)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("HERALD_IMAGE_TEST=1 needs root (rootful podman, network namespaces)")
	}
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatal("HERALD_IMAGE_TEST=1 needs podman: bash hack/bootstrap.sh")
	}
	img := os.Getenv("HERALD_IMAGE")
	if img == "" {
		img = "ghcr.io/herald-lb/herald:dev"
	}
	if err := exec.Command("podman", "image", "exists", img).Run(); err != nil {
		t.Fatalf("no image %s: make image first", img)
	}
	return img
}

func cmd(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// run runs the image with podman's extra flags, then the image and args.
func run(t *testing.T, podmanFlags []string, img string, args ...string) string {
	t.Helper()
	a := append([]string{"run", "--rm"}, runFlags...)
	a = append(append(a, podmanFlags...), img)
	return cmd(t, "podman", append(a, args...)...)
}

func label(t *testing.T, img, key string) string {
	t.Helper()
	return strings.TrimSpace(cmd(t, "podman", "image", "inspect", "--format", fmt.Sprintf("{{index .Labels %q}}", key), img))
}

func TestVersionMatchesLabels(t *testing.T) {
	img := image(t)
	out := run(t, []string{"--network", "none"}, img, "version")
	t.Logf("herald version:\n%s", out)
	want := fmt.Sprintf("version: %s\nrevision: %s\ngo: go", label(t, img, "org.opencontainers.image.version"),
		label(t, img, "org.opencontainers.image.revision"))
	if !strings.HasPrefix(out, want) {
		t.Errorf("herald version says\n%s\nwant it to start with\n%s", out, want)
	}
	if strings.Contains(out, "revision: unknown") || strings.Contains(out, "revision: \n") {
		t.Errorf("no revision in the image: build it with make image (or --build-arg REVISION=...)")
	}
	for k, v := range map[string]string{"licenses": "Apache-2.0", "source": "https://github.com/herald-lb/herald"} {
		if got := label(t, img, "org.opencontainers.image."+k); got != v {
			t.Errorf("label org.opencontainers.image.%s = %q, want %q", k, got, v)
		}
	}
	t.Logf("size: %s bytes uncompressed", strings.TrimSpace(cmd(t, "podman", "image", "inspect", "--format", "{{.Size}}", img)))
}

func TestIPTablesTools(t *testing.T) {
	img := image(t)
	var tools []string
	for _, ip := range []string{"iptables", "ip6tables"} {
		for _, mode := range []string{"legacy", "nft"} {
			for _, suffix := range []string{"", "-save", "-restore"} {
				tools = append(tools, ip+"-"+mode+suffix)
			}
		}
	}
	script := "set -e; for t in " + strings.Join(tools, " ") + "; do printf '%s: ' $t; $t --version; done"
	out := run(t, []string{"--network", "none", "--entrypoint", "/bin/sh"}, img, "-c", script)
	t.Logf("%s", out)
}

// TestBackendDetection puts herald's chains into a fresh network namespace
// with one backend, then runs `herald proxy --cleanup` from the image in
// that namespace with the speaker's capabilities: it must pick that
// backend (its log says so) and remove the chains.
func TestBackendDetection(t *testing.T) {
	img := image(t)
	for _, mode := range []string{"legacy", "nft"} {
		t.Run(mode, func(t *testing.T) {
			ns := fmt.Sprintf("herald-imgtest-%d-%s", os.Getpid(), mode)
			cmd(t, "ip", "netns", "add", ns)
			t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
			ipt := "iptables-" + mode
			in := func(args ...string) string { return cmd(t, "ip", append([]string{"netns", "exec", ns}, args...)...) }
			in(ipt, "-t", "nat", "-N", "HERALD-SERVICES")
			in(ipt, "-t", "nat", "-A", "HERALD-SERVICES", "-j", "RETURN")
			in(ipt, "-t", "nat", "-I", "PREROUTING", "-j", "HERALD-SERVICES")

			out := run(t, []string{"--network", "ns:/run/netns/" + ns, "--cap-drop", "ALL", "--cap-add", "NET_ADMIN,NET_RAW"},
				img, "proxy", "--cleanup")
			t.Logf("%s", out)
			if !strings.Contains(out, "mode="+mode) {
				t.Errorf("herald picked another backend than %s", mode)
			}
			if left := in(ipt+"-save", "-t", "nat"); strings.Contains(left, "HERALD") {
				t.Errorf("herald's chains left after --cleanup:\n%s", left)
			}
		})
	}
}
