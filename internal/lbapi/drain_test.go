package lbapi

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNodeDrain(t *testing.T) {
	for _, c := range []struct {
		ann          map[string]string
		drained, set bool
		err          string
	}{
		{ann: nil},
		{ann: map[string]string{"other": "true"}},
		{ann: map[string]string{AnnotationDrain: "true"}, drained: true, set: true},
		{ann: map[string]string{AnnotationDrain: "false"}, set: true},
		{ann: map[string]string{AnnotationDrain: ""}, set: true, err: `node node2: annotation herald.io/drain="": want "true" (herald drain node2) or no annotation (herald drain --undo node2)`},
		{ann: map[string]string{AnnotationDrain: "yes"}, set: true, err: `herald.io/drain="yes"`},
		{ann: map[string]string{AnnotationDrain: " true"}, set: true, err: `herald.io/drain=" true"`},
		{ann: map[string]string{AnnotationDrain: "TRUE"}, set: true, err: `"TRUE"`},
	} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node2", Annotations: c.ann}}
		drained, set, err := NodeDrain(n)
		if drained != c.drained || set != c.set {
			t.Errorf("%v: drained %v set %v, want %v %v", c.ann, drained, set, c.drained, c.set)
		}
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%v: %v", c.ann, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "node2")):
			t.Errorf("%v: error %v, want one naming the node and containing %q", c.ann, err, c.err)
		case err != nil && drained:
			t.Errorf("%v: a bad value drains the node", c.ann)
		}
	}
}
