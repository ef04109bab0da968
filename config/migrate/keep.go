package migrate

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/config/v1beta1"
)

// objKey is a translated object's identity in herald's namespace.
type objKey struct{ kind, name string }

// translated is one object of the output, with where it came from.
type translated struct {
	src *object
	obj metav1.Object // *v1beta1.IPAddressPool, ...
	// conflict: the name was given again with another spec, so neither
	// is written.
	conflict bool
}

// keep adds a translated object to the output, unless its kind and name
// were given already: the same object twice (the same file given twice,
// a kubectl get dump next to the file it was applied from) is written
// once; two different ones leave both out, as no single object can be
// the one MetalLB reads.
func (o *object) keep(obj metav1.Object) {
	k := objKey{o.kind, obj.GetName()}
	prev := o.t.objs[k]
	switch {
	case prev == nil:
		o.t.objs[k] = &translated{src: o, obj: obj}
		o.t.order = append(o.t.order, k)
	case prev.conflict:
		o.errorf("metadata.name", "%s %s is defined more than twice (again at %s); none of them is written", o.kind, obj.GetName(), o.where)
	case reflect.DeepEqual(prev.obj, obj):
		o.notef("", "given again at %s, the same as at %s: written once", o.where, prev.src.where)
	default:
		prev.conflict = true
		o.errorf("metadata.name", "%s %s is defined twice, differently: at %s and at %s; neither is written (MetalLB can hold only one: give the one it uses)",
			o.kind, obj.GetName(), prev.src.where, o.where)
	}
}

// ownershipLabels mark an object as deployed by a tool (Helm, Argo CD,
// Flux, kapp, Rancher Fleet). Copied to herald's objects, they would make
// the tool that deployed MetalLB's configuration own herald's: prune it
// with MetalLB, or report it as drift.
var (
	ownershipLabels = map[string]bool{
		"app.kubernetes.io/instance":   true,
		"app.kubernetes.io/managed-by": true,
		"helm.sh/chart":                true,
	}
	ownershipPrefixes = []string{
		"argocd.argoproj.io/", "kustomize.toolkit.fluxcd.io/", "helm.toolkit.fluxcd.io/",
		"kapp.k14s.io/", "objectset.rio.cattle.io/",
	}
)

