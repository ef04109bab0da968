package harness

import (
	"bytes"
	"context"
	"os/exec"
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
