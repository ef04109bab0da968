package proxy

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
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

// TestMetricsDocumented: every metric the proxy registers has its row in
// docs/reference.md's metrics table, so the list users read is the one
// served (TestReference in cmd/herald/cli regenerates that table; this
// checks the proxy's side without it).
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/reference.md")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *prometheus.Desc)
	go func() { NewMetrics().Registry.Describe(ch); close(ch) }()
	n := 0
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		n++
		if !strings.Contains(string(doc), "| `"+m[1]) {
			t.Errorf("%s is not in docs/reference.md's metrics table", m[1])
		}
	}
	if n < 10 {
		t.Errorf("only %d metrics described", n)
	}
}

var fqName = regexp.MustCompile(`fqName: "([a-z_:]+)"`)
