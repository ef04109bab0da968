package labtest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/cluster"
	"github.com/herald-lb/herald/e2e/lab/e2eimages"
)

// initcWebPod initializes in two steps before its app runs: "flaky" fails
// its first try and is retried (restartPolicy Always), "write" leaves a
// file in an emptyDir and takes 5 s, then the app prints the file and
// serves HTTP. Busybox as Conntrack's init container, agnhost as app.
const initcWebPod = `
apiVersion: v1
kind: Pod
metadata:
  name: initc-web
  labels: {app: initc-web}
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 2
  volumes:
  - name: data
    emptyDir: {}
  initContainers:
  - name: flaky
    image: %[2]s
    command: ["/bin/sh", "-c", "if [ -e /data/tried ]; then echo second try; exit 0; fi; touch /data/tried; echo first try fails; exit 3"]
    volumeMounts: [{name: data, mountPath: /data}]
  - name: write
    image: %[2]s
    command: ["/bin/sh", "-c", "echo Pausing start. && echo written-by-init >/data/msg && sleep 5"]
    volumeMounts: [{name: data, mountPath: /data}]
  containers:
  - name: app
    image: %[3]s
    command: ["/bin/sh", "-c", "cat /data/msg && exec /agnhost netexec --http-port=8080"]
    volumeMounts: [{name: data, mountPath: /data}]
    readinessProbe:
      httpGet: {path: /healthz, port: 8080}
      periodSeconds: 1
`

// initcSidecarPod is upstream's "restartable init containers" pod
// (createPodWithRestartableInitContainerOrFail) with more to check: the
// sidecar serves the port the Service names, behind a startup probe; the
// next init container starts only once it has started (it connects to
// it, and would fail and be restarted otherwise); the main container
// takes 3 s to end on SIGTERM, so a sidecar stopped at the same time
// would end before it.
const initcSidecarPod = `
apiVersion: v1
kind: Pod
metadata:
  name: initc-sidecar
  labels: {app: initc-sidecar}
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 15
  initContainers:
  - name: sidecar
    image: %[2]s
    args: ["netexec", "--http-port=8080"]
    restartPolicy: Always
    ports:
    - {name: http-sidecar, containerPort: 8080, protocol: TCP}
    startupProbe:
      tcpSocket: {port: http-sidecar}
      periodSeconds: 1
      failureThreshold: 30
    readinessProbe:
      httpGet: {path: /healthz, port: http-sidecar}
      periodSeconds: 1
  - name: check-sidecar
    image: %[2]s
    command: ["/agnhost", "connect", "--timeout=3s", "127.0.0.1:8080"]
  containers:
  - name: main
    image: %[2]s
    command: ["/bin/sh", "-c", "trap 'echo TERM; sleep 3; exit 0' TERM; echo main running; while true; do sleep 1; done"]
---
apiVersion: v1
kind: Service
metadata:
  name: initc-sidecar
spec:
  selector: {app: initc-sidecar}
  ports:
  - name: http-sidecar
    port: 80
    targetPort: http-sidecar
`

// initcFailPod's init container fails under restartPolicy Never: the pod
// fails and its app container never starts.
const initcFailPod = `
apiVersion: v1
kind: Pod
metadata:
  name: initc-fail
  labels: {app: initc-fail}
spec:
  nodeName: %[1]s
  restartPolicy: Never
  terminationGracePeriodSeconds: 2
  initContainers:
  - name: fail
    image: %[2]s
    command: ["/bin/sh", "-c", "echo failing; exit 3"]
  containers:
  - name: app
    image: %[2]s
    command: ["sleep", "600"]
`

// initcSuite is what TestInitContainers' steps share: the lab, the nodes
// for the pods and the images' references.
type initcSuite struct {
	lab                  *harness.T
	webNode, sidecarNode string
	agnhost, busybox     string
}

