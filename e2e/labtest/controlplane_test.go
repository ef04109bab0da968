package labtest

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/controlplane"
	"github.com/herald-lb/herald/e2e/lab/kubectl"
)

// redactor writes to w with every occurrence of secret replaced.
type redactor struct {
	w      io.Writer
	secret string
}

func (r redactor) Write(p []byte) (int, error) {
	if _, err := io.WriteString(r.w, strings.ReplaceAll(string(p), r.secret, "<token>")); err != nil {
		return 0, err
	}
	return len(p), nil
}

func TestControlPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cp, bin := harness.StartControlPlane(t, ctx)
	k := &kubectl.Kubectl{Path: bin.Tool("kubectl"), Kubeconfig: cp.AdminKubeconfig(), Log: t.Output()}

	must := func(args ...string) string {
		t.Helper()
		out, err := k.Run(ctx, args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	if out := must("get", "--raw", "/readyz"); strings.TrimSpace(out) != "ok" {
		t.Fatalf("/readyz answered %q", out)
	}
	if out := must("version", "-o", "json"); !strings.Contains(out, `"gitVersion": "`+bin.Version+`"`) {
		t.Errorf("kubectl version does not report %s for client and server:\n%s", bin.Version, out)
	}
	must("create", "namespace", "herald-system")

	t.Run("crds", func(t *testing.T) {
		must("apply", "-f", "../../config/crd/bases")
		must("wait", "--for=condition=Established", "--timeout=60s", "-f", "../../config/crd/bases")
		must("apply", "-f", "../../config/samples/valid.yaml")
		if out := must("get", "ipaddresspools,bgppeers,l2advertisements,bgpadvertisements,bfdprofiles,communities", "-n", "herald-system", "-o", "name"); strings.Count(out, "\n") < 10 {
			t.Errorf("expected the valid sample's objects, got:\n%s", out)
		}

		files, err := filepath.Glob("../../config/samples/invalid-schema/*.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if len(files) < 10 {
			t.Fatalf("want at least 10 invalid samples in config/samples/invalid-schema, found %d", len(files))
		}
		for _, f := range files {
			t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
				field, expects := sampleExpectations(t, f)
				out, err := k.Run(ctx, "apply", "-f", f)
				if err == nil {
					t.Fatalf("the API server accepted %s:\n%s", f, out)
				}
				for _, e := range expects {
					if !strings.Contains(out, e) {
						t.Errorf("rejection of %s lacks %q:\n%s", f, e, out)
					}
				}
				if field != "" && !strings.Contains(out, field+":") {
					t.Errorf("rejection of %s does not name field %s:\n%s", f, field, out)
				}
			})
		}
	})

	t.Run("serviceaccount-token", func(t *testing.T) {
		must("create", "serviceaccount", "lab-check", "-n", "herald-system")
		quiet := &kubectl.Kubectl{Path: k.Path, Kubeconfig: k.Kubeconfig} // does not log the token
		token, err := quiet.Output(ctx, "create", "token", "lab-check", "-n", "herald-system", "--duration=10m")
		if err != nil {
			t.Fatal(err)
		}
		token = strings.TrimSpace(token)
		// A kubeconfig with nothing in it, so that only the token
		// authenticates (an admin kubeconfig's client certificate would
		// win over it).
		empty := filepath.Join(t.TempDir(), "empty.kubeconfig")
		if err := os.WriteFile(empty, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		tk := &kubectl.Kubectl{Path: k.Path, Kubeconfig: empty, Log: redactor{t.Output(), token}}
		flags := []string{"--server=" + cp.APIServerURL(), "--certificate-authority=" + cp.CAFile(), "--token=" + token}
		run := func(args ...string) (string, error) { return tk.Output(ctx, append(flags, args...)...) }

		user, err := run("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
		if err != nil {
			t.Fatal(err)
		}
		if want := "system:serviceaccount:herald-system:lab-check"; user != want {
			t.Errorf("token authenticates as %q, want %q", user, want)
		}
		if _, err := run("get", "--raw", "/api"); err != nil {
			t.Errorf("GET /api with the token: %v", err)
		}
		if _, err := run("auth", "can-i", "--list", "-n", "herald-system"); err != nil {
			t.Errorf("auth can-i --list with the token: %v", err)
		}
		// RBAC is on: a fresh ServiceAccount may not read Secrets.
		if out, err := run("auth", "can-i", "get", "secrets", "-n", "herald-system"); err == nil || strings.TrimSpace(out) != "no" {
			t.Errorf("a ServiceAccount without roles can read secrets (RBAC off?): %q %v", out, err)
		}
		if _, err := run("get", "secrets", "-n", "herald-system"); err == nil {
			t.Error("listing secrets with an unprivileged token succeeded")
		}
		// A forged token does not authenticate.
		if _, err := tk.Output(ctx, "--server="+cp.APIServerURL(), "--certificate-authority="+cp.CAFile(), "--token="+token+"x", "get", "--raw", "/api"); err == nil {
			t.Error("a corrupted token was accepted")
		}
	})

	t.Run("controllers", func(t *testing.T) {
		// The controller-manager publishes the root CA into every
		// namespace (--root-ca-file) and makes its default ServiceAccount.
		waitFor(t, ctx, func() bool {
			_, err := k.Output(ctx, "get", "configmap", "kube-root-ca.crt", "-n", "herald-system")
			return err == nil
		}, "the kube-root-ca.crt ConfigMap in herald-system")
		waitFor(t, ctx, func() bool {
			_, err := k.Output(ctx, "get", "serviceaccount", "default", "-n", "herald-system")
			return err == nil
		}, "the default ServiceAccount in herald-system")
	})
}

// sampleExpectations reads the `# field:` and `# expect:` comment lines at
// the top of an invalid sample.
func sampleExpectations(t *testing.T, path string) (field string, expects []string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "#") {
			if line == "" {
				continue
			}
			break
		}
		body := strings.TrimSpace(strings.TrimPrefix(line, "#"))
		switch {
		case strings.HasPrefix(body, "field:"):
			field = strings.TrimSpace(strings.TrimPrefix(body, "field:"))
		case strings.HasPrefix(body, "expect:"):
			expects = append(expects, strings.TrimSpace(strings.TrimPrefix(body, "expect:")))
		}
	}
	if len(expects) == 0 {
		t.Fatalf("%s has no `# expect:` line", path)
	}
	return field, expects
}

