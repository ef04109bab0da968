package kubelet

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// statusInput is what the pod worker knows about a pod.
type statusInput struct {
	// hostIPs are the node's, podIP(v6) the pod's (empty without).
	hostIPs []string
	podIP   string
	podIPv6 string
	// sandboxReady: the pod's namespace and address exist.
	sandboxReady bool
	// initContainers and containers are the statuses of the pod's init
	// containers and app containers, each in spec order.
	initContainers []v1.ContainerStatus
	containers     []v1.ContainerStatus
	startTime      *metav1.Time
	// terminating: the pod is being deleted, nothing will restart.
	terminating bool
	now         metav1.Time
}

// isSidecar tells whether an init container is a restartable one (a
// sidecar): restartPolicy Always on the init container itself.
func isSidecar(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

// hasRun tells whether a container has run at some point: it runs, or
// ran and ended (and may be waiting to run again).
func hasRun(cs *v1.ContainerStatus) bool {
	return cs.State.Running != nil || cs.State.Terminated != nil || cs.LastTerminationState.Terminated != nil
}

// appStarted tells whether any app container of the pod has run: then
// the pod was initialized, even if a sidecar is being restarted now.
func appStarted(statuses []v1.ContainerStatus) bool {
	for i := range statuses {
		if hasRun(&statuses[i]) {
			return true
		}
	}
	return false
}

// initDone tells whether init container c lets the next one start: a
// regular init container has completed (exit code 0), a sidecar has
// started (running, its startup probe passed if it has one).
func initDone(c *v1.Container, cs *v1.ContainerStatus) bool {
	if isSidecar(c) {
		return cs.State.Running != nil && cs.Started != nil && *cs.Started
	}
	return cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0
}

// initStep is what comes next in a pod's initialization.
type initStep struct {
	// start is the init container to start now, or -1.
	start int
	// apps: every init container is done; the app containers start.
	apps bool
	// failed: a regular init container failed and the pod's
	// restartPolicy is Never: the pod has failed.
	failed bool
}

// nextInitStep is what the kubelet does next to initialize a pod, given
// which init containers it has started (ever) and their statuses: as the
// real kubelet, it looks at the last one started; once that one is done
// the next one starts, and after the last the app containers. A
// regular init container that fails is restarted (by its container's own
// loop) unless the pod's restartPolicy is Never, which fails the pod.
// Restarts of started containers are not its business.
func nextInitStep(inits []v1.Container, started []bool, statuses []v1.ContainerStatus, policy v1.RestartPolicy) initStep {
	last := -1
	for i := range inits {
		if i < len(started) && started[i] {
			last = i
		}
	}
	switch {
	case len(inits) == 0:
		return initStep{start: -1, apps: true}
	case last < 0:
		return initStep{start: 0}
	case last >= len(statuses):
		return initStep{start: -1}
	}
	c, cs := &inits[last], &statuses[last]
	if !initDone(c, cs) {
		if !isSidecar(c) && policy == v1.RestartPolicyNever && cs.State.Terminated != nil {
			return initStep{start: -1, failed: true}
		}
		return initStep{start: -1}
	}
	if last == len(inits)-1 {
		return initStep{start: -1, apps: true}
	}
	return initStep{start: last + 1}
}

// podPhase follows the kubelet's rules (pkg/kubelet's getPhase): Pending
// while a regular init container has not completed, a sidecar has not
// started before the app containers ran, or an app container waits to
// start for the first time; Failed once a regular init container failed
// under restartPolicy Never; Running while a container (app or sidecar)
// runs or an app container will be restarted; Succeeded/Failed once all
// app containers have stopped for good. Sidecars that stopped do not
// count.
func podPhase(pod *v1.Pod, in statusInput) v1.PodPhase {
	n := len(pod.Spec.Containers)
	if n == 0 || len(in.containers) != n || len(in.initContainers) != len(pod.Spec.InitContainers) {
		return v1.PodPending
	}
	var pendingInit, pendingSidecars, failedInit int
	var running, waiting, stopped, succeeded int
	for i := range pod.Spec.InitContainers {
		cs := &in.initContainers[i]
		if isSidecar(&pod.Spec.InitContainers[i]) {
			switch {
			case cs.State.Running != nil:
				running++
				if cs.Started == nil || !*cs.Started {
					pendingSidecars++
				}
			case cs.State.Terminated != nil, cs.LastTerminationState.Terminated != nil:
				// Stopped, or waiting to be restarted: not counted.
			default:
				pendingSidecars++
				waiting++
			}
			continue
		}
		switch {
		case cs.State.Terminated != nil:
			if cs.State.Terminated.ExitCode != 0 {
				failedInit++
			}
		case cs.State.Waiting != nil && cs.LastTerminationState.Terminated != nil:
			if cs.LastTerminationState.Terminated.ExitCode != 0 {
				failedInit++
			}
		default:
			pendingInit++
		}
	}
	for _, cs := range in.containers {
		switch {
		case cs.State.Running != nil:
			running++
		case cs.State.Terminated != nil:
			stopped++
			if cs.State.Terminated.ExitCode == 0 {
				succeeded++
			}
		case cs.State.Waiting != nil && cs.LastTerminationState.Terminated != nil:
			stopped++ // waiting to be restarted
			if cs.LastTerminationState.Terminated.ExitCode == 0 {
				succeeded++
			}
		default:
			waiting++
		}
	}
	if failedInit > 0 && pod.Spec.RestartPolicy == v1.RestartPolicyNever {
		return v1.PodFailed
	}
	if in.terminating && running == 0 && waiting == 0 && pendingInit == 0 {
		if succeeded == n {
			return v1.PodSucceeded
		}
		return v1.PodFailed
	}
	switch {
	case pendingInit > 0, pendingSidecars > 0 && !appStarted(in.containers):
		return v1.PodPending
	case waiting > 0:
		return v1.PodPending
	case running > 0:
		return v1.PodRunning
	case stopped == n:
		switch pod.Spec.RestartPolicy {
		case v1.RestartPolicyNever:
			if succeeded == n {
				return v1.PodSucceeded
			}
			return v1.PodFailed
		case v1.RestartPolicyOnFailure:
			if succeeded == n {
				return v1.PodSucceeded
			}
			return v1.PodRunning
		default:
			return v1.PodRunning
		}
	}
	return v1.PodPending
}

// initialized is the pod's Initialized condition (the kubelet's
// GeneratePodInitializedCondition): true once every regular init
// container has completed and every sidecar has started, and from then
// on as long as app containers have run (a sidecar's restart does not
// undo it); a succeeded pod says PodCompleted.
func initialized(pod *v1.Pod, in statusInput, phase v1.PodPhase) (ok bool, reason, msg string) {
	if len(pod.Spec.InitContainers) == 0 {
		return true, "", ""
	}
	if phase == v1.PodSucceeded && len(in.initContainers) == len(pod.Spec.InitContainers) {
		return true, "PodCompleted", ""
	}
	if appStarted(in.containers) {
		return true, "", ""
	}
	var incomplete []string
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if i >= len(in.initContainers) {
			incomplete = append(incomplete, c.Name)
			continue
		}
		cs := &in.initContainers[i]
		done := cs.Ready
		if isSidecar(c) {
			done = cs.Started != nil && *cs.Started
		}
		if !done {
			incomplete = append(incomplete, c.Name)
		}
	}
	if len(incomplete) > 0 {
		return false, "ContainersNotInitialized", fmt.Sprintf("containers with incomplete status: [%s]", strings.Join(incomplete, " "))
	}
	return true, "", ""
}

