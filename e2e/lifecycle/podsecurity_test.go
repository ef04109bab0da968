package lifecycle

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/cluster"
)

const psaPrefix = "hlpsa"

// psaChecks are TestHelmPodSecurity's checks of the namespaces and the
// speakers, on its test and lab.
type psaChecks struct {
	t *testing.T
	h *harness.T
}

// TestHelmPodSecurity: on a lab whose API server enforces Pod Security
// (baseline for namespaces without labels, controlplane's default), the
// chart's speakers run only because its hook labels the release's
// namespace privileged:
//   - without the hook (podSecurity.labelNamespace=false), helm install
//     --create-namespace leaves the namespace bare and the API server
//     refuses every speaker pod, naming host network, the hostPath,
//     NET_ADMIN and NET_RAW; the controller runs;
//   - into a namespace its owner made beforehand with enforce=restricted,
//     helm install --wait succeeds: the hook's pod passes restricted and
//     labels the namespace, keeping the owner's other labels;
//   - helm upgrade relabels a namespace whose label was lowered to
//     baseline since, before the speakers roll: no speaker pod is refused;
//   - so does helm rollback (the hook runs pre-rollback too): the
//     speakers roll back to the first revision's pods, none refused;
//   - helm uninstall leaves the namespace and its labels;
//   - helm install --create-namespace into a new namespace just works;
//   - the hook leaves no Job, ServiceAccount, Role or RoleBinding behind.
func TestHelmPodSecurity(t *testing.T) {
	needLab(t)
	root := repoRoot(t)
	helmBin := helmBinary(t, root)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	h := harness.UpOwnLab(t, ctx, cluster.Options{Prefix: psaPrefix, Nodes: 1, Bare: true, Proxy: cluster.ProxyHerald})
	helm := helmRunner(t, ctx, helmBin, h.Lab.Kubeconfig)
	values := labValues(t, h.Lab.APIServerURL)
	chart := filepath.Join(root, "charts", "herald")

	pc := psaChecks{t: t, h: h}

	// 1. No hook: the namespace as --create-namespace makes it, refused.
	start := time.Now()
	helm("install", helmRelease, chart, "-n", "psa-off", "--create-namespace", "-f", values, "--set", "podSecurity.labelNamespace=false")
	if got := pc.psaLabels("psa-off"); len(got) != 0 {
		t.Errorf("psa-off after helm install --create-namespace without the hook: labels %v, want none", got)
	}
	var refusal string
	h.Poll(2*time.Minute, "the speaker DaemonSet's pods refused by Pod Security", func() (bool, string) {
		var err error
		refusal, err = pc.refusals("psa-off")
		refusal = strings.TrimSpace(refusal)
		return err == nil && refusal != "", fmt.Sprintf("refusals %q, error %v", refusal, err)
	})
	for _, want := range []string{`violates PodSecurity "baseline:latest"`, "host namespaces (hostNetwork=true)", `hostPath volumes (volume "xtables-lock")`,
		`container "speaker" must not include "NET_ADMIN", "NET_RAW" in securityContext.capabilities.add`, "hostPort"} {
		if !strings.Contains(refusal, want) {
			t.Errorf("the refusal does not name %q:\n%s", want, refusal)
		}
	}
	t.Logf("without the label, the API server refuses the speaker's pods: %s", strings.SplitN(refusal, "\n", 2)[0])
	if n := strings.Count(h.Kubectl("-n", "psa-off", "get", "pods", "-l", "app.kubernetes.io/component=speaker", "-o", "name"), "pod/"); n != 0 {
		t.Errorf("psa-off: %d speaker pods, want none", n)
	}
	h.Kubectl("-n", "psa-off", "wait", "--for=condition=Available", "--timeout=120s", "deployment/herald-controller")
	helm("uninstall", helmRelease, "-n", "psa-off", "--wait", "--timeout", "2m")
	t.Logf("TIMING without the hook, install, refusal, uninstall: %s", time.Since(start).Round(time.Millisecond))

	// 2. A namespace of its owner's, restricted: the hook relabels it.
	h.Kubectl("create", "namespace", "psa-own")
	h.Kubectl("label", "namespace", "psa-own", "pod-security.kubernetes.io/enforce=restricted", "team=network")
	start = time.Now()
	helm("install", helmRelease, chart, "-n", "psa-own", "-f", values, "--wait", "--timeout", "5m")
	t.Logf("TIMING helm install --wait into a restricted namespace made beforehand: %s", time.Since(start).Round(time.Millisecond))
	pc.privileged("psa-own", "team", "network")
	pc.speakersReady("psa-own")
	pc.noHookLeft("psa-own")

	// 3. Lowered since: helm upgrade relabels before the speakers roll.
	h.Kubectl("label", "namespace", "psa-own", "--overwrite", "pod-security.kubernetes.io/enforce=baseline")
	start = time.Now()
	helm("upgrade", helmRelease, chart, "-n", "psa-own", "-f", values, "--set", "speaker.logLevel=info", "--timeout", "5m")
	pc.rolled("helm upgrade", "info")
	t.Logf("TIMING helm upgrade, a new speaker pod per node: %s", time.Since(start).Round(time.Millisecond))

	// 4. Lowered again: helm rollback to the install's revision relabels
	// too (the hook runs pre-rollback) before the speakers roll back.
	h.Kubectl("label", "namespace", "psa-own", "--overwrite", "pod-security.kubernetes.io/enforce=baseline")
	start = time.Now()
	helm("rollback", helmRelease, "1", "-n", "psa-own", "--timeout", "5m")
	pc.rolled("helm rollback", "debug")
	t.Logf("TIMING helm rollback, a new speaker pod per node: %s", time.Since(start).Round(time.Millisecond))

	// 5. helm uninstall keeps the namespace and its labels.
	helm("uninstall", helmRelease, "-n", "psa-own", "--wait", "--timeout", "2m")
	pc.privileged("psa-own", "team", "network")

	// 6. A new namespace, --create-namespace: the hook labels it.
	start = time.Now()
	helm("install", helmRelease, chart, "-n", "psa-new", "--create-namespace", "-f", values, "--wait", "--timeout", "5m")
	t.Logf("TIMING helm install --create-namespace --wait: %s", time.Since(start).Round(time.Millisecond))
	pc.privileged("psa-new")
	pc.speakersReady("psa-new")
	pc.noHookLeft("psa-new")
	helm("uninstall", helmRelease, "-n", "psa-new", "--wait", "--timeout", "2m")
	if _, err := h.CS.CoreV1().Namespaces().Get(h.Ctx, "psa-new", metav1.GetOptions{}); err != nil {
		t.Errorf("psa-new after helm uninstall: %v; Helm does not delete the namespace --create-namespace made", err)
	}
}

