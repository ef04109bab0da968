// Package buildinfo is the herald_build_info metric every component
// exports, so dashboards and alerts can tell which build runs where.
package buildinfo

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/herald-lb/herald/internal/version"
)

// Collector is herald_build_info for component (controller, speaker,
// proxy): always 1, with the build in its labels.
func Collector(component string) prometheus.Collector {
	i := version.Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "herald_build_info",
		Help: "Always 1; the labels say which herald build this component runs.",
		ConstLabels: prometheus.Labels{
			"component": component,
			"version":   i.Version,
			"revision":  i.Revision,
			"modified":  strconv.FormatBool(i.Modified),
			"goversion": i.Go,
		},
	})
	g.Set(1)
	return g
}