// unreadyContainers names the containers that count toward the pod's
// readiness and are not ready: sidecars first, then app containers, in
// spec order (all of them while their statuses are not known).
func unreadyContainers(pod *v1.Pod, in statusInput) []string {
	var out []string
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if isSidecar(c) && (len(in.initContainers) != len(pod.Spec.InitContainers) || !in.initContainers[i].Ready) {
			out = append(out, c.Name)
		}
	}
	for i, c := range pod.Spec.Containers {
		if len(in.containers) != len(pod.Spec.Containers) || !in.containers[i].Ready {
			out = append(out, c.Name)
		}
	}
	return out
}

// podStatus computes the status the kubelet reports. Conditions keep
// their lastTransitionTime while their status does not change;
// conditions the kubelet does not own (PodScheduled, DisruptionTarget,
// readiness gates) are kept as they are.
func podStatus(pod *v1.Pod, in statusInput) v1.PodStatus {
	old := pod.Status
	phase := podPhase(pod, in)
	// A pod never leaves a terminal phase (the API server refuses it).
	if old.Phase == v1.PodSucceeded || old.Phase == v1.PodFailed {
		phase = old.Phase
	}
	st := v1.PodStatus{
		Phase:                 phase,
		StartTime:             in.startTime,
		InitContainerStatuses: in.initContainers,
		ContainerStatuses:     in.containers,
		QOSClass:              old.QOSClass,
	}
	for _, ip := range in.hostIPs {
		st.HostIPs = append(st.HostIPs, v1.HostIP{IP: ip})
	}
	if len(st.HostIPs) > 0 {
		st.HostIP = st.HostIPs[0].IP
	}
	if in.podIP != "" {
		st.PodIP = in.podIP
		st.PodIPs = []v1.PodIP{{IP: in.podIP}}
		if in.podIPv6 != "" {
			st.PodIPs = append(st.PodIPs, v1.PodIP{IP: in.podIPv6})
		}
	}

	// cond is a kubelet-owned condition; reason and msg go with a False
	// status (and with True only when given for it).
	cond := func(t v1.PodConditionType, ok bool, reason, msg string) v1.PodCondition {
		s := v1.ConditionFalse
		if ok {
			s = v1.ConditionTrue
		}
		c := v1.PodCondition{Type: t, Status: s, Reason: reason, Message: msg, LastTransitionTime: in.now}
		for _, o := range old.Conditions {
			if o.Type == t && o.Status == s {
				c.LastTransitionTime = o.LastTransitionTime
			}
		}
		return c
	}
	var ready bool
	var reason, msg string
	switch unready := unreadyContainers(pod, in); {
	case phase == v1.PodSucceeded:
		reason = "PodCompleted"
	case phase == v1.PodFailed:
		reason = "PodFailed"
	case len(unready) > 0:
		reason, msg = "ContainersNotReady", fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))
	default:
		ready = true
	}
	containersReady := cond(v1.ContainersReady, ready, reason, msg)
	// Ready also needs the readiness gates' conditions to be True.
	if ready {
		var missing []string
		for _, g := range pod.Spec.ReadinessGates {
			found := false
			for _, o := range old.Conditions {
				if o.Type == g.ConditionType && o.Status == v1.ConditionTrue {
					found = true
				}
			}
			if !found {
				missing = append(missing, string(g.ConditionType))
			}
		}
		if len(missing) > 0 {
			ready, reason, msg = false, "ReadinessGatesNotReady", fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist or is not True", strings.Join(missing, ", "))
		}
	}
	initOK, initReason, initMsg := initialized(pod, in, phase)
	owned := []v1.PodCondition{
		cond(v1.PodReadyToStartContainers, in.sandboxReady, "", ""),
		cond(v1.PodInitialized, initOK, initReason, initMsg),
		cond(v1.PodReady, ready, reason, msg),
		containersReady,
	}
	isOwned := map[v1.PodConditionType]bool{}
	for _, c := range owned {
		isOwned[c.Type] = true
	}
	for _, o := range old.Conditions {
		if !isOwned[o.Type] {
			st.Conditions = append(st.Conditions, o)
		}
	}
	st.Conditions = append(st.Conditions, owned...)
	return st
}

// waitingStatuses are the statuses of containers the kubelet has not
// set up yet: waiting with reason (ContainerCreating, or PodInitializing
// in a pod with init containers, as the kubelet says).
func waitingStatuses(specs []v1.Container, reason string) []v1.ContainerStatus {
	var out []v1.ContainerStatus
	for _, c := range specs {
		out = append(out, v1.ContainerStatus{
			Name: c.Name, Image: c.Image,
			State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: reason}},
		})
	}
	return out
}

// waitingReason is the reason of a container that has not started yet:
// PodInitializing in a pod with init containers, else ContainerCreating.
func waitingReason(pod *v1.Pod) string {
	if len(pod.Spec.InitContainers) > 0 {
		return ReasonPodInitializing
	}
	return ReasonContainerCreating
}

// sameStatus tells whether two statuses are equal (times compared as
// instants; the kubelet keeps them at whole seconds, as they travel).
func sameStatus(a, b *v1.PodStatus) bool {
	if a == nil || b == nil {
		return a == b
	}
	return apiequality.Semantic.DeepEqual(*a, *b)
}
