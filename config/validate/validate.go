// Package validate is `herald validate`: the checks the API server makes on
// each object (the CRD schema with its CEL rules, run offline) followed by
// herald's parser over the whole set, as the controller would run it. What it
// passes, kubectl apply accepts and herald uses.
package validate

import (
	"context"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/config/crd"
)

// Files loads the files, checks them and prints every problem. It returns
// the number of problems; err is for files that cannot be read at all.
func Files(out io.Writer, namespace string, files []string) (int, error) {
	return run(out, namespace, func(l *config.Loader) error { return l.LoadFiles(files) })
}

// Stream checks one multi-document YAML stream (named source in
// messages) as Files checks files.
func Stream(out io.Writer, namespace, source string, rd io.Reader) (int, error) {
	return run(out, namespace, func(l *config.Loader) error { return l.Load(source, rd) })
}

func run(out io.Writer, namespace string, load func(*config.Loader) error) (int, error) {
	schema, err := crd.NewValidator()
	if err != nil {
		return 0, fmt.Errorf("loading the CRD schemas: %w", err)
	}
	l := config.Loader{Schema: func(doc []byte) []config.FieldError { return check(schema, doc) }}
	if err := load(&l); err != nil {
		return 0, err
	}
	l.Resources.Namespace = namespace
	l.Resources.SecretsUnavailable = !l.HasSecrets
	cfg, problems := config.Parse(l.Resources)
	all := append(append(config.Problems{}, l.Problems...), problems...)
	// The parser repeats the schema's checks with more specific messages;
	// keep its word and add what only the schema found.
	seen := map[string]bool{}
	for _, p := range all {
		seen[p.Object()+" "+p.Field] = true
	}
	for _, p := range l.SchemaProblems {
		if !seen[p.Object()+" "+p.Field] {
			all = append(all, p)
		}
	}
	config.SortProblems(all)

	for _, s := range l.Skipped {
		fmt.Fprintf(out, "skipped %s: %s\n", s.Source, s.Reason)
	}
	for _, p := range all {
		fmt.Fprintln(out, p.String())
	}
	// Objects read back from a cluster (kubectl get -o yaml) carry the
	// version in force in their status: say which one herald uses.
	for _, st := range cfg.Stale() {
		fmt.Fprintf(out, "%s %s/%s: %s\n", st.Kind, st.Namespace, st.Name, st.Describe())
	}
	if l.Resources.SecretsUnavailable && hasPasswordSecrets(l.Resources) {
		fmt.Fprintln(out, "note: passwordSecret references were not checked because no Secret was given; add the Secrets' YAML to check them")
	}
	objects := l.Objects
	warnings := len(all) - all.Errors()
	if len(all) == 0 {
		fmt.Fprintf(out, "%s checked: no problems\n", plural(objects, "object"))
	} else {
		fmt.Fprintf(out, "%s checked: %s (%s, %s)\n", plural(objects, "object"), plural(len(all), "problem"),
			plural(all.Errors(), "error"), plural(warnings, "warning"))
	}
	return len(all), nil
}

func hasPasswordSecrets(r config.Resources) bool {
	for _, p := range r.Peers {
		if p.Spec.PasswordSecret != nil {
			return true
		}
	}
	return false
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func check(v *crd.Validator, doc []byte) []config.FieldError {
	objs, err := crd.ReadObjects(doc)
	if err != nil || len(objs) != 1 {
		return []config.FieldError{{Message: fmt.Sprintf("cannot be read: %v", err)}}
	}
	var out []config.FieldError
	for _, e := range v.Validate(context.Background(), objs[0]) {
		body := e.ErrorBody()
		if e.Type == field.ErrorTypeInvalid && e.Detail != "" {
			body = e.Detail // the rule's message, without the echoed value
		}
		out = append(out, config.FieldError{Field: e.Field, Message: body})
	}
	return out
}
