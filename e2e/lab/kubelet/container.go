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

// containerKind is a container's place in its pod.
type containerKind int

const (
	// appContainer is one of spec.containers.
	appContainer containerKind = iota
	// initContainer is a regular init container: it runs to completion
	// before the next one starts.
	initContainer
	// sidecarContainer is a restartable init container: once started
	// it lets the next one start and runs alongside the app containers.
	sidecarContainer
)

func (k containerKind) String() string {
	switch k {
	case initContainer:
		return "init container"
	case sidecarContainer:
		return "sidecar container"
	}
	return "container"
}

// kindOf is the kind of init container c (init: from
// spec.initContainers) or of an app container.
func kindOf(c *v1.Container, init bool) containerKind {
	switch {
	case !init:
		return appContainer
	case isSidecar(c):
		return sidecarContainer
	}
	return initContainer
}

// container runs one container of a pod: once launched it starts the
// program, records its state, runs its startup and readiness probes, and
// restarts it (per the pod's restartPolicy for an app container; after
// a failure, unless the policy is Never, for a regular init container;
// always for a sidecar) until stop is called.
type container struct {
	w    *podWorker
	spec v1.Container
	kind containerKind

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	status   v1.ContainerStatus
	proc     *process
	stopping bool
	// launched: run was started (launch). A container that never is
	// (its pod's initialization did not get that far) has nothing to
	// stop, and stop returns at once.
	launched bool
	// runs are the last two runs that started, the latest last: the
	// kubelet API's logs (current and previous).
	runs []*process
}

// newContainer is a container of the pod that has not run yet: waiting
// with reason until it starts.
func newContainer(w *podWorker, spec v1.Container, kind containerKind, reason string) *container {
	ctx, cancel := context.WithCancel(context.Background())
	return &container{
		w:      w,
		spec:   spec,
		kind:   kind,
		ctx:    ctx,
		cancel: cancel,
		done:   make(chan struct{}),
		status: v1.ContainerStatus{
			Name:  spec.Name,
			Image: spec.Image,
			State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: reason}},
		},
	}
}

// launch starts the container's life (run), once, unless it was stopped
// before.
func (c *container) launch() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.launched || c.stopping {
		return
	}
	c.launched = true
	go c.run()
}

// wasLaunched tells whether launch started the container's life.
func (c *container) wasLaunched() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.launched
}

// finished tells whether the container was launched and will not run
// again.
func (c *container) finished() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
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

