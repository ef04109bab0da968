package status

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Session is one BGP session of one node's speaker, as the speaker's
// metrics report it.
type Session struct {
	Node    string `json:"node"`
	Peer    string `json:"peer"`
	Address string `json:"address"`
	// Established: the session is up.
	Established bool `json:"established"`
	// BFD is "up", "down", or "" for a peer without a bfdProfile.
	BFD string `json:"bfd,omitempty"`
	// Prefixes the speaker advertises to the peer, and those it means to.
	PrefixesAdvertised int `json:"prefixesAdvertised"`
	PrefixesConfigured int `json:"prefixesConfigured"`
	// Flaps counts the times the session left Established.
	Flaps int `json:"flaps"`
}

// NodeError is a speaker whose metrics could not be read.
type NodeError struct {
	Node  string `json:"node"`
	Pod   string `json:"pod"`
	Error string `json:"error"`
}

// BGPReport is `herald status bgp -o json|yaml`.
type BGPReport struct {
	Sessions []Session   `json:"sessions"`
	Errors   []NodeError `json:"errors,omitempty"`
}

// ParseSessions reads a speaker's /metrics (Prometheus text format) into
// its BGP sessions, sorted by peer and address.
func ParseSessions(node string, r io.Reader) ([]Session, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	type key struct{ peer, addr string }
	by := map[key]*Session{}
	get := func(peer, addr string) *Session {
		k := key{peer, addr}
		if by[k] == nil {
			by[k] = &Session{Node: node, Peer: peer, Address: addr}
		}
		return by[k]
	}
	each := func(name string, f func(labels map[string]string, v float64)) {
		mf := mfs[name]
		if mf == nil {
			return
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			f(labels, value(m))
		}
	}
	each("herald_speaker_bgp_session_up", func(l map[string]string, v float64) { get(l["peer"], l["address"]).Established = v == 1 })
	each("herald_speaker_bgp_bfd_up", func(l map[string]string, v float64) {
		get(l["peer"], l["address"]).BFD = map[bool]string{true: "up", false: "down"}[v == 1]
	})
	// The per-peer series carry no address: they go to every session of
	// the peer (one per address family at most).
	perPeer := func(name string, set func(*Session, int)) {
		each(name, func(l map[string]string, v float64) {
			for k, s := range by {
				if k.peer == l["peer"] {
					set(s, int(v))
				}
			}
		})
	}
	perPeer("herald_speaker_bgp_prefixes_advertised", func(s *Session, n int) { s.PrefixesAdvertised = n })
	perPeer("herald_speaker_bgp_prefixes_configured", func(s *Session, n int) { s.PrefixesConfigured = n })
	perPeer("herald_speaker_bgp_session_flaps_total", func(s *Session, n int) { s.Flaps = n })
	out := make([]Session, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b Session) int {
		return strings.Compare(a.Peer+"\x00"+a.Address, b.Peer+"\x00"+b.Address)
	})
	return out, nil
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

// speakerSelector selects herald's speaker pods (chart and kustomize).
const speakerSelector = "app.kubernetes.io/name=herald,app.kubernetes.io/component=speaker"

// RunBGP prints every speaker's BGP sessions, read from the speakers'
// /metrics through the API server's pod proxy (which needs get on
// pods/proxy in herald's namespace).
func RunBGP(ctx context.Context, o Options, kube kubernetes.Interface, out io.Writer) error {
	pods, err := kube.CoreV1().Pods(o.HeraldNamespace).List(ctx, metav1.ListOptions{LabelSelector: speakerSelector})
	if err != nil {
		return fmt.Errorf("listing the speakers in %s: %w", o.HeraldNamespace, err)
	}
	report := BGPReport{Sessions: []Session{}}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning {
			continue
		}
		port := metricsPort(&p)
		raw, err := kube.CoreV1().Pods(p.Namespace).ProxyGet("http", p.Name, strconv.Itoa(port), "/metrics", nil).DoRaw(ctx)
		if err != nil {
			report.Errors = append(report.Errors, NodeError{Node: p.Spec.NodeName, Pod: p.Name, Error: err.Error()})
			continue
		}
		sessions, err := ParseSessions(p.Spec.NodeName, bytes.NewReader(raw))
		if err != nil {
			report.Errors = append(report.Errors, NodeError{Node: p.Spec.NodeName, Pod: p.Name, Error: "reading its metrics: " + err.Error()})
			continue
		}
		report.Sessions = append(report.Sessions, sessions...)
	}
	slices.SortStableFunc(report.Sessions, func(a, b Session) int { return strings.Compare(a.Node, b.Node) })
	if o.Output == "json" || o.Output == "yaml" {
		return writeData(out, o.Output, report)
	}
	return RenderBGP(out, report)
}

// metricsPort is the speaker container's port named "metrics" (7473 by
// default).
func metricsPort(p *corev1.Pod) int {
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == "metrics" {
				return int(cp.ContainerPort)
			}
		}
	}
	return 7473
}

// RenderBGP writes one line per session, then the speakers that could
// not be read.
func RenderBGP(out io.Writer, r BGPReport) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPEER\tADDRESS\tSTATE\tBFD\tPREFIXES (ADVERTISED/MEANT)\tFLAPS")
	for _, s := range r.Sessions {
		state := "Down"
		if s.Established {
			state = "Established"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%d\n", s.Node, s.Peer, s.Address, state, cmpOr(s.BFD, "-"), s.PrefixesAdvertised, s.PrefixesConfigured, s.Flaps)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Sessions) == 0 {
		fmt.Fprintln(out, "no BGP sessions (no BGPPeer selects a node, or BGP is off)")
	}
	for _, e := range r.Errors {
		fmt.Fprintf(out, "speaker %s on %s: %s\n", e.Pod, e.Node, e.Error)
	}
	return nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
