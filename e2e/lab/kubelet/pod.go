package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// MinGracePeriod is the shortest time a container gets between SIGTERM
// and SIGKILL, as in the real kubelet (a grace period of 0 still means
// 2s there unless the pod is force-deleted).
const MinGracePeriod = 2 * time.Second

// ShutdownGracePeriod caps the grace period when the kubelet itself stops
// (it then tears its pods down without touching the API).
var ShutdownGracePeriod = 3 * time.Second

// podWorker owns one pod (by UID): its sandbox, its containers and its
// status reports. Informer events replace the pod it works from; run
// reacts to them and to its containers' changes.
type podWorker struct {
	k      *Kubelet
	uid    types.UID
	key    string // namespace/name, for messages
	logDir string

	mu      sync.Mutex
	latest  *v1.Pod
	removed bool // the pod is gone from the API server
	notify  chan struct{}

	// Owned by run (containers read sandbox once it is set, before they
	// start); run sets sandbox, sandboxGone, initContainers and
	// containers under mu too, for the kubelet API.
	sandbox        *sandbox
	sandboxGone    bool
	initContainers []*container
	containers     []*container
	started        bool
	// appsLaunched: the pod is initialized and its app containers were
	// launched; initFailed: a regular init container failed under
	// restartPolicy Never, so they never will be. sidecarsStopping: the
	// sidecars are being stopped, as nothing else will run.
	appsLaunched     bool
	initFailed       bool
	sidecarsStopping bool
	startTime        *metav1.Time
	lastPodIP        string
	lastPodIPv6      string
	failedStatus     bool
	// stopRefresh ends the projected-volume refresher.
	stopRefresh context.CancelFunc
}

func newPodWorker(k *Kubelet, pod *v1.Pod) *podWorker {
	return &podWorker{
		k:      k,
		uid:    pod.UID,
		key:    pod.Namespace + "/" + pod.Name,
		logDir: filepath.Join(k.cfg.StateDir, PodsDir, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID)),
		latest: pod,
		notify: make(chan struct{}, 1),
	}
}

// update hands the worker a newer version of its pod.
func (w *podWorker) update(pod *v1.Pod) {
	w.mu.Lock()
	w.latest = pod
	w.mu.Unlock()
	w.poke()
}

// remove tells the worker its pod is gone from the API server.
func (w *podWorker) remove() {
	w.mu.Lock()
	w.removed = true
	w.mu.Unlock()
	w.poke()
}

func (w *podWorker) poke() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

func (w *podWorker) currentPod() *v1.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.latest
}

// addrs are the pod's addresses (none before its sandbox) and its
// node's, as its status lists them.
func (w *podWorker) addrs() podAddrs {
	a := podAddrs{host: w.k.nodeIPs()}
	if w.sandbox != nil {
		for _, ip := range []string{w.sandbox.ip, w.sandbox.ip6} {
			if ip != "" {
				a.pod = append(a.pod, ip)
			}
		}
	}
	return a
}

func (w *podWorker) podIP() string {
	if w.sandbox == nil {
		return ""
	}
	return w.sandbox.ip
}

func (w *podWorker) event(eventType, reason, format string, args ...any) {
	w.k.recorder.Eventf(w.currentPod(), eventType, reason, format, args...)
}

// run is the worker's loop; it returns when the pod is finished with
// (deleted, or the kubelet stops).
func (w *podWorker) run(ctx context.Context) {
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	for {
		w.mu.Lock()
		pod, removed := w.latest, w.removed
		w.mu.Unlock()
		done, again := w.sync(ctx, pod, removed)
		if done {
			return
		}
		if again > 0 {
			retry.Reset(again)
		}
		select {
		case <-w.notify:
		case <-retry.C:
		case <-ctx.Done():
			w.k.logf("pod %s: kubelet stopping: tearing the pod down", w.key)
			w.killAll(min(gracePeriod(pod), ShutdownGracePeriod))
			for i := 0; i < 3; i++ {
				err := w.teardown()
				if err == nil {
					break
				}
				w.k.logf("pod %s: removing sandbox: %v", w.key, err)
				time.Sleep(500 * time.Millisecond)
			}
			return
		}
	}
}