// shouldRestart tells whether a container of kind that exited with
// exitCode runs again under the pod's restartPolicy: a sidecar always
// does, a regular init container after a failure unless the policy is
// Never, an app container as the policy says.
func shouldRestart(kind containerKind, policy v1.RestartPolicy, exitCode int32) bool {
	switch {
	case kind == sidecarContainer:
		return true
	case kind == initContainer:
		return exitCode != 0 && policy != v1.RestartPolicyNever
	case policy == v1.RestartPolicyNever:
		return false
	case policy == v1.RestartPolicyOnFailure:
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
	defer func() {
		close(c.done)
		c.w.poke() // the pod worker looks at what is finished
	}()
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
		rp, sp, lp := c.spec.ReadinessProbe, c.spec.StartupProbe, c.spec.LivenessProbe
		if unsupportedProbe(rp) != "" || c.kind == initContainer {
			rp = nil
		}
		if unsupportedProbe(sp) != "" || c.kind == initContainer {
			sp = nil
		}
		if unsupportedProbe(lp) != "" || c.kind == initContainer {
			lp = nil
		}
		// Started once the startup probe passes (at once without one);
		// ready once started and the readiness probe passes. A regular
		// init container is never ready while it runs: it is when it
		// has completed.
		c.status.Started = ptr(sp == nil)
		c.status.Ready = sp == nil && rp == nil && c.kind != initContainer
		c.status.ContainerID = fmt.Sprintf("lab://%s/%d", w.sandbox.netns, p.rec.PID)
		c.status.ImageID = l.imageID
		c.mu.Unlock()
		w.k.recordProcess(w.uid, c.spec.Name, &p.rec)
		w.event(v1.EventTypeNormal, "Started", "Started container %s (pid %d)", c.spec.Name, p.rec.PID)
		w.k.logf("pod %s: %s %s started: pid %d: %s", w.key, c.kind, c.spec.Name, p.rec.PID, l.describe())
		w.poke()

		// Probes run until the program exits, through a graceful stop
		// too (stop cancels c.ctx first), as the kubelet does: a
		// terminating pod can turn unready before it ends.
		probeCtx, stopProbe := context.WithCancel(context.WithoutCancel(c.ctx))
		if sp != nil || rp != nil || lp != nil {
			go c.probe(probeCtx, p, probes{startup: sp, readiness: rp, liveness: lp}, w.podIP())
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
		// A regular init container that completed counts as ready (the
		// kubelet's prober says so), which the Initialized condition reads.
		c.status.Ready, c.status.Started = c.kind == initContainer && p.exitCode == 0, ptr(false)
		restart := !c.stopping && shouldRestart(c.kind, pod.Spec.RestartPolicy, p.exitCode)
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

// probeTiming is a probe's period and failure threshold, with the API's
// defaults (10s, 3).
func probeTiming(pb *v1.Probe) (period time.Duration, failures int32) {
	period = time.Duration(pb.PeriodSeconds) * time.Second
	if period <= 0 {
		period = 10 * time.Second
	}
	failures = pb.FailureThreshold
	if failures <= 0 {
		failures = 3
	}
	return period, failures
}

// initialDelay waits until the probe's initialDelaySeconds have passed
// since run p started; it tells whether ctx is still on.
func initialDelay(ctx context.Context, p *process, pb *v1.Probe) bool {
	d := time.Duration(pb.InitialDelaySeconds)*time.Second - time.Since(p.startedAt)
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// probes are the probes of a container the lab kubelet runs; any may be
// nil.
type probes struct {
	startup, readiness, liveness *v1.Probe
}

// prober is the prober for run p of the container.
func (c *container) prober(p *process) prober {
	return prober{netns: c.w.k.cfg.NodeNetns, exec: c.w.execTarget(p)}
}

// probe runs the probes of one run (p) of the container: the startup
// probe until it passes, then the readiness and liveness probes side by
// side. Liveness stops when the container is told to stop (c.ctx), as
// the kubelet stops it for a terminating pod; readiness goes on until
// the run ends (ctx).
func (c *container) probe(ctx context.Context, p *process, pbs probes, podIP string) {
	if pbs.startup != nil && !c.startupLoop(ctx, p, pbs.startup, pbs.readiness == nil, podIP) {
		return
	}
	if pbs.liveness != nil {
		lctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(c.ctx, cancel)
		go func() {
			defer stop()
			defer cancel()
			c.livenessLoop(lctx, p, pbs.liveness, podIP)
		}()
	}
	if pbs.readiness != nil {
		c.probeLoop(ctx, p, pbs.readiness, podIP)
	}
}

// killForProbe stops run p after its startup or liveness probe (kind)
// failed failRun times; the run loop then restarts the container as its
// kind and the pod's restartPolicy say.
func (c *container) killForProbe(p *process, pb *v1.Probe, kind string, failRun int32) {
	grace := gracePeriod(c.w.currentPod())
	if s := pb.TerminationGracePeriodSeconds; s != nil {
		grace = max(time.Duration(*s)*time.Second, MinGracePeriod)
	}
	c.w.event(v1.EventTypeNormal, "Killing", "Container %s failed %s probe, will be restarted", c.spec.Name, kind)
	c.w.k.logf("pod %s: %s %s failed its %s probe %d times: killing it", c.w.key, c.kind, c.spec.Name, kind, failRun)
	c.terminate(p, grace)
}

// livenessLoop runs the liveness probe against run p, with its delay,
// period and thresholds, and kills the run after failureThreshold
// failures in a row.
func (c *container) livenessLoop(ctx context.Context, p *process, pb *v1.Probe, podIP string) {
	period, failures := probeTiming(pb)
	if !initialDelay(ctx, p, pb) {
		return
	}
	pr := c.prober(p)
	var failRun int32
	for {
		ok, msg := pr.probe(ctx, pb, &c.spec, podIP)
		if ctx.Err() != nil {
			return
		}
		if ok {
			failRun = 0
		} else {
			failRun++
			c.w.event(v1.EventTypeWarning, "Unhealthy", "Liveness probe failed: %s", msg)
			if failRun >= failures {
				c.killForProbe(p, pb, "liveness", failRun)
				return
			}
		}
		t := time.NewTimer(period)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// startupLoop runs the startup probe against run p until it passes: the
// container is started then (and ready too when readyNow, without a
// readiness probe), which lets the next init container start after a
// sidecar. After failureThreshold failures in a row the run is killed,
// as the kubelet does, and its container restarted as its kind and the
// pod's restartPolicy say. It tells whether the probe passed.
func (c *container) startupLoop(ctx context.Context, p *process, pb *v1.Probe, readyNow bool, podIP string) bool {
	period, failures := probeTiming(pb)
	if !initialDelay(ctx, p, pb) {
		return false
	}
	pr := c.prober(p)
	var failRun int32
	for {
		ok, msg := pr.probe(ctx, pb, &c.spec, podIP)
		if ctx.Err() != nil {
			return false
		}
		if ok {
			c.mu.Lock()
			if c.proc == p {
				c.status.Started = ptr(true)
				c.status.Ready = readyNow
			}
			c.mu.Unlock()
			c.w.k.logf("pod %s: %s %s passed its startup probe", c.w.key, c.kind, c.spec.Name)
			c.w.poke()
			return true
		}
		failRun++
		c.w.event(v1.EventTypeWarning, "Unhealthy", "Startup probe failed: %s", msg)
		if failRun >= failures {
			c.killForProbe(p, pb, "startup", failRun)
			return false
		}
		t := time.NewTimer(period)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		}
	}
}

// probeLoop runs the readiness probe against one run (p) of the
// container, with the probe's delay, period and thresholds, and flips the
// container's Ready accordingly.
func (c *container) probeLoop(ctx context.Context, p *process, pb *v1.Probe, podIP string) {
	period, failures := probeTiming(pb)
	successes := max(pb.SuccessThreshold, 1)
	if !initialDelay(ctx, p, pb) {
		return
	}
	pr := c.prober(p)
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
// returned (at once for a container never launched, which never will
// be now).
func (c *container) stop(grace time.Duration) {
	c.mu.Lock()
	c.stopping = true
	p, launched := c.proc, c.launched
	c.mu.Unlock()
	c.cancel()
	if !launched {
		return
	}
	if p != nil {
		c.w.event(v1.EventTypeNormal, "Killing", "Stopping container %s", c.spec.Name)
		c.terminate(p, grace)
	}
	<-c.done
}

// halt ends the container's restarts without stopping what runs: a run
// that ends now is its last, and a container never launched never will
// be.
func (c *container) halt() {
	c.mu.Lock()
	c.stopping = true
	c.mu.Unlock()
	c.cancel()
}