// TestInitContainers runs pods with init containers in image mode, as
// upstream's tests write them: regular init containers run in order, each
// to completion (a failed one retried, or failing the pod under
// restartPolicy Never) before the app starts, and leave a file in an
// emptyDir for it; a sidecar (restartable init container) serves the
// named port a Service targets, is reached through the ClusterIP, counts
// toward the pod's readiness, is restarted when it exits, and is stopped
// after the main container on deletion. The kubelet API finds init
// containers for logs and exec.
func TestInitContainers(t *testing.T) {
	if os.Getenv(cluster.ImageModeEnv) != "1" {
		t.Skipf("image mode only (%s=1, as make e2e-image-test sets it): the init containers run busybox and agnhost images", cluster.ImageModeEnv)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the images are in root's podman storage, and the lab builds network namespaces")
	}
	// The images are made by make e2e-images (go run ./cmd/e2e-images),
	// not here: the test only runs what podman's storage holds.
	refs := e2eimages.FrameworkRefs()
	agnhost, busybox := refs[e2eimages.Agnhost], refs[e2eimages.BusyBox]
	for _, ref := range []string{agnhost, busybox} {
		if out, err := exec.Command("podman", "image", "exists", ref).CombinedOutput(); err != nil {
			t.Fatalf("podman's storage has no %s (%v %s): make it with `go run ./cmd/e2e-images` in e2e/", ref, err, out)
		}
	}

	lab := harness.Start(t)
	if len(lab.Lab.Kubelets) < 2 {
		t.Fatalf("the lab has %d nodes, want 2", len(lab.Lab.Kubelets))
	}
	webNode, sidecarNode := lab.Lab.Kubelets[0].Config.NodeName, lab.Lab.Kubelets[1].Config.NodeName
	t.Cleanup(func() { initcDeletePods(lab, "initc-web", "initc-sidecar", "initc-fail") })
	t.Cleanup(func() { _, _, _ = runKubectl(t, lab, nil, "delete", "service", "initc-sidecar", "--ignore-not-found") })
	ic := &initcSuite{lab: lab, webNode: webNode, sidecarNode: sidecarNode, agnhost: agnhost, busybox: busybox}

	t.Run("regular", ic.checkRegular)
	t.Run("sidecar", ic.checkSidecar)
	t.Run("failed", ic.checkFailed)
}

// checkRegular checks regular init containers: run in order, a failed one
// retried, the app started after them with their file; logs and exec
// through the kubelet API.
func (ic *initcSuite) checkRegular(t *testing.T) {
	start := time.Now()
	ic.lab.Apply(fmt.Sprintf(initcWebPod, ic.webNode, ic.busybox, ic.agnhost))
	// While "write" runs: Pending, not initialized, flaky done after
	// one retry, the app waiting with PodInitializing.
	var p *v1.Pod
	ic.lab.Poll(2*time.Minute, "init container write running", func() (bool, string) {
		p = ic.lab.Pod("initc-web")
		ics := p.Status.InitContainerStatuses
		return len(ics) == 2 && ics[1].State.Running != nil, initcDescribe(p)
	})
	t.Logf("while write runs: %s", initcDescribe(p))
	flaky, app := p.Status.InitContainerStatuses[0], p.Status.ContainerStatuses[0]
	if p.Status.Phase != v1.PodPending {
		t.Errorf("phase %s while initializing, want Pending", p.Status.Phase)
	}
	if c := initcCondition(p, v1.PodInitialized); c.Status != v1.ConditionFalse || c.Reason != "ContainersNotInitialized" || !strings.Contains(c.Message, "[write]") {
		t.Errorf("Initialized while write runs: %+v", c)
	}
	if t0 := flaky.State.Terminated; t0 == nil || t0.ExitCode != 0 || t0.Reason != "Completed" || !flaky.Ready || flaky.RestartCount != 1 {
		t.Errorf("flaky: %+v", flaky)
	} else if lt := flaky.LastTerminationState.Terminated; lt == nil || lt.ExitCode != 3 {
		t.Errorf("flaky's first try: %+v", flaky.LastTerminationState)
	}
	if w := app.State.Waiting; w == nil || w.Reason != "PodInitializing" {
		t.Errorf("app while initializing: %+v", app.State)
	}
	// kubectl's own rendering of those statuses.
	if out := ic.lab.Kubectl("get", "pod", "initc-web", "--no-headers"); !strings.Contains(out, "Init:1/2") {
		t.Errorf("kubectl get pod says %q, want Init:1/2", strings.TrimSpace(out))
	}

	pods, _ := ic.lab.ReadyPods("app=initc-web", 1, 2*time.Minute)
	p = &pods[0]
	t.Logf("initc-web ready %s after it was applied: %s", time.Since(start).Round(time.Millisecond), initcDescribe(p))
	write, app := p.Status.InitContainerStatuses[1], p.Status.ContainerStatuses[0]
	if wt := write.State.Terminated; wt == nil || wt.ExitCode != 0 || wt.Reason != "Completed" || !write.Ready || write.RestartCount != 0 {
		t.Errorf("write: %+v", write)
	} else if ar := app.State.Running; ar == nil || ar.StartedAt.Before(&wt.FinishedAt) {
		t.Errorf("app started at %v, before write finished at %v", app.State, wt.FinishedAt)
	}
	for _, ct := range []v1.PodConditionType{v1.PodInitialized, v1.PodReady, v1.ContainersReady} {
		if c := initcCondition(p, ct); c.Status != v1.ConditionTrue {
			t.Errorf("%s: %+v", ct, c)
		}
	}
	// The file, as the app printed it and as it sees it; the init
	// containers' logs through the kubelet API.
	if out, _, code := runKubectl(t, ic.lab, nil, "logs", "initc-web", "-c", "app"); code != 0 || !strings.Contains(out, "written-by-init") {
		t.Errorf("app's log: exit code %d, %q", code, out)
	}
	if out, _, code := runKubectl(t, ic.lab, nil, "exec", "initc-web", "-c", "app", "--", "cat", "/data/msg"); code != 0 || strings.TrimSpace(out) != "written-by-init" {
		t.Errorf("the file in the app: exit code %d, %q", code, out)
	}
	if out, _, code := runKubectl(t, ic.lab, nil, "logs", "initc-web", "-c", "write"); code != 0 || strings.TrimSpace(out) != "Pausing start." {
		t.Errorf("write's log: exit code %d, %q", code, out)
	}
	if out, _, code := runKubectl(t, ic.lab, nil, "logs", "initc-web", "-c", "flaky", "--previous"); code != 0 || strings.TrimSpace(out) != "first try fails" {
		t.Errorf("flaky's previous log: exit code %d, %q", code, out)
	}
	if _, stderr, code := runKubectl(t, ic.lab, nil, "exec", "initc-web", "-c", "write", "--", "true"); code == 0 || !strings.Contains(stderr, "not running") {
		t.Errorf("exec in a completed init container: exit code %d, stderr %q", code, stderr)
	}
}

