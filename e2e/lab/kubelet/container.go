package kubelet

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Restart back-off: the real kubelet starts at 10s and doubles up to
// 5 minutes; the lab uses shorter steps so that tests of crashing
// containers finish quickly. A container that ran for BackoffReset is
// restarted without delay growth.
var (
	InitialBackoff = time.Second
	MaxBackoff     = 30 * time.Second
	BackoffReset   = 2 * time.Minute
)

// container runs one container of a pod: it starts the program, records
// its state, runs its readiness probe, and restarts it per the pod's
// restartPolicy until stop is called.
type container struct {
	w    *podWorker
	spec v1.Container

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	status   v1.ContainerStatus
	proc     *process
	stopping bool
	// runs are the last two runs that started, the latest last: the
	// kubelet API's logs (current and previous).
	runs []*process
}

func newContainer(w *podWorker, spec v1.Container) *container {
	ctx, cancel := context.WithCancel(context.Background())
	return &container{
		w:      w,
		spec:   spec,
		ctx:    ctx,
		cancel: cancel,
		done:   make(chan struct{}),
		status: v1.ContainerStatus{
			Name:  spec.Name,
			Image: spec.Image,
			State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: ReasonContainerCreating}},
		},
	}
}

// snapshot is the container's status for the pod's status.
func (c *container) snapshot() v1.ContainerStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return *c.status.DeepCopy()
}

func (c *container) setWaiting(reason, msg string) {
	c.mu.Lock()
	c.status.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: reason, Message: msg}}
	c.status.Ready, c.status.Started = false, ptr(false)
	c.mu.Unlock()
	c.w.poke()
}

// sleep waits d or until the container is stopped; it tells whether the
// full time passed.
func (c *container) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.ctx.Done():
		return false
	}
}

func shouldRestart(policy v1.RestartPolicy, exitCode int32) bool {
	switch policy {
	case v1.RestartPolicyNever:
		return false
	case v1.RestartPolicyOnFailure:
		return exitCode != 0
	default:
		return true
	}
}

func ptr[T any](v T) *T { return &v }

func now() metav1.Time { return metav1.Now().Rfc3339Copy() }

// run is the container's life; it returns when the container will not
// run again (stopped, or finished under its restartPolicy).
func (c *container) run() {
	defer close(c.done)
	w := c.w
	backoff := InitialBackoff
	for {
		if c.ctx.Err() != nil {
			return
		}
		pod := w.currentPod()
		l, err := w.prepare(c.ctx, pod, &c.spec)
		if err != nil {
			var ce *containerError
			if !errors.As(err, &ce) {
				ce = &containerError{Reason: ReasonCreateContainerError, Message: err.Error()}
			}
			c.setWaiting(ce.Reason, ce.Message)
			w.event(v1.EventTypeWarning, "Failed", "Error: %s", ce.Message)
			w.k.logf("pod %s: container %s cannot start: %s", w.key, c.spec.Name, ce)
			if ce.Reason == ReasonErrImagePull && !w.k.usesImage(c.spec.Image) {
				<-c.ctx.Done() // the set of known images never changes
				return
			}
			if !c.sleep(backoff) {
				return
			}
			backoff = min(2*backoff, MaxBackoff)
			continue
		}

		c.mu.Lock()
		if c.stopping {
			c.mu.Unlock()
			return
		}
		logPath := filepath.Join(w.logDir, c.spec.Name+".log")
		p, err := w.start(c.spec.Name, l, logPath)
		if err != nil {
			c.mu.Unlock()
			c.setWaiting("RunContainerError", err.Error())
			w.event(v1.EventTypeWarning, "Failed", "Error: %v", err)
			if !c.sleep(backoff) {
				return
			}
			backoff = min(2*backoff, MaxBackoff)
			continue
		}
		c.proc = p
		if n := len(c.runs); n > 0 {
			c.runs = []*process{c.runs[n-1], p}
		} else {
			c.runs = []*process{p}
		}
		started := metav1.NewTime(p.startedAt).Rfc3339Copy()
		c.status.State = v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: started}}
		c.status.Started = ptr(true)
		rp := c.spec.ReadinessProbe
		if unsupportedProbe(rp) != "" {
			rp = nil
		}
		c.status.Ready = rp == nil
		c.status.ContainerID = fmt.Sprintf("lab://%s/%d", w.sandbox.netns, p.rec.PID)
		c.status.ImageID = l.imageID
		c.mu.Unlock()
		w.k.recordProcess(w.uid, c.spec.Name, &p.rec)
		w.event(v1.EventTypeNormal, "Started", "Started container %s (pid %d)", c.spec.Name, p.rec.PID)
		w.k.logf("pod %s: container %s started: pid %d: %s", w.key, c.spec.Name, p.rec.PID, l.describe())
		w.poke()

		// Readiness is probed until the program exits, through a
		// graceful stop too (stop cancels c.ctx first), as the kubelet
		// does: a terminating pod can turn unready before it ends.
		probeCtx, stopProbe := context.WithCancel(context.WithoutCancel(c.ctx))
		if rp != nil {
			go c.probeLoop(probeCtx, p, rp, w.podIP())
		}
		<-p.exited
		stopProbe()
		w.k.recordProcess(w.uid, c.spec.Name, nil)

		reason := ReasonCompleted
		if p.exitCode != 0 {
			reason = ReasonError
		}
		term := &v1.ContainerStateTerminated{
			ExitCode:    p.exitCode,
			Signal:      int32(p.signal),
			Reason:      reason,
			StartedAt:   started,
			FinishedAt:  metav1.NewTime(p.finishedAt).Rfc3339Copy(),
			ContainerID: c.status.ContainerID,
		}
		w.k.logf("pod %s: container %s (pid %d) exited with code %d", w.key, c.spec.Name, p.rec.PID, p.exitCode)
		c.mu.Lock()
		c.proc = nil
		c.status.State = v1.ContainerState{Terminated: term}
		c.status.Ready, c.status.Started = false, ptr(false)
		restart := !c.stopping && shouldRestart(pod.Spec.RestartPolicy, p.exitCode)
		if !restart {
			c.mu.Unlock()
			w.poke()
			return
		}
		if p.finishedAt.Sub(p.startedAt) >= BackoffReset {
			backoff = InitialBackoff
		}
		c.status.LastTerminationState = v1.ContainerState{Terminated: term}
		c.status.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{
			Reason:  ReasonCrashLoopBackOff,
			Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", backoff, c.spec.Name, pod.Name, pod.Namespace, pod.UID),
		}}
		c.mu.Unlock()
		w.event(v1.EventTypeWarning, "BackOff", "Back-off %s restarting failed container %s", backoff, c.spec.Name)
		w.poke()
		if !c.sleep(backoff) {
			return
		}
		backoff = min(2*backoff, MaxBackoff)
		c.mu.Lock()
		c.status.RestartCount++
		c.mu.Unlock()
	}
}

