package kubelet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/herald-lb/herald/e2e/lab/proc"
)

// Image mode runs a container as `runc run` in the foreground, a child
// of the kubelet like a binary-mode program: runc passes its stdout and
// stderr (the container's log file) to the container, forwards the
// signals it gets, waits for the container's first process, exits with
// its status, and on the way out removes the container's cgroup and
// state. The container has its own PID namespace, so SIGKILL to its first
// process (the PID the kubelet reports, which tests kill) ends it all.
//
// Each run gets a fresh bundle, <StateDir>/bundles/<id>: config.json and
// rootfs, an overlay of the image's unpacked filesystem (never written)
// and the run's own upper layer (where runc makes mount points and, with
// a writable root, the container writes). The kubelet unmounts and
// removes it when runc exits; Down sweeps whatever a crashed kubelet
// left: runc's containers, overlay mounts, bundles and cgroups.

// RuncCgroupRoot is the cgroup (in every hierarchy) under which each
// kubelet keeps its containers' cgroups, in <RuncCgroupRoot>/<node netns>.
const RuncCgroupRoot = "herald-lab"

// runtimeDirs are where a kubelet keeps runc's state and the bundles,
// inside its state directory.
const (
	runcStateDir = "runc"
	bundlesDir   = "bundles"
)

// ociRuntime runs image-mode containers for one kubelet.
type ociRuntime struct {
	runc string
	// root is runc's state directory (--root); bundles holds the
	// bundles.
	root, bundles string
	// cgroupParent is <RuncCgroupRoot>/<node netns>.
	cgroupParent string
}

func newOCIRuntime(stateDir, nodeNetns string) ociRuntime {
	return ociRuntime{
		runc:         "runc",
		root:         filepath.Join(stateDir, runcStateDir),
		bundles:      filepath.Join(stateDir, bundlesDir),
		cgroupParent: cgroupParent(nodeNetns),
	}
}

// cgroupParent is the cgroup of the kubelet of node nodeNetns, below
// which each of its containers has one, in both modes.
func cgroupParent(nodeNetns string) string { return RuncCgroupRoot + "/" + nodeNetns }

// cgroupsPath is a container's cgroup below the kubelet's.
func (r ociRuntime) cgroupsPath(id string) string { return "/" + r.cgroupParent + "/" + id }

// start runs container o (ID id, unique among the kubelet's runs) on the
// image filesystem in lower, with output appended to logPath. It returns
// once the container's first process runs; when it cannot start, the
// error carries runc's message.
func (r ociRuntime) start(name, id string, o ociContainer, lower, logPath string) (*process, error) {
	cleanup := func() {
		if err := r.removeBundle(id); err != nil {
			appendLog(logPath, "=== removing the bundle: %v", err)
		}
	}
	weighCgroupRoot()
	bundle, err := r.makeBundle(id, o, lower)
	if err != nil {
		cleanup()
		return nil, err
	}
	pidFile := filepath.Join(bundle, "pid")
	// A container that exits at once takes its bundle, and with it the
	// PID file, along before the poll below may have read it: read the
	// file on the way out, before the bundle goes.
	var pidAtExit []byte
	atExit := func() {
		pidAtExit, _ = os.ReadFile(pidFile)
		cleanup()
	}
	logStart := fileSize(logPath)
	cmd := exec.Command(r.runc, "--root", r.root, "run", "--bundle", bundle, "--pid-file", pidFile, id)
	cmd.Dir = bundle
	// A dying kubelet's runc forwards SIGTERM to the container, which
	// then ends as on a stopped node; Down sweeps one that does not.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGTERM}
	header := fmt.Sprintf("starting %s under runc (container %s, netns %s)", strings.Join(o.Args, " "), id, o.NetnsPath)
	p, err := runCmd(cmd, logPath, header, atExit)
	if err != nil {
		cleanup()
		return nil, err
	}
	p.runcID = id
	// pidAtExit is written before p.exited closes, and read only after.
	pid, err := waitPIDFile(pidFile, p.exited, func() []byte { return pidAtExit })
	if err != nil {
		_ = p.cmd.Process.Kill() // only if it hangs: it has not exited
		<-p.exited
		return nil, fmt.Errorf("runc: %s (exit code %d)", runcMessage(logPath, logStart), p.exitCode)
	}
	p.rec = proc.Record{Name: name, PID: pid, Path: o.Args[0], Args: o.Args[1:], LogPath: logPath}
	if st, err := startTime(pid); err == nil {
		p.rec.StartTime = st
	}
	return p, nil
}

