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
	// containers are the containers' statuses in spec order.
	containers []v1.ContainerStatus
	startTime  *metav1.Time
	// terminating: the pod is being deleted, nothing will restart.
	terminating bool
	now         metav1.Time
}

// podPhase follows the kubelet's rules (pkg/kubelet's getPhase): Pending
// while a container waits to start for the first time; Running while one
// runs or will be restarted; Succeeded/Failed once all have stopped for
// good.
func podPhase(pod *v1.Pod, in statusInput) v1.PodPhase {
	n := len(pod.Spec.Containers)
	if n == 0 || len(in.containers) != n {
		return v1.PodPending
	}
	var running, waiting, stopped, succeeded int
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
	if in.terminating && running == 0 && waiting == 0 {
		if succeeded == n {
			return v1.PodSucceeded
		}
		return v1.PodFailed
	}
	switch {
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
		Phase:             phase,
		StartTime:         in.startTime,
		ContainerStatuses: in.containers,
		QOSClass:          old.QOSClass,
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
	terminal := phase == v1.PodSucceeded || phase == v1.PodFailed

	var unready []string
	for _, cs := range in.containers {
		if !cs.Ready {
			unready = append(unready, cs.Name)
		}
	}
	if len(in.containers) != len(pod.Spec.Containers) {
		unready = nil
		for _, c := range pod.Spec.Containers {
			unready = append(unready, c.Name)
		}
	}
	cond := func(t v1.PodConditionType, ok bool, reason, msg string) v1.PodCondition {
		s := v1.ConditionFalse
		if ok {
			s, reason, msg = v1.ConditionTrue, "", ""
		}
		c := v1.PodCondition{Type: t, Status: s, Reason: reason, Message: msg, LastTransitionTime: in.now}
		for _, o := range old.Conditions {
			if o.Type == t && o.Status == s {
				c.LastTransitionTime = o.LastTransitionTime
			}
		}
		return c
	}
	ready, reason, msg := len(unready) == 0, "ContainersNotReady", fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))
	if terminal {
		ready, reason, msg = false, "PodCompleted", ""
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
	owned := []v1.PodCondition{
		cond(v1.PodReadyToStartContainers, in.sandboxReady, "", ""),
		cond(v1.PodInitialized, true, "", ""),
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

// sameStatus tells whether two statuses are equal (times compared as
// instants; the kubelet keeps them at whole seconds, as they travel).
func sameStatus(a, b *v1.PodStatus) bool {
	if a == nil || b == nil {
		return a == b
	}
	return apiequality.Semantic.DeepEqual(*a, *b)
}
