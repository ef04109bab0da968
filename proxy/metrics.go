package proxy

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/herald-lb/herald/internal/buildinfo"
)

// Metrics are the proxy's Prometheus metrics, named like kube-proxy's
// with a herald_proxy_ prefix so dashboards translate one to one. They
// live in registries of their own so tests can build many proxies.
type Metrics struct {
	// Registry holds the proxy's own metrics and its herald_build_info,
	// without the process-wide Go and process collectors, so that the
	// speaker's registry can include it when both run in one process
	// (those collectors twice would make every scrape fail).
	Registry *prometheus.Registry
	// Endpoint is what --metrics-bind-address serves: Registry plus the
	// process's Go and process metrics, as kube-proxy's /metrics.
	Endpoint *prometheus.Registry

	syncDuration        prometheus.Histogram
	syncFullDuration    prometheus.Histogram
	syncPartialDuration prometheus.Histogram
	lastSync            prometheus.Gauge
	rules               *prometheus.GaugeVec
	restoreFailures     prometheus.Counter
	partialFailures     prometheus.Counter
	noLocalEndpoints    *prometheus.GaugeVec
	conntrackDeleted    prometheus.Counter
}

// syncBuckets are kube-proxy's: 1ms to ~16s.
var syncBuckets = prometheus.ExponentialBuckets(0.001, 2, 15)

// NewMetrics registers the metrics; Endpoint adds the Go runtime and
// process metrics.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Endpoint: prometheus.NewRegistry(),
		syncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "herald_proxy_sync_proxy_rules_duration_seconds", Buckets: syncBuckets,
			Help: "Time to sync the rules: render, iptables-restore of every family, health and conntrack updates.",
		}),
		syncFullDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "herald_proxy_sync_full_proxy_rules_duration_seconds", Buckets: syncBuckets,
			Help: "Time of syncs that rewrote every Service's chains.",
		}),
		syncPartialDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "herald_proxy_sync_partial_proxy_rules_duration_seconds", Buckets: syncBuckets,
			Help: "Time of syncs that rewrote only the changed Services' chains.",
		}),
		lastSync: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_proxy_sync_proxy_rules_last_timestamp_seconds",
			Help: "When the rules were last synced successfully (Unix seconds).",
		}),
		rules: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "herald_proxy_sync_proxy_rules_iptables_total",
			Help: "Rules herald has in each table after the last sync (all families).",
		}, []string{"table"}),
		restoreFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_proxy_sync_proxy_rules_iptables_restore_failures_total",
			Help: "iptables-restore runs that failed, full or partial.",
		}),
		partialFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_proxy_sync_proxy_rules_iptables_partial_restore_failures_total",
			Help: "Partial iptables-restore runs that failed (a full sync follows).",
		}),
		noLocalEndpoints: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "herald_proxy_sync_proxy_rules_no_local_endpoints_total",
			Help: "Service ports whose traffic policy is Local and that have endpoints, none of them on this node.",
		}, []string{"traffic_policy"}),
		conntrackDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_proxy_conntrack_stale_entries_deleted_total",
			Help: "UDP conntrack entries deleted because their endpoint is gone.",
		}),
	}
	m.Registry.MustRegister(m.syncDuration, m.syncFullDuration, m.syncPartialDuration, m.lastSync, m.rules,
		m.restoreFailures, m.partialFailures, m.noLocalEndpoints, m.conntrackDeleted, buildinfo.Collector("proxy"))
	m.Endpoint.MustRegister(m.Registry, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
