package config

import (
	"fmt"
	"sort"
	"strings"
)

// Severity says what the parser did with an object that has a problem.
type Severity int

const (
	// Error: the object is left out of the model.
	Error Severity = iota
	// Warning: the object is kept; the part named in the message has no
	// effect.
	Warning
)

func (s Severity) String() string {
	if s == Warning {
		return "warning"
	}
	return "error"
}

// Problem is one thing wrong with one object.
type Problem struct {
	Kind      string
	Namespace string
	Name      string
	// Field is the path inside the object, as the API server writes it
	// (spec.addresses[1]); empty when the object as a whole is at fault.
	Field    string
	Message  string
	Severity Severity
	// Code marks the problems callers treat apart (CodeNotAdvertised);
	// empty for the others.
	Code string
}

// CodeNotAdvertised marks the warning that no advertisement announces a
// pool: its Services get IPs that no node answers for. The controller
// shows it as the pool's Advertised condition rather than in Valid.
const CodeNotAdvertised = "NotAdvertised"

// Object is "Kind namespace/name", or "Kind name" without a namespace.
func (p Problem) Object() string {
	if p.Namespace == "" {
		return p.Kind + " " + p.Name
	}
	return p.Kind + " " + p.Namespace + "/" + p.Name
}

func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.Object())
	if p.Field != "" {
		b.WriteString(": ")
		b.WriteString(p.Field)
	}
	b.WriteString(": ")
	b.WriteString(p.Message)
	if p.Severity == Warning {
		b.WriteString(" (warning)")
	}
	return b.String()
}

// Problems is a list of problems, sorted by SortProblems.
type Problems []Problem

// Errors returns how many problems left an object out.
func (ps Problems) Errors() int {
	n := 0
	for _, p := range ps {
		if p.Severity == Error {
			n++
		}
	}
	return n
}

// For returns the problems of one object.
func (ps Problems) For(kind, namespace, name string) Problems {
	var out Problems
	for _, p := range ps {
		if p.Kind == kind && p.Namespace == namespace && p.Name == name {
			out = append(out, p)
		}
	}
	return out
}

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

var kindOrder = map[string]int{
	KindIPAddressPool: 0, KindCommunity: 1, KindBFDProfile: 2, KindBGPPeer: 3,
	KindL2Advertisement: 4, KindBGPAdvertisement: 5,
}

// SortProblems orders problems by kind, namespace, name and field so output
// is stable from run to run.
func SortProblems(ps Problems) {
	sort.SliceStable(ps, func(i, j int) bool {
		a, b := ps[i], ps[j]
		if ka, kb := kindOrder[a.Kind], kindOrder[b.Kind]; ka != kb {
			return ka < kb
		}
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Field < b.Field
	})
}

// reporter collects the problems of one object.
type reporter struct {
	kind, namespace, name string
	out                   *Problems
	errors                int
}

func (r *reporter) errorf(field, format string, args ...any) {
	r.errors++
	r.add(field, Error, format, args...)
}

func (r *reporter) warnf(field, format string, args ...any) {
	r.add(field, Warning, format, args...)
}

// last is the problem added last, to mark it.
func (r *reporter) last() *Problem { return &(*r.out)[len(*r.out)-1] }

func (r *reporter) add(field string, sev Severity, format string, args ...any) {
	*r.out = append(*r.out, Problem{
		Kind: r.kind, Namespace: r.namespace, Name: r.name,
		Field: field, Message: fmt.Sprintf(format, args...), Severity: sev,
	})
}

func (r *reporter) ok() bool { return r.errors == 0 }
