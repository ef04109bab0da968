package kubelet

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
)

// terminate ends run p of the container within grace, as the kubelet
// kills a container: its preStop hook first (bounded by the grace
// period), then SIGTERM with what is left of it (at least
// MinGracePeriod), then SIGKILL.
func (c *container) terminate(p *process, grace time.Duration) {
	if h := c.spec.Lifecycle; h != nil && h.PreStop != nil && c.kind != initContainer {
		start := time.Now()
		c.runPreStop(p, h.PreStop, grace)
		grace = max(grace-time.Since(start), MinGracePeriod)
	}
	p.stop(grace)
}

// runPreStop runs a preStop hook against run p and waits for it, at most
// grace. A hook that fails or outlasts the grace period is reported as a
// FailedPreStopHook event and the container is stopped all the same, as
// the kubelet does.
func (c *container) runPreStop(p *process, h *v1.LifecycleHandler, grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	select {
	case <-p.exited:
		return // nothing left to run it in
	default:
	}
	ok, msg := c.runHook(ctx, p, h, grace)
	if !ok {
		c.w.event(v1.EventTypeWarning, "FailedPreStopHook", "PreStop hook for container %s failed: %s", c.spec.Name, msg)
		c.w.k.logf("pod %s: %s %s: preStop hook failed: %s", c.w.key, c.kind, c.spec.Name, msg)
	}
}

// runHook runs one lifecycle handler against run p: exec in the
// container, an HTTP GET to the pod (as a probe does), or a sleep. The
// deprecated tcpSocket handler is not run by the kubelet either.
func (c *container) runHook(ctx context.Context, p *process, h *v1.LifecycleHandler, timeout time.Duration) (bool, string) {
	pr := c.prober(p)
	switch {
	case h.Exec != nil:
		return pr.execProbe(ctx, h.Exec.Command)
	case h.HTTPGet != nil:
		return pr.httpGet(ctx, h.HTTPGet, &c.spec, c.w.podIP(), timeout)
	case h.Sleep != nil:
		t := time.NewTimer(time.Duration(h.Sleep.Seconds) * time.Second)
		defer t.Stop()
		select {
		case <-t.C:
			return true, ""
		case <-ctx.Done():
			return false, fmt.Sprintf("sleep %ds outlasted the grace period", h.Sleep.Seconds)
		}
	case h.TCPSocket != nil:
		return false, "tcpSocket is not supported as a lifecycle handler"
	}
	return false, "the handler names no action"
}
