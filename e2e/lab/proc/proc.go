// Package proc runs the lab's long-lived child processes (etcd, Kubernetes
// components, later kubelets and pods) with their output in log files, and
// stops them by PID: SIGTERM, a grace period, then SIGKILL.
//
// A Record (name, PID, the kernel's start time of that PID, log path) is
// what a state file keeps, so that a later `down` — after the process that
// started the children crashed or exited — can stop exactly those
// processes and never a stranger that reused a PID.
package proc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DefaultGrace is how long Stop waits after SIGTERM before SIGKILL.
const DefaultGrace = 10 * time.Second

// Spec says what to run.
type Spec struct {
	// Name identifies the process in records and messages (e.g. "etcd").
	Name string
	// Path is the executable; Args are its arguments (without argv[0]).
	Path string
	Args []string
	// Argv0, when set, is passed as argv[0] instead of Path (for
	// multi-call binaries that dispatch on their name).
	Argv0 string
	// Env is added to the current environment.
	Env []string
	// Dir is the working directory; empty means the current one.
	Dir string
	// LogPath receives stdout and stderr (appended). Required.
	LogPath string
	// KillWithParent makes the kernel SIGKILL the process when the thread
	// that started it dies, so a crashed test leaves nothing behind. Leave
	// it off for processes that must outlive a CLI invocation.
	KillWithParent bool
}

// Record identifies a started process; it is safe to store as JSON.
type Record struct {
	Name string   `json:"name"`
	PID  int      `json:"pid"`
	Path string   `json:"path"`
	Args []string `json:"args,omitempty"`
	// StartTime is field 22 of /proc/<pid>/stat when the process started,
	// which tells the process apart from a later one with the same PID.
	StartTime uint64 `json:"startTime"`
	LogPath   string `json:"logPath"`
}

// Process is a child started by this process.
type Process struct {
	Record
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
}

// Start starts spec's process with its output going to spec.LogPath. The
// process gets its own session, so terminal signals to the parent do not
// reach it; it is stopped only through Stop (or Record.Stop).
func Start(spec Spec) (*Process, error) {
	if spec.LogPath == "" {
		return nil, fmt.Errorf("proc: %s: no log path", spec.Name)
	}
	logf, err := os.OpenFile(spec.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	fmt.Fprintf(logf, "=== %s: starting %s %s\n", time.Now().Format(time.RFC3339Nano), spec.Path, strings.Join(spec.Args, " "))

	cmd := exec.Command(spec.Path, spec.Args...)
	if spec.Argv0 != "" {
		cmd.Args[0] = spec.Argv0
	}
	cmd.Dir = spec.Dir
	cmd.Env = append(os.Environ(), spec.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if spec.KillWithParent {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	p := &Process{
		Record: Record{
			Name:    spec.Name,
			Path:    spec.Path,
			Args:    spec.Args,
			LogPath: spec.LogPath,
		},
		cmd:  cmd,
		done: make(chan struct{}),
	}
	// The kernel sends Pdeathsig when the *thread* that forked the child
	// ends, and the Go runtime ends any thread a goroutine exits while
	// locked to (netns.Do does, when it cannot switch back). A child
	// forked from an ordinary goroutine therefore died whenever its
	// thread was later used that way (a lab test once saw etcd end with
	// "signal: killed" while nothing signalled it). So the child is
	// forked, and waited for, from a thread locked for its whole life.
	started := make(chan error, 1)
	go func() {
		if spec.KillWithParent {
			runtime.LockOSThread() // never unlocked: the thread ends after the child
		}
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("proc: start %s: %w", spec.Name, err)
	}
	p.PID = cmd.Process.Pid
	// The child exists (unreaped) until Wait, so its stat is readable.
	if st, err := readStat(p.PID); err == nil {
		p.StartTime = st.startTime
	}
	return p, nil
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the exit status once Done is closed (nil for exit code 0).
func (p *Process) Err() error {
	select {
	case <-p.done:
		return p.waitErr
	default:
		return nil
	}
}

// Exited tells whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM, waits up to grace (DefaultGrace if zero) and then
// sends SIGKILL. It returns once the process is gone; an exit caused by
// the signals is not an error.
func (p *Process) Stop(grace time.Duration) error {
	if grace <= 0 {
		grace = DefaultGrace
	}
	if p.Exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("proc: SIGTERM %s (pid %d): %w", p.Name, p.PID, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("proc: SIGKILL %s (pid %d): %w", p.Name, p.PID, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("proc: %s (pid %d) survived SIGKILL", p.Name, p.PID)
	}
}

// Alive tells whether the recorded process still runs: the PID exists, is
// not a zombie, and (when recorded) started at the recorded time.
func (r Record) Alive() bool {
	if r.PID <= 0 {
		return false
	}
	st, err := readStat(r.PID)
	if err != nil || st.state == 'Z' || st.state == 'X' {
		return false
	}
	return r.StartTime == 0 || st.startTime == r.StartTime
}

// Stop stops a recorded process that need not be a child of this process
// (e.g. after the lab's starter crashed): SIGTERM, poll for up to grace,
// SIGKILL. A process that is already gone — or whose PID now belongs to a
// different process — is left alone and is not an error.
func (r Record) Stop(grace time.Duration) error {
	if grace <= 0 {
		grace = DefaultGrace
	}
	if !r.Alive() {
		return nil
	}
	if err := syscall.Kill(r.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("proc: SIGTERM %s (pid %d): %w", r.Name, r.PID, err)
	}
	if waitGone(r, grace) {
		return nil
	}
	if err := syscall.Kill(r.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("proc: SIGKILL %s (pid %d): %w", r.Name, r.PID, err)
	}
	if waitGone(r, 10*time.Second) {
		return nil
	}
	return fmt.Errorf("proc: %s (pid %d) survived SIGKILL", r.Name, r.PID)
}

func waitGone(r Record, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if !r.Alive() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type stat struct {
	state     byte
	startTime uint64
}

// readStat reads the state (field 3) and start time (field 22) from
// /proc/<pid>/stat. The command name (field 2) may contain spaces and
// parentheses, so fields are counted from the last ')'.
func readStat(pid int) (stat, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, err
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return stat{}, fmt.Errorf("proc: malformed stat for pid %d", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return stat{}, fmt.Errorf("proc: short stat for pid %d", pid)
	}
	st, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return stat{}, fmt.Errorf("proc: stat for pid %d: %w", pid, err)
	}
	return stat{state: f[0][0], startTime: st}, nil
}

// WriteTail writes a header and the last n lines of the file at path to w
// (for dumping logs when a test fails).
func WriteTail(w io.Writer, path string, n int) {
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintf(w, "===== %s: %v\n", path, err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	fmt.Fprintf(w, "===== last %d lines of %s\n%s\n", len(lines), path, strings.Join(lines, "\n"))
}
