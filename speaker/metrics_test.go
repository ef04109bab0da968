package speaker

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// NewMetricsFor serves the in-process proxy's metrics with the speaker's,
// and refuses a registry that would repeat the speaker's series (every
// scrape would fail).
func TestNewMetricsFor(t *testing.T) {
	proxy := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "herald_proxy_test_gauge", Help: "a proxy metric"})
	proxy.MustRegister(g)
	m, err := NewMetricsFor(Options{ProxyMetrics: proxy})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{"herald_proxy_test_gauge": 1, "go_goroutines": 1, "herald_build_info": 1} {
		if n, err := testutil.GatherAndCount(m.Registry, name); err != nil || n != want {
			t.Errorf("%s: %d series (%v), want %d", name, n, err, want)
		}
	}
	if _, err := NewMetricsFor(Options{}); err != nil {
		t.Errorf("without a proxy: %v", err)
	}
	dup := prometheus.NewRegistry()
	dup.MustRegister(collectors.NewGoCollector())
	if _, err := NewMetricsFor(Options{ProxyMetrics: dup}); err == nil || !strings.Contains(err.Error(), "proxy") {
		t.Errorf("a second Go collector: err = %v", err)
	}
}
