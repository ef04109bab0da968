package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// build compiles the command as the image has it: static, no cgo.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pause")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// wait waits for cmd to exit, at most 10 s.
func wait(t *testing.T, cmd *exec.Cmd) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("pause did not exit within 10 s")
		return nil
	}
}

// TestSignals: the binary waits until SIGTERM or SIGINT and exits 0.
func TestSignals(t *testing.T) {
	bin := build(t)
	out, err := exec.Command(bin, "-v").Output()
	if err != nil || !strings.Contains(string(out), "pause") {
		t.Errorf("pause -v: %q %v", out, err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		var stderr bytes.Buffer
		cmd := exec.Command(bin)
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// It must still be there after a while.
		time.Sleep(300 * time.Millisecond)
		if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
			t.Fatalf("pause exited on its own: %v (%s)", err, stderr.String())
		}
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if err := wait(t, cmd); err != nil {
			t.Errorf("after %v: %v (stderr %q)", sig, err, stderr.String())
		}
		if !strings.Contains(stderr.String(), "Shutting down, got signal") || !strings.Contains(stderr.String(), "should be the first process") {
			t.Errorf("after %v: stderr %q", sig, stderr.String())
		}
	}
}

// TestReapsAsPID1 runs pause as PID 1 of a new PID namespace (root only),
// puts an orphan there (a sleep whose shell exits), and checks that pause
// inherits it and reaps it once it exits: no zombie is left.
func TestReapsAsPID1(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a new PID namespace")
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skip("needs nsenter (util-linux)")
	}
	bin := build(t)
	var stderr bytes.Buffer
	cmd := exec.Command(bin)
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	time.Sleep(200 * time.Millisecond) // until its handlers are in place

	// The shell exits at once; its sleep is orphaned inside the
	// namespace and so becomes pause's child. (Its output goes elsewhere,
	// or CombinedOutput would wait for it.)
	sh := exec.Command("nsenter", "--target", strconv.Itoa(pid), "--pid", "--", "sh", "-c", "sleep 2 </dev/null >/dev/null 2>&1 & exit 0")
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("nsenter: %v\n%s", err, out)
	}
	orphan := 0
	for deadline := time.Now().Add(5 * time.Second); orphan == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		orphan = childNamed(t, pid, "sleep")
	}
	if orphan == 0 {
		t.Fatalf("no sleep became a child of pause (pid %d)", pid)
	}
	// Once sleep exits, its /proc entry goes only when pause reaps it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		state := procState(orphan)
		if state == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the orphan %d is still there in state %s: pause did not reap it", orphan, state)
		}
	}
	if stderr.Len() != 0 {
		t.Errorf("pause as PID 1 printed %q", stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, cmd); err != nil {
		t.Errorf("SIGTERM: %v (stderr %q)", err, stderr.String())
	}
}

// childNamed is the PID of a child of parent whose command is name (0 if
// none).
func childNamed(t *testing.T, parent int, name string) int {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range dirs {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := string(data)
		if strings.Contains(s, "\nPPid:\t"+strconv.Itoa(parent)+"\n") && strings.HasPrefix(s, "Name:\t"+name+"\n") {
			n, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			return n
		}
	}
	return 0
}

// procState is the state letter (and name) of a process, "" when it is
// gone.
func procState(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "State:\t"); ok {
			return v
		}
	}
	return "?"
}
