package kubelet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/herald-lb/herald/e2e/lab/netns"
)

// testImage builds testdata/ctrhelper statically, imports it with podman
// as a one-layer image (ENTRYPOINT /ctrhelper, users root and nobody)
// and unpacks it through an imageStore, as the kubelet would.
func testImage(t *testing.T) (imageConfig, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs containers")
	}
	for _, tool := range []string{"runc", "podman"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	build := exec.Command("go", "build", "-o", filepath.Join(rootfs, "ctrhelper"), "./testdata/ctrhelper")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the helper: %v: %s", err, out)
	}
	files := map[string][]byte{
		"etc/passwd": []byte("root:x:0:0::/:/ctrhelper\nnobody:x:65534:65534::/:/ctrhelper\n"),
		"etc/group":  []byte("root:x:0:\nnogroup:x:65534:\n"),
	}
	if err := writeFiles(rootfs, files); err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(dir, "rootfs.tar")
	if out, err := exec.Command("tar", "-C", rootfs, "-cf", tarball, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v: %s", err, out)
	}
	ref := fmt.Sprintf("localhost/herald-lab-kubelet-test:%d", os.Getpid())
	if out, err := exec.Command("podman", "import", "--change", `ENTRYPOINT ["/ctrhelper"]`, tarball, ref).CombinedOutput(); err != nil {
		t.Fatalf("podman import: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("podman", "rmi", ref).Run() })

	store := imageStore{podman: "podman", dir: filepath.Join(dir, "images")}
	ctx := context.Background()
	img, err := store.inspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	lower, err := store.rootfs(ctx, img)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.inspect(ctx, ref+"-missing"); err == nil || !strings.Contains(err.Error(), ReasonErrImagePull) {
		t.Errorf("a missing image: %v, want %s", err, ReasonErrImagePull)
	}
	return img, lower
}

// runcSuite is what TestRuncContainer's steps share.
type runcSuite struct {
	r ociRuntime
	// img is the helper image's configuration, lower its filesystem.
	img         imageConfig
	lower       string
	ns          string
	state, node string
	logDir      string
	// hostDir is the hostPath volume's directory.
	hostDir   string
	available []string
	// run counts the containers started, for their IDs.
	run int
}

// TestRuncContainer runs the helper image under runc the way image mode
// does and checks what a test on a real node would meet: the exit code,
// the securityContext's capabilities and user, a hostPath volume, the
// intended network namespace, SIGKILL of the reported PID, SIGTERM on
// stop, runc's message for a missing program, and a sweep after a
// crashed kubelet. Nothing may be left: no mounts, bundles or cgroups,
// and the image's filesystem untouched.
func TestRuncContainer(t *testing.T) {
	img, lower := testImage(t)
	ns := testNetns(t)
	state := t.TempDir()
	const node = "hlkut-oci"
	r := newOCIRuntime(state, node)
	logDir := t.TempDir()
	before, _ := os.ReadDir(lower)
	available, err := boundingCaps()
	if err != nil {
		t.Fatal(err)
	}
	hostDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(hostDir, "hello"), []byte("hello from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rs := &runcSuite{r: r, img: img, lower: lower, ns: ns, state: state, node: node, logDir: logDir, hostDir: hostDir, available: available}

	t.Run("exit code", rs.checkExitCode)

	// What the kubelet API's exec does in image mode: runc exec, in the
	// container, with and without a terminal.
	t.Run("exec", rs.checkExec)
	t.Run("capabilities, hostPath, netns, read-only root, SIGKILL", rs.checkRootContainer)
	t.Run("non-root user keeps no capability; stop sends SIGTERM", rs.checkNonRootAndStop)
	t.Run("missing program", rs.checkMissingProgram)
	t.Run("sweep after a crashed kubelet", rs.checkSweepAfterCrash)

	if err := runtimeDown(context.Background(), state, node, os.Stderr); err != nil {
		t.Errorf("runtimeDown: %v", err)
	}
	data, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(data), state) {
		t.Errorf("mounts left under %s:\n%s", state, data)
	}
	for _, d := range []string{r.root, r.bundles} {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s left", d)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(CgroupMount, "*", RuncCgroupRoot, node)); len(left) > 0 {
		t.Errorf("cgroups left: %v", left)
	}
	after, _ := os.ReadDir(lower)
	if len(after) != len(before) {
		t.Errorf("the image's filesystem changed: %d entries, was %d", len(after), len(before))
	}
}

// container derives a run's configuration from a pod the way the
// kubelet does.
func (rs *runcSuite) container(t *testing.T, edit func(*v1.Pod, *v1.Container)) ociContainer {
	pod := &v1.Pod{Spec: v1.PodSpec{NodeName: "node1", Containers: []v1.Container{{Name: "c", Image: "test"}}}}
	pod.Name = "p"
	c := &pod.Spec.Containers[0]
	edit(pod, c)
	var binds []bind
	for _, m := range c.VolumeMounts {
		b, err := hostPathBind(m, &v1.HostPathVolumeSource{Path: rs.hostDir})
		if err != nil {
			t.Fatal(err)
		}
		binds = append(binds, b)
	}
	o, err := newOCIContainer(ociSource{
		pod: pod, c: c, image: rs.img, env: []string{"PATH=/"}, binds: binds,
		netnsPath: filepath.Join(netns.Dir, rs.ns), available: rs.available,
		readFile: func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(rs.lower, name)) },
		rlimits:  currentRlimits(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// start starts o as the next run, stopped at the end of t.
func (rs *runcSuite) start(t *testing.T, o ociContainer) (*process, string) {
	t.Helper()
	rs.run++
	id := fmt.Sprintf("t-%d", rs.run)
	p, err := rs.r.start("c", id, o, rs.lower, filepath.Join(rs.logDir, "c.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.stop(time.Second) })
	return p, id
}

// checkExitCode checks that the program's exit code is the container's.
func (rs *runcSuite) checkExitCode(t *testing.T) {
	p, _ := rs.start(t, rs.container(t, func(_ *v1.Pod, c *v1.Container) { c.Args = []string{"exit", "3"} }))
	waitExit(t, p)
	if p.exitCode != 3 {
		t.Errorf("exit code %d, want 3", p.exitCode)
	}
}

// checkExec checks runc exec in the container, with and without a terminal,
// as the kubelet API's exec does in image mode.
func (rs *runcSuite) checkExec(t *testing.T) {
	p, id := rs.start(t, rs.container(t, func(_ *v1.Pod, c *v1.Container) { c.Args = []string{"sleep"} }))
	if !waitLogged(filepath.Join(rs.logDir, "c.log"), "ctrhelper [sleep]") {
		t.Fatal("the program did not start within 10 s")
	}
	target := execTarget{pid: p.rec.PID, runcRoot: rs.r.root, runcID: id}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out strings.Builder
	err := target.run(ctx, []string{"/ctrhelper", "exit", "5"}, nil, &out, &out, false, nil)
	if code := exitCode(t, err); code != 5 || out.String() != "ctrhelper [exit 5] uid 0 gid 0\n" {
		t.Errorf("exec: exit code %d (want 5), output %q", code, out.String())
	}
	out.Reset()
	err = target.run(ctx, []string{"/ctrhelper", "readlink", "/proc/self/fd/0"}, nil, &out, nil, true, nil)
	// Line ends come as \r\n, now and then as \r\r\n: runc clears
	// ONLCR on the container's terminal only after the command
	// may have written, and ours adds the usual \r.
	if got := strings.ReplaceAll(out.String(), "\r", ""); err != nil || !strings.Contains(got, "readlink: /dev/pts/0 <nil>\n") {
		t.Errorf("exec with a terminal: %v, output %q, want stdin on the container's terminal", err, got)
	}
}

// checkRootContainer checks a root container's capabilities, hostPath
// volume, network namespace, read-only root and cgroup, and SIGKILL of
// its reported PID.
func (rs *runcSuite) checkRootContainer(t *testing.T) {
	o := rs.container(t, func(_ *v1.Pod, c *v1.Container) {
		c.Args = []string{"cat", "/mnt/host/hello"}
		c.VolumeMounts = []v1.VolumeMount{{Name: "host", MountPath: "/mnt/host", ReadOnly: true}}
		c.SecurityContext = &v1.SecurityContext{ReadOnlyRootFilesystem: ptr(true), Capabilities: &v1.Capabilities{
			Drop: []v1.Capability{"ALL"}, Add: []v1.Capability{"NET_ADMIN", "NET_RAW"}}}
	})
	p, id := rs.start(t, o)
	pid := p.rec.PID
	// runc reports the process while it is still "runc init",
	// about to exec the program (as a real runtime's start does);
	// in the middle of that execve its command line reads empty.
	var cmdline []byte
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		cmdline, _ = os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if (len(cmdline) > 0 && !strings.HasPrefix(string(cmdline), "runc\x00init")) || time.Now().After(deadline) {
			break
		}
	}
	for _, f := range []string{"CapEff", "CapPrm", "CapBnd"} {
		if m, err := statusCaps(pid, f); err != nil || m != 0x3000 {
			t.Errorf("%s %#x (%v), want 0x3000", f, m, err)
		}
	}
	if string(cmdline) != "/ctrhelper\x00cat\x00/mnt/host/hello\x00" {
		t.Errorf("pid %d is %q, not the container's program", pid, cmdline)
	}
	if got, want := nsInode(t, fmt.Sprintf("/proc/%d/ns/net", pid)), nsInode(t, filepath.Join(netns.Dir, rs.ns)); got != want {
		t.Errorf("network namespace %d, want %s's %d", got, rs.ns, want)
	}
	if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/root/mnt/host/hello", pid)); err != nil || string(data) != "hello from the host\n" {
		t.Errorf("hostPath volume inside the container: %q %v", data, err)
	}
	if opts := rootMountOptions(t, pid); !slices.Contains(opts, "ro") {
		t.Errorf("root mounted %v, want ro", opts)
	}
	if cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); !strings.Contains(string(cg), "/"+RuncCgroupRoot+"/"+rs.node+"/"+id+"\n") {
		t.Errorf("cgroups:\n%s", cg)
	}
	if data, err := os.ReadFile(filepath.Join(CgroupMount, "cpu", RuncCgroupRoot, "cpu.shares")); err == nil && strings.TrimSpace(string(data)) == "1024" {
		t.Errorf("the lab's cgroup has a single task's CPU weight")
	}
	// The program prints, then waits for a signal: kill it only once
	// its output is in the log, or the kill can win the race with
	// its first write and the log check below fails for nothing.
	logged := waitLogged(filepath.Join(rs.logDir, "c.log"), "hello from the host")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitExit(t, p)
	if p.exitCode != 137 {
		t.Errorf("exit code after SIGKILL %d, want 137", p.exitCode)
	}
	if out, _ := exec.Command("ip", "netns", "pids", rs.ns).Output(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("processes left in %s: %s", rs.ns, out)
	}
	if log, _ := os.ReadFile(filepath.Join(rs.logDir, "c.log")); !logged || !strings.Contains(string(log), "hello from the host") {
		t.Errorf("the container's output is not in its log after 10 s:\n%s", log)
	}
}

// checkNonRootAndStop checks that a non-root user keeps no capability, and
// that stop sends SIGTERM.
func (rs *runcSuite) checkNonRootAndStop(t *testing.T) {
	o := rs.container(t, func(p *v1.Pod, c *v1.Container) {
		c.Args = []string{"sleep"}
		p.Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: ptr(int64(65534)), RunAsNonRoot: ptr(true)}
		c.SecurityContext = &v1.SecurityContext{Capabilities: &v1.Capabilities{Drop: []v1.Capability{"ALL"}, Add: []v1.Capability{"NET_RAW"}}}
	})
	p, _ := rs.start(t, o)
	// Until the program handles SIGTERM, PID 1 of a namespace ignores
	// it: stop only once it has said it is running.
	if !waitLogged(filepath.Join(rs.logDir, "c.log"), "ctrhelper [sleep] uid 65534") {
		t.Fatal("the program did not start within 10 s")
	}
	if m, _ := statusCaps(p.rec.PID, "CapEff"); m != 0 {
		t.Errorf("CapEff %#x for a non-root user", m)
	}
	if m, _ := statusCaps(p.rec.PID, "CapBnd"); m != 1<<13 {
		t.Errorf("CapBnd %#x, want NET_RAW only", m)
	}
	if status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.rec.PID)); !strings.Contains(string(status), "\nUid:\t65534\t") {
		t.Errorf("not user 65534:\n%s", status)
	}
	p.stop(10 * time.Second)
	if p.exitCode != 143 {
		t.Errorf("exit code after stop %d, want 143 (SIGTERM through runc)", p.exitCode)
	}
}

