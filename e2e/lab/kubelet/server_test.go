package kubelet

import (
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// apiTestKubelet runs pod default/web (UID u1) with container app, which
// has had two runs, and container idle, which has not started.
func apiTestKubelet(t *testing.T) *Kubelet {
	t.Helper()
	log := filepath.Join(t.TempDir(), "app.log")
	content := "=== start 1\nold output\n=== exited\n=== start 2\nnew output\n"
	if err := os.WriteFile(log, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(start, end int) *process {
		p := &process{logPath: log, logStart: int64(start), exited: make(chan struct{})}
		p.logEnd.Store(int64(end))
		if end >= 0 {
			close(p.exited)
		}
		return p
	}
	k := &Kubelet{cfg: Config{NodeName: "node1", Log: io.Discard}, workers: map[types.UID]*podWorker{}}
	w := &podWorker{k: k, uid: "u1", key: "default/web"}
	app := &container{w: w, spec: v1.Container{Name: "app"}}
	app.runs = []*process{run(len("=== start 1\n"), len("=== start 1\nold output\n")), run(len(content)-len("new output\n"), -1)}
	w.containers = []*container{app, {w: w, spec: v1.Container{Name: "idle"}}}
	k.workers[w.uid] = w
	return k
}

func TestAPIHandler(t *testing.T) {
	h := apiTestKubelet(t).apiHandler()
	for _, tc := range []struct {
		method, target string
		status         int
		body           string
	}{
		{"GET", "/healthz", 200, "ok"},
		{"GET", "/containerLogs/default/web/app", 200, "new output\n"},
		{"GET", "/containerLogs/default/web/app?previous=true", 200, "old output\n"},
		{"GET", "/containerLogs/default/web/app?tailLines=0", 200, ""},
		{"GET", "/containerLogs/default/web/app?timestamps=true", 400, "no time for each log line"},
		{"GET", "/containerLogs/default/web/idle", 400, `container "idle" in pod "default/web" is waiting to start`},
		{"GET", "/containerLogs/default/web/idle?previous=true", 400, `previous terminated container "idle" in pod "default/web" not found`},
		{"GET", "/containerLogs/default/web/nope", 404, `container "nope" not found in pod "default/web"`},
		{"GET", "/containerLogs/default/other/app", 404, `pod "default/other" does not exist on node node1`},
		{"GET", "/containerLogs/default/web", 404, "404 page not found"},
		{"POST", "/containerLogs/default/web/app", 405, "Method Not Allowed"},
		{"POST", "/exec/default/web/app?command=true", 400, `container "app" in pod "default/web" is not running`},
		{"POST", "/exec/default/web/u2/app?command=true", 404, `pod "default/web" does not exist`},
		{"POST", "/exec/default/web/u1/nope?command=true", 404, `container "nope" not found`},
		{"PUT", "/exec/default/web/app", 405, "Method Not Allowed"},
		{"POST", "/run/default/web/app?cmd=true", 400, "is not running"},
		{"POST", "/portForward/default/web", 400, `pod "default/web" has no network`},
		{"POST", "/portForward/default/gone", 404, `pod "default/gone" does not exist`},
		{"POST", "/attach/default/web/app", 404, "404 page not found"},
	} {
		r := httptest.NewRequest(tc.method, tc.target, nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		got := w.Body.String()
		if w.Code != tc.status || (tc.body == "" && got != "") || !strings.Contains(got, tc.body) {
			t.Errorf("%s %s: %d %q, want %d with %q", tc.method, tc.target, w.Code, got, tc.status, tc.body)
		}
	}
}
