package migrate

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

func obj(apiVersion, kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": ns}}}
	if spec != nil {
		u.Object["spec"] = spec
	}
	return u
}

func fakeCluster(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	lists := map[schema.GroupVersionResource]string{}
	for _, k := range clusterKinds {
		for _, v := range k.versions {
			lists[schema.GroupVersionResource{Group: Group, Version: v, Resource: k.resource}] = "List"
		}
	}
	lists[schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}] = "ConfigMapList"
	lists[schema.GroupVersionResource{Group: otherGroupFRRK8s, Version: "v1beta1", Resource: "frrconfigurations"}] = "FRRConfigurationList"
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), lists, objs...)
}

func TestLoadCluster(t *testing.T) {
	dyn := fakeCluster(
		obj("metallb.io/v1beta1", "IPAddressPool", "metallb-system", "lan", map[string]any{"addresses": []any{"192.0.2.100-192.0.2.110"}}),
		obj("metallb.io/v1beta1", "L2Advertisement", "metallb-system", "lan", map[string]any{}),
		obj("metallb.io/v1beta2", "BGPPeer", "metallb-system", "tor", map[string]any{"myASN": int64(64512), "peerASN": int64(64513), "peerAddress": "192.0.2.1", "vrf": "red"}),
		// Another namespace is not read.
		obj("metallb.io/v1beta1", "IPAddressPool", "elsewhere", "other", map[string]any{"addresses": []any{"198.51.100.0/30"}}),
		// With custom resources present, the legacy ConfigMap is left alone.
		&unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "config", "namespace": "metallb-system"},
			"data":     map[string]any{"config": "address-pools: [{name: old, protocol: layer2, addresses: [192.0.2.0/30]}]"}}},
	)
	tr := New(Options{})
	if err := tr.LoadCluster(context.Background(), dyn); err != nil {
		t.Fatal(err)
	}
	res := tr.Result()
	if len(res.Pools) != 1 || res.Pools[0].Name != "lan" || len(res.L2Advertisements) != 1 || len(res.Peers) != 1 {
		t.Fatalf("translated %d pools, %d L2 advertisements, %d peers: %+v", len(res.Pools), len(res.L2Advertisements), len(res.Peers), res)
	}
	if got := problems(res.Problems); !strings.Contains(got, "BGPPeer metallb-system/tor: spec.vrf: not translated") {
		t.Errorf("problems: %s", got)
	}
	if len(res.Skipped) != 1 || !strings.Contains(res.Skipped[0].Reason, "ConfigMap metallb-system/config left alone") {
		t.Errorf("skipped: %+v", res.Skipped)
	}
}

func TestLoadClusterLegacyOnly(t *testing.T) {
	dyn := fakeCluster(&unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "config", "namespace": "metallb-system"},
		"data":     map[string]any{"config": "address-pools: [{name: old, protocol: layer2, addresses: [192.0.2.0/30]}]"}}})
	tr := New(Options{})
	if err := tr.LoadCluster(context.Background(), dyn); err != nil {
		t.Fatal(err)
	}
	res := tr.Result()
	if len(res.Pools) != 1 || res.Pools[0].Name != "old" || len(res.L2Advertisements) != 1 {
		t.Fatalf("legacy ConfigMap: %+v", res)
	}
}
