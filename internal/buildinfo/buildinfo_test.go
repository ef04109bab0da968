package buildinfo

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCollector(t *testing.T) {
	r := prometheus.NewRegistry()
	r.MustRegister(Collector("speaker"))
	n, err := testutil.GatherAndCount(r, "herald_build_info")
	if err != nil || n != 1 {
		t.Fatalf("herald_build_info series: %d, %v", n, err)
	}
	mfs, _ := r.Gather()
	m := mfs[0].GetMetric()[0]
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["component"] != "speaker" || labels["version"] == "" || !strings.HasPrefix(labels["goversion"], "go") || m.GetGauge().GetValue() != 1 {
		t.Errorf("labels %v, value %v", labels, m.GetGauge().GetValue())
	}
}
