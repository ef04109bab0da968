package config

import (
	"fmt"
	"io"
)

// ValidateFiles is `herald validate`: it loads the files, runs the parser
// over them as the controller would, and prints every problem. It returns
// the number of problems; err is for files that cannot be read at all.
func ValidateFiles(out io.Writer, namespace string, files []string) (int, error) {
	var l Loader
	if err := l.LoadFiles(files); err != nil {
		return 0, err
	}
	l.Resources.Namespace = namespace
	l.Resources.SecretsUnavailable = !l.HasSecrets
	_, problems := Parse(l.Resources)
	all := append(append(Problems{}, l.Problems...), problems...)
	SortProblems(all)

	for _, s := range l.Skipped {
		fmt.Fprintf(out, "skipped %s: %s\n", s.Source, s.Reason)
	}
	for _, p := range all {
		fmt.Fprintln(out, p.String())
	}
	if l.Resources.SecretsUnavailable && hasPasswordSecrets(l.Resources) {
		fmt.Fprintln(out, "note: passwordSecret references were not checked because no Secret was given; add the Secrets' YAML to check them")
	}
	objects := countObjects(l.Resources) + len(l.Problems)
	warnings := len(all) - all.Errors()
	if len(all) == 0 {
		fmt.Fprintf(out, "%s checked: no problems\n", plural(objects, "object"))
	} else {
		fmt.Fprintf(out, "%s checked: %s (%s, %s)\n", plural(objects, "object"), plural(len(all), "problem"),
			plural(all.Errors(), "error"), plural(warnings, "warning"))
	}
	return len(all), nil
}

func countObjects(r Resources) int {
	return len(r.Pools) + len(r.L2Advertisements) + len(r.BGPAdvertisements) + len(r.Peers) + len(r.Communities) + len(r.BFDProfiles)
}

func hasPasswordSecrets(r Resources) bool {
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
