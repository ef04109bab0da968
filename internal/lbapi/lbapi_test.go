package lbapi

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func svcWith(ann map[string]string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Annotations: ann}}
}

func TestReadAnnotation(t *testing.T) {
	for _, tc := range []struct {
		name string
		ann  map[string]string
		want Annotation
	}{
		{"unset", nil, Annotation{Name: AnnotationAddressPool}},
		{"herald's", map[string]string{"herald.io/address-pool": "a"},
			Annotation{Name: AnnotationAddressPool, Key: "herald.io/address-pool", Value: "a"}},
		{"MetalLB's", map[string]string{"metallb.io/address-pool": "a"},
			Annotation{Name: AnnotationAddressPool, Key: "metallb.io/address-pool", Value: "a"}},
		{"MetalLB's older", map[string]string{"metallb.universe.tf/address-pool": "a"},
			Annotation{Name: AnnotationAddressPool, Key: "metallb.universe.tf/address-pool", Value: "a"}},
		{"newer MetalLB name wins", map[string]string{"metallb.universe.tf/address-pool": "old", "metallb.io/address-pool": "new"},
			Annotation{Name: AnnotationAddressPool, Key: "metallb.io/address-pool", Value: "new", Overridden: []string{"metallb.universe.tf/address-pool"}}},
		{"herald's wins", map[string]string{"herald.io/address-pool": "h", "metallb.io/address-pool": "m"},
			Annotation{Name: AnnotationAddressPool, Key: "herald.io/address-pool", Value: "h", Overridden: []string{"metallb.io/address-pool"}}},
		{"same value is no conflict", map[string]string{"herald.io/address-pool": "a", "metallb.io/address-pool": " a"},
			Annotation{Name: AnnotationAddressPool, Key: "herald.io/address-pool", Value: "a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ReadAnnotation(svcWith(tc.ann), AnnotationAddressPool); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestAliasNotes(t *testing.T) {
	notes, conflicts := AliasNotes(svcWith(map[string]string{
		"metallb.universe.tf/allow-shared-ip": "key1",
		"herald.io/loadBalancerIPs":           "192.0.2.10",
		"metallb.io/loadBalancerIPs":          "192.0.2.11",
	}))
	if len(notes) != 1 || !strings.Contains(notes[0], `herald reads metallb.universe.tf/allow-shared-ip ("key1") as herald.io/allow-shared-ip; rename the annotation to herald.io/allow-shared-ip`) {
		t.Errorf("notes %q", notes)
	}
	if len(conflicts) != 1 || !strings.Contains(conflicts[0], `herald.io/loadBalancerIPs ("192.0.2.10") and metallb.io/loadBalancerIPs ("192.0.2.11") disagree: herald uses herald.io/loadBalancerIPs`) {
		t.Errorf("conflicts %q", conflicts)
	}
	if n, c := AliasNotes(svcWith(map[string]string{"herald.io/address-pool": "a"})); len(n)+len(c) != 0 {
		t.Errorf("herald's own names: notes %q, conflicts %q", n, c)
	}
}
