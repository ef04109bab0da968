package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/herald-lb/herald/internal/daemon"
)

// OwnerAPI is what the uninstall check asks the API server: the proxy's
// own Pod, its DaemonSet, and a watch on that DaemonSet. KubeOwner is the
// real one; tests use a fake.
type OwnerAPI interface {
	Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	DaemonSet(ctx context.Context, namespace, name string) (*appsv1.DaemonSet, error)
	// WatchDaemonSet calls deleting once it sees the DaemonSet deleted or
	// being deleted, and returns when ctx ends.
	WatchDaemonSet(ctx context.Context, namespace, name string, uid types.UID, deleting func())
}

// UninstallFacts is what the decision is made of.
type UninstallFacts struct {
	// InPod: POD_NAME and POD_NAMESPACE are set.
	InPod bool
	// Owner is the DaemonSet owning the pod (nil: none, or unknown with
	// PodErr set).
	Owner  *metav1.OwnerReference
	PodErr error
	// DeletionSeen: the watch saw the owner deleted or being deleted
	// while the proxy ran.
	DeletionSeen bool
	// DaemonSet and DaemonSetErr are a lookup at stop time.
	DaemonSet    *appsv1.DaemonSet
	DaemonSetErr error
}

// Decision says whether the proxy removes its rules when it stops.
type Decision struct {
	Uninstall bool
	Reason    string
}

// DecideUninstall is true only when the API says the pod's DaemonSet is
// gone or going: a rolling update, a restart or a drain keeps the rules
// (traffic keeps flowing until the next proxy takes them over), and so
// does every doubt.
func DecideUninstall(f UninstallFacts) Decision {
	keep := func(format string, args ...any) Decision { return Decision{Reason: fmt.Sprintf(format, args...)} }
	switch {
	case !f.InPod:
		return keep("not in a pod (no POD_NAME/POD_NAMESPACE)")
	case f.Owner == nil && f.PodErr != nil:
		return keep("own pod unreadable: %v", f.PodErr)
	case f.Owner == nil:
		return keep("the pod has no DaemonSet owner")
	case f.DeletionSeen:
		return Decision{true, "DaemonSet " + f.Owner.Name + " deleted (watched)"}
	case apierrors.IsNotFound(f.DaemonSetErr):
		return Decision{true, "DaemonSet " + f.Owner.Name + " not found"}
	case f.DaemonSetErr != nil:
		return keep("DaemonSet %s unreadable: %v", f.Owner.Name, f.DaemonSetErr)
	case f.DaemonSet == nil:
		return keep("DaemonSet %s unknown", f.Owner.Name)
	case f.DaemonSet.UID != f.Owner.UID:
		// Deleted and created again: its new pod takes the rules over.
		return keep("DaemonSet %s replaced by one of the same name", f.Owner.Name)
	case f.DaemonSet.DeletionTimestamp != nil:
		return Decision{true, "DaemonSet " + f.Owner.Name + " being deleted"}
	}
	return keep("DaemonSet %s in place", f.Owner.Name)
}

// UninstallCheck follows the pod's DaemonSet while the proxy runs and
// decides at stop. The watch matters: `helm uninstall` deletes the
// DaemonSet and, milliseconds later, the Role and the ServiceAccount, so
// a lookup at SIGTERM is often refused; an established watch has already
// delivered the deletion.
type UninstallCheck struct {
	api            OwnerAPI
	namespace, pod string
	log            *slog.Logger

	mu     sync.Mutex
	owner  *metav1.OwnerReference
	podErr error
	seen   atomic.Bool
}

// WatchOwner starts following the pod's DaemonSet until ctx ends. With
// an empty namespace or pod the check always keeps the rules.
func WatchOwner(ctx context.Context, api OwnerAPI, namespace, pod string, log *slog.Logger) *UninstallCheck {
	c := &UninstallCheck{api: api, namespace: namespace, pod: pod, log: log}
	if namespace == "" || pod == "" || api == nil {
		return c
	}
	go func() {
		// The pod may not be readable at once (API down at start): retry.
		for delay := time.Second; ctx.Err() == nil; delay = min(2*delay, 30*time.Second) {
			if c.resolve(ctx) {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
		}
		if o := c.ownerRef(); o != nil {
			api.WatchDaemonSet(ctx, namespace, o.Name, o.UID, func() { c.seen.Store(true) })
		}
	}()
	return c
}

// resolve reads the pod's owner; true once known (or known absent).
func (c *UninstallCheck) resolve(ctx context.Context) bool {
	p, err := c.api.Pod(ctx, c.namespace, c.pod)
	if err == nil && p == nil {
		err = errors.New("no pod in the answer")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.podErr = err
		return false
	}
	c.owner, c.podErr = daemon.DaemonSetOwner(p), nil
	return true
}

func (c *UninstallCheck) ownerRef() *metav1.OwnerReference {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.owner
}

// Decide gathers the facts within timeout (ctx is usually already done:
// it is the one SIGTERM ended) and decides.
func (c *UninstallCheck) Decide(timeout time.Duration) Decision {
	f := UninstallFacts{InPod: c.namespace != "" && c.pod != "" && c.api != nil}
	if !f.InPod {
		return DecideUninstall(f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if c.ownerRef() == nil {
		c.resolve(ctx)
	}
	c.mu.Lock()
	f.Owner, f.PodErr = c.owner, c.podErr
	c.mu.Unlock()
	f.DeletionSeen = c.seen.Load()
	if f.Owner != nil && !f.DeletionSeen {
		f.DaemonSet, f.DaemonSetErr = c.api.DaemonSet(ctx, c.namespace, f.Owner.Name)
		// The watch may have delivered the deletion meanwhile.
		f.DeletionSeen = c.seen.Load()
	}
	return DecideUninstall(f)
}

// KubeOwner is OwnerAPI over client-go.
type KubeOwner struct{ Kube kubernetes.Interface }

func (k KubeOwner) Pod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	return k.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
}

func (k KubeOwner) DaemonSet(ctx context.Context, ns, name string) (*appsv1.DaemonSet, error) {
	return k.Kube.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
}

// WatchDaemonSet narrows the list and watch to the one name, which is
// what RBAC's resourceNames allows.
func (k KubeOwner) WatchDaemonSet(ctx context.Context, ns, name string, uid types.UID, deleting func()) {
	f := informers.NewSharedInformerFactoryWithOptions(k.Kube, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	inf := f.Apps().V1().DaemonSets().Informer()
	check := func(obj any) {
		if ds, ok := obj.(*appsv1.DaemonSet); ok && ds.UID == uid && ds.DeletionTimestamp != nil {
			deleting()
		}
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    check,
		UpdateFunc: func(_, obj any) { check(obj) },
		DeleteFunc: func(obj any) {
			if ds, ok := tombstone[*appsv1.DaemonSet](obj); ok && ds.UID == uid {
				deleting()
			}
		},
	})
	if err != nil {
		return
	}
	f.Start(ctx.Done())
	<-ctx.Done()
	f.Shutdown()
}
