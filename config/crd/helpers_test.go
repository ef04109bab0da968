package crd

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// newValidator builds a Validator over the generated CRDs or stops the test.
func newValidator(t *testing.T) *Validator {
	t.Helper()
	v, err := NewValidator()
	if err != nil {
		t.Fatalf("building validator from config/crd/bases: %v", err)
	}
	return v
}

// validateYAML decodes one object and validates it.
func validateYAML(t *testing.T, v *Validator, doc string) field.ErrorList {
	t.Helper()
	objs, err := ReadObjects([]byte(doc))
	if err != nil || len(objs) != 1 {
		t.Fatalf("want one object, got %d (%v) from:\n%s", len(objs), err, doc)
	}
	return v.Validate(context.Background(), objs[0])
}

// render prints errors one per line for failure messages.
func render(errs field.ErrorList) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "\n  %s", e)
	}
	return b.String()
}

// object renders a herald.io object of the given kind and spec (YAML) with
// a fixed name and namespace.
func object(kind, spec string) string {
	return "apiVersion: herald.io/v1beta1\nkind: " + kind + "\nmetadata:\n  name: test\n  namespace: herald-system\nspec:\n" + indent(spec, "  ")
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n") + "\n"
}