// gracePeriod is how long containers get between SIGTERM and SIGKILL.
func gracePeriod(pod *v1.Pod) time.Duration {
	var s int64 = v1.DefaultTerminationGracePeriodSeconds
	if pod.DeletionGracePeriodSeconds != nil {
		s = *pod.DeletionGracePeriodSeconds
	} else if pod.Spec.TerminationGracePeriodSeconds != nil {
		s = *pod.Spec.TerminationGracePeriodSeconds
	}
	return max(time.Duration(s)*time.Second, MinGracePeriod)
}

func isTerminal(p v1.PodPhase) bool { return p == v1.PodSucceeded || p == v1.PodFailed }

// sync moves the pod one step towards what its spec asks. It returns
// done when the worker has nothing left to do, or a delay after which
// it wants to be called again (a failed step to retry).
func (w *podWorker) sync(ctx context.Context, pod *v1.Pod, removed bool) (done bool, again time.Duration) {
	switch {
	case removed:
		// Force-deleted (or deleted by someone else after we asked):
		// nothing to report any more.
		w.killAll(gracePeriod(pod))
		if err := w.teardown(); err != nil {
			w.k.logf("pod %s: removing sandbox: %v (retrying)", w.key, err)
			return false, time.Second
		}
		w.k.logf("pod %s: removed from the API server; torn down", w.key)
		return true, 0

	case pod.DeletionTimestamp != nil:
		grace := gracePeriod(pod)
		if w.started {
			w.k.logf("pod %s: deleted: stopping containers (grace %s)", w.key, grace)
		}
		w.stopReporting(ctx, grace)
		if err := w.teardown(); err != nil {
			w.k.logf("pod %s: removing sandbox: %v (retrying)", w.key, err)
			return false, time.Second
		}
		if w.started {
			if err := w.syncStatus(ctx, pod, true); err != nil {
				w.k.logf("pod %s: final status: %v", w.key, err)
			}
		}
		// The kubelet confirms the deletion once nothing runs, which
		// removes the object.
		zero := int64(0)
		err := w.k.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: &zero,
			Preconditions:      &metav1.Preconditions{UID: &w.uid},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			w.k.logf("pod %s: delete: %v", w.key, err)
			return false, 2 * time.Second
		}
		w.k.logf("pod %s: deleted", w.key)
		return true, 0

	case isTerminal(pod.Status.Phase) && !w.started:
		// A pod that finished before this kubelet started: nothing runs.
		return false, 0
	}

	if !w.started {
		start := now()
		w.startTime = &start
		if pod.Status.StartTime != nil {
			w.startTime = pod.Status.StartTime
		}
		if err := os.MkdirAll(w.logDir, 0o755); err != nil {
			w.k.logf("pod %s: %v", w.key, err)
			return false, 5 * time.Second
		}
		sb, err := w.k.setupSandbox(ctx, pod, w.logDir)
		if err != nil {
			w.k.logf("pod %s: sandbox: %v", w.key, err)
			w.event(v1.EventTypeWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: %v", err)
			_ = w.syncStatus(ctx, pod, false)
			return false, 5 * time.Second
		}
		w.lastPodIP, w.lastPodIPv6 = sb.ip, sb.ip6
		w.k.logf("pod %s: sandbox ready: netns %s, IPs %s %s", w.key, sb.netns, sb.ip, sb.ip6)
		reason := waitingReason(pod)
		var inits, containers []*container
		for _, spec := range pod.Spec.InitContainers {
			inits = append(inits, newContainer(w, spec, kindOf(&spec, true), reason))
		}
		for _, spec := range pod.Spec.Containers {
			containers = append(containers, newContainer(w, spec, appContainer, reason))
		}
		// Under mu for the kubelet API (apiView); run itself reads them
		// without: it is their only writer.
		w.mu.Lock()
		w.sandbox, w.initContainers, w.containers = sb, inits, containers
		w.mu.Unlock()
		var refreshCtx context.Context
		refreshCtx, w.stopRefresh = context.WithCancel(ctx)
		go w.volumes(pod).refreshVolumes(refreshCtx)
		w.started = true
	}
	w.advance(pod)

	// Once every container is finished for good, the sandbox goes (and
	// its address is free again), as the real kubelet does.
	if w.allFinished() && w.sandbox != nil && !w.sandboxGone {
		w.k.logf("pod %s: all containers finished: removing the sandbox", w.key)
		if err := w.teardown(); err != nil {
			w.k.logf("pod %s: removing sandbox: %v (retrying)", w.key, err)
			return false, time.Second
		}
	}
	if err := w.syncStatus(ctx, pod, false); err != nil {
		w.k.logf("pod %s: status: %v", w.key, err)
		return false, 2 * time.Second
	}
	return false, 0
}

