package labtest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/cluster"
	"github.com/herald-lb/herald/e2e/lab/e2eimages"
)

// probesPod has exec probes only, as upstream's tests write them: ready
// while /tmp/ready exists (its readiness command prints why it fails),
// alive until /tmp/die appears. Each run of the container starts on a
// fresh root filesystem, so a run restarted for its liveness probe has
// neither file.
const probesPod = `
apiVersion: v1
kind: Pod
metadata:
  name: probes
  labels: {app: probes}
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: %[2]s
    command: ["/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
    readinessProbe:
      exec:
        command: ["/bin/sh", "-c", "cat /tmp/ready || { echo not-ready-yet; exit 1; }"]
      periodSeconds: 1
      failureThreshold: 2
    livenessProbe:
      exec:
        command: ["/bin/sh", "-c", "test ! -e /tmp/die"]
      periodSeconds: 1
      failureThreshold: 2
`

// probesTimeoutPod's readiness command outlasts the probe's 1 s
// timeout: it must never be ready.
const probesTimeoutPod = `
apiVersion: v1
kind: Pod
metadata:
  name: probes-timeout
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: %[2]s
    command: ["/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
    readinessProbe:
      exec:
        command: ["/bin/sh", "-c", "sleep 3"]
      timeoutSeconds: 1
      periodSeconds: 1
`

// probesPreStopPod's preStop hook writes to the container's output and
// takes 4 s; the container prints TERM when the signal comes and takes
// 2 s more to end, which leaves time to read its log.
const probesPreStopPod = `
apiVersion: v1
kind: Pod
metadata:
  name: probes-prestop
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 30
  containers:
  - name: main
    image: %[2]s
    command: ["/bin/sh", "-c", "trap 'echo TERM $(date +%%s); sleep 2; exit 0' TERM; echo started; while true; do sleep 1; done"]
    lifecycle:
      preStop:
        exec:
          command: ["/bin/sh", "-c", "echo prestop $(date +%%s) >/proc/1/fd/1; sleep 4"]
`

