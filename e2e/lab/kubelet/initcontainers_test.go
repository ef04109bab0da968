package kubelet

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Container statuses for the tests below, as the lab kubelet's
// containers report them.

func waitingFor(reason string) v1.ContainerStatus {
	return v1.ContainerStatus{State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: reason}}}
}

// runningInit is a regular init container at work: started, not ready.
func runningInit() v1.ContainerStatus {
	return v1.ContainerStatus{State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}, Started: ptr(true)}
}

// completedInit is a regular init container that ended with code.
func completedInit(code int32) v1.ContainerStatus {
	return v1.ContainerStatus{
		State:   v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: code}},
		Ready:   code == 0,
		Started: ptr(false),
	}
}

// crashLoop is a container waiting to be restarted after exiting with
// code.
func crashLoop(code int32) v1.ContainerStatus {
	return v1.ContainerStatus{
		State:                v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: ReasonCrashLoopBackOff}},
		LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: code}},
		Started:              ptr(false),
	}
}

// sidecarRunning is a sidecar that runs; started tells whether its
// startup probe passed (or it has none), ready its readiness.
func sidecarRunning(started, ready bool) v1.ContainerStatus {
	return v1.ContainerStatus{State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}, Started: ptr(started), Ready: ready}
}

func initSpec(name string, sidecar bool) v1.Container {
	c := v1.Container{Name: name}
	if sidecar {
		c.RestartPolicy = ptr(v1.ContainerRestartPolicyAlways)
	}
	return c
}

func TestIsSidecarAndKind(t *testing.T) {
	plain, side := initSpec("a", false), initSpec("b", true)
	never := v1.Container{Name: "c", RestartPolicy: ptr(v1.ContainerRestartPolicy("Never"))}
	if isSidecar(&plain) || !isSidecar(&side) || isSidecar(&never) {
		t.Errorf("isSidecar: plain %v, Always %v, Never %v", isSidecar(&plain), isSidecar(&side), isSidecar(&never))
	}
	if kindOf(&plain, true) != initContainer || kindOf(&side, true) != sidecarContainer || kindOf(&side, false) != appContainer {
		t.Errorf("kindOf: %v %v %v", kindOf(&plain, true), kindOf(&side, true), kindOf(&side, false))
	}
}

func TestShouldRestart(t *testing.T) {
	for _, tc := range []struct {
		kind   containerKind
		policy v1.RestartPolicy
		code   int32
		want   bool
	}{
		{appContainer, v1.RestartPolicyAlways, 0, true},
		{appContainer, v1.RestartPolicyOnFailure, 0, false},
		{appContainer, v1.RestartPolicyOnFailure, 1, true},
		{appContainer, v1.RestartPolicyNever, 1, false},
		// A regular init container that completed never runs again; a
		// failed one is retried unless the pod's policy is Never.
		{initContainer, v1.RestartPolicyAlways, 0, false},
		{initContainer, v1.RestartPolicyAlways, 1, true},
		{initContainer, v1.RestartPolicyOnFailure, 2, true},
		{initContainer, v1.RestartPolicyNever, 1, false},
		// A sidecar is restarted whatever the pod's policy and its code.
		{sidecarContainer, v1.RestartPolicyNever, 0, true},
		{sidecarContainer, v1.RestartPolicyNever, 1, true},
		{sidecarContainer, v1.RestartPolicyOnFailure, 0, true},
	} {
		if got := shouldRestart(tc.kind, tc.policy, tc.code); got != tc.want {
			t.Errorf("%s, policy %s, exit code %d: restart %v, want %v", tc.kind, tc.policy, tc.code, got, tc.want)
		}
	}
}

