package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Selector matches a set of labels. It hides the Kubernetes selector type so
// the model stays free of Kubernetes types.
type Selector struct {
	sel labels.Selector
}

// Matches reports whether the labels satisfy the selector.
func (s Selector) Matches(l map[string]string) bool {
	return s.sel.Matches(labels.Set(l))
}

func (s Selector) String() string { return s.sel.String() }

// Selectors is a list of selectors, matching when any of them matches.
type Selectors []Selector

// Any reports whether any selector matches; false for an empty list.
func (ss Selectors) Any(l map[string]string) bool {
	for _, s := range ss {
		if s.Matches(l) {
			return true
		}
	}
	return false
}

// AllowAll reports whether the list leaves the set unrestricted: it is empty
// or one of its selectors is empty (matches everything).
func (ss Selectors) AllowAll() bool {
	if len(ss) == 0 {
		return true
	}
	for _, s := range ss {
		if s.sel.Empty() {
			return true
		}
	}
	return false
}

// MatchesOrEmpty reports whether the labels match, treating an empty list
// as "no restriction", as nodeSelectors and serviceSelectors do.
func (ss Selectors) MatchesOrEmpty(l map[string]string) bool {
	return len(ss) == 0 || ss.Any(l)
}

// parseSelectors converts label selectors, reporting each bad one.
func parseSelectors(r *reporter, field string, in []metav1.LabelSelector) Selectors {
	out := make(Selectors, 0, len(in))
	for i := range in {
		s, err := metav1.LabelSelectorAsSelector(&in[i])
		if err != nil {
			r.errorf(indexed(field, i), "invalid label selector: %v", err)
			continue
		}
		out = append(out, Selector{sel: s})
	}
	return out
}

// SelectorFromLabels is a selector matching exactly these labels (an
// equality-based matchLabels), for code that builds a model by hand.
func SelectorFromLabels(l map[string]string) Selector {
	return Selector{sel: labels.SelectorFromSet(labels.Set(l))}
}
