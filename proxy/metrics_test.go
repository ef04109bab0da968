package proxy

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Registry holds the proxy's metrics without the process-wide ones, so a
// speaker can serve it next to its own; Endpoint (--metrics-bind-address)
// has both, as kube-proxy's /metrics.
func TestMetricsRegistries(t *testing.T) {
	m := NewMetrics()
	for _, c := range []struct {
		what    string
		n, want int
	}{
		{"Registry's go_goroutines", count(t, m, false, "go_goroutines"), 0},
		{"Registry's herald_proxy_sync_proxy_rules_last_timestamp_seconds", count(t, m, false, "herald_proxy_sync_proxy_rules_last_timestamp_seconds"), 1},
		{"Endpoint's go_goroutines", count(t, m, true, "go_goroutines"), 1},
		{"Endpoint's herald_proxy_sync_proxy_rules_last_timestamp_seconds", count(t, m, true, "herald_proxy_sync_proxy_rules_last_timestamp_seconds"), 1},
		{"Endpoint's herald_build_info", count(t, m, true, "herald_build_info"), 1},
	} {
		if c.n != c.want {
			t.Errorf("%s: %d series, want %d", c.what, c.n, c.want)
		}
	}
}

func count(t *testing.T, m *Metrics, endpoint bool, name string) int {
	t.Helper()
	g := m.Registry
	if endpoint {
		g = m.Endpoint
	}
	n, err := testutil.GatherAndCount(g, name)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
