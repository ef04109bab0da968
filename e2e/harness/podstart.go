package harness

import (
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodStarts creates n pods of image (spread by the scheduler), watches
// them from creation to Ready and returns each one's time, sorted; the
// pods are deleted at the end. On the lab kubelet a pod is a network
// namespace and a process; on real nodes a sandbox, a CNI call and a
// container through containerd and runc.
func (h *T) PodStarts(name, image string, n int, timeout time.Duration) ([]time.Duration, error) {
	h.T.Helper()
	created := map[string]time.Time{}
	defer func() {
		_, _ = h.K.Run(h.Ctx, "delete", "pods", "-l", "podstart="+name, "--wait=false")
	}()
	for i := range n {
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, i), Labels: map[string]string{"podstart": name}},
			// No probe: Ready once the container runs, so the time is the
			// kubelet's and the runtime's, not a probe period's.
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: image, ImagePullPolicy: v1.PullNever}}},
		}
		created[pod.Name] = time.Now()
		if _, err := h.CS.CoreV1().Pods("default").Create(h.Ctx, pod, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	// Polled every 50 ms rather than watched: a watch can end early, and
	// the resolution is ample for starts of seconds.
	var out []time.Duration
	ready := map[string]bool{}
	deadline := time.Now().Add(timeout)
	for len(ready) < n {
		list, err := h.CS.CoreV1().Pods("default").List(h.Ctx, metav1.ListOptions{LabelSelector: "podstart=" + name})
		if err != nil {
			return nil, err
		}
		for i := range list.Items {
			p := &list.Items[i]
			if !ready[p.Name] && PodReady(p) {
				ready[p.Name] = true
				out = append(out, time.Since(created[p.Name]))
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d pods Ready after %s", len(ready), n, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	slices.Sort(out)
	return out, nil
}