func TestNextInitStep(t *testing.T) {
	two := []v1.Container{initSpec("setup", false), initSpec("more", false)}
	withSidecar := []v1.Container{initSpec("proxy", true), initSpec("setup", false)}
	none := initStep{start: -1}
	apps := initStep{start: -1, apps: true}
	failed := initStep{start: -1, failed: true}
	for _, tc := range []struct {
		name     string
		inits    []v1.Container
		launched []bool
		statuses []v1.ContainerStatus
		policy   v1.RestartPolicy
		want     initStep
	}{
		{"no init containers", nil, nil, nil, v1.RestartPolicyAlways, apps},
		{"nothing started", two, []bool{false, false}, []v1.ContainerStatus{waitingFor(ReasonPodInitializing), waitingFor(ReasonPodInitializing)}, v1.RestartPolicyAlways, initStep{start: 0}},
		{"first preparing", two, []bool{true, false}, []v1.ContainerStatus{waitingFor(ReasonPodInitializing), waitingFor(ReasonPodInitializing)}, v1.RestartPolicyAlways, none},
		{"first running", two, []bool{true, false}, []v1.ContainerStatus{runningInit(), waitingFor(ReasonPodInitializing)}, v1.RestartPolicyAlways, none},
		{"first completed", two, []bool{true, false}, []v1.ContainerStatus{completedInit(0), waitingFor(ReasonPodInitializing)}, v1.RestartPolicyAlways, initStep{start: 1}},
		{"both completed", two, []bool{true, true}, []v1.ContainerStatus{completedInit(0), completedInit(0)}, v1.RestartPolicyNever, apps},
		{"second running", two, []bool{true, true}, []v1.ContainerStatus{completedInit(0), runningInit()}, v1.RestartPolicyAlways, none},
		{"failed, Never", two, []bool{true, false}, []v1.ContainerStatus{completedInit(1), waitingFor(ReasonPodInitializing)}, v1.RestartPolicyNever, failed},
		{"second failed, Never", two, []bool{true, true}, []v1.ContainerStatus{completedInit(0), completedInit(3)}, v1.RestartPolicyNever, failed},
		{"failed, OnFailure: retried", two, []bool{true, false}, []v1.ContainerStatus{crashLoop(1), waitingFor(ReasonPodInitializing)}, v1.RestartPolicyOnFailure, none},
		{"failed, Always: retried", two, []bool{true, false}, []v1.ContainerStatus{crashLoop(1), waitingFor(ReasonPodInitializing)}, v1.RestartPolicyAlways, none},
		{"cannot start (ErrImagePull)", two, []bool{true, false}, []v1.ContainerStatus{waitingFor(ReasonErrImagePull), waitingFor(ReasonPodInitializing)}, v1.RestartPolicyNever, none},
		{"sidecar running, startup probe pending", withSidecar, []bool{true, false}, []v1.ContainerStatus{sidecarRunning(false, false), waitingFor(ReasonPodInitializing)}, v1.RestartPolicyAlways, none},
		{"sidecar started, not ready", withSidecar, []bool{true, false}, []v1.ContainerStatus{sidecarRunning(true, false), waitingFor(ReasonPodInitializing)}, v1.RestartPolicyAlways, initStep{start: 1}},
		{"sidecar crashed before it started", withSidecar, []bool{true, false}, []v1.ContainerStatus{crashLoop(1), waitingFor(ReasonPodInitializing)}, v1.RestartPolicyNever, none},
		{"sidecar restarting, next completed", withSidecar, []bool{true, true}, []v1.ContainerStatus{crashLoop(1), completedInit(0)}, v1.RestartPolicyAlways, apps},
		{"sidecar last, started", []v1.Container{initSpec("setup", false), initSpec("proxy", true)}, []bool{true, true}, []v1.ContainerStatus{completedInit(0), sidecarRunning(true, true)}, v1.RestartPolicyNever, apps},
	} {
		got := nextInitStep(tc.inits, tc.launched, tc.statuses, tc.policy)
		if got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestPodPhaseWithInitContainers(t *testing.T) {
	pod := func(policy v1.RestartPolicy, inits ...v1.Container) *v1.Pod {
		return &v1.Pod{Spec: v1.PodSpec{RestartPolicy: policy, InitContainers: inits, Containers: []v1.Container{{Name: "app"}}}}
	}
	regular, sidecar := initSpec("setup", false), initSpec("proxy", true)
	initializing := waitingFor(ReasonPodInitializing)
	for _, tc := range []struct {
		name        string
		pod         *v1.Pod
		inits, apps []v1.ContainerStatus
		terminating bool
		want        v1.PodPhase
	}{
		{"init waiting", pod(v1.RestartPolicyAlways, regular), []v1.ContainerStatus{initializing}, []v1.ContainerStatus{initializing}, false, v1.PodPending},
		{"init running", pod(v1.RestartPolicyAlways, regular), []v1.ContainerStatus{runningInit()}, []v1.ContainerStatus{initializing}, false, v1.PodPending},
		{"init completed, app starting", pod(v1.RestartPolicyAlways, regular), []v1.ContainerStatus{completedInit(0)}, []v1.ContainerStatus{initializing}, false, v1.PodPending},
		{"init completed, app running", pod(v1.RestartPolicyAlways, regular), []v1.ContainerStatus{completedInit(0)}, []v1.ContainerStatus{running()}, false, v1.PodRunning},
		{"init failed, Never", pod(v1.RestartPolicyNever, regular), []v1.ContainerStatus{completedInit(1)}, []v1.ContainerStatus{initializing}, false, v1.PodFailed},
		{"init crash loop, OnFailure", pod(v1.RestartPolicyOnFailure, regular), []v1.ContainerStatus{crashLoop(1)}, []v1.ContainerStatus{initializing}, false, v1.PodPending},
		{"init completed, app done, Never", pod(v1.RestartPolicyNever, regular), []v1.ContainerStatus{completedInit(0)}, []v1.ContainerStatus{exited(0)}, false, v1.PodSucceeded},
		{"deleted while initializing", pod(v1.RestartPolicyAlways, regular), []v1.ContainerStatus{completedInit(137)}, []v1.ContainerStatus{initializing}, true, v1.PodPending},
		{"sidecar not started yet", pod(v1.RestartPolicyAlways, sidecar), []v1.ContainerStatus{sidecarRunning(false, false)}, []v1.ContainerStatus{initializing}, false, v1.PodPending},
		{"sidecar started, app starting", pod(v1.RestartPolicyAlways, sidecar), []v1.ContainerStatus{sidecarRunning(true, true)}, []v1.ContainerStatus{initializing}, false, v1.PodPending},
		{"sidecar and app running", pod(v1.RestartPolicyAlways, sidecar), []v1.ContainerStatus{sidecarRunning(true, true)}, []v1.ContainerStatus{running()}, false, v1.PodRunning},
		{"sidecar restarting, app running", pod(v1.RestartPolicyAlways, sidecar), []v1.ContainerStatus{crashLoop(1)}, []v1.ContainerStatus{running()}, false, v1.PodRunning},
		{"sidecar restarting unstarted after app ran", pod(v1.RestartPolicyAlways, sidecar), []v1.ContainerStatus{sidecarRunning(false, false)}, []v1.ContainerStatus{running()}, false, v1.PodRunning},
		// A job-like pod: the app is done, the sidecar still runs until
		// the kubelet stops it; then the app's result decides.
		{"app done, sidecar running", pod(v1.RestartPolicyNever, sidecar), []v1.ContainerStatus{sidecarRunning(true, true)}, []v1.ContainerStatus{exited(0)}, false, v1.PodRunning},
		{"app done, sidecar stopped", pod(v1.RestartPolicyNever, sidecar), []v1.ContainerStatus{exited(143)}, []v1.ContainerStatus{exited(0)}, false, v1.PodSucceeded},
		{"app failed, sidecar stopped", pod(v1.RestartPolicyOnFailure, sidecar), []v1.ContainerStatus{exited(143)}, []v1.ContainerStatus{exited(2)}, false, v1.PodRunning},
		{"app failed, sidecar stopped, Never", pod(v1.RestartPolicyNever, sidecar), []v1.ContainerStatus{exited(143)}, []v1.ContainerStatus{exited(2)}, false, v1.PodFailed},
		{"deleted, all stopped", pod(v1.RestartPolicyAlways, regular, sidecar), []v1.ContainerStatus{completedInit(0), exited(143)}, []v1.ContainerStatus{exited(0)}, true, v1.PodSucceeded},
		{"statuses missing", pod(v1.RestartPolicyAlways, regular), nil, []v1.ContainerStatus{running()}, false, v1.PodPending},
	} {
		got := podPhase(tc.pod, statusInput{initContainers: tc.inits, containers: tc.apps, terminating: tc.terminating})
		if got != tc.want {
			t.Errorf("%s: phase %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestPodStatusWithInitContainers(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	pod := &v1.Pod{Spec: v1.PodSpec{
		RestartPolicy:  v1.RestartPolicyAlways,
		InitContainers: []v1.Container{initSpec("setup", false), initSpec("proxy", true)},
		Containers:     []v1.Container{{Name: "app"}},
	}}
	get := func(st v1.PodStatus, typ v1.PodConditionType) v1.PodCondition {
		t.Helper()
		for _, c := range st.Conditions {
			if c.Type == typ {
				return c
			}
		}
		t.Fatalf("no %s condition in %+v", typ, st.Conditions)
		return v1.PodCondition{}
	}
	named := func(name string, cs v1.ContainerStatus) v1.ContainerStatus {
		cs.Name = name
		return cs
	}
	initializing := waitingFor(ReasonPodInitializing)

	// The first init container runs: nothing is initialized or ready.
	in := statusInput{sandboxReady: true, now: t0,
		initContainers: []v1.ContainerStatus{named("setup", runningInit()), named("proxy", initializing)},
		containers:     []v1.ContainerStatus{named("app", initializing)}}
	st := podStatus(pod, in)
	if st.Phase != v1.PodPending || len(st.InitContainerStatuses) != 2 || st.InitContainerStatuses[0].Name != "setup" {
		t.Errorf("initializing: phase %s, init statuses %+v", st.Phase, st.InitContainerStatuses)
	}
	if c := get(st, v1.PodInitialized); c.Status != v1.ConditionFalse || c.Reason != "ContainersNotInitialized" ||
		c.Message != "containers with incomplete status: [setup proxy]" {
		t.Errorf("Initialized while the first runs: %+v", c)
	}
	if c := get(st, v1.PodReady); c.Status != v1.ConditionFalse || c.Message != "containers with unready status: [proxy app]" {
		t.Errorf("Ready while initializing: %+v", c)
	}

	// setup completed and the sidecar started (not ready yet): that
	// is initialized, as a sidecar needs only to have started.
	pod.Status = st
	in.now = metav1.NewTime(t0.Add(time.Minute))
	in.initContainers = []v1.ContainerStatus{named("setup", completedInit(0)), named("proxy", sidecarRunning(true, false))}
	st = podStatus(pod, in)
	if c := get(st, v1.PodInitialized); c.Status != v1.ConditionTrue || c.Reason != "" || c.LastTransitionTime != in.now {
		t.Errorf("Initialized once setup completed and proxy started: %+v", c)
	}
	if st.Phase != v1.PodPending {
		t.Errorf("app not started yet: phase %s", st.Phase)
	}

	// The app runs and is ready, the sidecar not: the pod is not ready,
	// for the sidecar's sake.
	pod.Status = st
	in.containers = []v1.ContainerStatus{named("app", running())}
	st = podStatus(pod, in)
	if c := get(st, v1.PodReady); st.Phase != v1.PodRunning || c.Status != v1.ConditionFalse || c.Message != "containers with unready status: [proxy]" {
		t.Errorf("sidecar unready: phase %s, Ready %+v", st.Phase, c)
	}
	if c := get(st, v1.ContainersReady); c.Status != v1.ConditionFalse {
		t.Errorf("ContainersReady with the sidecar unready: %+v", c)
	}

	// All ready.
	pod.Status = st
	in.initContainers[1] = named("proxy", sidecarRunning(true, true))
	st = podStatus(pod, in)
	if c := get(st, v1.PodReady); c.Status != v1.ConditionTrue {
		t.Errorf("all ready: %+v", c)
	}
	initTime := get(st, v1.PodInitialized).LastTransitionTime

	// The sidecar restarts after the app has run: the pod stays
	// initialized (and Running), but is not ready.
	pod.Status = st
	in.now = metav1.NewTime(t0.Add(2 * time.Minute))
	in.initContainers[1] = named("proxy", crashLoop(1))
	st = podStatus(pod, in)
	if c := get(st, v1.PodInitialized); c.Status != v1.ConditionTrue || c.LastTransitionTime != initTime {
		t.Errorf("Initialized while the sidecar restarts: %+v", c)
	}
	if c := get(st, v1.PodReady); st.Phase != v1.PodRunning || c.Status != v1.ConditionFalse {
		t.Errorf("sidecar restarting: phase %s, Ready %+v", st.Phase, c)
	}

	// A failed initialization under Never: the pod fails.
	never := pod.DeepCopy()
	never.Spec.RestartPolicy = v1.RestartPolicyNever
	never.Status = v1.PodStatus{}
	st = podStatus(never, statusInput{now: t0,
		initContainers: []v1.ContainerStatus{named("setup", completedInit(1)), named("proxy", initializing)},
		containers:     []v1.ContainerStatus{named("app", initializing)}})
	if c := get(st, v1.PodInitialized); st.Phase != v1.PodFailed || c.Status != v1.ConditionFalse || c.Message != "containers with incomplete status: [setup proxy]" {
		t.Errorf("failed init: phase %s, Initialized %+v", st.Phase, c)
	}
	if c := get(st, v1.PodReady); c.Status != v1.ConditionFalse || c.Reason != "PodFailed" {
		t.Errorf("failed init: Ready %+v", c)
	}

	// A job-like pod that succeeded: Initialized says PodCompleted.
	never.Status = v1.PodStatus{}
	st = podStatus(never, statusInput{now: t0,
		initContainers: []v1.ContainerStatus{named("setup", completedInit(0)), named("proxy", exited(143))},
		containers:     []v1.ContainerStatus{named("app", exited(0))}})
	if c := get(st, v1.PodInitialized); st.Phase != v1.PodSucceeded || c.Status != v1.ConditionTrue || c.Reason != "PodCompleted" {
		t.Errorf("completed: phase %s, Initialized %+v", st.Phase, c)
	}
	if c := get(st, v1.PodReady); c.Status != v1.ConditionFalse || c.Reason != "PodCompleted" {
		t.Errorf("completed: Ready %+v", c)
	}

	// No init containers: no init statuses, Initialized at once.
	plain := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app"}}}}
	st = podStatus(plain, statusInput{now: t0, containers: []v1.ContainerStatus{named("app", running())}})
	if c := get(st, v1.PodInitialized); st.InitContainerStatuses != nil || c.Status != v1.ConditionTrue {
		t.Errorf("no init containers: %+v, Initialized %+v", st.InitContainerStatuses, c)
	}
}

func TestWaitingStatuses(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{
		InitContainers: []v1.Container{{Name: "setup", Image: "busybox"}},
		Containers:     []v1.Container{{Name: "app", Image: "agnhost"}},
	}}
	if r := waitingReason(pod); r != ReasonPodInitializing {
		t.Errorf("with init containers: %s", r)
	}
	got := waitingStatuses(pod.Spec.InitContainers, waitingReason(pod))
	if len(got) != 1 || got[0].Name != "setup" || got[0].Image != "busybox" || got[0].State.Waiting == nil || got[0].State.Waiting.Reason != ReasonPodInitializing {
		t.Errorf("init statuses: %+v", got)
	}
	pod.Spec.InitContainers = nil
	if r := waitingReason(pod); r != ReasonContainerCreating {
		t.Errorf("without init containers: %s", r)
	}
	if waitingStatuses(nil, ReasonContainerCreating) != nil {
		t.Error("statuses for no containers")
	}
}
