package controller

import (
	"math/big"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/config/informer"
	"github.com/herald-lb/herald/controller/allocator"
	"github.com/herald-lb/herald/internal/buildinfo"
)

// Metrics are the controller's Prometheus metrics, in a registry of their
// own so tests can build many controllers.
type Metrics struct {
	Registry *prometheus.Registry

	addresses   *prometheus.GaugeVec
	inUse       *prometheus.GaugeVec
	allocations prometheus.Counter
	failures    *prometheus.CounterVec
	releases    prometheus.Counter
	reconcile   *prometheus.HistogramVec
	leader      prometheus.Gauge
	startup     prometheus.Gauge
	adopted     prometheus.Gauge
	stale       *prometheus.GaugeVec
	invalid     *prometheus.GaugeVec
	advertised  *prometheus.GaugeVec

	mu    sync.Mutex
	pools map[string]bool // pools with published gauges
}

// NewMetrics registers the metrics, with Go runtime and process metrics.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		addresses: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "herald_controller_pool_addresses",
			Help: "Addresses a pool can hand out, per family (IPv6 counts beyond 2^53 lose precision).",
		}, []string{"pool", "family"}),
		inUse: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "herald_controller_pool_addresses_in_use",
			Help: "Addresses of a pool held by at least one Service, per family.",
		}, []string{"pool", "family"}),
		allocations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_controller_allocations_total",
			Help: "Services given new IPs (one per IPAllocated event).",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_controller_allocation_failures_total",
			Help: "Allocation failures reported (one per AllocationFailed event), by reason.",
		}, []string{"reason"}),
		releases: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_controller_releases_total",
			Help: "Services whose IPs were released.",
		}),
		reconcile: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "herald_controller_reconcile_duration_seconds",
			Help:    "Time to reconcile one Service, or the configuration, including API writes.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"kind"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_controller_leader",
			Help: "1 while this replica holds the Lease and allocates, else 0.",
		}),
		startup: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_controller_startup_seconds",
			Help: "Time from becoming leader to ready: caches synced, configuration parsed, Service IPs adopted.",
		}),
		adopted: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_controller_adopted_services",
			Help: "Services whose IPs were adopted from their status at the last start.",
		}),
		stale: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "herald_config_stale_objects",
			Help: "Configuration objects whose current spec (or the Secret it names) was refused while their last valid version stays in force, by kind.",
		}, []string{"kind"}),
		invalid: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "herald_config_invalid_objects",
			Help: "Configuration objects left out because of errors (no version of them in force), by kind.",
		}, []string{"kind"}),
		advertised: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "herald_controller_pool_advertised",
			Help: "1 when an L2Advertisement or BGPAdvertisement selects the pool, 0 when none does and its addresses go unannounced.",
		}, []string{"pool"}),
	}
	m.Registry.MustRegister(m.addresses, m.inUse, m.allocations, m.failures, m.releases, m.reconcile,
		m.leader, m.startup, m.adopted, m.stale, m.invalid, m.advertised,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildinfo.Collector("controller"))
	return m
}

// setPools publishes the pool counts and whether each pool is advertised
// (unadvertised names the pools no advertisement selects), and forgets
// pools that are gone.
func (m *Metrics) setPools(stats []allocator.PoolStats, unadvertised map[string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[string]bool{}
	for _, s := range stats {
		seen[s.Pool] = true
	}
	for p := range m.pools {
		if !seen[p] {
			m.addresses.DeletePartialMatch(prometheus.Labels{"pool": p})
			m.inUse.DeletePartialMatch(prometheus.Labels{"pool": p})
			m.advertised.DeletePartialMatch(prometheus.Labels{"pool": p})
		}
	}
	m.pools = seen
	for _, s := range stats {
		adv := 1.0
		if unadvertised[s.Pool] {
			adv = 0
		}
		m.advertised.WithLabelValues(s.Pool).Set(adv)
		for _, f := range []struct {
			name string
			st   allocator.FamilyStats
		}{{"IPv4", s.IPv4}, {"IPv6", s.IPv6}} {
			total, _ := new(big.Float).SetInt(f.st.Total).Float64()
			m.addresses.WithLabelValues(s.Pool, f.name).Set(total)
			m.inUse.WithLabelValues(s.Pool, f.name).Set(float64(f.st.InUse))
		}
	}
}

// setInvalid publishes how many objects of each kind are left out: not
// in force at all (a stale object keeps an older version in force).
func (m *Metrics) setInvalid(objects map[string]config.ObjectState) {
	counts := map[string]int{}
	for _, k := range informer.Kinds {
		counts[k.Kind] = 0
	}
	for _, o := range objects {
		if o.InForce == 0 {
			counts[o.Kind]++
		}
	}
	for k, n := range counts {
		m.invalid.WithLabelValues(k).Set(float64(n))
	}
}

// setStale publishes how many objects of each kind are stale.
func (m *Metrics) setStale(objs []config.ObjectState) {
	counts := map[string]int{}
	for _, k := range informer.Kinds {
		counts[k.Kind] = 0
	}
	for _, o := range objs {
		counts[o.Kind]++
	}
	for k, n := range counts {
		m.stale.WithLabelValues(k).Set(float64(n))
	}
}
