// Package migrate is `herald migrate`: it translates MetalLB's
// configuration (metallb.io custom resources, v1beta1 and v1beta2, or the
// legacy ConfigMap of MetalLB 0.12 and older) into herald.io/v1beta1
// objects, and reports every field that does not carry over, naming the
// MetalLB object and field.
//
// herald's API follows MetalLB's closely, so most of a translation is a
// change of group and namespace. What is left out is what herald's
// speakers do not do (FRR-only settings such as vrf, interface or
// localASN) or what has another shape in herald (a passwordSecret names a
// key in a Secret of herald's namespace).
package migrate

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/config/v1beta1"
)

// Group is MetalLB's API group.
const Group = "metallb.io"

// Options shape the output.
type Options struct {
	// Namespace is herald's namespace, where the translated objects go
	// (herald reads its configuration from there only).
	Namespace string
}

// Result is a translation: herald's objects, and what did not carry over.
type Result struct {
	Pools             []v1beta1.IPAddressPool
	L2Advertisements  []v1beta1.L2Advertisement
	BGPAdvertisements []v1beta1.BGPAdvertisement
	Peers             []v1beta1.BGPPeer
	Communities       []v1beta1.Community
	BFDProfiles       []v1beta1.BFDProfile

	// Problems name the MetalLB object and field that did not translate.
	// An Error left the object out; a Warning left out the field named.
	Problems config.Problems
	// Skipped are documents that are not MetalLB configuration.
	Skipped []config.Skipped
}

// Objects counts the herald objects in the result.
func (r *Result) Objects() int {
	return len(r.Pools) + len(r.L2Advertisements) + len(r.BGPAdvertisements) + len(r.Peers) +
		len(r.Communities) + len(r.BFDProfiles)
}

// Translator gathers MetalLB objects and translates each as it comes.
type Translator struct {
	opts Options
	res  Result
}

// New returns a Translator writing objects into opts.Namespace.
func New(opts Options) *Translator {
	if opts.Namespace == "" {
		opts.Namespace = "herald-system"
	}
	return &Translator{opts: opts}
}

// Result returns what was translated so far, each kind sorted by name.
func (t *Translator) Result() Result {
	r := t.res
	sortByName(r.Pools)
	sortByName(r.L2Advertisements)
	sortByName(r.BGPAdvertisements)
	sortByName(r.Peers)
	sortByName(r.Communities)
	sortByName(r.BFDProfiles)
	config.SortProblems(r.Problems)
	return r
}

// Load reads a multi-document YAML stream (lists too, as `kubectl get -o
// yaml` writes them). A stream that cannot be read is an error; problems
// with single objects are collected in the result.
func (t *Translator) Load(source string, rd io.Reader) error {
	yr := utilyaml.NewYAMLReader(bufio.NewReader(rd))
	for n := 1; ; n++ {
		doc, err := yr.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: document %d: %v", source, n, err)
		}
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return fmt.Errorf("%s:%d: not valid YAML: %v", source, n, err)
		}
		if obj == nil {
			continue // empty document or comments only
		}
		where := fmt.Sprintf("%s:%d", source, n)
		if kind, _ := obj["kind"].(string); strings.HasSuffix(kind, "List") {
			items, _ := obj["items"].([]any)
			for i, it := range items {
				if m, ok := it.(map[string]any); ok {
					t.Add(fmt.Sprintf("%s item %d", where, i), m)
				}
			}
			continue
		}
		t.Add(where, obj)
	}
}