// probeLoop runs the readiness probe against one run (p) of the
// container, with the probe's delay, period and thresholds, and flips the
// container's Ready accordingly.
func (c *container) probeLoop(ctx context.Context, p *process, pb *v1.Probe, podIP string) {
	period := time.Duration(pb.PeriodSeconds) * time.Second
	if period <= 0 {
		period = 10 * time.Second
	}
	successes, failures := max(pb.SuccessThreshold, 1), max(pb.FailureThreshold, 1)
	if pb.FailureThreshold == 0 {
		failures = 3
	}
	if d := time.Duration(pb.InitialDelaySeconds) * time.Second; d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return
		}
	}
	pr := prober{netns: c.w.k.cfg.NodeNetns}
	ready := false
	var okRun, failRun int32
	for {
		ok, msg := pr.probe(ctx, pb, &c.spec, podIP)
		if ctx.Err() != nil {
			return
		}
		changed := false
		if ok {
			okRun, failRun = okRun+1, 0
			if !ready && okRun >= successes {
				ready, changed = true, true
			}
		} else {
			okRun, failRun = 0, failRun+1
			c.w.event(v1.EventTypeWarning, "Unhealthy", "Readiness probe failed: %s", msg)
			if ready && failRun >= failures {
				ready, changed = false, true
			}
		}
		if changed {
			c.mu.Lock()
			if c.proc == p {
				c.status.Ready = ready
			}
			c.mu.Unlock()
			c.w.k.logf("pod %s: container %s ready=%v", c.w.key, c.spec.Name, ready)
			c.w.poke()
		}
		select {
		case <-time.After(period):
		case <-ctx.Done():
			return
		}
	}
}

// stop ends the container for good: no more restarts; a running program
// gets SIGTERM, then SIGKILL after grace. It returns when run has
// returned.
func (c *container) stop(grace time.Duration) {
	c.mu.Lock()
	c.stopping = true
	p := c.proc
	c.mu.Unlock()
	c.cancel()
	if p != nil {
		c.w.event(v1.EventTypeNormal, "Killing", "Stopping container %s", c.spec.Name)
		p.stop(grace)
	}
	<-c.done
}
