package status

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/herald-lb/herald/internal/lbapi"
)

// Drained nodes are listed after the Services, a bad mark with its
// problem; without the right to list Nodes, a warning says what is not
// shown and the rest of the report stands.
func TestRunShowsDrainedNodes(t *testing.T) {
	kube := kubeWorld()
	for name, v := range map[string]string{"node1": "", "node2": "true", "node3": "soon"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if v != "" {
			n.Annotations = map[string]string{lbapi.AnnotationDrain: v}
		}
		if _, err := kube.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dyn := fakeDynamic(append(bgpWorld(t, nil), serviceAnnouncements(t)...)...)
	r := runJSON(t, Options{HeraldNamespace: heraldNS}, kube, dyn)
	if len(r.Drained) != 2 || r.Drained[0] != (DrainedNode{Node: "node2"}) || r.Drained[1].Node != "node3" ||
		!strings.Contains(r.Drained[1].Problem, `node node3: annotation herald.io/drain="soon"`) {
		t.Errorf("drained %+v", r.Drained)
	}
	var b strings.Builder
	if err := run(context.Background(), Options{HeraldNamespace: heraldNS, Output: "text"}, kube, dyn, &b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Drained nodes (herald drain;") || !strings.Contains(b.String(), "  node2: drained:") ||
		!strings.Contains(b.String(), "its speaker keeps the drain state it had") {
		t.Errorf("text:\n%s", b.String())
	}
	t.Logf("$ herald status\n%s", b.String())

	kube.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("nodes"), "", fmt.Errorf("no"))
	})
	r = runJSON(t, Options{HeraldNamespace: heraldNS}, kube, dyn)
	if len(r.Drained) != 0 || !slices.ContainsFunc(r.Warnings, func(w string) bool { return strings.Contains(w, "nodes drained with herald drain are not shown") }) || len(r.Services) == 0 {
		t.Errorf("forbidden Nodes: drained %+v warnings %q services %d", r.Drained, r.Warnings, len(r.Services))
	}
}
