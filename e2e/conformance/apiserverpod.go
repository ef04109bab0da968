package conformance

import (
	"context"
	"fmt"
	"io"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The lab's API server is a process beside the nodes, not a pod. On a
// kubeadm cluster it is a static pod, which the API shows as a mirror
// pod in kube-system labelled component=kube-apiserver, and upstream's
// "Services should work after restarting apiserver" restarts it by
// deleting the pods of that label and waiting until as many are back.
// Deleting a mirror pod does not stop the static pod: the kubelet takes
// the deletion as an update of the static pod and makes the mirror pod
// again (kubelet HandlePodRemoves), and the API server keeps running.
// The stand-in below does the same for the lab: a pod of that label,
// bound to no node and served by no scheduler, reported running, and made
// again whenever it is deleted. Like on kubeadm, that test then restarts
// nothing; herald across a real restart of the API server is what the
// lab's own fault test measures (e2e TestFaultsControlPlaneAPIServerDown).

// APIServerPodLabels are the labels kubeadm gives the API server's pod.
var APIServerPodLabels = map[string]string{"component": "kube-apiserver", "tier": "control-plane"}

// APIServerPod is the stand-in for the lab's API server: name, image tag
// the release it runs.
func APIServerPod(name, release string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: metav1.NamespaceSystem, Labels: APIServerPodLabels,
			Annotations: map[string]string{
				"herald.io/lab": "stands for the lab's API server, a process beside the nodes, as kubeadm's mirror pod stands for its static pod; made again when deleted, without a restart, as a kubelet does",
			},
		},
		Spec: v1.PodSpec{
			// No scheduler serves this name, so the pod is never bound and
			// no kubelet runs it.
			SchedulerName: "herald-lab-control-plane",
			Containers: []v1.Container{{
				Name:  "kube-apiserver",
				Image: "registry.k8s.io/kube-apiserver:" + release,
			}},
		},
	}
}

// runningStatus reports the stand-in running and ready, as the kubelet
// reports a static pod's mirror (the suite waits at its start until every
// pod in kube-system is).
func runningStatus(p *v1.Pod, since time.Time) {
	t := metav1.NewTime(since)
	p.Status = v1.PodStatus{
		Phase:     v1.PodRunning,
		StartTime: &t,
		Conditions: []v1.PodCondition{
			{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: t},
			{Type: v1.PodInitialized, Status: v1.ConditionTrue, LastTransitionTime: t},
			{Type: v1.ContainersReady, Status: v1.ConditionTrue, LastTransitionTime: t},
			{Type: v1.PodReady, Status: v1.ConditionTrue, LastTransitionTime: t},
		},
		ContainerStatuses: []v1.ContainerStatus{{
			Name: "kube-apiserver", Image: p.Spec.Containers[0].Image, Ready: true, Started: ptr(true),
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: t}},
		}},
	}
}

func ptr[T any](v T) *T { return &v }

// KeepAPIServerPod makes the stand-in pod and makes it again whenever it
// is deleted, until ctx ends. It returns once the first one is running;
// the loop goes on in the background, logging each deletion to log, and
// the returned channel closes when it has ended.
func KeepAPIServerPod(ctx context.Context, cs kubernetes.Interface, name, release string, every time.Duration, log io.Writer) (<-chan struct{}, error) {
	started := time.Now()
	if err := ensureAPIServerPod(ctx, cs, name, release, started); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			p, err := cs.CoreV1().Pods(metav1.NamespaceSystem).Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err == nil && p.DeletionTimestamp != nil:
				// Deleted with a grace period: gone once it ends; a
				// mirror pod is made again after that, too.
				continue
			default:
				continue // there, or the API server did not answer
			}
			if err := ensureAPIServerPod(ctx, cs, name, release, started); err != nil {
				if ctx.Err() == nil {
					fmt.Fprintf(log, "conformance: making the API server's stand-in pod kube-system/%s again: %v\n", name, err)
				}
				continue
			}
			fmt.Fprintf(log, "conformance: kube-system/%s was deleted and is made again, as a kubelet makes a mirror pod again; the API server kept running (as on kubeadm)\n", name)
		}
	}()
	return done, nil
}

// ensureAPIServerPod creates the stand-in, if it is not there, and
// reports it running.
func ensureAPIServerPod(ctx context.Context, cs kubernetes.Interface, name, release string, since time.Time) error {
	pods := cs.CoreV1().Pods(metav1.NamespaceSystem)
	p, err := pods.Create(ctx, APIServerPod(name, release), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		p, err = pods.Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return err
	}
	if p.Status.Phase == v1.PodRunning {
		return nil
	}
	runningStatus(p, since)
	_, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}
