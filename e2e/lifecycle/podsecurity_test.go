package lifecycle

import (
	"context"
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
//     baseline since, before the speakers roll;
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

	psaLabels := func(ns string) map[string]string {
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
	privileged := func(ns string, extra ...string) {
		t.Helper()
		got := psaLabels(ns)
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
	noHookLeft := func(ns string) {
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
	speakersReady := func(ns string) {
		t.Helper()
		h.Kubectl("-n", ns, "rollout", "status", "--timeout=180s", "daemonset/herald-speaker")
		if n := strings.Count(h.Kubectl("-n", ns, "get", "pods", "-l", "app.kubernetes.io/component=speaker", "-o", "name"), "pod/"); n != len(h.Layout.Nodes) {
			t.Errorf("%s: %d speaker pods, want %d", ns, n, len(h.Layout.Nodes))
		}
	}

	// 1. No hook: the namespace as --create-namespace makes it, refused.
	start := time.Now()
	helm("install", helmRelease, chart, "-n", "psa-off", "--create-namespace", "-f", values, "--set", "podSecurity.labelNamespace=false")
	if got := psaLabels("psa-off"); len(got) != 0 {
		t.Errorf("psa-off after helm install --create-namespace without the hook: labels %v, want none", got)
	}
	var refusal string
	h.Poll(2*time.Minute, "the speaker DaemonSet's pods refused by Pod Security", func() (bool, string) {
		out, err := h.K.Output(h.Ctx, "-n", "psa-off", "get", "events", "--field-selector", "involvedObject.name=herald-speaker,reason=FailedCreate",
			"-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
		refusal = strings.TrimSpace(out)
		return err == nil && refusal != "", out
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
	privileged("psa-own", "team", "network")
	speakersReady("psa-own")
	noHookLeft("psa-own")

	// 3. Lowered since: helm upgrade relabels before the speakers roll.
	h.Kubectl("label", "namespace", "psa-own", "--overwrite", "pod-security.kubernetes.io/enforce=baseline")
	start = time.Now()
	helm("upgrade", helmRelease, chart, "-n", "psa-own", "-f", values, "--set", "speaker.logLevel=info", "--wait", "--timeout", "5m")
	t.Logf("TIMING helm upgrade --wait, a new speaker pod per node: %s", time.Since(start).Round(time.Millisecond))
	privileged("psa-own", "team", "network")
	speakersReady("psa-own")
	if args := h.Kubectl("-n", "psa-own", "get", "daemonset", "herald-speaker", "-o", "jsonpath={.spec.template.spec.containers[0].args}"); !strings.Contains(args, "--log-level=info") {
		t.Errorf("the upgrade did not reach the speaker's pods: args %s", args)
	}
	noHookLeft("psa-own")

	// 4. helm uninstall keeps the namespace and its labels.
	helm("uninstall", helmRelease, "-n", "psa-own", "--wait", "--timeout", "2m")
	privileged("psa-own", "team", "network")

	// 5. A new namespace, --create-namespace: the hook labels it.
	start = time.Now()
	helm("install", helmRelease, chart, "-n", "psa-new", "--create-namespace", "-f", values, "--wait", "--timeout", "5m")
	t.Logf("TIMING helm install --create-namespace --wait: %s", time.Since(start).Round(time.Millisecond))
	privileged("psa-new")
	speakersReady("psa-new")
	noHookLeft("psa-new")
	helm("uninstall", helmRelease, "-n", "psa-new", "--wait", "--timeout", "2m")
	if _, err := h.CS.CoreV1().Namespaces().Get(h.Ctx, "psa-new", metav1.GetOptions{}); err != nil {
		t.Errorf("psa-new after helm uninstall: %v; Helm does not delete the namespace --create-namespace made", err)
	}
}

// get keeps the error of a client-go Get.
func get[T any](_ T, err error) error { return err }
