package migrate

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/config/v1beta1"
)

// Render writes the result's objects as one multi-document YAML stream
// that `kubectl apply -f -` and `herald validate` take: pools first, then
// what refers to them, each kind by name.
func Render(w io.Writer, r Result) error {
	if _, err := fmt.Fprintln(w, "# herald.io/v1beta1 configuration translated from MetalLB's by `herald migrate`;\n# what did not translate is reported on standard error."); err != nil {
		return err
	}
	var docs []any
	gv := v1beta1.GroupVersion.String()
	for i := range r.Pools {
		o := r.Pools[i]
		o.APIVersion, o.Kind = gv, config.KindIPAddressPool
		docs = append(docs, o)
	}
	for i := range r.Communities {
		o := r.Communities[i]
		o.APIVersion, o.Kind = gv, config.KindCommunity
		docs = append(docs, o)
	}
	for i := range r.BFDProfiles {
		o := r.BFDProfiles[i]
		o.APIVersion, o.Kind = gv, config.KindBFDProfile
		docs = append(docs, o)
	}
	for i := range r.Peers {
		o := r.Peers[i]
		o.APIVersion, o.Kind = gv, config.KindBGPPeer
		docs = append(docs, o)
	}
	for i := range r.L2Advertisements {
		o := r.L2Advertisements[i]
		o.APIVersion, o.Kind = gv, config.KindL2Advertisement
		docs = append(docs, o)
	}
	for i := range r.BGPAdvertisements {
		o := r.BGPAdvertisements[i]
		o.APIVersion, o.Kind = gv, config.KindBGPAdvertisement
		docs = append(docs, o)
	}
	for _, d := range docs {
		m, err := clean(d)
		if err != nil {
			return err
		}
		data, err := yaml.Marshal(m)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "---\n%s", data); err != nil {
			return err
		}
	}
	return nil
}

// clean is the object as a map without what the Go types write for
// empty values (creationTimestamp: null, status: {}), which is noise in
// a file meant for kubectl apply.
func clean(obj any) (map[string]any, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	delete(m, "status")
	if meta, ok := m["metadata"].(map[string]any); ok {
		delete(meta, "creationTimestamp")
	}
	return m, nil
}

// Report writes what did not carry over, one line each, as herald
// migrate prints it on standard error: the documents skipped, the
// problems (errors left an object or alias out, warnings a setting), the
// notes, and a count; or, when the input held no MetalLB configuration at
// all, why nothing was written.
func Report(w io.Writer, r Result, input string) error {
	var b strings.Builder
	for _, s := range r.Skipped {
		fmt.Fprintf(&b, "skipped %s: %s\n", s.Source, s.Reason)
	}
	for _, p := range r.Problems {
		fmt.Fprintln(&b, p.String())
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	switch {
	case r.Found == 0:
		fmt.Fprintf(&b, "no MetalLB configuration found in %s: nothing written", input)
		if r.Elsewhere > 0 {
			fmt.Fprintf(&b, "; %d MetalLB %s in another namespace than MetalLB's (give --metallb-namespace if MetalLB reads its configuration from there)",
				r.Elsewhere, plural(r.Elsewhere, "object is", "objects are"))
		}
		fmt.Fprintln(&b)
	case r.Objects() == 0:
		fmt.Fprintf(&b, "no herald object could be made from the MetalLB configuration in %s: nothing written\n", input)
	case len(r.Problems) == 0:
		fmt.Fprintf(&b, "%d herald %s written; no warnings or errors", r.Objects(), plural(r.Objects(), "object", "objects"))
		if len(r.Notes) > 0 {
			b.WriteString(" (the notes are changes that keep MetalLB's behaviour)")
		}
		fmt.Fprintln(&b)
	default:
		// Only warnings' lines say what they are ("(warning)"), so the
		// count says what each kind means.
		errs := r.Problems.Errors()
		warns := len(r.Problems) - errs
		fmt.Fprintf(&b, "%d herald %s written; above, %d %s (a setting left out or changed) and %d %s (an object or alias left out): read them before you apply the output\n",
			r.Objects(), plural(r.Objects(), "object", "objects"), warns, plural(warns, "warning", "warnings"), errs, plural(errs, "error", "errors"))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