// Add translates one object, read from where.
func (t *Translator) Add(where string, obj map[string]any) {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	ns, _ := meta["namespace"].(string)
	group, version, _ := strings.Cut(apiVersion, "/")
	if apiVersion == "v1" && kind == "ConfigMap" {
		t.addConfigMap(where, obj)
		return
	}
	if group != Group {
		t.res.Skipped = append(t.res.Skipped, config.Skipped{Source: where,
			Reason: fmt.Sprintf("%s %s (%s) is not MetalLB configuration", kind, name, apiVersion)})
		return
	}
	o := &object{t: t, kind: kind, ns: ns, name: name, version: version, meta: meta}
	if name == "" {
		o.errorf("metadata.name", "missing")
		return
	}
	if version != "v1beta1" && version != "v1beta2" {
		o.errorf("apiVersion", "%s is not a MetalLB version this translator knows (v1beta1, v1beta2)", apiVersion)
		return
	}
	spec, ok := obj["spec"].(map[string]any)
	if !ok && obj["spec"] != nil {
		o.errorf("spec", "not an object")
		return
	}
	if spec == nil {
		spec = map[string]any{}
	}
	switch kind {
	case config.KindIPAddressPool:
		var s v1beta1.IPAddressPoolSpec
		if o.decode(spec, &s, nil) {
			t.res.Pools = append(t.res.Pools, v1beta1.IPAddressPool{ObjectMeta: o.heraldMeta(), Spec: s})
		}
	case config.KindL2Advertisement:
		var s v1beta1.L2AdvertisementSpec
		if o.decode(spec, &s, l2Dropped) {
			t.res.L2Advertisements = append(t.res.L2Advertisements, v1beta1.L2Advertisement{ObjectMeta: o.heraldMeta(), Spec: s})
		}
	case config.KindBGPAdvertisement:
		var s v1beta1.BGPAdvertisementSpec
		if o.decode(spec, &s, nil) {
			t.res.BGPAdvertisements = append(t.res.BGPAdvertisements, v1beta1.BGPAdvertisement{ObjectMeta: o.heraldMeta(), Spec: s})
		}
	case config.KindBGPPeer:
		var s v1beta1.BGPPeerSpec
		if o.peer(spec) && o.decode(spec, &s, peerDropped) {
			t.res.Peers = append(t.res.Peers, v1beta1.BGPPeer{ObjectMeta: o.heraldMeta(), Spec: s})
		}
	case config.KindCommunity:
		var s v1beta1.CommunitySpec
		if !o.community(spec) {
			return
		}
		if o.decode(spec, &s, nil) {
			t.res.Communities = append(t.res.Communities, v1beta1.Community{ObjectMeta: o.heraldMeta(), Spec: s})
		}
	case config.KindBFDProfile:
		var s v1beta1.BFDProfileSpec
		if o.decode(spec, &s, nil) {
			t.res.BFDProfiles = append(t.res.BFDProfiles, v1beta1.BFDProfile{ObjectMeta: o.heraldMeta(), Spec: s})
		}
	case "ServiceL2Status", "ServiceBGPStatus", "ConfigurationState":
		t.res.Skipped = append(t.res.Skipped, config.Skipped{Source: where,
			Reason: fmt.Sprintf("%s %s is status MetalLB writes; herald's speakers write ServiceAnnouncements of their own", kind, name)})
	case "AddressPool":
		o.errorf("", "AddressPool (MetalLB before 0.14) is not translated: write it as an IPAddressPool with an L2Advertisement or BGPAdvertisement, or upgrade MetalLB first, which converts it")
	default:
		o.errorf("kind", "MetalLB has no configuration kind %q", kind)
	}
}

// l2Dropped and peerDropped are the MetalLB fields herald has no
// counterpart for, with the reason the report gives.
var (
	l2Dropped = map[string]string{
		"preferredNodeSelectors": "herald elects the announcing node by rendezvous hashing over the eligible nodes, without preferences; nodeSelectors still limits which nodes are eligible",
	}
	peerDropped = map[string]string{
		"vrf":                    "herald's speakers peer from the node's default VRF only (a MetalLB FRR-mode setting)",
		"interface":              "herald has no BGP unnumbered peering; give the neighbour's address in peerAddress (a MetalLB FRR-mode setting)",
		"localASN":               "herald presents myASN to every peer; there is no local-as override (a MetalLB FRR-mode setting)",
		"disableMP":              "herald's speakers carry IPv4 and IPv6 prefixes in one multiprotocol session per peer address family, as GoBGP does; there is nothing to disable (a MetalLB FRR-mode setting)",
		"dualStackAddressFamily": "herald announces each address family over a session of that family; one session carrying both is not supported (a MetalLB FRR-mode setting)",
	}
)

// object is one MetalLB object being translated.
type object struct {
	t                       *Translator
	kind, ns, name, version string
	meta                    map[string]any
}

func (o *object) problem(sev config.Severity, field, format string, args ...any) {
	o.t.res.Problems = append(o.t.res.Problems, config.Problem{Kind: o.kind, Namespace: o.ns, Name: o.name,
		Field: field, Message: fmt.Sprintf(format, args...), Severity: sev})
}

func (o *object) errorf(field, format string, args ...any) {
	o.problem(config.Error, field, format, args...)
}

func (o *object) warnf(field, format string, args ...any) {
	o.problem(config.Warning, field, format, args...)
}

// heraldMeta is the translated object's metadata: the same name and
// labels (advertisements select pools by label), herald's namespace.
// Annotations, status and the API server's fields stay behind.
func (o *object) heraldMeta() metav1.ObjectMeta {
	m := metav1.ObjectMeta{Name: o.name, Namespace: o.t.opts.Namespace}
	if labels, ok := o.meta["labels"].(map[string]any); ok {
		for k, v := range labels {
			if s, ok := v.(string); ok {
				if m.Labels == nil {
					m.Labels = map[string]string{}
				}
				m.Labels[k] = s
			}
		}
	}
	return m
}

