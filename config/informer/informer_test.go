package informer

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/herald-lb/herald/config"
)

func lister(objs ...map[string]any) cache.GenericLister {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, o := range objs {
		_ = idx.Add(&unstructured.Unstructured{Object: o})
	}
	return cache.NewGenericLister(idx, GVR("ipaddresspools").GroupResource())
}

// Objects of herald's namespace are read; one that does not decode is a
// problem naming it, and a kind without a lister is not read at all.
func TestResources(t *testing.T) {
	pool := func(name, ns string, spec any) map[string]any {
		return map[string]any{"apiVersion": "herald.io/v1beta1", "kind": "IPAddressPool",
			"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec}
	}
	l := Listers{config.KindIPAddressPool: lister(
		pool("good", "herald-system", map[string]any{"addresses": []any{"192.0.2.0/28"}}),
		pool("odd", "herald-system", map[string]any{"addresses": "not a list"}),
		pool("elsewhere", "default", map[string]any{"addresses": []any{"192.0.2.16/28"}}),
	)}
	res, probs := l.Resources("herald-system")
	if len(res.Pools) != 1 || res.Pools[0].Name != "good" || res.Namespace != "herald-system" {
		t.Errorf("pools = %+v", res.Pools)
	}
	if len(probs) != 1 || probs[0].Name != "odd" || probs[0].Kind != config.KindIPAddressPool {
		t.Errorf("problems = %v, want one naming IPAddressPool odd", probs)
	}
	if res.Peers != nil || res.L2Advertisements != nil {
		t.Errorf("kinds without a lister were read: %+v", res)
	}
	if l.Get(config.KindIPAddressPool, "herald-system", "good") == nil || l.Get(config.KindBGPPeer, "herald-system", "x") != nil {
		t.Error("Get")
	}
}
