package migrate

import (
	"encoding/json"
	"fmt"
	"io"

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
