package proxy

import (
	"slices"
	"time"

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
	lastQueued          prometheus.Gauge
	rules               *prometheus.GaugeVec
	restoreFailures     prometheus.Counter
	partialFailures     prometheus.Counter
	nftFailures         prometheus.Counter
	noLocalEndpoints    *prometheus.GaugeVec
	conntrackDeleted    prometheus.Counter
	networkProgramming  prometheus.Histogram
	endpointChanges     prometheus.Counter
	endpointPending     prometheus.Gauge
	serviceChanges      prometheus.Counter
	servicePending      prometheus.Gauge
}

// syncBuckets are kube-proxy's: 1ms to ~16s.
var syncBuckets = prometheus.ExponentialBuckets(0.001, 2, 15)

// programmingBuckets are kube-proxy's for network programming latency:
// 0.25 s, 0.5 s, then every second to 59 s, every 5 s to 115 s, and
// every 30 s to 5 minutes.
var programmingBuckets = slices.Concat(
	prometheus.LinearBuckets(0.25, 0.25, 2),
	prometheus.LinearBuckets(1, 1, 59),
	prometheus.LinearBuckets(60, 5, 12),
	prometheus.LinearBuckets(120, 30, 7),
)

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
		lastQueued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_proxy_sync_proxy_rules_last_queued_timestamp_seconds",
			Help: "When a change last asked for a sync (Unix seconds); far ahead of the last sync's timestamp, syncs are stuck.",
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
		nftFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_proxy_sync_proxy_rules_nftables_sync_failures_total",
			Help: "nftables transactions that failed (the table is recreated next).",
		}),
		noLocalEndpoints: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "herald_proxy_sync_proxy_rules_no_local_endpoints_total",
			Help: "Service ports whose traffic policy is Local and that have endpoints, none of them on this node.",
		}, []string{"traffic_policy"}),
		conntrackDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_proxy_conntrack_stale_entries_deleted_total",
			Help: "UDP conntrack entries deleted because their endpoint is gone.",
		}),
		networkProgramming: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "herald_proxy_network_programming_duration_seconds", Buckets: programmingBuckets,
			Help: "From an EndpointSlice's last-change-trigger-time to the rules of its family reflecting the change.",
		}),
		endpointChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_proxy_sync_proxy_rules_endpoint_changes_total",
			Help: "EndpointSlice events (IPv4 and IPv6 slices of a Service), whether they changed anything or not.",
		}),
		endpointPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_proxy_sync_proxy_rules_endpoint_changes_pending",
			Help: "EndpointSlice events since the last sync started that changed a Service's endpoints.",
		}),
		serviceChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_proxy_sync_proxy_rules_service_changes_total",
			Help: "Service events, whether they changed anything or not.",
		}),
		servicePending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_proxy_sync_proxy_rules_service_changes_pending",
			Help: "Services whose rules changed since the last sync started.",
		}),
	}
	m.Registry.MustRegister(m.syncDuration, m.syncFullDuration, m.syncPartialDuration, m.lastSync, m.lastQueued,
		m.rules, m.restoreFailures, m.partialFailures, m.nftFailures, m.noLocalEndpoints, m.conntrackDeleted,
		m.networkProgramming, m.endpointChanges, m.endpointPending, m.serviceChanges, m.servicePending,
		buildinfo.Collector("proxy"))
	m.Endpoint.MustRegister(m.Registry, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// syncFailed counts a family's failed sync by what failed: an
// iptables-restore, full or partial, or an nftables transaction.
func (m *Metrics) syncFailed(nftables, full bool) {
	switch {
	case nftables:
		m.nftFailures.Inc()
	case full:
		m.restoreFailures.Inc()
	default:
		m.restoreFailures.Inc()
		m.partialFailures.Inc()
	}
}

// The Tracker's counts, as kube-proxy's change trackers keep them. A
// Tracker without metrics has a nil *Metrics, so these accept one.

func (m *Metrics) serviceEvent() {
	if m != nil {
		m.serviceChanges.Inc()
	}
}

func (m *Metrics) serviceChangesPending(n int) {
	if m != nil {
		m.servicePending.Set(float64(n))
	}
}

func (m *Metrics) endpointEvent() {
	if m != nil {
		m.endpointChanges.Inc()
	}
}

func (m *Metrics) endpointChangePending() {
	if m != nil {
		m.endpointPending.Inc()
	}
}

// checkedOut: a sync took every pending change.
func (m *Metrics) checkedOut() {
	if m != nil {
		m.endpointPending.Set(0)
		m.servicePending.Set(0)
	}
}

func (m *Metrics) queued(at time.Time) {
	if m != nil {
		m.lastQueued.Set(float64(at.UnixNano()) / 1e9)
	}
}
