// Package heartbeat keeps the Lease herald-speakers that tells a speaker
// whose memberlist view is a minority of the speakers it knows of (alone,
// or one side of a partition) whether the others are alive: the
// lowest-named live member of each view renews it every period, so the
// API carries a heartbeat of the cluster for one write per period however
// many nodes there are. It is the wire of speaker/partition, which makes
// every decision: this package only reads the renewals into its Guard and
// renews when the Guard says so.
package heartbeat

import (
	"context"
	"log/slog"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/herald-lb/herald/internal/daemon"
	"github.com/herald-lb/herald/speaker/partition"
)

// LeaseName is the Lease in herald's namespace that carries the heartbeat.
const LeaseName = "herald-speakers"

// View is this speaker's memberlist view: whether it is the lowest-named
// live member, and its standing.
type View func() (first bool, s partition.Standing)

// Run keeps the heartbeat: it watches the Lease (feeding the Guard with
// the renewals it sees), renews it every period while the Guard says so,
// and calls changed whenever Isolated flips, so the speaker elects again.
// It returns when ctx ends.
func Run(ctx context.Context, kube kubernetes.Interface, ns string, tr *partition.Guard, view View, period time.Duration, changed func(), log *slog.Logger) {
	f := daemon.OneObject(kube, ns, LeaseName)
	inf := f.Coordination().V1().Leases()
	_, _ = inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		// The first sighting carries the writer's clock; later ones
		// happen now, whatever the writer's clock says.
		AddFunc: func(obj any) {
			if l, ok := obj.(*coordinationv1.Lease); ok && l.Spec.HolderIdentity != nil && l.Spec.RenewTime != nil {
				tr.Observe(*l.Spec.HolderIdentity, l.Spec.RenewTime.Time)
			}
		},
		UpdateFunc: func(_, obj any) {
			if l, ok := obj.(*coordinationv1.Lease); ok && l.Spec.HolderIdentity != nil {
				tr.Observe(*l.Spec.HolderIdentity, time.Now())
			}
		},
	})
	f.Start(ctx.Done())
	defer f.Shutdown()
	cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced)

	w := &writer{kube: kube, ns: ns, self: tr.Self(), lister: inf.Lister().Leases(ns).Get, duration: tr.Window()}
	// Isolation is checked twice per period, so a hold-down that ends is
	// acted on within half a period.
	t := time.NewTicker(period / 2)
	defer t.Stop()
	was, tick := false, 0
	for {
		first, st := view()
		if iso := tr.Isolated(st); iso != was {
			was = iso
			changed()
		}
		if tick%2 == 0 && tr.ShouldRenew(first, st) {
			if err := w.renew(ctx, time.Now()); err != nil && ctx.Err() == nil {
				log.Debug("renewing the heartbeat Lease", "lease", ns+"/"+LeaseName, "err", err)
			}
		}
		tick++
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// writer renews the Lease through the API.
type writer struct {
	kube     kubernetes.Interface
	ns, self string
	lister   func(string) (*coordinationv1.Lease, error)
	duration time.Duration
}

func (w *writer) renew(ctx context.Context, now time.Time) error {
	leases := w.kube.CoordinationV1().Leases(w.ns)
	secs := int32(max(w.duration/time.Second, 1))
	renew := metav1.NewMicroTime(now)
	have, err := w.lister(LeaseName)
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: LeaseName, Namespace: w.ns, Labels: map[string]string{"app.kubernetes.io/name": "herald"}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &w.self, RenewTime: &renew, LeaseDurationSeconds: &secs},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	next := have.DeepCopy()
	next.Spec.HolderIdentity, next.Spec.RenewTime, next.Spec.LeaseDurationSeconds = &w.self, &renew, &secs
	_, err = leases.Update(ctx, next, metav1.UpdateOptions{})
	return err
}