// psaLabels is ns's Pod Security labels, and its team label.
func (pc psaChecks) psaLabels(ns string) map[string]string {
	t, h := pc.t, pc.h
	t.Helper()
	n, err := h.CS.CoreV1().Namespaces().Get(h.Ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("namespace %s: %v", ns, err)
	}
	out := map[string]string{}
	for k, v := range n.Labels {
		if strings.HasPrefix(k, "pod-security.kubernetes.io/") || k == "team" {
			out[k] = v
		}
	}
	return out
}

// privileged checks that ns's labels are the privileged level's, and
// extra (label, value pairs) alone besides.
func (pc psaChecks) privileged(ns string, extra ...string) {
	t := pc.t
	t.Helper()
	got := pc.psaLabels(ns)
	want := map[string]string{"pod-security.kubernetes.io/enforce": "privileged", "pod-security.kubernetes.io/audit": "privileged", "pod-security.kubernetes.io/warn": "privileged"}
	for i := 0; i+1 < len(extra); i += 2 {
		want[extra[i]] = extra[i+1]
	}
	if len(got) != len(want) {
		t.Errorf("namespace %s: labels %v, want %v", ns, got, want)
		return
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("namespace %s: labels %v, want %v", ns, got, want)
			return
		}
	}
}

// noHookLeft checks that the labelling hook left nothing in ns.
func (pc psaChecks) noHookLeft(ns string) {
	t, h := pc.t, pc.h
	t.Helper()
	cs, name := h.CS, "herald-label-namespace"
	for what, err := range map[string]error{
		"Job":            get(cs.BatchV1().Jobs(ns).Get(h.Ctx, name, metav1.GetOptions{})),
		"ServiceAccount": get(cs.CoreV1().ServiceAccounts(ns).Get(h.Ctx, name, metav1.GetOptions{})),
		"Role":           get(cs.RbacV1().Roles(ns).Get(h.Ctx, name, metav1.GetOptions{})),
		"RoleBinding":    get(cs.RbacV1().RoleBindings(ns).Get(h.Ctx, name, metav1.GetOptions{})),
	} {
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s %s/%s after the hook: %v; want it deleted", what, ns, name, err)
		}
	}
}

