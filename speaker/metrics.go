package speaker

import (
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/herald-lb/herald/internal/buildinfo"
	"github.com/herald-lb/herald/speaker/layer2"
	l2plan "github.com/herald-lb/herald/speaker/layer2/plan"
)

// Metrics are the speaker's Prometheus metrics.
type Metrics struct {
	Registry *prometheus.Registry

	announced       *prometheus.GaugeVec
	unannounced     *prometheus.GaugeVec
	unadvertised    *prometheus.GaugeVec
	elected         prometheus.Gauge
	members         prometheus.Gauge
	electionChanges prometheus.Counter
	syncs           prometheus.Counter
	isolated        prometheus.Gauge
	known           prometheus.Gauge
	recovering      prometheus.Gauge
	drained         prometheus.Gauge
	keys            prometheus.Gauge
	contested       prometheus.Gauge
	takeovers       *prometheus.CounterVec
	awaiting        prometheus.Gauge
	handoffs        *prometheus.CounterVec

	// speaker is read at scrape time by the responder and BGP
	// collectors, registered before it exists so that the registry
	// describes all the speaker serves from the start.
	speaker atomic.Pointer[Speaker]
}

// NewMetrics registers the speaker's metrics, with Go and process
// metrics, in a registry of their own.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		announced: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "herald_speaker_announced_ips",
			Help: "LoadBalancer IPs this node announces, by address family.",
		}, []string{"family"}),
		unannounced: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "herald_speaker_layer2_unannounced_ips",
			Help: "LoadBalancer IPs an L2Advertisement covers that no node may announce, as this node sees them, by reason (every speaker computes the same election).",
		}, []string{"reason"}),
		unadvertised: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "herald_speaker_bgp_unadvertised_ips",
			Help: "LoadBalancer IPs a BGPAdvertisement covers that no node advertises, for a reason that holds on every node (no serving endpoint, the Service not selected), by reason (every speaker computes the same).",
		}, []string{"reason"}),
		elected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_speaker_layer2_ips",
			Help: "LoadBalancer IPs elected over layer 2 in the cluster (any winner), as this node sees them.",
		}),
		members: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_speaker_members",
			Help: "Live speakers in the memberlist cluster, this one included.",
		}),
		electionChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_speaker_election_changes_total",
			Help: "IPs whose winner changed (on any node), as this node saw it.",
		}),
		syncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_speaker_syncs_total",
			Help: "Elections run (one per change of the inputs).",
		}),
		isolated: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_speaker_isolated",
			Help: "1 while this speaker's memberlist view is a minority of the speakers it knows of (alone, or the smaller side of a partition) and the API shows speakers outside it alive; it then announces only addresses no other node may announce.",
		}),
		known: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_speaker_known_speakers",
			Help: "Speakers this one knows of: the live members and those that died without leaving (a view of no more than half of them asks the heartbeat Lease before it announces).",
		}),
		recovering: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_speaker_recovering",
			Help: "1 while this speaker recovers from being counted out (declared dead by memberlist, or isolated): it wins an address only where no healthy node can.",
		}),
		drained: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_speaker_drained",
			Help: "1 while this node carries herald drain's mark (the herald.io/drain annotation): its layer-2 addresses go to the other nodes, and its BGP routes are sent with GRACEFUL_SHUTDOWN, then withdrawn.",
		}),
		keys: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_speaker_memberlist_keys",
			Help: "Keys in the memberlist keyring (the primary one included): 2 while a key rotation is under way.",
		}),
		contested: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_speaker_takeovers_checking",
			Help: "LoadBalancer IPs this node won from a speaker declared dead and does not answer for yet, while it checks that the latter no longer answers for them on the LAN.",
		}),
		takeovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_speaker_takeovers_total",
			Help: "LoadBalancer IPs this node won from a speaker declared dead, by how the check that the latter no longer answers ended: clear (nobody answered), waited (it answered, then stopped), forced (it still answered after the longest wait: two answers), unchecked (the check failed).",
		}, []string{"outcome"}),
		awaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_speaker_handoffs_awaiting",
			Help: "LoadBalancer IPs this node won from a live speaker and does not answer for yet, until the latter says it stopped answering for them.",
		}),
		handoffs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_speaker_handoffs_total",
			Help: "LoadBalancer IPs this node won from a live speaker and answers now, by how the wait for the latter ended: released (it said it stopped), timeout (it said nothing within 2s: two nodes may have answered), gone (it left the members meanwhile).",
		}, []string{"outcome"}),
	}
	m.Registry.MustRegister(m.announced, m.unannounced, m.unadvertised, m.elected, m.members, m.electionChanges, m.syncs, m.isolated, m.known, m.recovering, m.drained, m.keys, m.contested, m.takeovers, m.awaiting, m.handoffs,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildinfo.Collector("speaker"),
		responderCollector{m}, bgpCollector{m})
	return m
}