// makeBundle writes container id's bundle: config.json and the rootfs
// mount.
func (r ociRuntime) makeBundle(id string, o ociContainer, lower string) (string, error) {
	bundle := filepath.Join(r.bundles, id)
	rootfs, upper, work := filepath.Join(bundle, "rootfs"), filepath.Join(bundle, "upper"), filepath.Join(bundle, "work")
	for _, d := range []string{rootfs, upper, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)
	if err := unix.Mount("overlay", rootfs, "overlay", 0, opts); err != nil {
		return "", fmt.Errorf("overlay root filesystem: %w", err)
	}
	o.CgroupsPath = r.cgroupsPath(id)
	cfg, err := json.MarshalIndent(o.spec(), "", "\t")
	if err != nil {
		return "", err
	}
	return bundle, os.WriteFile(filepath.Join(bundle, "config.json"), cfg, 0o644)
}

// waitPIDFile waits for runc to write the container's PID, which it does
// once the container's process runs; nothing comes if runc exits first.
// atExit gives what the file held when runc exited (the file itself may
// be gone by then).
func waitPIDFile(path string, exited <-chan struct{}, atExit func() []byte) (int, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if data, err := os.ReadFile(path); err == nil && len(data) > 0 {
			return strconv.Atoi(strings.TrimSpace(string(data)))
		}
		select {
		case <-exited:
			// It may have written the file just before exiting.
			if data := atExit(); len(data) > 0 {
				return strconv.Atoi(strings.TrimSpace(string(data)))
			}
			return 0, errors.New("runc exited before the container started")
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return 0, errors.New("no container PID after 2 minutes")
		}
	}
}

// runcMessage is what runc wrote to the log since offset, on one line.
func runcMessage(logPath string, offset int64) string {
	f, err := os.Open(logPath)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return err.Error()
	}
	data, _ := io.ReadAll(io.LimitReader(f, 4096))
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		// runc logs as logrus does: time="..." level=error msg="...".
		if _, m, ok := strings.Cut(l, ` msg=`); ok {
			if u, err := strconv.Unquote(m); err == nil {
				l = u
			}
		}
		if l != "" && !strings.HasPrefix(l, "===") {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return "no message"
	}
	return strings.Join(lines, "; ")
}

func fileSize(path string) int64 {
	if fi, err := os.Stat(path); err == nil {
		return fi.Size()
	}
	return 0
}

func appendLog(path, format string, args ...any) {
	if f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
		fmt.Fprintf(f, format+"\n", args...)
		f.Close()
	}
}

