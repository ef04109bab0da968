// Package migrate is `herald migrate`: it translates MetalLB's
// configuration (metallb.io custom resources, v1beta1 and v1beta2, or the
// legacy configuration of MetalLB 0.12 and older, as its ConfigMap or as
// the bare file under the ConfigMap's "config" key) into herald.io/v1beta1
// objects, and reports every field that does not carry over, naming the
// MetalLB object and field.
//
// herald's API follows MetalLB's closely, so most of a translation is a
// change of group and namespace. What is left out is what herald's
// speakers do not do (FRR-only settings such as vrf, interface or
// localASN; BFD echo and passive modes) or what has another shape in
// herald (a passwordSecret names a key in a Secret of herald's
// namespace). Only what MetalLB itself reads is translated: objects of
// its namespace, each name once.
package migrate

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/config/v1beta1"
)

// Group is MetalLB's API group.
const Group = "metallb.io"

// DefaultMetalLBNamespace is where MetalLB's manifests and chart install
// it, and so where it reads its configuration.
const DefaultMetalLBNamespace = "metallb-system"

// Options shape the output.
type Options struct {
	// Namespace is herald's namespace, where the translated objects go
	// (herald reads its configuration from there only).
	Namespace string
	// MetalLBNamespace is the namespace MetalLB reads its configuration
	// from. Objects of other namespaces are not MetalLB's configuration
	// and are skipped; objects without a namespace are taken as its.
	MetalLBNamespace string
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
	// Notes are changes made on purpose that keep MetalLB's behaviour
	// and ask nothing of the user (a CIDR with host bits masked as
	// MetalLB masks it, GitOps labels left behind).
	Notes []Note
	// Skipped are documents that are not MetalLB configuration.
	Skipped []config.Skipped

	// Found counts the MetalLB configuration objects read, translated or
	// not. Zero means the input held no MetalLB configuration at all.
	Found int
	// Elsewhere counts MetalLB configuration objects skipped because
	// they are in another namespace than MetalLB's.
	Elsewhere int
}

// Note is a change the translation made that keeps MetalLB's behaviour.
type Note struct {
	Object  string // "Kind namespace/name", as in problems
	Field   string
	Message string
}

func (n Note) String() string {
	if n.Field == "" {
		return n.Object + ": " + n.Message
	}
	return n.Object + ": " + n.Field + ": " + n.Message
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
	// objs are the translated objects by kind and name, to find a name
	// given twice; order keeps the first sighting of each.
	objs  map[objKey]*translated
	order []objKey
}

// New returns a Translator writing objects into opts.Namespace.
func New(opts Options) *Translator {
	if opts.Namespace == "" {
		opts.Namespace = "herald-system"
	}
	if opts.MetalLBNamespace == "" {
		opts.MetalLBNamespace = DefaultMetalLBNamespace
	}
	return &Translator{opts: opts, objs: map[objKey]*translated{}}
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
		_, hasAPIVersion := obj["apiVersion"]
		_, hasKind := obj["kind"]
		if !hasAPIVersion && !hasKind {
			t.addLegacyFile(where, source, doc, obj)
			continue
		}
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
	if !strings.Contains(apiVersion, "/") {
		group, version = "", apiVersion
	}
	o := &object{t: t, kind: kind, ns: ns, name: name, version: version, meta: meta, where: where}
	switch {
	case group == "" && kind == "ConfigMap":
		t.addConfigMap(o, obj)
		return
	case group == otherGroupFRRK8s:
		t.notTranslated(o, frrK8sReason(kind))
		return
	case group == oldAnnotationGroup:
		if !t.inMetalLBNamespace(o) {
			return
		}
		t.res.Found++
		o.errorf("apiVersion", "%s is not an API group MetalLB serves: MetalLB's configuration is in %s (%s was the prefix of its Service annotations, which herald reads as they are); not translated",
			apiVersion, Group, oldAnnotationGroup)
		return
	case group != Group:
		t.skip(where, "%s %s (%s) is not MetalLB configuration", kind, name, orNone(apiVersion))
		return
	}
	switch kind {
	case "ServiceL2Status", "ServiceBGPStatus", "ConfigurationState":
		t.skip(where, "%s %s is status MetalLB writes; herald's speakers write ServiceAnnouncements of their own", kind, name)
		return
	}
	if !t.inMetalLBNamespace(o) {
		return
	}
	t.res.Found++
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
		o.errorf("spec", "is %s, not an object", describeValue(obj["spec"]))
		return
	}
	if spec == nil {
		spec = map[string]any{}
	}
	switch kind {
	case config.KindIPAddressPool:
		var s v1beta1.IPAddressPoolSpec
		if o.pool(spec) && o.decode(spec, &s, nil) {
			o.keep(&v1beta1.IPAddressPool{ObjectMeta: o.heraldMeta(), Spec: s})
		}
	case config.KindL2Advertisement:
		var s v1beta1.L2AdvertisementSpec
		if o.references(spec) && o.decode(spec, &s, l2Dropped) {
			o.keep(&v1beta1.L2Advertisement{ObjectMeta: o.heraldMeta(), Spec: s})
		}
	case config.KindBGPAdvertisement:
		var s v1beta1.BGPAdvertisementSpec
		if o.references(spec) && o.decode(spec, &s, nil) {
			o.keep(&v1beta1.BGPAdvertisement{ObjectMeta: o.heraldMeta(), Spec: s})
		}
	case config.KindBGPPeer:
		var s v1beta1.BGPPeerSpec
		if o.peer(spec) && o.decode(spec, &s, peerDropped) {
			o.keep(&v1beta1.BGPPeer{ObjectMeta: o.heraldMeta(), Spec: s})
		}
	case config.KindCommunity:
		var s v1beta1.CommunitySpec
		if o.community(spec) && o.decode(spec, &s, nil) {
			o.keep(&v1beta1.Community{ObjectMeta: o.heraldMeta(), Spec: s})
		}
	case config.KindBFDProfile:
		var s v1beta1.BFDProfileSpec
		o.bfd(spec)
		if o.decode(spec, &s, nil) {
			o.keep(&v1beta1.BFDProfile{ObjectMeta: o.heraldMeta(), Spec: s})
		}
	case "AddressPool":
		o.errorf("", "AddressPool (MetalLB before 0.14) is not translated: write it as an IPAddressPool with an L2Advertisement or BGPAdvertisement, or upgrade MetalLB first, which converts it")
	default:
		o.errorf("kind", "MetalLB has no configuration kind %q", kind)
	}
}

// inMetalLBNamespace says whether MetalLB reads o, and skips it when it
// does not: MetalLB reads its own namespace only, so an object anywhere
// else (a copy in default, a test in a developer's namespace) is not
// configuration, and must not become herald's. An object without a
// namespace is taken as MetalLB's: files meant for kubectl apply -n
// often have none.
func (t *Translator) inMetalLBNamespace(o *object) bool {
	if o.ns == "" || o.ns == t.opts.MetalLBNamespace {
		return true
	}
	t.res.Elsewhere++
	t.skip(o.where, "%s %s/%s is in namespace %s: MetalLB reads its configuration from %s only (--metallb-namespace)",
		o.kind, o.ns, o.name, o.ns, t.opts.MetalLBNamespace)
	return false
}

func (t *Translator) skip(where, format string, args ...any) {
	t.res.Skipped = append(t.res.Skipped, config.Skipped{Source: where, Reason: fmt.Sprintf(format, args...)})
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
	where                   string
	// dropped are the ownership labels heraldMeta left behind.
	dropped map[string]string
}

// ref is "Kind namespace/name", as problems name the object.
func (o *object) ref() string {
	return config.Problem{Kind: o.kind, Namespace: o.ns, Name: o.name}.Object()
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

func (o *object) notef(field, format string, args ...any) {
	o.t.res.Notes = append(o.t.res.Notes, Note{Object: o.ref(), Field: field, Message: fmt.Sprintf(format, args...)})
}

func orNone(s string) string {
	if s == "" {
		return "no apiVersion"
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
