package controller

import (
	"context"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/internal/lbapi"
)

// passwordsInForce are the passwords of the peers in force that take them
// from a Secret.
func passwordsInForce(cfg *config.Config) map[string][]byte {
	out := map[string][]byte{}
	for name, p := range cfg.Peers {
		if p.PasswordSecret != "" && len(p.Password) > 0 {
			out[name] = []byte(p.Password)
		}
	}
	return out
}

// storedPasswords reads the copy, for the parser.
func (c *Controller) storedPasswords() map[string]config.Secret {
	s, err := c.secrets.Secrets(c.opts.Namespace).Get(lbapi.PasswordsSecretName)
	if err != nil {
		return nil
	}
	out := make(map[string]config.Secret, len(s.Data))
	for k, v := range s.Data {
		out[k] = config.Secret(v)
	}
	return out
}

// writePasswords brings the copy up to date. The values are never logged.
func (c *Controller) writePasswords(ctx context.Context) error {
	c.mu.Lock()
	want := c.passwords
	c.mu.Unlock()
	if want == nil {
		return nil // no configuration parsed yet
	}
	secrets := c.kube.CoreV1().Secrets(c.opts.Namespace)
	have, err := c.secrets.Secrets(c.opts.Namespace).Get(lbapi.PasswordsSecretName)
	switch {
	case apierrors.IsNotFound(err):
		if len(want) == 0 {
			return nil
		}
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: lbapi.PasswordsSecretName, Namespace: c.opts.Namespace,
				Labels: map[string]string{"app.kubernetes.io/name": "herald"}},
			Type: corev1.SecretTypeOpaque,
			Data: want,
		}
		_, err = secrets.Create(ctx, s, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil // the cache is behind; the next pass compares again
		}
		return err
	case err != nil:
		return err
	}
	if maps.EqualFunc(have.Data, want, func(a, b []byte) bool { return string(a) == string(b) }) {
		return nil
	}
	next := have.DeepCopy()
	next.Data = want
	_, err = secrets.Update(ctx, next, metav1.UpdateOptions{})
	return err
}
