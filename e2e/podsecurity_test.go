package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/herald-lb/herald/e2e/harness"
)

// TestPodSecurityAdmission: the lab's API server enforces Pod Security
// (baseline where a namespace has no label, as many clusters do), so
// herald's node agents are admitted only because of their namespace's
// labels. In herald-system made bare, as `helm install --create-namespace`
// makes it, the API server refuses the speaker's and the proxy's pods and
// names what baseline forbids; with the labels config/deploy gives
// herald-system it admits them. The controller is admitted even where
// restricted is enforced. The namespaces the lab exempts (kube-system and
// default, for its own test pods) admit anything. Pods are created with
// dryRun=All: admission runs in full, nothing is stored, no node needed.
func TestPodSecurityAdmission(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cp, _ := harness.StartControlPlane(t, ctx)
	rc, err := clientcmd.BuildConfigFromFlags("", cp.AdminKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}

	deploy := decodeManifests(t, "../config/deploy/herald.yaml")
	proxyOnly := decodeManifests(t, "../config/proxy-only/proxy.yaml")
	var labelled *corev1.Namespace
	templates := map[string]corev1.PodTemplateSpec{}
	for _, o := range append(deploy, proxyOnly...) {
		switch w := o.(type) {
		case *corev1.Namespace:
			labelled = w
		case *appsv1.DaemonSet:
			templates[w.Name] = w.Spec.Template
		case *appsv1.Deployment:
			templates[w.Name] = w.Spec.Template
		}
	}
	if labelled == nil || labelled.Name != "herald-system" || len(templates) != 3 {
		t.Fatalf("config/deploy and config/proxy-only: namespace %v, pod templates of %d workloads, want herald-system and 3", labelled, len(templates))
	}

	// admit asks the API server to create the workload's pod in ns.
	admit := func(workload, ns string) error {
		t.Helper()
		tmpl := templates[workload]
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: tmpl.Spec.ServiceAccountName, Namespace: ns}}
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		pod := &corev1.Pod{ObjectMeta: *tmpl.ObjectMeta.DeepCopy(), Spec: *tmpl.Spec.DeepCopy()}
		pod.Name, pod.Namespace = workload+"-psa", ns
		_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	refused := func(workload, ns string, want ...string) {
		t.Helper()
		err := admit(workload, ns)
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s's pod in %s: %v; want it refused by Pod Security", workload, ns, err)
			return
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s's pod in %s: %v\nwant the refusal to name %q", workload, ns, err, w)
			}
		}
		t.Logf("%s's pod in %s: refused: %v", workload, ns, err)
	}
	admitted := func(workload, ns string) {
		t.Helper()
		if err := admit(workload, ns); err != nil {
			t.Errorf("%s's pod in %s: %v; want it admitted", workload, ns, err)
		}
	}
	setLabels := func(labels map[string]string) {
		t.Helper()
		ns, err := cs.CoreV1().Namespaces().Get(ctx, "herald-system", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ns.Labels = labels
		if _, err := cs.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// As helm install --create-namespace makes it: only Helm's name label.
	bare := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "herald-system", Labels: map[string]string{"name": "herald-system"}}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, bare, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nodeAgent := func(container string) []string {
		return []string{`violates PodSecurity "baseline:latest"`, "host namespaces (hostNetwork=true)", `hostPath volumes (volume "xtables-lock")`,
			`container "` + container + `" must not include "NET_ADMIN", "NET_RAW" in securityContext.capabilities.add`, "hostPort"}
	}
	refused("herald-speaker", "herald-system", nodeAgent("speaker")...)
	refused("herald-proxy", "herald-system", nodeAgent("proxy")...)
	admitted("herald-controller", "herald-system")

	setLabels(map[string]string{"pod-security.kubernetes.io/enforce": "restricted"})
	admitted("herald-controller", "herald-system")
	refused("herald-speaker", "herald-system", `violates PodSecurity "restricted:latest"`, "hostNetwork=true")

	setLabels(labelled.Labels)
	t.Logf("herald-system labelled as config/deploy labels it: %v", labelled.Labels)
	for w := range templates {
		admitted(w, "herald-system")
	}

	for _, ns := range []string{"default", "kube-system"} {
		admitted("herald-speaker", ns)
	}
}

// decodeManifests reads the Kubernetes objects of a multi-document YAML
// file with client-go's scheme.
func decodeManifests(t *testing.T, path string) []runtime.Object {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var out []runtime.Object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if runtime.IsNotRegisteredError(err) {
			continue // the CRDs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, obj)
	}
}
