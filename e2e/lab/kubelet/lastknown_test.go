package kubelet

import (
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestLastKnown(t *testing.T) {
	var c lastKnown
	refused := &dialError{syscall.ECONNREFUSED}
	notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, "x")
	answer := func(v string, err error) func() (string, time.Time, error) {
		return func() (string, time.Time, error) { return v, time.Time{}, err }
	}
	// Nothing known yet: the error.
	if _, err := remember(&c, "a", answer("", refused)); err == nil {
		t.Fatal("unreachable API with nothing known: want the error")
	}
	if v, err := remember(&c, "a", answer("one", nil)); err != nil || v != "one" {
		t.Fatalf("answer: %q %v", v, err)
	}
	// The API server is away: the last answer.
	if v, err := remember(&c, "a", answer("", refused)); err != nil || v != "one" {
		t.Fatalf("unreachable: %q %v, want the last answer one", v, err)
	}
	for _, e := range []error{apierrors.NewServiceUnavailable("etcd"), apierrors.NewTimeoutError("x", 1)} {
		if v, err := remember(&c, "a", answer("", e)); err != nil || v != "one" {
			t.Errorf("%v: %q %v, want the last answer", e, v, err)
		}
	}
	// An answer of the API server is final: gone is gone.
	if _, err := remember(&c, "a", answer("", notFound)); !apierrors.IsNotFound(err) {
		t.Fatalf("NotFound: %v", err)
	}
	// Another key knows nothing.
	if _, err := remember(&c, "b", answer("", refused)); err == nil {
		t.Fatal("key b: want the error")
	}
	// An expired value is not served.
	if _, err := remember(&c, "tok", func() (string, time.Time, error) { return "t", time.Now().Add(-time.Second), nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := remember(&c, "tok", answer("", refused)); err == nil {
		t.Fatal("expired token: want the error")
	}
}

// dialError stands for a transport error: not an API status.
type dialError struct{ err error }

func (e *dialError) Error() string { return "dial tcp: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }
