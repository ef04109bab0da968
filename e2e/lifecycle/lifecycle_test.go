// Package lifecycle tests the herald-lab command the way a newcomer uses
// it: up, status, exec, kubeconfig, a second up refused, a crash, down, and
// the machine as it was before.
package lifecycle

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/cluster"
	"github.com/herald-lb/herald/e2e/lab/controlplane"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

const prefix = "hlcli"

func TestHeraldLabCLI(t *testing.T) {
	needLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "herald-lab")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/herald-lab").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	state := filepath.Join(t.TempDir(), "lab")
	cli := labCLI{ctx: ctx, bin: bin}

	// Another package's lab may be up: --wait queues behind it. The
	// machine is observed once up holds the lab lock would be ideal, but
	// the CLI is another process; the observation only covers this lab's
	// prefix, so other labs coming and going do not disturb it.
	before, err := harness.ObserveMachine(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out := cli.must(t, "up", "--wait", "--nodes", "2", "--prefix", prefix, "--state", state, "--bare")
	t.Logf("herald-lab up returned after %s (including any wait for another package's lab); it says:\n%s", time.Since(start).Round(time.Millisecond), out)
	downDone := false
	t.Cleanup(func() {
		if !downDone {
			out, code := cli.run(t, "down", "--state", state)
			t.Logf("cleanup down (exit %d):\n%s", code, out)
		}
	})
	if !strings.Contains(out, "lab up in") {
		t.Errorf("up printed:\n%s", out)
	}

	s, err := cluster.ReadState(state)
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Layout()
	if err != nil {
		t.Fatal(err)
	}

	// status: every process running, the network there, both nodes Ready.
	out = cli.must(t, "status", "--state", state)
	if strings.Contains(out, "GONE") || strings.Contains(out, "missing") || strings.Count(out, " Ready ") != 2 {
		t.Errorf("status:\n%s", out)
	}
	if got := strings.TrimSpace(cli.must(t, "kubeconfig", "--state", state)); got != s.Kubeconfig {
		t.Errorf("kubeconfig printed %q, want %q", got, s.Kubeconfig)
	}

	// exec: each kind of target, exit codes passed through.
	for target, want := range map[string]string{
		"client": topology.ClientV4.String() + "/",
		"router": topology.RouterLANv4.String() + "/",
		"remote": topology.RemoteV4IP.String() + "/",
		"node2":  l.Nodes[1].IPv4.String() + "/",
	} {
		if out := cli.must(t, "exec", "--state", state, target, "--", "ip", "-br", "addr"); !strings.Contains(out, want) {
			t.Errorf("exec %s: no %s in:\n%s", target, want, out)
		}
	}
	if _, code := cli.run(t, "exec", "--state", state, "client", "--", "sh", "-c", "exit 7"); code != 7 {
		t.Errorf("exec exit code %d, want 7", code)
	}
	if out, code := cli.run(t, "exec", "--state", state, "node9", "--", "true"); code == 0 || !strings.Contains(out, "want a node (node1..node2)") {
		t.Errorf("exec on a bad target: exit %d:\n%s", code, out)
	}
	k := s.KubectlClient()
	if _, err := k.Run(ctx, "run", "web", "--image=registry.k8s.io/echoserver:1.4"); err != nil {
		t.Fatal(err)
	}
	var podIP, cid string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		o, _ := k.Output(ctx, "get", "pod", "web", "-o", "jsonpath={.status.podIP} {.status.containerStatuses[0].containerID}")
		if f := strings.Fields(o); len(f) == 2 {
			podIP, cid = f[0], f[1]
			break
		}
	}
	if podIP == "" {
		t.Fatal("pod web did not start")
	}
	if out := cli.must(t, "exec", "--state", state, "pod/web", "--", "ip", "-br", "addr"); !strings.Contains(out, podIP+"/") {
		t.Errorf("exec pod/web: no %s in:\n%s", podIP, out)
	}
	podPID, _ := strconv.Atoi(cid[strings.LastIndexByte(cid, '/')+1:])

	// A second lab is refused while this one is up, whatever its prefix.
	if out, code := cli.run(t, "up", "--nodes", "1", "--prefix", "hlcla", "--state", filepath.Join(t.TempDir(), "other")); code == 0 || !strings.Contains(out, "another lab is up") {
		t.Errorf("second up: exit %d:\n%s", code, out)
	}
	// And the same state directory is refused too.
	if out, code := cli.run(t, "up", "--state", state); code == 0 || !strings.Contains(out, "is recorded in") {
		t.Errorf("up over the same state: exit %d:\n%s", code, out)
	}

	// A crash: the kubelet of node1 and the API server die by SIGKILL.
	// down still removes everything from the state file.
	for _, r := range []int{s.Kubelets[0].Process.PID, apiServerPID(t, s)} {
		if err := syscall.Kill(r, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	start = time.Now()
	if out := cli.must(t, "down", "--state", state); !strings.Contains(out, "lab down in") {
		t.Errorf("down printed:\n%s", out)
	}
	downDone = true
	t.Logf("TIMING herald-lab down after a crash: %s", time.Since(start).Round(time.Millisecond))

	after, err := harness.ObserveMachine(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if diff := before.Diff(after); diff != "" {
		t.Errorf("down did not leave the machine as before:\n%s", diff)
	}
	if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state directory %s left behind (%v)", state, err)
	}
	if left := processesMentioning(state); len(left) > 0 {
		t.Errorf("processes of the lab still running: %v", left)
	}
	if alive(podPID) {
		t.Errorf("the pod's process %d survived down", podPID)
	}
	if out, _ := cli.run(t, "status", "--state", state); !strings.Contains(out, "no lab") {
		t.Errorf("status after down:\n%s", out)
	}
}

// labCLI runs a herald-lab binary.
type labCLI struct {
	ctx context.Context
	bin string
}

// run runs herald-lab with args and returns its output and exit code; the
// test ends if it cannot run.
func (c labCLI) run(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.CommandContext(c.ctx, c.bin, args...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("herald-lab %v: %v", args, err)
	}
	return string(out), 0
}

// must runs herald-lab with args and returns its output; the test ends if
// it fails.
func (c labCLI) must(t *testing.T, args ...string) string {
	t.Helper()
	out, code := c.run(t, args...)
	if code != 0 {
		t.Fatalf("herald-lab %s: exit %d\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

func apiServerPID(t *testing.T, s cluster.State) int {
	t.Helper()
	cp, err := controlplane.ReadState(s.ControlPlaneDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range cp.Processes {
		if p.Name == controlplane.APIServer {
			return p.PID
		}
	}
	t.Fatal("no kube-apiserver in the control plane's state")
	return 0
}

// processesMentioning lists live processes whose command line contains s.
func processesMentioning(s string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !alive(pid) {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(cmdline), s) {
			out = append(out, e.Name()+" "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return out
}

// alive: the process exists and is not a zombie.
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// needLab skips a test that brings a lab up in short mode or without root
// (the lab builds network namespaces) and fails it when etcd is missing.
func needLab(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("short mode: brings a lab up")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the lab builds network namespaces")
	}
	if _, err := os.Stat(controlplane.DefaultEtcdPath); err != nil {
		t.Fatalf("etcd not found at %s (apt-get install etcd-server): %v", controlplane.DefaultEtcdPath, err)
	}
}
