// Package podsecurity labels a namespace with a Pod Security Standards
// level (pod-security.kubernetes.io/enforce, audit and warn), for
// `herald label-namespace`, which the Helm chart runs as a hook: Helm's
// --create-namespace makes a namespace without labels, and Pod Security
// admission reads its levels from namespace labels only.
package podsecurity

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

// Level is a Pod Security Standards level.
type Level string

// The levels, from the least restricted.
const (
	Privileged Level = "privileged"
	Baseline   Level = "baseline"
	Restricted Level = "restricted"
)

// The namespace labels Pod Security admission reads a mode's level from.
const (
	EnforceLabel = "pod-security.kubernetes.io/enforce"
	AuditLabel   = "pod-security.kubernetes.io/audit"
	WarnLabel    = "pod-security.kubernetes.io/warn"
)

// ParseLevel accepts the three levels' names only.
func ParseLevel(s string) (Level, error) {
	switch l := Level(s); l {
	case Privileged, Baseline, Restricted:
		return l, nil
	}
	return "", fmt.Errorf("%q is not a Pod Security level (privileged, baseline or restricted)", s)
}

// Labels are the labels that set every mode (enforce, audit, warn) to
// level. audit and warn follow enforce: at a stricter level than the one
// enforced, they would report herald's own pods on every change.
func Labels(level Level) map[string]string {
	return map[string]string{EnforceLabel: string(level), AuditLabel: string(level), WarnLabel: string(level)}
}

// A Change is one label Plan sets; From is "" when it was absent.
type Change struct {
	Label, From, To string
}

func (c Change) String() string {
	from := c.From
	if from == "" {
		from = "unset"
	}
	return fmt.Sprintf("%s=%s (was %s)", c.Label, c.To, from)
}

// Plan lists the labels to set on a namespace with these labels so that
// every mode is level, sorted by label; nil when nothing changes. The
// *-version labels are left alone: they pick which version of a level's
// checks applies, and the privileged level has none.
func Plan(current map[string]string, level Level) []Change {
	var out []Change
	for k, v := range Labels(level) {
		if current[k] != v {
			out = append(out, Change{Label: k, From: current[k], To: v})
		}
	}
	slices.SortFunc(out, func(a, b Change) int { return strings.Compare(a.Label, b.Label) })
	return out
}

// Apply reads namespace name and sets the labels Plan lists with one
// merge patch (only those keys: other labels, and other writers' changes
// to them, are untouched). It returns what it changed.
func Apply(ctx context.Context, namespaces typedcorev1.NamespaceInterface, name string, level Level) ([]Change, error) {
	ns, err := namespaces.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("namespace %s: %w", name, err)
	}
	changes := Plan(ns.Labels, level)
	if len(changes) == 0 {
		return nil, nil
	}
	labels := map[string]string{}
	for _, c := range changes {
		labels[c.Label] = c.To
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		return nil, err
	}
	if _, err := namespaces.Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		return nil, fmt.Errorf("namespace %s: labelling it %s: %w", name, level, err)
	}
	return changes, nil
}
