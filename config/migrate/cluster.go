package migrate

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// clusterKinds are the MetalLB resources LoadCluster reads, each at the
// versions to try in order (BGPPeer is stored as v1beta2; clusters with
// an older MetalLB serve only v1beta1).
var clusterKinds = []struct {
	resource string
	versions []string
}{
	{"ipaddresspools", []string{"v1beta1"}},
	{"l2advertisements", []string{"v1beta1"}},
	{"bgpadvertisements", []string{"v1beta1"}},
	{"bgppeers", []string{"v1beta2", "v1beta1"}},
	{"bfdprofiles", []string{"v1beta1"}},
	{"communities", []string{"v1beta1"}},
}

// LoadCluster reads MetalLB's configuration from its namespace
// (Options.MetalLBNamespace) of a cluster: its custom resources, or,
// when there are none, its legacy ConfigMap "config" (MetalLB 0.13 and
// later ignore that ConfigMap, so it is only read for a MetalLB that
// still uses it); and the configuration herald does not translate, to
// report it: the ConfigMaps metallb-excludel2 and bgpextras, frr-k8s's
// FRRConfigurations.
func (t *Translator) LoadCluster(ctx context.Context, dyn dynamic.Interface) error {
	ns := t.opts.MetalLBNamespace
	found := 0
	for _, k := range clusterKinds {
		for i, v := range k.versions {
			gvr := schema.GroupVersionResource{Group: Group, Version: v, Resource: k.resource}
			list, err := dyn.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
			if apierrors.IsNotFound(err) {
				if i == len(k.versions)-1 {
					break // this MetalLB (or none) has no such resource
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("listing %s in %s: %w", gvr.GroupResource(), ns, err)
			}
			for _, item := range list.Items {
				found++
				t.Add(fmt.Sprintf("cluster %s", gvr.GroupResource()), item.Object)
			}
			break
		}
	}
	frr := schema.GroupVersionResource{Group: otherGroupFRRK8s, Version: "v1beta1", Resource: "frrconfigurations"}
	switch list, err := dyn.Resource(frr).Namespace(ns).List(ctx, metav1.ListOptions{}); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("listing %s in %s: %w", frr.GroupResource(), ns, err)
	default:
		for _, item := range list.Items {
			t.Add(fmt.Sprintf("cluster %s", frr.GroupResource()), item.Object)
		}
	}
	configMaps := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace(ns)
	for _, name := range []string{"config", excludeL2ConfigMap, bgpExtrasConfigMap} {
		cm, err := configMaps.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("reading ConfigMap %s/%s: %w", ns, name, err)
		case name == "config" && found > 0:
			t.skip("cluster configmaps", "ConfigMap %s/config left alone: the namespace has MetalLB custom resources, and MetalLB 0.13 and later ignore that ConfigMap", ns)
		default:
			t.Add("cluster configmaps", cm.Object)
		}
	}
	return nil
}
