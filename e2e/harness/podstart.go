package harness

import (
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// PodStarts creates n pods of image (spread by the scheduler), watches
// them from creation to Ready and returns each one's time, sorted; the
// pods are deleted at the end. On the lab kubelet a pod is a network
// namespace and a process; on real nodes a sandbox, a CNI call and a
// container through containerd and runc.
func (h *T) PodStarts(name, image string, n int, timeout time.Duration) ([]time.Duration, error) {
	h.T.Helper()
	w, err := h.CS.CoreV1().Pods("default").Watch(h.Ctx, metav1.ListOptions{LabelSelector: "podstart=" + name})
	if err != nil {
		return nil, err
	}
	defer w.Stop()
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
	var out []time.Duration
	ready := map[string]bool{}
	deadline := time.After(timeout)
	for len(ready) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, fmt.Errorf("pod watch ended with %d of %d Ready", len(ready), n)
			}
			p, isPod := ev.Object.(*v1.Pod)
			if !isPod || ev.Type == watch.Deleted || ready[p.Name] || !PodReady(p) {
				continue
			}
			ready[p.Name] = true
			out = append(out, time.Since(created[p.Name]))
		case <-deadline:
			return nil, fmt.Errorf("%d of %d pods Ready after %s", len(ready), n, timeout)
		}
	}
	slices.Sort(out)
	return out, nil
}
