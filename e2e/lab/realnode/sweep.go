package realnode

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CgroupRoot is where cgroup v1 hierarchies are mounted.
const CgroupRoot = "/sys/fs/cgroup"

// CgroupHierarchies are the cgroup v1 hierarchies a node's subtree is
// made in: every mounted one but the unified (v2) mount, which runc
// leaves alone in hybrid mode.
func CgroupHierarchies() ([]string, error) {
	entries, err := os.ReadDir(CgroupRoot)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() || e.Name() == "unified" {
			continue
		}
		if _, err := os.Stat(filepath.Join(CgroupRoot, e.Name(), "cgroup.procs")); err == nil {
			out = append(out, filepath.Join(CgroupRoot, e.Name()))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no cgroup v1 hierarchy under %s", CgroupRoot)
	}
	return out, nil
}

// MakeCgroup creates path (e.g. /herald-lab/hlab-node1/runtime) in every
// hierarchy. cpuset needs its parents' cpus and mems copied down, as the
// kernel starts a new cpuset empty.
func MakeCgroup(path string) error {
	hs, err := CgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		parts := strings.Split(strings.Trim(path, "/"), "/")
		dir := h
		for _, p := range parts {
			parent := dir
			dir = filepath.Join(dir, p)
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("cgroup %s: %w", dir, err)
			}
			if filepath.Base(h) == "cpuset" {
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					if cur, _ := os.ReadFile(filepath.Join(dir, f)); strings.TrimSpace(string(cur)) != "" {
						continue
					}
					v, err := os.ReadFile(filepath.Join(parent, f))
					if err != nil {
						return err
					}
					if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
						return fmt.Errorf("cgroup %s: %w", filepath.Join(dir, f), err)
					}
				}
			}
		}
	}
	return nil
}

// JoinCgroup moves pid into path in every hierarchy.
func JoinCgroup(path string, pid int) error {
	hs, err := CgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		if err := os.WriteFile(filepath.Join(h, path, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("moving %d into %s: %w", pid, filepath.Join(h, path), err)
		}
	}
	return nil
}

// CgroupPIDs lists the processes anywhere under path, in any hierarchy.
func CgroupPIDs(path string) ([]int, error) {
	hs, err := CgroupHierarchies()
	if err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	for _, h := range hs {
		root := filepath.Join(h, path)
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if !d.IsDir() {
				return nil
			}
			data, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if err != nil {
				return nil // gone meanwhile
			}
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	var out []int
	for pid := range seen {
		out = append(out, pid)
	}
	sort.Ints(out)
	return out, nil
}

// SweepCgroup kills every process under path (the node's containers, its
// shims, its runtime) and removes the cgroups, deepest first. Only what
// the lab put there is in that subtree, so nothing else is touched.
func SweepCgroup(path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	// Freeze nothing: SIGKILL cannot be caught, and a process forking
	// meanwhile lands in the same subtree, so loop until empty.
	for {
		pids, err := CgroupPIDs(path)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still has processes %v after %s", path, pids, timeout)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
	hs, err := CgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hs {
		root := filepath.Join(h, path)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		// Deepest first; a cgroup empties of processes a moment after
		// they die, so retry briefly.
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			var err error
			for i := 0; i < 50; i++ {
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, fs.ErrNotExist) {
					err = nil
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// RemoveEmptyCgroup removes path in every hierarchy if nothing is left in
// it (the lab's common parent, once its last node is gone).
func RemoveEmptyCgroup(path string) {
	hs, err := CgroupHierarchies()
	if err != nil {
		return
	}
	for _, h := range hs {
		_ = syscall.Rmdir(filepath.Join(h, path))
	}
}

// MountsUnder lists the mount points at or below dir, deepest first, from
// /proc/self/mountinfo (a mount over a mount is listed twice).
func MountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dir = filepath.Clean(dir)
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// UnmountUnder detaches every mount below dir (the runtime's snapshots
// and sandbox mounts, kubelet's volumes, the pods' network namespaces),
// deepest first, lazily so that a busy one does not stop the sweep.
func UnmountUnder(dir string) error {
	var errs []error
	for i := 0; i < 3; i++ {
		mps, err := MountsUnder(dir)
		if err != nil {
			return err
		}
		if len(mps) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, mp := range mps {
			if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("unmounting %s: %w", mp, err))
			}
		}
	}
	if mps, _ := MountsUnder(dir); len(mps) > 0 {
		errs = append(errs, fmt.Errorf("still mounted under %s: %v", dir, mps))
	}
	return errors.Join(errs...)
}

// PodPID is a process of the pod with that UID, from its cgroup under
// podsCgroup (kubelet's cgroupRoot): kubepods[/<qos>]/pod<uid>.
func PodPID(podsCgroup, uid string) (int, error) {
	hs, err := CgroupHierarchies()
	if err != nil {
		return 0, err
	}
	want := "pod" + uid
	for _, h := range hs {
		var found string
		_ = filepath.WalkDir(filepath.Join(h, podsCgroup), func(p string, d fs.DirEntry, err error) error {
			if err != nil || found != "" || !d.IsDir() {
				return nil
			}
			if d.Name() == want {
				found = p
				return filepath.SkipAll
			}
			return nil
		})
		if found == "" {
			continue
		}
		var pid int
		_ = filepath.WalkDir(found, func(p string, d fs.DirEntry, err error) error {
			if err != nil || pid != 0 || !d.IsDir() {
				return nil
			}
			data, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if fs := strings.Fields(string(data)); len(fs) > 0 {
				pid, _ = strconv.Atoi(fs[0])
			}
			return nil
		})
		if pid != 0 {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no process of pod %s under %s", uid, podsCgroup)
}

// NetnsDir is where `ip netns` keeps named namespaces.
const NetnsDir = "/var/run/netns"

// AttachNetns names pid's network namespace (ip netns attach), replacing
// a handle of that name that leads elsewhere.
func AttachNetns(name string, pid int) error {
	handle := filepath.Join(NetnsDir, name)
	target := fmt.Sprintf("/proc/%d/ns/net", pid)
	var want, have syscall.Stat_t
	if err := syscall.Stat(target, &want); err != nil {
		return err
	}
	if syscall.Stat(handle, &have) == nil {
		if have.Ino == want.Ino && have.Dev == want.Dev {
			return nil
		}
		if err := DetachNetns(name); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(NetnsDir, 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(handle, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return err
	}
	f.Close()
	if err := syscall.Mount(target, handle, "none", syscall.MS_BIND, ""); err != nil {
		_ = os.Remove(handle)
		return fmt.Errorf("attaching %s as netns %s: %w", target, name, err)
	}
	return nil
}

// DetachNetns removes a named namespace handle.
func DetachNetns(name string) error {
	handle := filepath.Join(NetnsDir, name)
	if err := syscall.Unmount(handle, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Remove(handle); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
