package kubelet

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	v1 "k8s.io/api/core/v1"
)

// minShares is the least cgroup v1 cpu.shares the kernel takes, and what
// a real kubelet gives BestEffort pods (their QoS cgroup).
const minShares = 2

// CPUShares is the cgroup v1 cpu.shares a real kubelet's container gets
// from its CPU request: millicores x 1024 / 1000, at least minShares
// (no request: BestEffort's minShares). The lab kubelet gives them so
// that, on a busy machine, a container with a request (herald's speaker,
// 200m) weighs over BestEffort ones (the echo pods) as it would on a
// node; without them, binary mode's programs competed thread by thread
// with every other process (docs/testing.md, the churn soak).
func CPUShares(c *v1.Container) uint64 {
	q, ok := c.Resources.Requests[v1.ResourceCPU]
	if !ok {
		q, ok = c.Resources.Limits[v1.ResourceCPU] // the API's defaulting, for a spec that skipped it
	}
	if !ok {
		return minShares
	}
	return max(minShares, uint64(q.MilliValue())*1024/1000)
}

// NoCPUCgroupsEnv set to 1 in the lab kubelet's environment leaves every
// binary-mode container in the kubelet's own cpu cgroup, as the lab was
// before it gave them their shares: an experiment's way back to the
// speakers a busy machine starves (docs/testing.md, the resets found).
const NoCPUCgroupsEnv = "HERALD_LAB_NO_CPU_CGROUPS"

// placeInCgroup moves pid (a binary-mode container's program) into a cgroup
// of its own, path below the cpu hierarchy, with shares, as runc does for
// an image-mode container. It returns the cgroup's directory, to remove
// once the program has exited. Without a cgroup v1 cpu hierarchy, or with
// NoCPUCgroupsEnv, it does nothing and returns "".
func placeInCgroup(path string, pid int, shares uint64) (string, error) {
	cpu := filepath.Join(CgroupMount, "cpu")
	if os.Getenv(NoCPUCgroupsEnv) == "1" {
		return "", nil
	}
	if _, err := os.Stat(filepath.Join(cpu, "cpu.shares")); err != nil {
		return "", nil
	}
	weighCgroupRoot()
	dir := filepath.Join(cpu, path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "cpu.shares"), []byte(strconv.FormatUint(shares, 10)), 0o644); err != nil {
		return dir, fmt.Errorf("cgroup %s: cpu.shares: %w", dir, err)
	}
	// cgroup.procs moves the whole process, every thread of it.
	// ESRCH: it has exited already, nothing to move.
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil && !errors.Is(err, syscall.ESRCH) {
		return dir, fmt.Errorf("cgroup %s: moving pid %d: %w", dir, pid, err)
	}
	return dir, nil
}
