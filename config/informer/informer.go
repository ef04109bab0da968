// Package informer reads herald's configuration objects from informer
// caches into config.Resources, for the controller and the speakers alike:
// one list of kinds and resources, one decoder.
package informer

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/config/v1beta1"
)

// Kind is a configuration kind and its API resource.
type Kind struct {
	Kind     string
	Resource string
}

// Kinds are the herald.io kinds the parser reads. ServiceAnnouncement is
// status the speakers write, not configuration.
var Kinds = []Kind{
	{config.KindIPAddressPool, "ipaddresspools"},
	{config.KindL2Advertisement, "l2advertisements"},
	{config.KindBGPAdvertisement, "bgpadvertisements"},
	{config.KindBGPPeer, "bgppeers"},
	{config.KindCommunity, "communities"},
	{config.KindBFDProfile, "bfdprofiles"},
}

// BGPKinds are the kinds only BGP needs; a speaker without BGP does not
// watch them.
var BGPKinds = map[string]bool{
	config.KindBGPAdvertisement: true, config.KindBGPPeer: true, config.KindCommunity: true, config.KindBFDProfile: true,
}

// GVR returns the group, version and resource of a herald.io resource.
func GVR(resource string) schema.GroupVersionResource {
	return v1beta1.GroupVersion.WithResource(resource)
}

// Listers are the caches of the configuration kinds, by kind. A kind
// without a lister is not read.
type Listers map[string]cache.GenericLister

// Resources reads the objects of namespace ns. An object that does not
// decode (the CRD schema makes that unlikely) is reported as a problem
// naming it, as the parser would.
func (l Listers) Resources(ns string) (config.Resources, config.Problems) {
	res := config.Resources{Namespace: ns}
	var probs config.Problems
	res.Pools = decodeAll[v1beta1.IPAddressPool](l, ns, config.KindIPAddressPool, &probs)
	res.L2Advertisements = decodeAll[v1beta1.L2Advertisement](l, ns, config.KindL2Advertisement, &probs)
	res.BGPAdvertisements = decodeAll[v1beta1.BGPAdvertisement](l, ns, config.KindBGPAdvertisement, &probs)
	res.Peers = decodeAll[v1beta1.BGPPeer](l, ns, config.KindBGPPeer, &probs)
	res.Communities = decodeAll[v1beta1.Community](l, ns, config.KindCommunity, &probs)
	res.BFDProfiles = decodeAll[v1beta1.BFDProfile](l, ns, config.KindBFDProfile, &probs)
	return res, probs
}

// Get returns one object of a kind, or nil.
func (l Listers) Get(kind, ns, name string) *unstructured.Unstructured {
	lister, ok := l[kind]
	if !ok || lister == nil {
		return nil
	}
	o, err := lister.ByNamespace(ns).Get(name)
	if err != nil {
		return nil
	}
	u, _ := o.(*unstructured.Unstructured)
	return u
}

func decodeAll[T any](l Listers, ns, kind string, probs *config.Problems) []T {
	lister, ok := l[kind]
	if !ok || lister == nil {
		return nil
	}
	objs, _ := lister.ByNamespace(ns).List(labels.Everything())
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		var t T
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &t); err != nil {
			*probs = append(*probs, config.Problem{Kind: kind, Namespace: u.GetNamespace(), Name: u.GetName(),
				Message: fmt.Sprintf("cannot be read: %v", err)})
			continue
		}
		out = append(out, t)
	}
	return out
}
