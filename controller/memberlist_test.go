package controller

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/herald-lb/herald/internal/lbapi"
)

func TestEnsureMemberlistSecretCreatesOnce(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	created, err := EnsureMemberlistSecret(ctx, kube, ns)
	if err != nil || !created {
		t.Fatalf("first call: created=%v err=%v, want a new Secret", created, err)
	}
	s, err := kube.CoreV1().Secrets(ns).Get(ctx, lbapi.MemberlistSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key := s.Data[lbapi.MemberlistSecretKey]
	if len(key) < 32 {
		t.Fatalf("key of %d bytes, want at least 32", len(key))
	}
	if bytes.Count(key, []byte{0}) == len(key) {
		t.Fatal("key is all zeros")
	}
	created, err = EnsureMemberlistSecret(ctx, kube, ns)
	if err != nil || created {
		t.Fatalf("second call: created=%v err=%v, want the existing Secret kept", created, err)
	}
	again, _ := kube.CoreV1().Secrets(ns).Get(ctx, lbapi.MemberlistSecretName, metav1.GetOptions{})
	if string(again.Data[lbapi.MemberlistSecretKey]) != string(key) {
		t.Fatal("the key changed on the second call: running speakers would split")
	}
}

func TestEnsureMemberlistSecretKeepsExistingAndRandom(t *testing.T) {
	ctx := context.Background()
	mine := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: lbapi.MemberlistSecretName, Namespace: ns},
		Data:       map[string][]byte{lbapi.MemberlistSecretKey: []byte("an operator's own key material!!")},
	}
	kube := fake.NewClientset(mine)
	if created, err := EnsureMemberlistSecret(ctx, kube, ns); err != nil || created {
		t.Fatalf("created=%v err=%v, want the operator's Secret kept", created, err)
	}
	got, _ := kube.CoreV1().Secrets(ns).Get(ctx, lbapi.MemberlistSecretName, metav1.GetOptions{})
	if string(got.Data[lbapi.MemberlistSecretKey]) != "an operator's own key material!!" {
		t.Fatal("the operator's key was replaced")
	}

	// Two clusters get different keys.
	a, b := fake.NewClientset(), fake.NewClientset()
	_, _ = EnsureMemberlistSecret(ctx, a, ns)
	_, _ = EnsureMemberlistSecret(ctx, b, ns)
	sa, _ := a.CoreV1().Secrets(ns).Get(ctx, lbapi.MemberlistSecretName, metav1.GetOptions{})
	sb, _ := b.CoreV1().Secrets(ns).Get(ctx, lbapi.MemberlistSecretName, metav1.GetOptions{})
	if string(sa.Data[lbapi.MemberlistSecretKey]) == string(sb.Data[lbapi.MemberlistSecretKey]) {
		t.Fatal("two Secrets got the same key")
	}
}

func TestEnsureMemberlistSecretRaceAndErrors(t *testing.T) {
	ctx := context.Background()
	// Another replica creates it between our Get and Create.
	kube := fake.NewClientset()
	kube.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewAlreadyExists(corev1.Resource("secrets"), lbapi.MemberlistSecretName)
	})
	if created, err := EnsureMemberlistSecret(ctx, kube, ns); err != nil || created {
		t.Fatalf("lost race: created=%v err=%v, want no error", created, err)
	}
	// A failing API server is reported, naming the Secret.
	broken := fake.NewClientset()
	broken.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	_, err := EnsureMemberlistSecret(ctx, broken, ns)
	if err == nil || !strings.Contains(err.Error(), "herald-system/herald-memberlist") {
		t.Fatalf("err = %v, want one naming the Secret", err)
	}
}
