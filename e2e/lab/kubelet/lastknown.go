package kubelet

import (
	"errors"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// lastKnown keeps the last answer of each API read the kubelet makes to
// start a container (ConfigMaps, Secrets, tokens, the `kubernetes`
// Service), and serves it when the API server cannot be reached. A real
// kubelet starts containers from its caches (watched ConfigMaps and
// Secrets, its token manager, its Service informer), so a container
// that crashes while the control plane is down is restarted; without
// this the lab kubelet would leave it in CreateContainerConfigError.
type lastKnown struct {
	mu sync.Mutex
	m  map[string]known
}

type known struct {
	v any
	// until, when set, is when the value stops being usable (a token's
	// expiry).
	until time.Time
}

// remember runs read; its answer is kept under key and returned, and
// when the API cannot be reached the kept answer (if any, and not
// expired) is returned instead of the error. A definite answer of the
// API server (NotFound, Forbidden, …) is returned as it is.
func remember[T any](c *lastKnown, key string, read func() (T, time.Time, error)) (T, error) {
	v, until, err := read()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		if c.m == nil {
			c.m = map[string]known{}
		}
		c.m[key] = known{v: v, until: until}
		return v, nil
	}
	if !unreachable(err) {
		return v, err
	}
	k, ok := c.m[key]
	if !ok || (!k.until.IsZero() && time.Now().After(k.until)) {
		return v, err
	}
	return k.v.(T), nil
}

// unreachable tells an API server that did not answer (connection
// refused, a timeout, 5xx while its storage is away) from one that did.
func unreachable(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return true
	}
	return apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsInternalError(err) || apierrors.IsTooManyRequests(err)
}

// ptrValue is *p, or the zero value for nil.
func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