// checkSidecar checks a sidecar: it serves the Service's named port,
// counts toward readiness, is restarted when it exits and stopped after
// the main container.
func (ic *initcSuite) checkSidecar(t *testing.T) {
	start := time.Now()
	ic.lab.Apply(fmt.Sprintf(initcSidecarPod, ic.sidecarNode, ic.agnhost))
	pods, _ := ic.lab.ReadyPods("app=initc-sidecar", 1, 2*time.Minute)
	p := &pods[0]
	t.Logf("initc-sidecar ready %s after it was applied: %s", time.Since(start).Round(time.Millisecond), initcDescribe(p))
	side, check, main := p.Status.InitContainerStatuses[0], p.Status.InitContainerStatuses[1], p.Status.ContainerStatuses[0]
	if side.State.Running == nil || side.Started == nil || !*side.Started || !side.Ready || side.RestartCount != 0 {
		t.Errorf("sidecar: %+v", side)
	}
	if ct := check.State.Terminated; ct == nil || ct.ExitCode != 0 || check.RestartCount != 0 {
		t.Errorf("check-sidecar (it connects to the sidecar, so it must start after it): %+v", check)
	} else if main.State.Running == nil || main.State.Running.StartedAt.Before(&ct.FinishedAt) {
		t.Errorf("main started at %+v, before check-sidecar finished at %v", main.State, ct.FinishedAt)
	}
	for _, ct := range []v1.PodConditionType{v1.PodInitialized, v1.PodReady, v1.ContainersReady} {
		if c := initcCondition(p, ct); c.Status != v1.ConditionTrue {
			t.Errorf("%s: %+v", ct, c)
		}
	}
	initialized := initcCondition(p, v1.PodInitialized).LastTransitionTime

	// The endpointslice controller resolves the named targetPort
	// from the sidecar's ports.
	var ep string
	ic.lab.Poll(time.Minute, "a ready endpoint of initc-sidecar on port 8080", func() (bool, string) {
		l, err := ic.lab.CS.DiscoveryV1().EndpointSlices("default").List(ic.lab.Ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=initc-sidecar"})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, s := range l.Items {
			for _, port := range s.Ports {
				for _, e := range s.Endpoints {
					ready := e.Conditions.Ready != nil && *e.Conditions.Ready
					seen = append(seen, fmt.Sprintf("%v:%v ready=%v", e.Addresses, initcPort(port), ready))
					if port.Port != nil && *port.Port == 8080 && ready && len(e.Addresses) > 0 && e.Addresses[0] == p.Status.PodIP {
						ep = e.Addresses[0]
					}
				}
			}
		}
		return ep != "", fmt.Sprint(seen)
	})
	svc, err := ic.lab.CS.CoreV1().Services("default").Get(ic.lab.Ctx, "initc-sidecar", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// From the other pod, through the ClusterIP, as upstream's
	// checkServiceReachabilityFromExecPod does.
	url := fmt.Sprintf("http://%s:80/hostname", svc.Spec.ClusterIP)
	ic.lab.Poll(time.Minute, "the sidecar through the Service's ClusterIP", func() (bool, string) {
		out, stderr, code := runKubectl(t, ic.lab, nil, "exec", "initc-web", "-c", "app", "--", "curl", "-g", "-q", "-s", "--connect-timeout", "3", url)
		return code == 0 && strings.TrimSpace(out) == "initc-sidecar", fmt.Sprintf("exit code %d, %q %q", code, out, stderr)
	})
	// The kubelet API finds the sidecar.
	if out, _, code := runKubectl(t, ic.lab, nil, "exec", "initc-sidecar", "-c", "sidecar", "--", "cat", "/etc/hostname"); code != 0 || strings.TrimSpace(out) != "initc-sidecar" {
		t.Errorf("exec in the sidecar: exit code %d, %q", code, out)
	}

	// The sidecar exits: it is restarted (whatever its exit code),
	// the pod stays Running and initialized, the main container
	// runs on.
	_, _, _ = runKubectl(t, ic.lab, nil, "exec", "initc-web", "-c", "app", "--", "curl", "-s", "--max-time", "3", fmt.Sprintf("http://%s:8080/exit?code=1", ep))
	ic.lab.Poll(time.Minute, "the sidecar restarted and ready", func() (bool, string) {
		p = ic.lab.Pod("initc-sidecar")
		s := p.Status.InitContainerStatuses[0]
		return s.RestartCount >= 1 && s.Ready && harness.PodReady(p), initcDescribe(p)
	})
	side, main = p.Status.InitContainerStatuses[0], p.Status.ContainerStatuses[0]
	if lt := side.LastTerminationState.Terminated; lt == nil || lt.ExitCode != 1 {
		t.Errorf("the sidecar's last termination: %+v", side.LastTerminationState)
	}
	if main.RestartCount != 0 || main.State.Running == nil || p.Status.Phase != v1.PodRunning {
		t.Errorf("after the sidecar's restart: phase %s, main %+v", p.Status.Phase, main)
	}
	if c := initcCondition(p, v1.PodInitialized); c.Status != v1.ConditionTrue || !c.LastTransitionTime.Equal(&initialized) {
		t.Errorf("Initialized after the sidecar's restart: %+v (was True since %v)", c, initialized)
	}
	if out, _, code := runKubectl(t, ic.lab, nil, "logs", "initc-sidecar", "-c", "sidecar", "--previous"); code != 0 || !strings.Contains(out, "/exit") {
		t.Errorf("the sidecar's previous log: exit code %d, %q", code, out)
	}

	// Deletion: the main container first (it takes 3 s after
	// SIGTERM), then the sidecar. The last status the kubelet
	// published before the pod went says when each ended.
	w, err := ic.lab.CS.CoreV1().Pods("default").Watch(ic.lab.Ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=initc-sidecar", ResourceVersion: p.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	start = time.Now()
	ic.lab.Kubectl("delete", "pod", "initc-sidecar", "--wait=false")
	var last *v1.Pod
	timeout := time.After(time.Minute)
watching:
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch ended before the pod was deleted")
			}
			if pod, ok := ev.Object.(*v1.Pod); ok {
				last = pod
			}
			if ev.Type == watch.Deleted {
				break watching
			}
		case <-timeout:
			t.Fatal("the pod was not gone a minute after its deletion")
		}
	}
	t.Logf("initc-sidecar gone %s after its deletion; its last status: %s", time.Since(start).Round(time.Millisecond), initcDescribe(last))
	side, main = last.Status.InitContainerStatuses[0], last.Status.ContainerStatuses[0]
	st, mt := side.State.Terminated, main.State.Terminated
	switch {
	case st == nil || mt == nil:
		t.Errorf("not both terminated: sidecar %+v, main %+v", side.State, main.State)
	case mt.ExitCode != 0:
		t.Errorf("main did not end through its SIGTERM trap: %+v", mt)
	case st.FinishedAt.Before(&mt.FinishedAt):
		t.Errorf("the sidecar ended at %v, before the main container at %v", st.FinishedAt, mt.FinishedAt)
	}
}

// checkFailed checks that a failing init container fails the pod under
// restartPolicy Never.
func (ic *initcSuite) checkFailed(t *testing.T) {
	ic.lab.Apply(fmt.Sprintf(initcFailPod, ic.webNode, ic.busybox))
	var p *v1.Pod
	ic.lab.Poll(2*time.Minute, "initc-fail to fail", func() (bool, string) {
		p = ic.lab.Pod("initc-fail")
		return p.Status.Phase == v1.PodFailed, initcDescribe(p)
	})
	t.Logf("initc-fail: %s", initcDescribe(p))
	fail, app := p.Status.InitContainerStatuses[0], p.Status.ContainerStatuses[0]
	if ft := fail.State.Terminated; ft == nil || ft.ExitCode != 3 || ft.Reason != "Error" || fail.RestartCount != 0 {
		t.Errorf("fail: %+v", fail)
	}
	if w := app.State.Waiting; w == nil || w.Reason != "PodInitializing" {
		t.Errorf("app of a pod whose initialization failed: %+v", app.State)
	}
	if c := initcCondition(p, v1.PodInitialized); c.Status != v1.ConditionFalse {
		t.Errorf("Initialized: %+v", c)
	}
	if out := ic.lab.Kubectl("get", "pod", "initc-fail", "--no-headers"); !strings.Contains(out, "Init:Error") {
		t.Errorf("kubectl get pod says %q, want Init:Error", strings.TrimSpace(out))
	}
}