// all is the pod's containers, init containers first.
func (w *podWorker) all() []*container {
	return append(append([]*container(nil), w.initContainers...), w.containers...)
}

// advance moves the pod's initialization on as the kubelet does: init
// containers start one after the other, each once the one before has
// completed (a regular init container) or started (a sidecar), then
// the app containers; a regular init container that fails under
// restartPolicy Never fails the pod. Once nothing but sidecars will run
// again (the app containers finished for good, or the initialization
// failed), the sidecars are stopped, last first.
func (w *podWorker) advance(pod *v1.Pod) {
	for !w.appsLaunched && !w.initFailed {
		launched := make([]bool, len(w.initContainers))
		statuses := make([]v1.ContainerStatus, len(w.initContainers))
		for i, c := range w.initContainers {
			launched[i], statuses[i] = c.wasLaunched(), c.snapshot()
		}
		step := nextInitStep(pod.Spec.InitContainers, launched, statuses, pod.Spec.RestartPolicy)
		switch {
		case step.failed:
			w.initFailed = true
			w.k.logf("pod %s: an init container failed and the restartPolicy is Never: the pod has failed", w.key)
		case step.apps:
			w.appsLaunched = true
			if len(w.initContainers) > 0 {
				w.k.logf("pod %s: initialized: starting the app containers", w.key)
			}
			for _, c := range w.containers {
				c.launch()
			}
		case step.start >= 0 && !launched[step.start]:
			c := w.initContainers[step.start]
			c.launch()
			if c.wasLaunched() {
				continue // it cannot be done yet, but look again
			}
		}
		break
	}
	if w.sidecarsStopping || !(w.initFailed || w.appsLaunched && finishedAll(w.containers)) {
		return
	}
	var sidecars []*container
	for _, c := range w.initContainers {
		if c.kind == sidecarContainer && c.wasLaunched() && !c.finished() {
			sidecars = append(sidecars, c)
		}
	}
	if len(sidecars) == 0 {
		return
	}
	w.sidecarsStopping = true
	w.k.logf("pod %s: no app container will run again: stopping %d sidecars", w.key, len(sidecars))
	grace := gracePeriod(pod)
	go stopSidecars(sidecars, time.Now().Add(grace))
}

// finishedAll tells whether every one of cs was launched and will not
// run again.
func finishedAll(cs []*container) bool {
	for _, c := range cs {
		if !c.finished() {
			return false
		}
	}
	return true
}

// stopSidecars stops sidecars (in spec order) the last first, each once
// the one after it has ended, as the kubelet orders a pod's
// termination; each gets what is left of the grace period until
// deadline, and at least MinGracePeriod.
func stopSidecars(sidecars []*container, deadline time.Time) {
	for i := len(sidecars) - 1; i >= 0; i-- {
		sidecars[i].stop(max(time.Until(deadline), MinGracePeriod))
	}
}