// signalContainer: SIGKILL goes to the container's first process (the
// container's PID namespace then ends everything in it), as long as that
// PID is still the container's; anything else goes to runc, which
// forwards it, so a stray signal can never hit a reused PID.
func (p *process) signalContainer(sig syscall.Signal) error {
	if sig == syscall.SIGKILL {
		if !p.rec.Alive() {
			return nil
		}
		if err := syscall.Kill(p.rec.PID, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return err
		}
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// removeBundle removes one run's leftovers: runc's record of it (there
// is one only if runc itself died), the rootfs mount and the bundle.
func (r ociRuntime) removeBundle(id string) error {
	var errs []error
	if _, err := os.Stat(filepath.Join(r.root, id)); err == nil {
		if out, err := exec.Command(r.runc, "--root", r.root, "delete", "--force", id).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("runc delete %s: %v: %s", id, err, strings.TrimSpace(string(out))))
		}
	}
	bundle := filepath.Join(r.bundles, id)
	if err := unmountUnder(bundle); err != nil {
		errs = append(errs, err)
	} else if err := os.RemoveAll(bundle); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// unmountUnder unmounts every mount point at or below dir, deepest first.
func unmountUnder(dir string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	var errs []error
	for i := len(points) - 1; i >= 0; i-- {
		if err := unix.Unmount(points[i], unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", points[i], err))
		}
	}
	return errors.Join(errs...)
}

// runtimeDown removes what image mode left in a kubelet's state
// directory: runc's containers (killed), every bundle and the node's
// cgroups. Nothing there is not an error.
func runtimeDown(ctx context.Context, stateDir, nodeNetns string, log io.Writer) error {
	r := newOCIRuntime(stateDir, nodeNetns)
	var errs []error
	if ids, err := os.ReadDir(r.root); err == nil {
		for _, e := range ids {
			fmt.Fprintf(log, "kubelet: removing runc container %s\n", e.Name())
			if out, err := exec.CommandContext(ctx, r.runc, "--root", r.root, "delete", "--force", e.Name()).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("runc delete %s: %v: %s", e.Name(), err, strings.TrimSpace(string(out))))
			}
		}
	}
	if entries, err := os.ReadDir(r.bundles); err == nil {
		for _, e := range entries {
			if err := r.removeBundle(e.Name()); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) == 0 {
		for _, d := range []string{r.root, r.bundles} {
			if err := os.RemoveAll(d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if nodeNetns != "" {
		errs = append(errs, removeCgroups(r.cgroupParent))
	}
	return errors.Join(errs...)
}

// CgroupMount is where the cgroup hierarchies are mounted.
var CgroupMount = "/sys/fs/cgroup"

// weighCgroupRoot gives RuncCgroupRoot the CPU weight a kubelet gives
// kubepods, a machine's worth of CPUs (cgroup v1's cpu.shares). That one
// cgroup holds every container of the lab's nodes: at the default weight
// of a single task it would starve them on a busy machine, where binary
// mode's programs compete thread by thread with everything else.
func weighCgroupRoot() {
	cpu := filepath.Join(CgroupMount, "cpu")
	if _, err := os.Stat(filepath.Join(cpu, "cpu.shares")); err != nil {
		return // no cgroup v1 cpu hierarchy
	}
	dir := filepath.Join(cpu, RuncCgroupRoot)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return
	}
	_ = os.WriteFile(filepath.Join(dir, "cpu.shares"), []byte(strconv.Itoa(1024*runtime.NumCPU())), 0o644)
}

// rmdirCgroup removes one cgroup, waiting up to 2 s while it is busy: a
// container's last process may still be exiting.
func rmdirCgroup(dir string) error {
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := unix.Rmdir(dir)
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return err
		}
	}
}

// removeCgroups removes cgroup path (and any cgroups below it) in every
// hierarchy, then its parent if that is left empty (other labs may still
// use it). A cgroup with processes cannot go: that is an error.
func removeCgroups(path string) error {
	roots := []string{CgroupMount}
	if entries, err := os.ReadDir(CgroupMount); err == nil {
		for _, e := range entries {
			if e.IsDir() { // symlinks such as cpu -> cpu,cpuacct are not
				roots = append(roots, filepath.Join(CgroupMount, e.Name()))
			}
		}
	}
	var errs []error
	for _, root := range roots {
		dir := filepath.Join(root, path)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		var dirs []string
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := rmdirCgroup(dirs[i]); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("cgroup %s: %w", dirs[i], err))
			}
		}
		_ = unix.Rmdir(filepath.Dir(dir)) // fails while other labs use it
	}
	return errors.Join(errs...)
}
