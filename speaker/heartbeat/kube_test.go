package heartbeat

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestRenew(t *testing.T) {
	kube := fake.NewClientset()
	get := func(name string) (*coordinationv1.Lease, error) {
		return kube.CoordinationV1().Leases("herald-system").Get(context.Background(), name, metav1.GetOptions{})
	}
	w := &writer{kube: kube, ns: "herald-system", self: "node1", lister: get, duration: 3 * time.Second}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 2 { // create, then update
		if err := w.renew(context.Background(), at.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	l, err := get(LeaseName)
	if err != nil {
		t.Fatal(err)
	}
	if *l.Spec.HolderIdentity != "node1" || !l.Spec.RenewTime.Time.Equal(at.Add(time.Second)) || *l.Spec.LeaseDurationSeconds != 3 {
		t.Errorf("lease = %+v", l.Spec)
	}
}