// allFinished tells whether no container runs or will run again.
func (w *podWorker) allFinished() bool {
	if !w.appsLaunched && !w.initFailed {
		return false
	}
	for _, c := range w.all() {
		if c.wasLaunched() && !c.finished() {
			return false
		}
	}
	return true
}

// killAll stops every container and waits for them: first the app
// containers and a running regular init container (in parallel), then
// the sidecars, last first, with what is left of the grace period, as
// the kubelet orders a pod's termination. Nothing restarts or starts
// meanwhile.
func (w *podWorker) killAll(grace time.Duration) {
	deadline := time.Now().Add(grace)
	var sidecars []*container
	for _, c := range w.all() {
		c.halt()
		if c.kind == sidecarContainer {
			sidecars = append(sidecars, c)
		}
	}
	var wg sync.WaitGroup
	for _, c := range w.all() {
		if c.kind == sidecarContainer {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.stop(grace)
		}()
	}
	wg.Wait()
	stopSidecars(sidecars, deadline)
}

// stopReporting stops the containers of a deleted pod like killAll and,
// while they shut down, keeps publishing the pod's status: a real kubelet
// goes on probing readiness through the grace period, so a terminating
// pod whose probe fails turns unready, and its endpoints say so (serving
// false, terminating true) while it still runs.
func (w *podWorker) stopReporting(ctx context.Context, grace time.Duration) {
	if !w.started {
		w.killAll(grace)
		return
	}
	done := make(chan struct{})
	go func() {
		w.killAll(grace)
		close(done)
	}()
	for {
		select {
		case <-done:
			return
		case <-w.notify:
			if err := w.syncStatus(ctx, w.currentPod(), false); err != nil {
				w.k.logf("pod %s: status while terminating: %v", w.key, err)
			}
		case <-ctx.Done():
			<-done
			return
		}
	}
}

// teardown removes the sandbox (containers must be stopped); after an
// error the sandbox stays recorded and a later call tries again.
func (w *podWorker) teardown() error {
	if w.sandbox == nil || w.sandboxGone {
		if w.sandbox == nil {
			w.k.forgetPod(w.uid)
		}
		return nil
	}
	if w.stopRefresh != nil {
		w.stopRefresh()
	}
	if err := w.k.teardownSandbox(w.uid, w.sandbox); err != nil {
		return err
	}
	w.mu.Lock()
	w.sandboxGone = true
	w.mu.Unlock()
	return nil
}

// apiView is what the kubelet API needs of the pod: its sandbox (nil
// before it is set up and after it is removed) and its containers, init
// containers first.
func (w *podWorker) apiView() (*sandbox, []*container) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sandboxGone {
		return nil, w.all()
	}
	return w.sandbox, w.all()
}

// syncStatus sends the pod's status if it differs from what the API
// server has.
func (w *podWorker) syncStatus(ctx context.Context, pod *v1.Pod, terminating bool) error {
	in := statusInput{
		hostIPs:      w.k.nodeIPs(),
		podIP:        w.lastPodIP,
		podIPv6:      w.lastPodIPv6,
		sandboxReady: w.sandbox != nil && !w.sandboxGone,
		startTime:    w.startTime,
		terminating:  terminating,
		now:          now(),
	}
	if w.containers != nil {
		for _, c := range w.initContainers {
			in.initContainers = append(in.initContainers, c.snapshot())
		}
		for _, c := range w.containers {
			in.containers = append(in.containers, c.snapshot())
		}
	} else {
		in.initContainers = waitingStatuses(pod.Spec.InitContainers, waitingReason(pod))
		in.containers = waitingStatuses(pod.Spec.Containers, waitingReason(pod))
	}
	st := podStatus(pod, in)
	if sameStatus(&st, &pod.Status) && !w.failedStatus {
		return nil
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID}, // a precondition: never a same-named successor
		"status":   st,
	})
	if err != nil {
		return err
	}
	_, err = w.k.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	w.failedStatus = err != nil
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone; the informer will tell
	}
	return err
}

