package cluster

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/herald-lb/herald/e2e/lab/topology"
)

// TestReclaimDeadLab leaves a lab's network up as a killed run does (a pod
// namespace included, no owner record) and checks that ReclaimDead keeps
// it while a process runs in one of its namespaces and removes all of it
// once none does: the next lab on the machine must not wait on the dead.
func TestReclaimDeadLab(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const prefix = "hlrcl"
	release, err := topology.Lock(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	l, err := topology.Plan(prefix, 3)
	if err != nil {
		t.Fatal(err)
	}
	existing, err := topology.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "delete", prefix+"-pod-x").Run()
		if err := topology.Down(context.Background(), topology.Exec{}, prefix); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if err := topology.Up(ctx, topology.Exec{}, l, existing); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ip", "netns", "add", prefix+"-pod-x").CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}

	// A live process in a node's namespace: the lab is in use.
	sleeper := exec.Command("ip", "netns", "exec", l.Nodes[1].Netns, "sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _, _ = sleeper.Process.Wait() })
	waitFor(t, func() bool {
		out, _ := exec.Command("ip", "netns", "pids", l.Nodes[1].Netns).Output()
		return len(out) > 0
	})
	gone, err := ReclaimDead(ctx, nil)
	if err != nil || gone {
		t.Fatalf("ReclaimDead with a process in %s: gone=%v err=%v, want the lab kept", l.Nodes[1].Netns, gone, err)
	}
	if up, _ := topology.LabUp(ctx); !up {
		t.Fatal("the live lab's network was removed")
	}

	_ = sleeper.Process.Kill()
	_, _ = sleeper.Process.Wait()
	gone, err = ReclaimDead(ctx, nil)
	if err != nil || !gone {
		t.Fatalf("ReclaimDead on the dead lab: gone=%v err=%v", gone, err)
	}
	after, err := topology.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if left := labNamespaces(after, prefix); len(left) > 0 {
		t.Errorf("namespaces left: %v", left)
	}
	if rest, _ := topology.Teardown(prefix, after); len(rest) > 0 {
		t.Errorf("network left: %v", rest)
	}
	if up, _ := topology.LabUp(ctx); up {
		t.Error("the host still has the lab's LAN address")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met in 10s")
}
