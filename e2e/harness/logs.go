package harness

import (
	"bytes"
	"context"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/herald-lb/herald/e2e/lab/kubectl"
)

// LogFollower keeps the logs of every pod matching a selector, from the
// moment it starts until Stop, across pod replacements: a real kubelet
// removes a deleted pod's log files, so what a pod wrote while stopping
// is only kept by following it (`kubectl logs -f`).
type LogFollower struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	logs   map[string]*bytes.Buffer
}

// FollowLogs follows container's logs in every pod of namespace matching
// selector, new pods included.
func (h *T) FollowLogs(namespace, selector, container string) *LogFollower {
	ctx, cancel := context.WithCancel(h.Ctx)
	f := &LogFollower{cancel: cancel, logs: map[string]*bytes.Buffer{}}
	quiet := kubectl.Kubectl{Path: h.K.Path, Kubeconfig: h.K.Kubeconfig} // no transcript of the polling
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for ctx.Err() == nil {
			out, err := quiet.Output(ctx, "-n", namespace, "get", "pods", "-l", selector, "-o",
				`jsonpath={range .items[*]}{.metadata.name} {.status.containerStatuses[?(@.name=="`+container+`")].containerID}{"\n"}{end}`)
			if err == nil {
				for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
					fs := strings.Fields(line)
					if len(fs) != 2 { // no container started yet
						continue
					}
					key := fs[0] + " " + fs[1]
					f.mu.Lock()
					_, seen := f.logs[key]
					if !seen {
						f.logs[key] = &bytes.Buffer{}
					}
					buf := f.logs[key]
					f.mu.Unlock()
					if !seen {
						f.wg.Add(1)
						go func(pod string) {
							defer f.wg.Done()
							cmd := exec.CommandContext(ctx, h.K.Path, "--kubeconfig", h.K.Kubeconfig, "-n", namespace, "logs", "-f", pod, "-c", container)
							cmd.Stdout = lockedWriter{&f.mu, buf}
							_ = cmd.Run()
						}(fs[0])
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return f
}

// Stop ends the following (give a stopping pod's last lines a moment
// first) and returns each container's log, by "pod containerID".
func (f *LogFollower) Stop() map[string]string {
	time.Sleep(time.Second)
	f.cancel()
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]string{}
	keys := make([]string, 0, len(f.logs))
	for k := range f.logs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out[k] = f.logs[k].String()
	}
	return out
}

type lockedWriter struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// Near returns the lines logged so far, by any followed container,
// whose slog time (time=...) lies within window of one of the times,
// each prefixed with its pod: what the components said when a request
// failed.
func (f *LogFollower) Near(times []time.Time, window time.Duration) []string {
	return f.lines(func(line string) bool {
		at, ok := slogTime(line)
		return ok && slices.ContainsFunc(times, func(t time.Time) bool { return at.Sub(t).Abs() <= window })
	})
}

// Matching returns the lines logged so far that hold any of words, each
// prefixed with its pod: a component's story of one kind of event.
func (f *LogFollower) Matching(words ...string) []string {
	return f.lines(func(line string) bool {
		return slices.ContainsFunc(words, func(w string) bool { return strings.Contains(line, w) })
	})
}

// lines returns the lines keep accepts, by pod, in each pod's order.
func (f *LogFollower) lines(keep func(string) bool) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]string, 0, len(f.logs))
	for k := range f.logs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		pod, _, _ := strings.Cut(k, " ")
		for _, line := range strings.Split(f.logs[k].String(), "\n") {
			if keep(line) {
				out = append(out, pod+": "+line)
			}
		}
	}
	return out
}

// slogTime reads the time=... field slog's text handler starts a line
// with.
func slogTime(line string) (time.Time, bool) {
	v, ok := strings.CutPrefix(line, "time=")
	if !ok {
		return time.Time{}, false
	}
	v, _, _ = strings.Cut(v, " ")
	t, err := time.Parse(time.RFC3339Nano, v)
	return t, err == nil
}
