package controller

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/herald-lb/herald/internal/daemon"
	"github.com/herald-lb/herald/internal/lbapi"
)

// memberlistSecretLen is 64 random bytes: HKDF needs no more than the 32
// of the key it derives, the rest is margin for free.
const memberlistSecretLen = 64

// EnsureMemberlistSecret creates the memberlist Secret
// (lbapi.MemberlistSecretName) in ns with fresh random key material
// unless it exists. An existing Secret is never changed: rotating the key
// under running speakers would split them into
// two clusters. It reports whether it created the Secret; the key itself
// never leaves this function except to the API server.
func EnsureMemberlistSecret(ctx context.Context, kube kubernetes.Interface, ns string) (bool, error) {
	secrets := kube.CoreV1().Secrets(ns)
	if _, err := secrets.Get(ctx, lbapi.MemberlistSecretName, metav1.GetOptions{}); err == nil {
		return false, nil
	} else if !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("reading Secret %s/%s: %w", ns, lbapi.MemberlistSecretName, err)
	}
	key := make([]byte, memberlistSecretLen)
	if _, err := rand.Read(key); err != nil {
		return false, fmt.Errorf("generating the memberlist key: %w", err)
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      lbapi.MemberlistSecretName,
			Namespace: ns,
			Labels:    map[string]string{"app.kubernetes.io/name": "herald"},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{lbapi.MemberlistSecretKey: key},
	}
	_, err := secrets.Create(ctx, s, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		return false, nil // another replica was faster; its key stands
	case err != nil:
		return false, fmt.Errorf("creating Secret %s/%s: %w", ns, lbapi.MemberlistSecretName, err)
	}
	return true, nil
}

// ensureMemberlistSecretLoop retries EnsureMemberlistSecret until it
// succeeds or ctx ends: speakers wait for the Secret, so a transient API
// error must not leave them waiting forever.
func ensureMemberlistSecretLoop(ctx context.Context, kube kubernetes.Interface, ns string, log *slog.Logger) {
	_ = daemon.Retry(ctx, time.Second, 30*time.Second, func(next time.Duration) bool {
		created, err := EnsureMemberlistSecret(ctx, kube, ns)
		if err != nil {
			log.Warn("cannot ensure the speakers' memberlist Secret; retrying", "err", err, "in", next)
			return false
		}
		if created {
			log.Info("created the speakers' memberlist Secret", "secret", ns+"/"+lbapi.MemberlistSecretName)
		}
		return true
	})
}