// initcCondition is the pod's condition of that type (empty if none).
func initcCondition(p *v1.Pod, t v1.PodConditionType) v1.PodCondition {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return v1.PodCondition{Type: t}
}

// initcDescribe sums a pod's status up: phase, conditions, and each
// container's state.
func initcDescribe(p *v1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s", p.Status.Phase)
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(&b, " %s=%s", c.Type, c.Status)
	}
	state := func(cs v1.ContainerStatus) string {
		s := "?"
		switch {
		case cs.State.Waiting != nil:
			s = "waiting:" + cs.State.Waiting.Reason
		case cs.State.Running != nil:
			s = "running"
		case cs.State.Terminated != nil:
			s = fmt.Sprintf("terminated:%s(%d)", cs.State.Terminated.Reason, cs.State.Terminated.ExitCode)
		}
		started := cs.Started != nil && *cs.Started
		return fmt.Sprintf(" %s[%s started=%v ready=%v restarts=%d]", cs.Name, s, started, cs.Ready, cs.RestartCount)
	}
	b.WriteString("; init:")
	for _, cs := range p.Status.InitContainerStatuses {
		b.WriteString(state(cs))
	}
	b.WriteString("; containers:")
	for _, cs := range p.Status.ContainerStatuses {
		b.WriteString(state(cs))
	}
	return b.String()
}

func initcPort(p discoveryv1.EndpointPort) string {
	name, port := "", int32(0)
	if p.Name != nil {
		name = *p.Name
	}
	if p.Port != nil {
		port = *p.Port
	}
	return fmt.Sprintf("%s/%d", name, port)
}

// initcDeletePods deletes those of the pods that exist and waits until
// they are gone.
func initcDeletePods(lab *harness.T, names ...string) {
	var present []string
	for _, n := range names {
		if _, err := lab.CS.CoreV1().Pods("default").Get(lab.Ctx, n, metav1.GetOptions{}); err == nil {
			present = append(present, n)
		}
	}
	if len(present) > 0 {
		lab.DeletePods(present...)
	}
}