func waitFor(t *testing.T, ctx context.Context, cond func() bool, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// TestControlPlaneDown covers what `herald-lab controlplane down` relies
// on: a second Up on a running state directory refuses, and Down stops the
// processes recorded in the state file (not through the handle Up
// returned, as after a crash of the process that started them) and
// removes what Up created.
func TestControlPlaneDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cp, bin := harness.StartControlPlane(t, ctx)
	dir := cp.State().StateDir

	_, err := controlplane.Up(ctx, controlplane.Config{StateDir: dir, BinDir: bin.Dir})
	if !errors.Is(err, controlplane.ErrRunning) {
		t.Fatalf("second Up on a running state directory: %v, want ErrRunning", err)
	}

	records := cp.State().Processes
	if len(records) != 4 {
		t.Fatalf("want 4 processes in the state file, got %+v", records)
	}
	var b strings.Builder
	start := time.Now()
	if err := controlplane.Down(dir, controlplane.DownOptions{Log: &b}); err != nil {
		t.Fatal(err)
	}
	t.Logf("down took %s:\n%s", time.Since(start).Round(time.Millisecond), b.String())
	for _, r := range records {
		if r.Alive() {
			t.Errorf("%s (pid %d) survived Down", r.Name, r.PID)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("Down left %s behind", filepath.Join(dir, e.Name()))
	}
	if err := controlplane.Down(dir, controlplane.DownOptions{}); err != nil {
		t.Errorf("a second Down: %v", err)
	}
}
