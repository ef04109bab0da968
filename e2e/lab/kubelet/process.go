package kubelet

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/herald-lb/herald/e2e/lab/proc"
)

// process is one run of a container's program.
//
// It is started as `ip netns exec <netns> <program> <args>`: ip enters the
// namespace, gives the program a private mount namespace with /sys
// remounted for that network namespace (so the program sees its own
// interfaces in /sys/class/net, as in a container), and then execs the
// program in place, so the PID the kubelet holds is the program's own.
// This needs no thread juggling in the kubelet (setns on a locked thread
// before fork would work too, but would leave the program with the
// node's /sys). The program gets a clean environment (only what the
// container's spec says, never the kubelet's), its own session, and
// SIGKILL when the kubelet dies, so a crashed kubelet leaves no container
// running.
type process struct {
	cmd    *exec.Cmd
	rec    proc.Record
	exited chan struct{}

	startedAt  time.Time
	finishedAt time.Time
	exitCode   int32
	signal     syscall.Signal

	// runcID is set in image mode: cmd is then `runc run` of that
	// container and rec the container's first process.
	runcID string

	// The run's output in the container's log file: from logStart (past
	// the kubelet's header line) to logEnd, which is -1 while the run
	// lasts and is set before the kubelet's closing line is appended.
	logPath  string
	logStart int64
	logEnd   atomic.Int64
}

// startProcess starts program in the named network namespace with output
// appended to logPath.
func startProcess(name, netnsName, program string, args, env []string, dir, logPath string) (*process, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", netnsName, program}, args...)...)
	cmd.Env = env
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	p, err := runCmd(cmd, logPath, fmt.Sprintf("starting %s %s (netns %s)", program, strings.Join(args, " "), netnsName), nil)
	if err != nil {
		return nil, err
	}
	p.rec = proc.Record{Name: name, PID: cmd.Process.Pid, Path: program, Args: args, LogPath: logPath}
	// As a real kubelet reports a container running only once its
	// runtime has set it up, wait until `ip netns exec` and, with
	// volumes, the mount helper have exec'd the program: before that
	// the process is in the namespace without the pod's mounts (a test
	// reading the service-account files through /proc/PID/root found
	// none, once).
	waitExec(p, cmd.Process.Pid, setupPrograms(program, args), 5*time.Second)
	if st, err := startTime(p.rec.PID); err == nil {
		p.rec.StartTime = st
	}
	return p, nil
}

// setupPrograms are the executables a container's process runs before
// its program: `ip` (netns exec), and the kubelet's own binary when it
// makes the mounts first (MountExecCommand).
func setupPrograms(program string, args []string) []string {
	var out []string
	if ip, err := exec.LookPath("ip"); err == nil {
		out = append(out, resolved(ip))
	}
	if len(args) > 0 && args[0] == MountExecCommand {
		out = append(out, resolved(program))
	}
	return out
}

func resolved(path string) string {
	if r, err := filepath.EvalSymlinks(path); err == nil {
		return r
	}
	return path
}

// waitExec waits, at most timeout, until the process runs none of the
// setup programs any more (it exec'd its own), or has exited.
func waitExec(p *process, pid int, setup []string, timeout time.Duration) {
	exe := "/proc/" + strconv.Itoa(pid) + "/exe"
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		select {
		case <-p.exited:
			return
		default:
		}
		cur, err := os.Readlink(exe)
		if err != nil {
			return // gone, or a zombie
		}
		if !slices.Contains(setup, strings.TrimSuffix(cur, " (deleted)")) {
			return
		}
	}
}

// runCmd starts cmd with its output appended to logPath, after a header
// line, and waits for it in the background: p.exited is closed once it
// has exited and afterExit (if any) has run. The caller fills p.rec.
func runCmd(cmd *exec.Cmd, logPath, header string, afterExit func()) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== %s: %s\n", time.Now().Format(time.RFC3339Nano), header)
	logStart, err := logf.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, exited: make(chan struct{}), startedAt: time.Now(), logPath: logPath, logStart: logStart}
	p.logEnd.Store(-1)
	go func() {
		_ = cmd.Wait()
		p.finishedAt = time.Now()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
			switch {
			case ws.Signaled():
				p.signal = ws.Signal()
				p.exitCode = 128 + int32(ws.Signal())
			default:
				p.exitCode = int32(ws.ExitStatus())
			}
		}
		if afterExit != nil {
			afterExit()
		}
		p.logEnd.Store(fileSize(logPath))
		if lf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			fmt.Fprintf(lf, "=== %s: exited: %s\n", p.finishedAt.Format(time.RFC3339Nano), cmd.ProcessState)
			lf.Close()
		}
		close(p.exited)
	}()
	return p, nil
}

// signalProcess sends sig to the program; SIGKILL goes to its whole
// process group (the program and whatever it started), as a container's
// teardown would. Until the kubelet has reaped the program, its PID (and
// so the group's ID) cannot belong to anyone else.
func (p *process) signalProcess(sig syscall.Signal) error {
	if p.runcID != "" {
		return p.signalContainer(sig)
	}
	pid := p.rec.PID
	if sig == syscall.SIGKILL {
		pid = -pid
	}
	err := syscall.Kill(pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// stop sends SIGTERM, waits up to grace, then SIGKILL, and returns once
// the program has exited.
func (p *process) stop(grace time.Duration) {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.signalProcess(syscall.SIGTERM)
	select {
	case <-p.exited:
		return
	case <-time.After(grace):
	}
	_ = p.signalProcess(syscall.SIGKILL)
	<-p.exited
}

// startTime reads field 22 of /proc/<pid>/stat (the process's start time
// in clock ticks), which proc.Record uses to tell a process from a later
// one with the same PID.
func startTime(pid int) (uint64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}
