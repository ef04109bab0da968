package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/herald-lb/herald/internal/daemon"
)

var (
	yes      = true
	owner    = &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "herald-speaker", UID: "u1", Controller: &yes}
	dsGone   = apierrors.NewNotFound(schema.GroupResource{Group: "apps", Resource: "daemonsets"}, "herald-speaker")
	dsDenied = apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "daemonsets"}, "herald-speaker", errors.New("no RBAC"))
)

func ds(uid types.UID, deleting bool) *appsv1.DaemonSet {
	d := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "herald-speaker", Namespace: "herald-system", UID: uid}}
	if deleting {
		now := metav1.Now()
		d.DeletionTimestamp = &now
	}
	return d
}

func TestDecideUninstall(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    UninstallFacts
		want bool
	}{
		{"not in a pod", UninstallFacts{DeletionSeen: true, DaemonSetErr: dsGone}, false},
		{"own pod unreadable", UninstallFacts{InPod: true, PodErr: errors.New("connection refused"), DaemonSetErr: dsGone}, false},
		{"no DaemonSet owner", UninstallFacts{InPod: true}, false},
		{"deletion watched", UninstallFacts{InPod: true, Owner: owner, DeletionSeen: true, DaemonSetErr: dsDenied}, true},
		{"DaemonSet not found", UninstallFacts{InPod: true, Owner: owner, DaemonSetErr: dsGone}, true},
		{"DaemonSet being deleted", UninstallFacts{InPod: true, Owner: owner, DaemonSet: ds("u1", true)}, true},
		{"rolling update: DaemonSet in place", UninstallFacts{InPod: true, Owner: owner, DaemonSet: ds("u1", false)}, false},
		{"RBAC already gone", UninstallFacts{InPod: true, Owner: owner, DaemonSetErr: dsDenied}, false},
		{"API unreachable", UninstallFacts{InPod: true, Owner: owner, DaemonSetErr: context.DeadlineExceeded}, false},
		{"no answer at all", UninstallFacts{InPod: true, Owner: owner}, false},
		{"replaced by another DaemonSet", UninstallFacts{InPod: true, Owner: owner, DaemonSet: ds("u2", true)}, false},
	} {
		d := DecideUninstall(tc.f)
		if d.Uninstall != tc.want || d.Reason == "" {
			t.Errorf("%s: %+v, want uninstall=%v with a reason", tc.name, d, tc.want)
		}
	}
}

func TestDaemonSetOwner(t *testing.T) {
	no := false
	rs := metav1.OwnerReference{Kind: "ReplicaSet", Name: "x", Controller: &yes}
	notController := *owner
	notController.Controller = &no
	for _, refs := range [][]metav1.OwnerReference{nil, {rs}, {notController}} {
		if o := daemon.DaemonSetOwner(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: refs}}); o != nil {
			t.Errorf("%v: owner %v", refs, o)
		}
	}
	if o := daemon.DaemonSetOwner(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{rs, *owner}}}); o == nil || o.UID != "u1" {
		t.Errorf("owner %v", o)
	}
}

// fakeOwner answers from fields; deleteNow plays the watch's event.
type fakeOwner struct {
	mu        sync.Mutex
	pod       *corev1.Pod
	podErr    error
	ds        *appsv1.DaemonSet
	dsErr     error
	dsCalls   int
	watching  chan func()
	watchedAs string
}

func (f *fakeOwner) Pod(context.Context, string, string) (*corev1.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pod, f.podErr
}

func (f *fakeOwner) DaemonSet(context.Context, string, string) (*appsv1.DaemonSet, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dsCalls++
	return f.ds, f.dsErr
}

func (f *fakeOwner) WatchDaemonSet(ctx context.Context, ns, name string, uid types.UID, deleting func()) {
	f.mu.Lock()
	f.watchedAs = ns + "/" + name + "/" + string(uid)
	f.mu.Unlock()
	f.watching <- deleting
	<-ctx.Done()
}

func ownedPod() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "herald-speaker-x", OwnerReferences: []metav1.OwnerReference{*owner}}}
}

func TestUninstallCheck(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// helm uninstall: the watch sees the deletion, then RBAC goes away.
	f := &fakeOwner{pod: ownedPod(), watching: make(chan func(), 1)}
	c := WatchOwner(ctx, f, "herald-system", "herald-speaker-x", log)
	deleting := <-f.watching
	if f.watchedAs != "herald-system/herald-speaker/u1" {
		t.Errorf("watched %s", f.watchedAs)
	}
	if d := c.Decide(time.Second); d.Uninstall {
		t.Errorf("before the deletion: %+v", d)
	}
	deleting()
	f.mu.Lock()
	f.pod, f.podErr, f.dsErr = nil, dsDenied, dsDenied
	f.mu.Unlock()
	if d := c.Decide(time.Second); !d.Uninstall {
		t.Errorf("after the deletion: %+v", d)
	}

	// Pod unreadable at start, readable at stop, DaemonSet gone: removed.
	f = &fakeOwner{podErr: errors.New("API down"), dsErr: dsGone, watching: make(chan func(), 1)}
	c = WatchOwner(ctx, f, "herald-system", "herald-speaker-x", log)
	if d := c.Decide(time.Second); d.Uninstall {
		t.Errorf("pod unreadable: %+v", d)
	}
	f.mu.Lock()
	f.pod, f.podErr = ownedPod(), nil
	f.mu.Unlock()
	if d := c.Decide(time.Second); !d.Uninstall {
		t.Errorf("pod read at stop, DaemonSet gone: %+v", d)
	}

	// An answer without a pod keeps the rules.
	f = &fakeOwner{dsErr: dsGone, watching: make(chan func(), 1)}
	if d := WatchOwner(ctx, f, "herald-system", "herald-speaker-x", log).Decide(time.Second); d.Uninstall {
		t.Errorf("no pod in the answer: %+v", d)
	}

	// Outside a pod nothing is asked.
	f = &fakeOwner{}
	if d := WatchOwner(ctx, f, "", "", log).Decide(time.Second); d.Uninstall || f.dsCalls != 0 {
		t.Errorf("outside a pod: %+v, %d lookups", d, f.dsCalls)
	}
}