// checkMissingProgram checks runc's message for a missing program.
func (rs *runcSuite) checkMissingProgram(t *testing.T) {
	o := rs.container(t, func(_ *v1.Pod, c *v1.Container) { c.Command = []string{"/usr/sbin/iptables"} })
	_, err := rs.r.start("c", "t-missing", o, rs.lower, filepath.Join(rs.logDir, "c.log"))
	if err == nil || !strings.Contains(err.Error(), "/usr/sbin/iptables") {
		t.Errorf("error %v, want runc's complaint about /usr/sbin/iptables", err)
	}
	t.Logf("as the pod's status says it: %v", err)
}

// checkSweepAfterCrash checks that runtimeDown kills a container that
// outlived runc, as after a crashed kubelet.
func (rs *runcSuite) checkSweepAfterCrash(t *testing.T) {
	o := rs.container(t, func(_ *v1.Pod, c *v1.Container) { c.Args = []string{"sleep"} })
	o.CgroupsPath = rs.r.cgroupsPath("t-orphan")
	bundle, err := rs.r.makeBundle("t-orphan", o, rs.lower)
	if err != nil {
		t.Fatal(err)
	}
	// Detached: the container outlives runc, as after a crash.
	cmd := exec.Command("runc", "--root", rs.r.root, "run", "--detach", "--bundle", bundle, "--pid-file", filepath.Join(bundle, "pid"), "t-orphan")
	logf, err := os.Create(filepath.Join(rs.logDir, "orphan.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Run(); err != nil {
		t.Fatalf("runc run --detach: %v", err)
	}
	pid, err := waitPIDFile(filepath.Join(bundle, "pid"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := runtimeDown(context.Background(), rs.state, rs.node, os.Stderr); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if alive(pid) {
		t.Errorf("container pid %d survived the sweep", pid)
	}
}

func nsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// rootMountOptions are the options of "/" as process pid sees it.
func rootMountOptions(t *testing.T, pid int) []string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	var opts []string
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) > 5 && f[4] == "/" {
			opts = strings.Split(f[5], ",") // the last "/" mount is the one seen
		}
	}
	return opts
}

// alive tells whether pid runs (a zombie does not).
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// waitLogged says whether text appears in the log at path within 10 s.
func waitLogged(path, text string) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if log, _ := os.ReadFile(path); strings.Contains(string(log), text) {
			return true
		}
	}
	return false
}
