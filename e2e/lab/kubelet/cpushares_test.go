package kubelet

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestCPUShares(t *testing.T) {
	with := func(req, lim string) *v1.Container {
		c := &v1.Container{Resources: v1.ResourceRequirements{Requests: v1.ResourceList{}, Limits: v1.ResourceList{}}}
		if req != "" {
			c.Resources.Requests[v1.ResourceCPU] = resource.MustParse(req)
		}
		if lim != "" {
			c.Resources.Limits[v1.ResourceCPU] = resource.MustParse(lim)
		}
		return c
	}
	for _, c := range []struct {
		c    *v1.Container
		want uint64
	}{
		{with("", ""), 2},         // BestEffort
		{with("200m", ""), 204},   // herald's speaker
		{with("100m", "1"), 102},  // the request, not the limit
		{with("", "500m"), 512},   // a limit alone is the request
		{with("1m", ""), 2},       // never below the kernel's least
		{with("2", ""), 2048},     // two CPUs
		{with("1500m", ""), 1536}, // kubelet's MilliCPUToShares
	} {
		if got := CPUShares(c.c); got != c.want {
			t.Errorf("requests %v limits %v: %d shares, want %d", c.c.Resources.Requests, c.c.Resources.Limits, got, c.want)
		}
	}
}

// TestPlaceInCgroup (root, cgroup v1's cpu hierarchy) moves a running
// program into its cgroup with its weight, and the cgroup goes once the
// program has.
func TestPlaceInCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes a cgroup")
	}
	if _, err := os.Stat(filepath.Join(CgroupMount, "cpu", "cpu.shares")); err != nil {
		t.Skip("no cgroup v1 cpu hierarchy here")
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	path := cgroupParent("hlkut-cg") + "/c-1"
	t.Cleanup(func() { _ = removeCgroups(cgroupParent("hlkut-cg")) })
	dir, err := placeInCgroup(path, cmd.Process.Pid, 204)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "cpu.shares")); strings.TrimSpace(string(b)) != "204" {
		t.Errorf("cpu.shares %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs")); strings.TrimSpace(string(b)) != strconv.Itoa(cmd.Process.Pid) {
		t.Errorf("cgroup.procs %q, want the program's pid %d", b, cmd.Process.Pid)
	}
	if b, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/cgroup"); !strings.Contains(string(b), path) {
		t.Errorf("the program's cgroups:\n%s", b)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err := os.Remove(dir); err != nil {
		t.Errorf("removing the emptied cgroup: %v", err)
	}
}