// TestProbes runs exec readiness and liveness probes in image mode (the
// upstream suite's "endpoints for unready pods" test has an exec
// readiness probe): the command runs inside the container, its exit code
// decides, its output is in the Unhealthy event, a command that outlasts
// timeoutSeconds fails; readiness follows the container's files both
// ways, and a failing liveness probe restarts the container, which comes
// back unready on a fresh root filesystem.
func TestProbes(t *testing.T) {
	if os.Getenv(cluster.ImageModeEnv) != "1" {
		t.Skipf("image mode only (%s=1, as make e2e-image-test sets it): the probes run inside a busybox image", cluster.ImageModeEnv)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the images are in root's podman storage, and the lab builds network namespaces")
	}
	busybox := e2eimages.FrameworkRefs()[e2eimages.BusyBox]
	if out, err := exec.Command("podman", "image", "exists", busybox).CombinedOutput(); err != nil {
		t.Fatalf("podman's storage has no %s (%v %s): make it with `go run ./cmd/e2e-images` in e2e/", busybox, err, out)
	}
	lab := harness.Start(t)
	node := lab.Lab.Kubelets[0].Config.NodeName
	t.Cleanup(func() { initcDeletePods(lab, "probes", "probes-timeout", "probes-prestop") })
	lab.Apply(fmt.Sprintf(probesPod, node, busybox))
	lab.Apply(fmt.Sprintf(probesTimeoutPod, node, busybox))
	lab.Apply(fmt.Sprintf(probesPreStopPod, node, busybox))

	main := func() v1.ContainerStatus {
		p := lab.Pod("probes")
		if len(p.Status.ContainerStatuses) == 0 {
			return v1.ContainerStatus{}
		}
		return p.Status.ContainerStatuses[0]
	}
	exe := func(cmd ...string) {
		args := append([]string{"exec", "probes", "--"}, cmd...)
		if out, errOut, code := runKubectl(t, lab, nil, args...); code != 0 {
			t.Fatalf("kubectl %s: exit %d: %s %s", strings.Join(args, " "), code, out, errOut)
		}
	}

	// Running but not ready: the readiness command fails, and says why.
	lab.Poll(2*time.Minute, "probes running", func() (bool, string) {
		cs := main()
		return cs.State.Running != nil, initcDescribe(lab.Pod("probes"))
	})
	lab.Poll(30*time.Second, "an Unhealthy event with the readiness command's output", func() (bool, string) {
		msgs := probeEvents(lab, "probes", "Unhealthy")
		for _, m := range msgs {
			if strings.HasPrefix(m, "Readiness probe failed") && strings.Contains(m, "not-ready-yet") {
				return true, m
			}
		}
		return false, strings.Join(msgs, " | ")
	})
	if cs := main(); cs.Ready {
		t.Fatalf("ready before /tmp/ready exists: %+v", cs)
	}

	// Ready once the file is there, unready again once it is gone.
	exe("touch", "/tmp/ready")
	start := time.Now()
	lab.Poll(30*time.Second, "ready after touch /tmp/ready", func() (bool, string) {
		cs := main()
		return cs.Ready, initcDescribe(lab.Pod("probes"))
	})
	t.Logf("ready %s after the file appeared", time.Since(start).Round(time.Millisecond))
	exe("rm", "/tmp/ready")
	start = time.Now()
	lab.Poll(30*time.Second, "unready after rm /tmp/ready", func() (bool, string) {
		cs := main()
		return !cs.Ready, initcDescribe(lab.Pod("probes"))
	})
	t.Logf("unready %s after the file went (failureThreshold 2, period 1 s)", time.Since(start).Round(time.Millisecond))

	// Liveness: /tmp/die makes the probe fail twice, the run is killed
	// and restarted; the new run has no /tmp/die (it stays up) and no
	// /tmp/ready (unready).
	exe("touch", "/tmp/ready")
	lab.Poll(30*time.Second, "ready again", func() (bool, string) { return main().Ready, initcDescribe(lab.Pod("probes")) })
	exe("touch", "/tmp/die")
	start = time.Now()
	lab.Poll(60*time.Second, "restarted by its liveness probe", func() (bool, string) {
		cs := main()
		return cs.RestartCount == 1 && cs.State.Running != nil, initcDescribe(lab.Pod("probes"))
	})
	t.Logf("restarted %s after /tmp/die appeared", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(strings.Join(probeEvents(lab, "probes", "Killing"), " | "), "failed liveness probe") {
		t.Errorf("no Killing event for the liveness probe: %q", probeEvents(lab, "probes", "Killing"))
	}
	time.Sleep(4 * time.Second) // four more liveness periods: the new run must stay
	if cs := main(); cs.RestartCount != 1 || cs.State.Running == nil || cs.Ready {
		t.Errorf("after the restart, want running, unready, 1 restart: %s", initcDescribe(lab.Pod("probes")))
	}

	checkPreStop(t, lab)

	// A command that outlasts its timeout fails the probe.
	p := lab.Pod("probes-timeout")
	if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Running == nil || p.Status.ContainerStatuses[0].Ready {
		t.Errorf("probes-timeout: want running and never ready: %s", initcDescribe(p))
	}
	timedOut := false
	for _, m := range probeEvents(lab, "probes-timeout", "Unhealthy") {
		timedOut = timedOut || strings.Contains(m, "timed out")
	}
	if !timedOut {
		t.Errorf("probes-timeout: no Unhealthy event saying the command timed out: %q", probeEvents(lab, "probes-timeout", "Unhealthy"))
	}
}

// checkPreStop deletes probes-prestop and reads, from its log while it
// terminates, that the hook ran first and the signal came once it was
// done (4 s later, well within the 30 s grace period).
func checkPreStop(t *testing.T, lab *harness.T) {
	lab.Poll(2*time.Minute, "probes-prestop running", func() (bool, string) {
		out, _ := lab.K.Run(lab.Ctx, "logs", "probes-prestop")
		return strings.Contains(out, "started"), initcDescribe(lab.Pod("probes-prestop"))
	})
	deleted := time.Now()
	lab.Kubectl("delete", "pod", "probes-prestop", "--wait=false")
	var log string
	lab.Poll(20*time.Second, "TERM in probes-prestop's log", func() (bool, string) {
		log, _ = lab.K.Run(lab.Ctx, "logs", "probes-prestop")
		return strings.Contains(log, "TERM"), log
	})
	var hookAt, termAt int64
	for _, line := range strings.Split(log, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "prestop" {
			fmt.Sscan(f[1], &hookAt)
		}
		if len(f) == 2 && f[0] == "TERM" {
			fmt.Sscan(f[1], &termAt)
		}
	}
	t.Logf("deleted at %d; preStop hook at %d, SIGTERM at %d; log %q", deleted.Unix(), hookAt, termAt, log)
	if hookAt == 0 || termAt == 0 {
		t.Fatalf("want a prestop line then a TERM line in the log: %q", log)
	}
	// The hook sleeps 4 s after writing; the shell traps the signal
	// within the second its sleep 1 takes.
	if d := termAt - hookAt; d < 4 || d > 6 {
		t.Errorf("SIGTERM came %d s after the preStop hook started, want 4-6 (the hook runs first, to its end)", d)
	}
}

// probeEvents are the messages of the pod's events with that reason.
func probeEvents(lab *harness.T, pod, reason string) []string {
	evs, err := lab.CS.CoreV1().Events("default").List(lab.Ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + pod + ",reason=" + reason,
	})
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, e := range evs.Items {
		out = append(out, e.Message)
	}
	return out
}
