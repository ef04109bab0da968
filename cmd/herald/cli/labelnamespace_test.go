package cli

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/herald-lb/herald/internal/podsecurity"
)

func TestParseLabelNamespace(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		podNS  string
		want   labelNamespaceOptions
		errHas string
	}{
		{args: []string{"--pod-security=privileged"}, podNS: "herald-system", want: labelNamespaceOptions{namespace: "herald-system", level: podsecurity.Privileged}},
		{args: []string{"--pod-security", "baseline", "--namespace", "lb"}, podNS: "herald-system", want: labelNamespaceOptions{namespace: "lb", level: podsecurity.Baseline}},
		{args: []string{"--pod-security=privileged"}, errHas: "--namespace is required (or $POD_NAMESPACE)"},
		{args: []string{"--namespace=lb"}, errHas: "--pod-security is required"},
		{args: []string{"--pod-security=Privileged", "--namespace=lb"}, errHas: `--pod-security: "Privileged" is not a Pod Security level`},
		{args: []string{"--pod-security=privileged", "--namespace=lb", "extra"}, errHas: `unexpected arguments ["extra"]`},
	} {
		got, err := parseLabelNamespace(tc.args, io.Discard, tc.podNS)
		switch {
		case tc.errHas != "":
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.errHas)
			}
		case err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case got.namespace != tc.want.namespace || got.level != tc.want.level:
			t.Errorf("%v: namespace %q level %q, want %q %q", tc.args, got.namespace, got.level, tc.want.namespace, tc.want.level)
		}
	}
	if got := Main([]string{"label-namespace", "--pod-security=none"}); got != 2 {
		t.Errorf("bad flag: exit %d, want 2", got)
	}
}

func TestLabelNamespaceMain(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "herald-system", Labels: map[string]string{"name": "herald-system"}}})
	o := labelNamespaceOptions{namespace: "herald-system", level: podsecurity.Privileged}
	var out, errOut bytes.Buffer
	if code := labelNamespaceMain(ctx, cs.CoreV1().Namespaces(), o, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	want := `namespace herald-system: pod-security.kubernetes.io/audit=privileged (was unset)
namespace herald-system: pod-security.kubernetes.io/enforce=privileged (was unset)
namespace herald-system: pod-security.kubernetes.io/warn=privileged (was unset)
`
	if out.String() != want {
		t.Errorf("first run printed:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	if code := labelNamespaceMain(ctx, cs.CoreV1().Namespaces(), o, &out, &errOut); code != 0 {
		t.Fatalf("second run: exit %d: %s", code, errOut.String())
	}
	if want := "namespace herald-system: Pod Security enforce, audit and warn are privileged already\n"; out.String() != want {
		t.Errorf("second run printed %q, want %q", out.String(), want)
	}

	o.namespace = "elsewhere"
	out.Reset()
	if code := labelNamespaceMain(ctx, cs.CoreV1().Namespaces(), o, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "namespace elsewhere: ") {
		t.Errorf("a missing namespace: exit %d, %q", code, errOut.String())
	}
}
