package kubelet

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testNetns makes an empty network namespace for the test.
func testNetns(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace")
	}
	const name = "hlkut-proc"
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns delete: %v: %s", err, out)
		}
	})
	return name
}

func waitExit(t *testing.T, p *process) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("process did not exit")
	}
}

// TestProcessRunsInNetnsWithCleanEnv: the program sees only the pod's
// namespace (also in /sys) and only the environment it is given.
func TestProcessRunsInNetnsWithCleanEnv(t *testing.T) {
	ns := testNetns(t)
	t.Setenv("KUBECONFIG", "/must/not/leak")
	dir := t.TempDir()
	log := filepath.Join(dir, "c.log")
	p, err := startProcess("c", ns, "/bin/sh", []string{"-c", "ls /sys/class/net; env"}, []string{"PATH=" + DefaultPath, "A=b"}, dir, log)
	if err != nil {
		t.Fatal(err)
	}
	waitExit(t, p)
	if p.exitCode != 0 {
		t.Fatalf("exit code %d", p.exitCode)
	}
	data, _ := os.ReadFile(log)
	var body []string
	for _, l := range strings.Split(string(data), "\n") {
		if l != "" && !strings.HasPrefix(l, "===") {
			body = append(body, l)
		}
	}
	got := strings.Join(body, "\n")
	for _, want := range []string{"lo", "A=b", "PATH=" + DefaultPath} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "KUBECONFIG") || strings.Contains(got, "eth0") {
		t.Errorf("the kubelet's environment or the host's interfaces leaked:\n%s", got)
	}
}

// TestProcessStop: SIGTERM ends a well-behaved program at once (exit
// 143); one that ignores it is killed after the grace period (exit 137).
func TestProcessStop(t *testing.T) {
	ns := testNetns(t)
	dir := t.TempDir()
	env := []string{"PATH=" + DefaultPath}

	p, err := startProcess("polite", ns, "/bin/sleep", []string{"60"}, env, dir, filepath.Join(dir, "polite.log"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p.stop(10 * time.Second)
	if d := time.Since(start); d > 5*time.Second || p.exitCode != 143 || p.signal != syscall.SIGTERM {
		t.Errorf("polite program: stopped in %s with exit code %d signal %v", d, p.exitCode, p.signal)
	}

	p, err = startProcess("stubborn", ns, "/bin/sh", []string{"-c", `trap "" TERM; echo ready; sleep 60 & wait`}, env, dir, filepath.Join(dir, "stubborn.log"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // let the shell install its trap
	start = time.Now()
	p.stop(time.Second)
	d := time.Since(start)
	if d < time.Second || d > 10*time.Second || p.exitCode != 137 || p.signal != syscall.SIGKILL {
		t.Errorf("stubborn program: stopped in %s with exit code %d signal %v", d, p.exitCode, p.signal)
	}
	// The whole group went, the shell's sleep too.
	if out, _ := exec.Command("ip", "netns", "pids", ns).Output(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("processes left in %s: %s", ns, out)
	}
}

// TestExecInProcess: the kubelet API's binary-mode exec runs in the
// program's network and mount namespaces (its own /sys) with its
// environment, and passes the exit code on.
func TestExecInProcess(t *testing.T) {
	ns := testNetns(t)
	dir := t.TempDir()
	p, err := startProcess("c", ns, "/bin/sh", []string{"-c", "exec sleep 60"}, []string{"PATH=" + DefaultPath, "A=from-the-container"}, dir, filepath.Join(dir, "c.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.stop(time.Second) })
	// At once: exec waits for the process to be in its namespaces.
	var out strings.Builder
	target := execTarget{pid: p.rec.PID, dir: dir}
	err = target.run(context.Background(), []string{"sh", "-c", "echo $A; ls /sys/class/net; exit 6"}, nil, &out, &out, false, nil)
	if code := exitCode(t, err); code != 6 || out.String() != "from-the-container\nlo\n" {
		t.Errorf("exit code %d (want 6), output %q", code, out.String())
	}
}