// decode fills herald's spec from MetalLB's: the fields in dropped are
// reported and left out, as is any other field herald's spec does not
// have; the rest must decode into herald's types (a value herald cannot
// hold is an error, and the object is left out).
func (o *object) decode(spec map[string]any, into any, dropped map[string]string) bool {
	known := jsonFields(reflect.TypeOf(into).Elem())
	kept := map[string]any{}
	for _, k := range sortedKeys(spec) {
		switch why, drop := dropped[k]; {
		case drop:
			o.warnf("spec."+k, "not translated: %s", why)
		case !known[k]:
			o.warnf("spec."+k, "not translated: herald's %s has no such field", o.kind)
		default:
			kept[k] = spec[k]
		}
	}
	data, err := json.Marshal(kept)
	if err != nil {
		o.errorf("spec", "%v", err)
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		o.errorf("spec", "cannot be translated: %s", strings.TrimPrefix(err.Error(), "json: "))
		return false
	}
	return true
}

// peer rewrites a BGPPeer's spec where herald's differs from MetalLB's,
// before decode. It returns false when the peer cannot be translated.
func (o *object) peer(spec map[string]any) bool {
	if _, ok := spec["interface"]; ok && spec["peerAddress"] == nil {
		o.errorf("spec.interface", "an unnumbered peer (interface, no peerAddress) cannot be translated: herald's BGPPeer needs the neighbour's address in peerAddress")
		return false
	}
	// v1beta1 durations are not pointers, and MetalLB's conversion to
	// v1beta2 writes an unset one as 0s: both mean "the default" there,
	// while herald refuses a zero hold time.
	for _, k := range []string{"holdTime", "keepaliveTime"} {
		if s, ok := spec[k].(string); ok && isZeroDuration(s) {
			delete(spec, k)
			o.warnf("spec."+k, "%s left out: MetalLB writes 0s for an unset %s; herald's default applies (holdTime 90s, keepaliveTime a third of it)", s, k)
		}
	}
	// MetalLB: a basic-auth Secret, key "password", in MetalLB's
	// namespace. herald: a key of a Secret in herald's namespace.
	if ref, ok := spec["passwordSecret"].(map[string]any); ok {
		name, _ := ref["name"].(string)
		ns, _ := ref["namespace"].(string)
		if ns == "" {
			ns = o.ns
		}
		spec["passwordSecret"] = map[string]any{"name": name, "key": "password"}
		if ns != o.t.opts.Namespace {
			o.warnf("spec.passwordSecret", "herald reads the password from key \"password\" of Secret %s/%s: copy Secret %s/%s there (it is not part of this output)",
				o.t.opts.Namespace, name, orUnknown(ns), name)
		}
	}
	return true
}

// community leaves out the aliases of a Community whose names herald
// knows as well-known communities (MetalLB lets an alias take such a
// name): one with the same value is not needed, one with another value
// would change what the name means, and both are reported. It returns
// false when no alias is left, and the object with them.
func (o *object) community(spec map[string]any) bool {
	list, ok := spec["communities"].([]any)
	if !ok {
		return true
	}
	kept := list[:0:0]
	for i, a := range list {
		m, _ := a.(map[string]any)
		name, _ := m["name"].(string)
		value, _ := m["value"].(string)
		known, isKnown := config.WellKnownCommunity(name)
		if !isKnown {
			kept = append(kept, a)
			continue
		}
		field := fmt.Sprintf("spec.communities[%d]", i)
		if c, err := config.ParseCommunity(value); err == nil && c == known {
			o.warnf(field, "alias %q left out: herald knows %s as %s already, so references to it keep their meaning", name, name, known)
		} else {
			o.errorf(field, "alias %q (%s) left out: herald reserves the name for the well-known community %s, so references to it would change meaning; rename the alias in MetalLB's configuration and in the advertisements that use it", name, value, known)
		}
	}
	spec["communities"] = kept
	if len(kept) == 0 {
		o.warnf("", "left out: it defined only aliases herald knows as well-known communities")
		return false
	}
	return true
}

func orUnknown(ns string) string {
	if ns == "" {
		return "<MetalLB's namespace>"
	}
	return ns
}

func isZeroDuration(s string) bool {
	d, err := time.ParseDuration(s)
	return err == nil && d == 0
}

// jsonFields are the JSON names of a struct type's fields.
func jsonFields(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out[name] = true
		}
	}
	return out
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func sortByName[T any, P interface {
	*T
	GetName() string
}](list []T) {
	sort.Slice(list, func(i, j int) bool { return P(&list[i]).GetName() < P(&list[j]).GetName() })
}
