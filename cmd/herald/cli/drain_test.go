package cli

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/herald-lb/herald/internal/lbapi"
)

func TestParseDrain(t *testing.T) {
	for _, c := range []struct {
		args   []string
		want   drainOptions
		errHas string
	}{
		{args: []string{"node2"}, want: drainOptions{node: "node2"}},
		{args: []string{"node2", "--undo"}, want: drainOptions{node: "node2", undo: true}},
		{args: []string{"--dry-run", "node2"}, want: drainOptions{node: "node2", dryRun: true}},
		{args: nil, errHas: "which node?"},
		{args: []string{"node1", "node2"}, errHas: `one node at a time, got ["node1" "node2"]`},
		{args: []string{"--cordon", "node2"}, errHas: "unknown flag: --cordon"},
	} {
		got, err := parseDrain(c.args, io.Discard)
		switch {
		case c.errHas != "":
			if err == nil || !strings.Contains(err.Error(), c.errHas) {
				t.Errorf("%v: %v, want an error with %q", c.args, err, c.errHas)
			}
		case err != nil:
			t.Errorf("%v: %v", c.args, err)
		case got.node != c.want.node || got.undo != c.want.undo || got.dryRun != c.want.dryRun:
			t.Errorf("%v: %+v, want %+v", c.args, got, c.want)
		}
	}
}

func drainNode(name string, ann map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann, Labels: map[string]string{"kubernetes.io/hostname": name}}}
}

// runDrainOn runs drainMain on cs and returns the exit status, stdout,
// stderr and the node's annotations afterwards.
func runDrainOn(t *testing.T, cs *fake.Clientset, o drainOptions) (int, string, string, map[string]string) {
	t.Helper()
	var out, errOut bytes.Buffer
	rc := drainMain(context.Background(), cs.CoreV1().Nodes(), o, &out, &errOut)
	n, err := cs.CoreV1().Nodes().Get(context.Background(), o.node, metav1.GetOptions{})
	var ann map[string]string
	if err == nil {
		ann = n.Annotations
	}
	return rc, out.String(), errOut.String(), ann
}

func TestDrainSetsAndClearsTheMark(t *testing.T) {
	cs := fake.NewClientset(drainNode("node2", map[string]string{"keep": "me"}))
	rc, out, errOut, ann := runDrainOn(t, cs, drainOptions{node: "node2"})
	if rc != 0 || ann[lbapi.AnnotationDrain] != "true" || ann["keep"] != "me" {
		t.Fatalf("drain: rc %d annotations %v stderr %q", rc, ann, errOut)
	}
	for _, s := range []string{"node node2: herald.io/drain=true set", "GRACEFUL_SHUTDOWN", "kubectl drain node2 --ignore-daemonsets"} {
		if !strings.Contains(out, s) {
			t.Errorf("drain output lacks %q:\n%s", s, out)
		}
	}
	t.Logf("$ herald drain node2\n%s", out)
	rc, out, _, _ = runDrainOn(t, cs, drainOptions{node: "node2"})
	if rc != 0 || !strings.Contains(out, "drained already") {
		t.Errorf("drain twice: rc %d %q", rc, out)
	}
	rc, out, _, ann = runDrainOn(t, cs, drainOptions{node: "node2", undo: true})
	if _, still := ann[lbapi.AnnotationDrain]; rc != 0 || still || ann["keep"] != "me" || !strings.Contains(out, "herald.io/drain removed") {
		t.Fatalf("undo: rc %d annotations %v output %q", rc, ann, out)
	}
	rc, out, _, _ = runDrainOn(t, cs, drainOptions{node: "node2", undo: true})
	if rc != 0 || !strings.Contains(out, "is not drained") {
		t.Errorf("undo twice: rc %d %q", rc, out)
	}
}

func TestDrainReplacesABadMark(t *testing.T) {
	cs := fake.NewClientset(drainNode("node2", map[string]string{lbapi.AnnotationDrain: "yes"}))
	rc, _, errOut, ann := runDrainOn(t, cs, drainOptions{node: "node2"})
	if rc != 0 || ann[lbapi.AnnotationDrain] != "true" || !strings.Contains(errOut, `herald.io/drain="yes"`) {
		t.Errorf("rc %d annotations %v stderr %q", rc, ann, errOut)
	}
	cs = fake.NewClientset(drainNode("node2", map[string]string{lbapi.AnnotationDrain: "yes"}))
	rc, _, _, ann = runDrainOn(t, cs, drainOptions{node: "node2", undo: true})
	if _, still := ann[lbapi.AnnotationDrain]; rc != 0 || still {
		t.Errorf("undo of a bad mark: rc %d annotations %v", rc, ann)
	}
}

func TestDrainDryRunChangesNothing(t *testing.T) {
	cs := fake.NewClientset(drainNode("node2", nil))
	var dryRun []string
	cs.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		// The fake ignores DryRun; the API server honours it.
		dryRun = a.(k8stesting.PatchActionImpl).PatchOptions.DryRun
		return true, drainNode("node2", nil), nil
	})
	rc, out, _, ann := runDrainOn(t, cs, drainOptions{node: "node2", dryRun: true})
	if rc != 0 || len(dryRun) != 1 || dryRun[0] != metav1.DryRunAll || !strings.HasPrefix(out, "(dry run) node node2") {
		t.Errorf("rc %d dryRun %v output %q", rc, dryRun, out)
	}
	if _, set := ann[lbapi.AnnotationDrain]; set {
		t.Errorf("dry run set the mark: %v", ann)
	}
}

func TestDrainErrorsNameTheNode(t *testing.T) {
	rc, _, errOut, _ := runDrainOn(t, fake.NewClientset(drainNode("node2", nil)), drainOptions{node: "node9"})
	if rc != 1 || !strings.Contains(errOut, `node "node9" not found`) {
		t.Errorf("missing node: rc %d %q", rc, errOut)
	}
	cs := fake.NewClientset(drainNode("node2", nil))
	cs.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "node2", nil)
	})
	rc, _, errOut, ann := runDrainOn(t, cs, drainOptions{node: "node2"})
	if rc != 1 || !strings.Contains(errOut, "no permission to read and patch node node2") {
		t.Errorf("forbidden: rc %d %q", rc, errOut)
	}
	if _, set := ann[lbapi.AnnotationDrain]; set {
		t.Errorf("forbidden, yet marked: %v", ann)
	}
}
