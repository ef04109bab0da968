package healthcheck

import (
	"errors"
	"net/http"
	"sync"
	"time"
)

// ProxyHealth tracks whether the proxy keeps its rules current: it is
// unhealthy when an update has been waiting longer than Timeout without
// a sync, the way kube-proxy's /healthz judges itself.
type ProxyHealth struct {
	// Timeout is how long a queued update may wait for a sync.
	Timeout time.Duration
	// Now is the clock (tests replace it).
	Now func() time.Time
	// NodeEligible, when set, reports whether this node should receive
	// load-balanced traffic (false while it is being deleted or drained);
	// /healthz answers 503 then, /livez does not look at it.
	NodeEligible func() bool

	mu          sync.Mutex
	lastUpdated time.Time
	oldestQueue time.Time // zero when nothing waits
}

// NewProxyHealth makes a tracker with the given timeout.
func NewProxyHealth(timeout time.Duration) *ProxyHealth {
	return &ProxyHealth{Timeout: timeout, Now: time.Now}
}

// QueuedUpdate records that a change is waiting for a sync.
func (h *ProxyHealth) QueuedUpdate() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.oldestQueue.IsZero() {
		h.oldestQueue = h.Now()
	}
}

// Updated records a successful sync: nothing waits any more.
func (h *ProxyHealth) Updated() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastUpdated = h.Now()
	h.oldestQueue = time.Time{}
}

// Healthy reports whether no update has waited longer than Timeout.
func (h *ProxyHealth) Healthy() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.healthyLocked(h.Now())
}

// Ready is /healthz as an error: nil when no change waited too long and
// the node is eligible (its rules written, not being deleted or drained).
func (h *ProxyHealth) Ready() error {
	if !h.Healthy() {
		return errors.New("a change has waited longer than " + h.Timeout.String() + " for a sync")
	}
	if h.NodeEligible != nil && !h.NodeEligible() {
		return errors.New("this node's rules are not written yet, or the node is being deleted or drained")
	}
	return nil
}

func (h *ProxyHealth) healthyLocked(now time.Time) bool {
	return h.oldestQueue.IsZero() || now.Sub(h.oldestQueue) <= h.Timeout
}

type proxyReply struct {
	LastUpdated  time.Time `json:"lastUpdated"`
	CurrentTime  time.Time `json:"currentTime"`
	NodeEligible *bool     `json:"nodeEligible,omitempty"`
}

// Handler serves /healthz (proxy healthy and node eligible) and /livez
// (proxy healthy).
func (h *ProxyHealth) Handler() http.Handler {
	mux := http.NewServeMux()
	serve := func(withNode bool) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			h.mu.Lock()
			now := h.Now()
			ok := h.healthyLocked(now)
			r := proxyReply{LastUpdated: h.lastUpdated, CurrentTime: now}
			h.mu.Unlock()
			if withNode && h.NodeEligible != nil {
				eligible := h.NodeEligible()
				r.NodeEligible = &eligible
				ok = ok && eligible
			}
			code := http.StatusOK
			if !ok {
				code = http.StatusServiceUnavailable
			}
			writeJSON(w, code, r)
		}
	}
	mux.Handle("/healthz", serve(true))
	mux.Handle("/livez", serve(false))
	return mux
}

// MetricsHandler serves /proxyMode (answering mode: iptables or
// nftables) next to the given /metrics handler, as kube-proxy's metrics
// port does.
func MetricsHandler(metrics http.Handler, mode string) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	mux.HandleFunc("/proxyMode", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write([]byte(mode))
	})
	return mux
}