func isOwnershipLabel(k string) bool {
	if ownershipLabels[k] {
		return true
	}
	for _, p := range ownershipPrefixes {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// heraldMeta is the translated object's metadata: the same name and
// labels (advertisements select pools by label) but the deploying tools'
// ownership labels, herald's namespace. Annotations, status and the API
// server's fields stay behind.
func (o *object) heraldMeta() metav1.ObjectMeta {
	m := metav1.ObjectMeta{Name: o.name, Namespace: o.t.opts.Namespace}
	labels, _ := o.meta["labels"].(map[string]any)
	for _, k := range sortedKeys(labels) {
		s, ok := labels[k].(string)
		if !ok {
			continue
		}
		if isOwnershipLabel(k) {
			if o.dropped == nil {
				o.dropped = map[string]string{}
			}
			o.dropped[k] = s
			continue
		}
		if m.Labels == nil {
			m.Labels = map[string]string{}
		}
		m.Labels[k] = s
	}
	return m
}

// Result returns what was translated so far, each kind sorted by name.
func (t *Translator) Result() Result {
	r := t.res
	r.Problems = append(config.Problems(nil), r.Problems...)
	r.Notes = append([]Note(nil), r.Notes...)
	r.Pools, r.L2Advertisements, r.BGPAdvertisements = nil, nil, nil
	r.Peers, r.Communities, r.BFDProfiles = nil, nil, nil
	sels := t.poolSelectors()
	for _, k := range t.order {
		e := t.objs[k]
		if e.conflict {
			continue
		}
		r.labelsLeftBehind(e, sels)
		switch obj := e.obj.(type) {
		case *v1beta1.IPAddressPool:
			r.Pools = append(r.Pools, *obj.DeepCopy())
		case *v1beta1.L2Advertisement:
			r.L2Advertisements = append(r.L2Advertisements, *obj.DeepCopy())
		case *v1beta1.BGPAdvertisement:
			r.BGPAdvertisements = append(r.BGPAdvertisements, *obj.DeepCopy())
		case *v1beta1.BGPPeer:
			r.Peers = append(r.Peers, *obj.DeepCopy())
		case *v1beta1.Community:
			r.Communities = append(r.Communities, *obj.DeepCopy())
		case *v1beta1.BFDProfile:
			r.BFDProfiles = append(r.BFDProfiles, *obj.DeepCopy())
		}
	}
	sortByName(r.Pools)
	sortByName(r.L2Advertisements)
	sortByName(r.BGPAdvertisements)
	sortByName(r.Peers)
	sortByName(r.Communities)
	sortByName(r.BFDProfiles)
	config.SortProblems(r.Problems)
	return r
}

// labelsLeftBehind reports the ownership labels an object lost, and
// gives back those that decide whether an advertisement selects the
// pool: without them the advertisement would announce other pools, which
// is worse than a label the user must rename.
func (r *Result) labelsLeftBehind(e *translated, sels []poolSelector) {
	if len(e.src.dropped) == 0 {
		return
	}
	restore := map[string][]string{} // label key: the advertisements needing it
	if _, isPool := e.obj.(*v1beta1.IPAddressPool); isPool {
		full := labels.Set{}
		for k, v := range e.obj.GetLabels() {
			full[k] = v
		}
		for k, v := range e.src.dropped {
			full[k] = v
		}
		stripped := labels.Set(e.obj.GetLabels())
		for _, s := range sels {
			if s.sel.Matches(full) == s.sel.Matches(stripped) {
				continue
			}
			for _, k := range s.keys {
				if _, dropped := e.src.dropped[k]; dropped && !slices.Contains(restore[k], s.adv) {
					restore[k] = append(restore[k], s.adv)
				}
			}
		}
	}
	var gone []string
	for _, k := range sortedKeys(e.src.dropped) {
		by := restore[k]
		if len(by) == 0 {
			gone = append(gone, k)
			continue
		}
		ls := e.obj.GetLabels()
		if ls == nil {
			ls = map[string]string{}
		}
		ls[k] = e.src.dropped[k]
		e.obj.SetLabels(ls)
		r.Problems = append(r.Problems, config.Problem{Kind: e.src.kind, Namespace: e.src.ns, Name: e.src.name,
			Field: "metadata.labels", Severity: config.Warning,
			Message: fmt.Sprintf("%s kept, though it marks the object as owned by the tool that deployed MetalLB's configuration: %s the pool by it. Select by another label, or that tool may prune or adopt herald's pool",
				k, plural(len(by), strings.Join(by, ", ")+" selects", strings.Join(by, ", ")+" select"))})
	}
	if len(gone) > 0 {
		r.Notes = append(r.Notes, Note{Object: e.src.ref(), Field: "metadata.labels",
			Message: fmt.Sprintf("%s left behind: %s the object as owned by the tool that deployed MetalLB's configuration (Helm, Argo CD, Flux, ...), which would prune or adopt herald's",
				strings.Join(gone, ", "), plural(len(gone), "it marks", "they mark"))})
	}
}

// poolSelector is one of an advertisement's ipAddressPoolSelectors.
type poolSelector struct {
	adv  string // "Kind name"
	sel  labels.Selector
	keys []string
}

// poolSelectors are the advertisements' pool selectors. One that does
// not parse selects nothing, here as in herald's parser.
func (t *Translator) poolSelectors() []poolSelector {
	var out []poolSelector
	add := func(kind, name string, sels []metav1.LabelSelector) {
		for i := range sels {
			sel, err := metav1.LabelSelectorAsSelector(&sels[i])
			if err != nil {
				continue
			}
			keys := sortedKeys(sels[i].MatchLabels)
			for _, e := range sels[i].MatchExpressions {
				keys = append(keys, e.Key)
			}
			out = append(out, poolSelector{adv: kind + " " + name, sel: sel, keys: keys})
		}
	}
	for _, k := range t.order {
		e := t.objs[k]
		if e.conflict {
			continue
		}
		switch obj := e.obj.(type) {
		case *v1beta1.L2Advertisement:
			add(config.KindL2Advertisement, obj.Name, obj.Spec.IPAddressPoolSelectors)
		case *v1beta1.BGPAdvertisement:
			add(config.KindBGPAdvertisement, obj.Name, obj.Spec.IPAddressPoolSelectors)
		}
	}
	return out
}

func sortByName[T any, P interface {
	*T
	GetName() string
}](list []T) {
	sort.Slice(list, func(i, j int) bool { return P(&list[i]).GetName() < P(&list[j]).GetName() })
}

// plural picks the singular or plural form for n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