// prepare computes how container c of pod runs: a program with its
// arguments and environment, or in image mode a container under runc.
func (w *podWorker) prepare(ctx context.Context, pod *v1.Pod, c *v1.Container) (*launch, error) {
	in := envInput{
		pod:           pod,
		ips:           w.addrs(),
		nodeResources: w.k.allocatable(),
		serviceEnv:    w.k.serviceEnv(ctx),
		getter:        w.k,
	}
	if w.k.usesImage(c.Image) {
		return w.prepareImage(ctx, pod, c, in)
	}
	env, err := containerEnv(ctx, in, c)
	if err != nil {
		return nil, err
	}
	program, args, err := w.k.cfg.Programs.command(c, env.vals)
	if err != nil {
		return nil, err
	}
	// The container's capabilities, applied to the program itself (after
	// the mounts below, which need more): a capability the manifest lacks
	// fails here as it would on a real node.
	if caps, all := capabilities(c.SecurityContext); !all {
		program, args = withCapabilities(caps, program, args)
	}
	binds, warnings, err := w.volumes(pod).binds(ctx, c, false)
	if err != nil {
		return nil, err
	}
	for _, warn := range warnings {
		w.event(v1.EventTypeWarning, "FailedMount", "%s", warn)
		w.k.logf("pod %s: container %s: %s", w.key, c.Name, warn)
	}
	if len(binds) > 0 {
		// The kubelet's own binary makes the mounts in the container's
		// mount namespace, then execs the program.
		args = mountExecArgs(binds, program, args)
		program = w.k.self
	}
	kind, _ := imageKind(c.Image)
	return &launch{program: program, args: args, env: env.list(), imageID: "lab://" + string(kind), shares: CPUShares(c)}, nil
}

func (w *podWorker) volumes(pod *v1.Pod) volumeWriter {
	return volumeWriter{k: w.k, pod: pod, dir: w.logDir, ips: w.addrs()}
}

// serviceEnv is the `kubernetes` Service's variables (only those: the
// lab has no other use for service links). Empty when it cannot be read.
func (k *Kubelet) serviceEnv(ctx context.Context) map[string]string {
	svc, err := remember(&k.known, "service/default/kubernetes", func() (*v1.Service, time.Time, error) {
		s, err := k.client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
		return s, time.Time{}, err
	})
	if err != nil || svc.Spec.ClusterIP == "" || len(svc.Spec.Ports) == 0 {
		return nil
	}
	ip := svc.Spec.ClusterIP
	port := strconv.Itoa(int(svc.Spec.Ports[0].Port))
	addr := "tcp://" + net.JoinHostPort(ip, port)
	return map[string]string{
		"KUBERNETES_SERVICE_HOST":                ip,
		"KUBERNETES_SERVICE_PORT":                port,
		"KUBERNETES_SERVICE_PORT_HTTPS":          port,
		"KUBERNETES_PORT":                        addr,
		"KUBERNETES_PORT_" + port + "_TCP":       addr,
		"KUBERNETES_PORT_" + port + "_TCP_PROTO": "tcp",
		"KUBERNETES_PORT_" + port + "_TCP_PORT":  port,
		"KUBERNETES_PORT_" + port + "_TCP_ADDR":  ip,
	}
}

// ConfigMap and Secret read what env refers to (the Node authorizer lets
// a node read those of pods bound to it); the last answer serves while
// the API server cannot be reached.
func (k *Kubelet) ConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	return remember(&k.known, "configmap/"+namespace+"/"+name, func() (*v1.ConfigMap, time.Time, error) {
		cm, err := k.client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
		return cm, time.Time{}, err
	})
}

func (k *Kubelet) Secret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	return remember(&k.known, "secret/"+namespace+"/"+name, func() (*v1.Secret, time.Time, error) {
		s, err := k.client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		return s, time.Time{}, err
	})
}