// NewMetricsFor is the registry --metrics-addr serves: the speaker's
// metrics and, when o.ProxyMetrics is set, the in-process proxy's, so
// that whatever scrapes the speaker's port sees the proxy too.
func NewMetricsFor(o Options) (*Metrics, error) {
	m := NewMetrics()
	if o.ProxyMetrics != nil {
		if err := m.Registry.Register(o.ProxyMetrics); err != nil {
			return nil, fmt.Errorf("the proxy's metrics: %w", err)
		}
	}
	return m, nil
}

// observeL2 sets the layer-2 election's figures.
func (m *Metrics) observeL2(st l2plan.State, ch l2plan.Changes) {
	v4, v6 := 0, 0
	for ip := range st.Announced() {
		if ip.Is4() {
			v4++
		} else {
			v6++
		}
	}
	m.announced.WithLabelValues("IPv4").Set(float64(v4))
	m.announced.WithLabelValues("IPv6").Set(float64(v6))
	elected := 0
	for _, ip := range st.IPs {
		if ip.Winner != "" {
			elected++
		}
	}
	m.elected.Set(float64(elected))
	m.unannounced.Reset()
	contested, awaiting := 0, 0
	for _, ip := range st.IPs {
		if ip.Winner == "" && ip.Reason != "" {
			m.unannounced.WithLabelValues(ip.Reason).Inc()
		}
		switch ip.Reason {
		case l2plan.ReasonContested:
			contested++
		case l2plan.ReasonAwaiting:
			awaiting++
		}
	}
	m.contested.Set(float64(contested))
	m.awaiting.Set(float64(awaiting))
	m.electionChanges.Add(float64(len(ch.Moved)))
}

// observeRound sets what one sync found of the cluster and this node.
func (m *Metrics) observeRound(r *round) {
	m.members.Set(float64(r.live))
	m.isolated.Set(boolGauge(r.holdBack))
	m.recovering.Set(boolGauge(r.recovering))
	m.drained.Set(boolGauge(r.drainMarked))
	m.known.Set(float64(len(r.standing.Known)))
	m.syncs.Inc()
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// observeBGP sets the BGP counts of a plan.
func (m *Metrics) observeBGP(unadvertised map[string]int) {
	m.unadvertised.Reset()
	for reason, n := range unadvertised {
		m.unadvertised.WithLabelValues(reason).Set(float64(n))
	}
}

// attach makes the responder and BGP collectors read s. One Metrics
// serves one Speaker.
func (m *Metrics) attach(s *Speaker) {
	if !m.speaker.CompareAndSwap(nil, s) {
		panic("speaker: Metrics already serve another Speaker")
	}
}

var (
	descRequests = prometheus.NewDesc("herald_speaker_requests_received_total",
		"ARP requests (protocol arp) and neighbor solicitations (protocol ndp) received, answered or not.",
		[]string{"interface", "protocol"}, nil)
	descResponses = prometheus.NewDesc("herald_speaker_responses_sent_total",
		"ARP replies and solicited neighbor advertisements sent.",
		[]string{"interface", "protocol"}, nil)
	descGratuitous = prometheus.NewDesc("herald_speaker_gratuitous_sent_total",
		"Gratuitous ARP frames (both forms count) and unsolicited neighbor advertisements sent.",
		[]string{"interface", "protocol"}, nil)
	descIgnored = prometheus.NewDesc("herald_speaker_requests_ignored_total",
		"Requests not answered, by reason (not announced here, another host's, malformed, ...).",
		[]string{"interface", "reason"}, nil)
	descIOErrors = prometheus.NewDesc("herald_speaker_socket_errors_total",
		"Read and write errors on the ARP/NDP sockets.",
		[]string{"interface", "op"}, nil)
)

type responderCollector struct{ m *Metrics }

func (c responderCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRequests, descResponses, descGratuitous, descIgnored, descIOErrors} {
		ch <- d
	}
}

