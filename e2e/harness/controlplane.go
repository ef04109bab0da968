package harness

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/herald-lb/herald/e2e/lab/controlplane"
	"github.com/herald-lb/herald/e2e/lab/k8sbin"
)

// RequireEtcd fails, rather than skips, without etcd: `make test` installs
// it (hack/apt-packages.txt), so its absence is a broken setup, and a skip
// would let the suite pass while proving nothing.
func RequireEtcd(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(controlplane.DefaultEtcdPath); err != nil {
		t.Fatalf("etcd not found at %s (apt-get install etcd-server, or run bash hack/bootstrap.sh): %v", controlplane.DefaultEtcdPath, err)
	}
}

// StartControlPlane builds (or reuses) the multi-call binary, starts a
// control plane in a temporary state directory and stops it when the test
// ends, dumping every log's tail first if the test failed.
func StartControlPlane(t *testing.T, ctx context.Context) (*controlplane.ControlPlane, *k8sbin.Bin) {
	t.Helper()
	RequireEtcd(t)
	bin, err := k8sbin.Ensure(ctx, k8sbin.Options{Log: t.Output()})
	if err != nil {
		t.Fatal(err)
	}
	if bin.Built {
		t.Logf("cold build of the multi-call binary: %s", bin.BuildTime.Round(time.Second))
	}
	start := time.Now()
	cp, err := controlplane.Up(ctx, controlplane.Config{
		StateDir:       t.TempDir(),
		BinDir:         bin.Dir,
		KillWithParent: true,
		Log:            t.Output(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("control plane start to ready: %s", time.Since(start).Round(time.Millisecond))
	// Cleanups run last-registered first: dump logs, then stop.
	t.Cleanup(func() {
		if err := cp.Stop(controlplane.StopOptions{}); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
		for _, r := range cp.State().Processes {
			if r.Alive() {
				t.Errorf("%s (pid %d) still running after Stop", r.Name, r.PID)
			}
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			var b strings.Builder
			cp.WriteLogTails(&b, 60)
			t.Log("logs of the control plane:\n" + b.String())
		}
	})
	return cp, bin
}
