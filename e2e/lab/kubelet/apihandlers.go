package kubelet

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	remotecommandconsts "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/kubelet/pkg/cri/streaming/portforward"
	remotecommandserver "k8s.io/kubelet/pkg/cri/streaming/remotecommand"
)

// execTarget is where commands for the request's container run: it
// must be running.
func (k *Kubelet) execTarget(r *http.Request) (*podWorker, *container, execTarget, error) {
	w, c, err := k.findContainer(r)
	if err != nil {
		return nil, nil, execTarget{}, err
	}
	c.mu.Lock()
	p := c.proc
	c.mu.Unlock()
	if p == nil {
		return nil, nil, execTarget{}, badRequest("container %q in pod %q is not running", c.spec.Name, w.key)
	}
	return w, c, w.execTarget(p), nil
}

// execTarget is where commands for run p of one of the pod's containers
// run.
func (w *podWorker) execTarget(p *process) execTarget {
	return execTarget{pid: p.rec.PID, runcRoot: w.k.runtime.root, runcID: p.runcID, dir: w.logDir}
}

// targetExecutor is the streaming server's Executor for one container,
// resolved before the connection is upgraded (so a missing pod is a 404).
type targetExecutor struct{ t execTarget }

func (e targetExecutor) ExecInContainer(ctx context.Context, _ string, _ types.UID, _ string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	return e.t.run(ctx, cmd, in, out, errOut, tty, resize)
}

func (k *Kubelet) serveExec(rw http.ResponseWriter, r *http.Request) {
	w, c, t, err := k.execTarget(r)
	if err != nil {
		writeError(rw, err)
		return
	}
	cmd := r.URL.Query()["command"]
	if len(cmd) == 0 {
		writeError(rw, badRequest("no command (query parameter command, once per argument)"))
		return
	}
	opts, err := remotecommandserver.NewOptions(r)
	if err != nil {
		writeError(rw, badRequest("%v", err))
		return
	}
	k.logf("pod %s: exec in container %s: %q (tty %v)", w.key, c.spec.Name, cmd, opts.TTY)
	remotecommandserver.ServeExec(rw, r, targetExecutor{t}, w.key, w.uid, c.spec.Name, cmd, opts,
		streamIdleTimeout, streamCreationTimeout, remotecommandconsts.SupportedStreamingProtocols)
}

// serveRun runs a command and answers with its output (stdout and
// stderr), as the kubelet's /run does.
func (k *Kubelet) serveRun(rw http.ResponseWriter, r *http.Request) {
	_, _, t, err := k.execTarget(r)
	if err != nil {
		writeError(rw, err)
		return
	}
	cmd := strings.Fields(r.FormValue("cmd"))
	if len(cmd) == 0 {
		writeError(rw, badRequest("no command (form or query parameter cmd)"))
		return
	}
	var out strings.Builder
	if err := t.run(r.Context(), cmd, nil, &out, &out, false, nil); err != nil {
		writeError(rw, fmt.Errorf("%v: %s", err, out.String()))
		return
	}
	_, _ = rw.Write([]byte(out.String()))
}

func (k *Kubelet) servePortForward(rw http.ResponseWriter, r *http.Request) {
	w, err := k.findPod(r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("uid"))
	if err != nil {
		writeError(rw, err)
		return
	}
	sb, _ := w.apiView()
	if sb == nil {
		writeError(rw, badRequest("pod %q has no network (not started, or finished)", w.key))
		return
	}
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		writeError(rw, badRequest("%v", err))
		return
	}
	k.logf("pod %s: port-forward", w.key)
	portforward.ServePortForward(rw, r, podPorts{netns: sb.netns}, w.key, w.uid, opts,
		streamIdleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
}

// serveLogs writes a container's log: its current run's output (the
// last run's, when it is not running), or with previous=true the run
// before, following it with follow=true until the run ends.
func (k *Kubelet) serveLogs(rw http.ResponseWriter, r *http.Request) {
	w, c, err := k.findContainer(r)
	if err != nil {
		writeError(rw, err)
		return
	}
	o, err := parseLogOptions(r.URL.Query())
	if err != nil {
		writeError(rw, badRequest("%v", err))
		return
	}
	c.mu.Lock()
	runs := c.runs
	c.mu.Unlock()
	var run *process
	switch {
	case o.previous && len(runs) >= 2:
		run = runs[len(runs)-2]
	case o.previous:
		writeError(rw, badRequest("previous terminated container %q in pod %q not found", c.spec.Name, w.key))
		return
	case len(runs) == 0:
		writeError(rw, badRequest("container %q in pod %q is waiting to start", c.spec.Name, w.key))
		return
	default:
		run = runs[len(runs)-1]
	}
	rw.Header().Set("Content-Type", "text/plain")
	rc := http.NewResponseController(rw)
	flush := func() { _ = rc.Flush() }
	if err := writeLog(r.Context(), rw, flush, run.segment(), o); err != nil {
		k.logf("pod %s: logs of %s: %v", w.key, c.spec.Name, err)
	}
}