// refusals are the messages of the speaker DaemonSet's FailedCreate
// events in ns that Pod Security caused: a pod created before the
// namespace was labelled.
func (pc psaChecks) refusals(ns string) (string, error) {
	h := pc.h
	out, err := h.K.Output(h.Ctx, "-n", ns, "get", "events", "--field-selector", "involvedObject.name=herald-speaker,reason=FailedCreate",
		"-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
	if err != nil {
		return "", err
	}
	var refused []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "violates PodSecurity") {
			refused = append(refused, l)
		}
	}
	return strings.Join(refused, "\n"), nil
}

// speakersReady waits for the speakers' rollout in ns and checks that
// every node has one.
func (pc psaChecks) speakersReady(ns string) {
	t, h := pc.t, pc.h
	t.Helper()
	h.Kubectl("-n", ns, "rollout", "status", "--timeout=180s", "daemonset/herald-speaker")
	if n := strings.Count(h.Kubectl("-n", ns, "get", "pods", "-l", "app.kubernetes.io/component=speaker", "-o", "name"), "pod/"); n != len(h.Layout.Nodes) {
		t.Errorf("%s: %d speaker pods, want %d", ns, n, len(h.Layout.Nodes))
	}
}

// rolled waits for the speakers of psa-own to roll out after a helm
// command run without --wait (so that a pod Pod Security refuses ends
// the test at once, with the API server's reason), then checks that
// none was refused (the hook relabelled the namespace first), that
// the new pods run with logLevel, and that the hook is gone.
func (pc psaChecks) rolled(after, logLevel string) {
	t, h := pc.t, pc.h
	t.Helper()
	h.Poll(3*time.Minute, "the speakers rolled out after "+after, func() (bool, string) {
		if r, err := pc.refusals("psa-own"); err == nil && r != "" {
			t.Fatalf("%s: the API server refused the speaker's new pods (namespace labels %v):\n%s", after, pc.psaLabels("psa-own"), r)
		}
		out, err := h.K.Output(h.Ctx, "-n", "psa-own", "rollout", "status", "--watch=false", "daemonset/herald-speaker")
		return err == nil && strings.Contains(out, "successfully rolled out"), out
	})
	pc.privileged("psa-own", "team", "network")
	pc.speakersReady("psa-own")
	if args := h.Kubectl("-n", "psa-own", "get", "daemonset", "herald-speaker", "-o", "jsonpath={.spec.template.spec.containers[0].args}"); !strings.Contains(args, "--log-level="+logLevel) {
		t.Errorf("%s did not reach the speaker's pods: args %s, want --log-level=%s", after, args, logLevel)
	}
	if r, err := pc.refusals("psa-own"); err != nil || r != "" {
		t.Errorf("%s: the API server refused speaker pods, created before the namespace was relabelled (%v):\n%s", after, err, r)
	}
	pc.noHookLeft("psa-own")
}

// get keeps the error of a client-go Get.
func get[T any](_ T, err error) error { return err }