func (c responderCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.m.speaker.Load()
	if s == nil {
		return
	}
	for iface, st := range s.l2.responders.stats() {
		counter := func(d *prometheus.Desc, v uint64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{iface}, labels...)...)
		}
		counter(descRequests, st.ARPRequests, "arp")
		counter(descRequests, st.NSRequests, "ndp")
		counter(descResponses, st.ARPReplies, "arp")
		counter(descResponses, st.NAReplies, "ndp")
		counter(descGratuitous, st.GratuitousARP, "arp")
		counter(descGratuitous, st.UnsolicitedNA, "ndp")
		counter(descIOErrors, st.ReadErrors, "read")
		counter(descIOErrors, st.WriteErrors, "write")
		for reason, n := range st.Ignored {
			counter(descIgnored, n, string(reason))
		}
	}
}

// stats sums, per interface, the live responder's counters and those of
// the responders it replaced, so the counters never go backwards.
func (r *responderSet) stats() map[string]layer2.Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]layer2.Stats{}
	for name, st := range r.retired {
		out[name] = addStats(layer2.Stats{}, st)
	}
	for name, e := range r.live {
		out[name] = addStats(out[name], e.r.Stats())
	}
	return out
}

var (
	descSessionUp = prometheus.NewDesc("herald_speaker_bgp_session_up",
		"1 when the BGP session to the peer is established, else 0.",
		[]string{"peer", "address"}, nil)
	descBFDUp = prometheus.NewDesc("herald_speaker_bgp_bfd_up",
		"1 when the BFD session to the peer is up, else 0 (only for peers with a bfdProfile).",
		[]string{"peer", "address"}, nil)
	descPrefixes = prometheus.NewDesc("herald_speaker_bgp_prefixes_advertised",
		"Prefixes the BGP implementation reports as advertised to the peer.",
		[]string{"peer"}, nil)
	descPrefixesWanted = prometheus.NewDesc("herald_speaker_bgp_prefixes_configured",
		"Prefixes this node means to advertise to the peer.",
		[]string{"peer"}, nil)
	descUpdates = prometheus.NewDesc("herald_speaker_bgp_updates_sent_total",
		"BGP UPDATE messages sent to the peer (since the session was opened).",
		[]string{"peer"}, nil)
	descFlaps = prometheus.NewDesc("herald_speaker_bgp_session_flaps_total",
		"Times the session to the peer left Established (since it was opened).",
		[]string{"peer"}, nil)
)

type bgpCollector struct{ m *Metrics }

func (c bgpCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSessionUp, descBFDUp, descPrefixes, descPrefixesWanted, descUpdates, descFlaps} {
		ch <- d
	}
}

func (c bgpCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.m.speaker.Load()
	if s == nil {
		return
	}
	if s.bgp == nil {
		return
	}
	sessions, routes, states := s.bgp.snapshot()
	for name, addr := range sessions {
		st := states[addr]
		up := 0.0
		if st.Up() {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(descSessionUp, prometheus.GaugeValue, up, name, addr.String())
		if st.BFD != "" {
			bfdUp := 0.0
			if st.BFD == "Up" {
				bfdUp = 1
			}
			ch <- prometheus.MustNewConstMetric(descBFDUp, prometheus.GaugeValue, bfdUp, name, addr.String())
		}
		ch <- prometheus.MustNewConstMetric(descPrefixes, prometheus.GaugeValue, float64(st.Advertised), name)
		ch <- prometheus.MustNewConstMetric(descPrefixesWanted, prometheus.GaugeValue, float64(routes[name]), name)
		ch <- prometheus.MustNewConstMetric(descUpdates, prometheus.CounterValue, float64(st.UpdatesSent), name)
		ch <- prometheus.MustNewConstMetric(descFlaps, prometheus.CounterValue, float64(st.Flaps), name)
	}
}
