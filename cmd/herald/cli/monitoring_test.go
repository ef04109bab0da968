package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/herald-lb/herald/config/manifests"
	"github.com/herald-lb/herald/controller"
	"github.com/herald-lb/herald/proxy"
	"github.com/herald-lb/herald/speaker"
)

// The monitoring test: in every install the chart and the kustomizations
// offer, each metric that a shipped alert (monitoring/rules.yaml) or
// dashboard panel (monitoring/grafana-dashboard.json) uses, and that a
// herald process of that install registers, is served on a port the
// shipped PodMonitor and ServiceMonitors scrape, under the job the
// expression asks for. What each port serves comes from the code: each
// container's arguments are parsed by herald's own flag parsers, and the
// registries behind its listeners are built as the commands build them.

// families are metric names with their type, or unknownType for a vector
// without series yet (described, not gathered).
type families map[string]dto.MetricType

const unknownType dto.MetricType = -1

var descName = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*")`)

// registered lists what a registry serves: every metric its collectors
// describe, typed where gathering shows the type. A gather error (two
// collectors of the same series) fails the test, as it would fail every
// scrape.
func registered(t *testing.T, r *prometheus.Registry) families {
	t.Helper()
	out := families{}
	ch := make(chan *prometheus.Desc)
	go func() { r.Describe(ch); close(ch) }()
	for d := range ch {
		m := descName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		name, err := strconv.Unquote(m[1])
		if err != nil {
			t.Fatal(err)
		}
		out[name] = unknownType
	}
	mfs, err := r.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		out[mf.GetName()] = mf.GetType()
	}
	return out
}

// family is the family whose series a query names: itself, or a
// histogram's or summary's, queried by its _bucket, _sum and _count
// series (a vector of unknown type may be either).
func (f families) family(name string) (string, bool) {
	if _, ok := f[name]; ok {
		return name, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			switch typ, ok := f[base]; {
			case !ok:
			case typ == unknownType, typ == dto.MetricType_HISTOGRAM, typ == dto.MetricType_SUMMARY && suffix != "_bucket":
				return base, true
			}
		}
	}
	return "", false
}

func (f families) serves(name string) bool { _, ok := f.family(name); return ok }

// A listener is an address a herald process serves /metrics on.
type listener struct {
	addr string
	fams families
}

func (l listener) port() int {
	_, p, err := net.SplitHostPort(l.addr)
	if err != nil {
		return -1
	}
	n, _ := strconv.Atoi(p)
	return n
}

// reachable: Prometheus scrapes the pod's address, which the loopback is
// not.
func (l listener) reachable() bool {
	host, _, err := net.SplitHostPort(l.addr)
	if err != nil {
		return false
	}
	a, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return host == "" || (err == nil && !a.IsLoopback())
}

// listeners parses a herald container's command line as the binary does
// and builds the registries its /metrics listeners serve.
func listeners(t *testing.T, c corev1.Container) []listener {
	t.Helper()
	if len(c.Command) > 0 || len(c.Args) == 0 {
		t.Fatalf("container %s: command %q, args %q: not the herald image's entrypoint with a subcommand", c.Name, c.Command, c.Args)
	}
	args := c.Args[1:]
	switch c.Args[0] {
	case "controller":
		o, err := controller.ParseFlags(args, io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		return []listener{{o.MetricsAddr, registered(t, controller.NewMetrics().Registry)}}
	case "speaker":
		cmd, err := parseSpeaker(args, io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		var out []listener
		if cmd.speaker.Proxy {
			p := cmd.withProxy()
			out = append(out, listener{cmd.proxy.MetricsBindAddress, registered(t, p.Metrics().Endpoint)})
		}
		m, err := speaker.NewMetricsFor(cmd.speaker)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		return append(out, listener{cmd.speaker.MetricsAddr, registered(t, m.Registry)})
	case "proxy":
		o, err := proxy.ParseFlags(args, io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		return []listener{{o.MetricsBindAddress, registered(t, proxy.New(o).Metrics().Endpoint)}}
	}
	t.Fatalf("container %s runs %q, which the test does not know", c.Name, c.Args[0])
	return nil
}

// A pod is a workload's pod template, with its containers' listeners.
type pod struct {
	where     string
	namespace string
	labels    map[string]string
	spec      corev1.PodSpec
	listeners map[string][]listener // by container
}

func pods(t *testing.T, objs []manifests.Object) []pod {
	t.Helper()
	var out []pod
	for _, o := range objs {
		var tmpl corev1.PodTemplateSpec
		switch w := o.Obj.(type) {
		case *appsv1.Deployment:
			tmpl = w.Spec.Template
		case *appsv1.DaemonSet:
			tmpl = w.Spec.Template
		default:
			continue
		}
		p := pod{where: o.String(), namespace: o.Namespace, labels: tmpl.Labels, spec: tmpl.Spec, listeners: map[string][]listener{}}
		for _, c := range tmpl.Spec.Containers {
			p.listeners[c.Name] = listeners(t, c)
		}
		out = append(out, p)
	}
	return out
}

// A target is what a monitor scrapes: a container's port, the job it
// gets and what the listeners there serve.
type target struct {
	where string
	job   string
	fams  families
}

// monitor is the part of a PodMonitor or ServiceMonitor this test reads.
type monitor struct {
	kind, name, namespace string `json:"-"`
	Spec                  struct {
		JobLabel          string `json:"jobLabel"`
		NamespaceSelector struct {
			Any        bool     `json:"any"`
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port        string `json:"port"`
			Path        string `json:"path"`
			Relabelings []any  `json:"relabelings"`
		} `json:"endpoints"`
		PodMetricsEndpoints []struct {
			Port        string `json:"port"`
			Path        string `json:"path"`
			Relabelings []any  `json:"relabelings"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

func (m monitor) String() string { return m.kind + " " + m.namespace + "/" + m.name }

func monitors(t *testing.T, objs []manifests.Object) []monitor {
	t.Helper()
	var out []monitor
	for _, o := range objs {
		if o.Kind != "PodMonitor" && o.Kind != "ServiceMonitor" {
			continue
		}
		m := monitor{kind: o.Kind, name: o.Name, namespace: o.Namespace}
		b, err := json.Marshal(o.Obj)
		if err == nil {
			err = json.Unmarshal(b, &m)
		}
		if err != nil {
			t.Fatalf("%s: %v", o, err)
		}
		out = append(out, m)
	}
	return out
}

func (m monitor) selects(t *testing.T, namespace string, l map[string]string) bool {
	t.Helper()
	ns := m.Spec.NamespaceSelector
	if !ns.Any && !slices.Contains(ns.MatchNames, namespace) && (len(ns.MatchNames) > 0 || namespace != m.namespace) {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(&m.Spec.Selector)
	if err != nil {
		t.Fatalf("%s: %v", m, err)
	}
	return sel.Matches(labels.Set(l))
}

// targets are what the monitor scrapes in an install. A scraped port
// where no listener serves /metrics is an error.
func (m monitor) targets(t *testing.T, objs []manifests.Object, ps []pod) []target {
	t.Helper()
	// job is the value of the jobLabel label (of the pod or the Service),
	// as the Prometheus operator relabels it.
	job := func(l map[string]string, fallback string) string {
		if m.Spec.JobLabel != "" && l[m.Spec.JobLabel] != "" {
			return l[m.Spec.JobLabel]
		}
		return fallback
	}
	var out []target
	// at is the target at a container's port, given by number or name.
	at := func(p pod, port string, jobName, via string) {
		for _, c := range p.spec.Containers {
			n, err := strconv.Atoi(port)
			if err != nil {
				n = -1
				for _, cp := range c.Ports {
					if cp.Name == port {
						n = int(cp.ContainerPort)
					}
				}
			}
			if n < 0 {
				continue
			}
			where := fmt.Sprintf("%s container %s port %s (%d)%s", p.where, c.Name, port, n, via)
			fams := families{}
			for _, l := range p.listeners[c.Name] {
				if l.port() == n && l.reachable() {
					for name, typ := range l.fams {
						fams[name] = typ
					}
				}
			}
			if len(fams) == 0 {
				t.Errorf("%s scrapes %s, where no herald listener serves /metrics beyond the loopback", m, where)
				continue
			}
			out = append(out, target{where: where, job: jobName, fams: fams})
		}
	}
	type endpoint struct{ port, path string }
	var eps []endpoint
	for _, e := range m.Spec.PodMetricsEndpoints {
		eps = append(eps, endpoint{e.Port, e.Path})
		if len(e.Relabelings) > 0 {
			t.Errorf("%s: relabelings, which this test does not model", m)
		}
	}
	for _, e := range m.Spec.Endpoints {
		eps = append(eps, endpoint{e.Port, e.Path})
		if len(e.Relabelings) > 0 {
			t.Errorf("%s: relabelings, which this test does not model", m)
		}
	}
	for _, e := range eps {
		if e.path != "" && e.path != "/metrics" {
			t.Errorf("%s: path %s; herald serves /metrics", m, e.path)
		}
	}
	if m.kind == "PodMonitor" {
		for _, p := range ps {
			if m.selects(t, p.namespace, p.labels) {
				for _, e := range eps {
					at(p, e.port, job(p.labels, m.namespace+"/"+m.name), "")
				}
			}
		}
		return out
	}
	for _, o := range objs {
		svc, ok := o.Obj.(*corev1.Service)
		if !ok || !m.selects(t, svc.Namespace, svc.Labels) {
			continue
		}
		for _, e := range eps {
			for _, sp := range svc.Spec.Ports {
				if sp.Name != e.port {
					continue
				}
				for _, p := range ps {
					if p.namespace == svc.Namespace && len(svc.Spec.Selector) > 0 && labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(p.labels)) {
						at(p, sp.TargetPort.String(), job(svc.Labels, svc.Name), " via "+o.String())
					}
				}
			}
		}
	}
	return out
}

// A use is a selector in an alert or a panel.
type use struct {
	where string
	sel   selector
}

// uses reads the selectors of the shipped alerts and dashboard panels.
func uses(t *testing.T) []use {
	t.Helper()
	dir := filepath.Join(manifests.Root(), "monitoring")
	var out []use
	add := func(where, expr string) {
		sels, err := selectors(expr)
		if err != nil {
			t.Fatalf("%s: %q: %v", where, expr, err)
		}
		for _, s := range sels {
			out = append(out, use{where, s})
		}
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Record, Expr string
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			add("rules.yaml "+r.Alert+r.Record, r.Expr)
		}
	}
	type panel struct {
		Title   string
		Panels  []json.RawMessage
		Targets []struct{ Expr string }
	}
	b, err = os.ReadFile(filepath.Join(dir, "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var walk func(raw []json.RawMessage)
	walk = func(raw []json.RawMessage) {
		for _, r := range raw {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatal(err)
			}
			for _, q := range p.Targets {
				add(fmt.Sprintf("dashboard panel %q", p.Title), q.Expr)
			}
			walk(p.Panels)
		}
	}
	var d struct{ Panels []json.RawMessage }
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	walk(d.Panels)
	if len(out) < 10 {
		t.Fatalf("only %d selectors in the alerts and the dashboard", len(out))
	}
	return out
}

// synthetic series are Prometheus' own, one per target.
func synthetic(name string) bool { return name == "up" || strings.HasPrefix(name, "scrape_") }

// matches: the target's job satisfies the selector's job matchers.
func (s selector) matches(job string) bool {
	for _, m := range s.matchers {
		if m.label != "job" {
			continue
		}
		var ok bool
		switch m.op {
		case "=", "!=":
			ok = job == m.value
		default:
			ok = regexp.MustCompile("^(?:" + m.value + ")$").MatchString(job)
		}
		if ok == strings.HasPrefix(m.op, "!") {
			return false
		}
	}
	return true
}

// An install is one way of installing herald, rendered.
type install struct {
	name string
	// full: everything the alerts and panels use must be scraped.
	full bool
	objs []manifests.Object
}

func checkInstall(t *testing.T, in install, mons []monitor, used []use) {
	ps := pods(t, in.objs)
	// What the install's processes register anywhere, the loopback too,
	// and where.
	all, where := families{}, map[string][]string{}
	for _, p := range ps {
		for c, ls := range p.listeners {
			for _, l := range ls {
				for name, typ := range l.fams {
					all[name] = typ
					where[name] = append(where[name], fmt.Sprintf("%s container %s on %s", p.where, c, l.addr))
				}
			}
		}
	}
	for _, m := range mons {
		targets := m.targets(t, in.objs, ps)
		if len(targets) == 0 {
			t.Errorf("%s scrapes nothing", m)
			continue
		}
		var jobs []string
		for _, tg := range targets {
			jobs = append(jobs, tg.job)
		}
		jobs = slices.Compact(slices.Sorted(slices.Values(jobs)))
		t.Logf("%s scrapes %d targets, jobs %v", m, len(targets), jobs)
		for _, u := range used {
			name := u.sel.name
			if synthetic(name) {
				if in.full && !slices.ContainsFunc(targets, func(tg target) bool { return u.sel.matches(tg.job) }) {
					t.Errorf("%s: %s: %s has no target with that job (jobs %v)", m, u.where, u.sel, jobs)
				}
				continue
			}
			fam, ok := all.family(name)
			if !ok {
				if in.full {
					t.Errorf("%s: %s: no herald process registers %s", in.name, u.where, name)
				}
				continue
			}
			var servedBy []string
			found := false
			for _, tg := range targets {
				if tg.fams.serves(name) {
					servedBy = append(servedBy, tg.job)
					found = found || u.sel.matches(tg.job)
				}
			}
			switch {
			case found:
			case servedBy == nil:
				t.Errorf("%s: %s: %s is registered by %s, but %s scrapes it nowhere", in.name, u.where, name, strings.Join(where[fam], ", "), m)
			default:
				t.Errorf("%s: %s: %s asks for a job %s scrapes %s under: %v", in.name, u.where, u.sel, m, name, slices.Compact(slices.Sorted(slices.Values(servedBy))))
			}
		}
	}
}

// helmTemplate renders the chart as release herald in herald-system with
// $HERALD_HELM (a relative path from the repository's root), or skips.
func helmTemplate(t *testing.T, set ...string) []byte {
	t.Helper()
	bin := os.Getenv("HERALD_HELM")
	if bin == "" {
		t.Skip("HERALD_HELM is not set: rendering the chart needs Helm (`make unit-test` installs the pinned one and sets it)")
	}
	root := manifests.Root()
	if strings.Contains(bin, "/") && !filepath.IsAbs(bin) {
		bin = filepath.Join(root, bin)
	}
	args := []string{"template", "herald", "charts/herald", "--namespace", "herald-system"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = root
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home, "KUBECONFIG="+filepath.Join(home, "none"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

func decode(t *testing.T, b []byte, err error) []manifests.Object {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestMonitoringSeesEveryComponent: see the top of this file. The chart
// is rendered in each proxy mode it offers (and the proxy alone), with its
// ServiceMonitor on; the kustomizations are config/default and its
// overlays. The bundle's PodMonitor is checked against every install, its
// ServiceMonitor and the chart's against the chart's (config/default has
// no metrics Services).
func TestMonitoringSeesEveryComponent(t *testing.T) {
	t.Setenv("NODE_NAME", "node1")
	t.Setenv("NODE_IP", "198.51.100.11")
	t.Setenv("POD_NAMESPACE", "herald-system")
	used := uses(t)
	var bundlePod, bundleService []monitor
	for _, f := range []string{"podmonitor.yaml", "servicemonitor.yaml"} {
		objs, err := manifests.DecodeFile(filepath.Join(manifests.Root(), "monitoring", f))
		if err != nil {
			t.Fatal(err)
		}
		ms := monitors(t, objs)
		if len(ms) != 1 {
			t.Fatalf("%s: %d monitors", f, len(ms))
		}
		if ms[0].kind == "PodMonitor" {
			bundlePod = ms
		} else {
			bundleService = ms
		}
	}
	if bundlePod == nil || bundleService == nil {
		t.Fatal("monitoring/ has no PodMonitor or no ServiceMonitor")
	}
	for _, k := range []struct {
		dir  string
		full bool
	}{
		{"config/default", true},
		{"config/overlays/l2-only", false},
		{"config/overlays/no-proxy", false},
		{"config/overlays/proxy-only", false},
	} {
		t.Run(k.dir, func(t *testing.T) {
			out, err := manifests.Kustomize(filepath.Join(manifests.Root(), k.dir))
			checkInstall(t, install{k.dir, k.full, decode(t, out, err)}, bundlePod, used)
		})
	}
	for _, c := range []struct {
		name string
		full bool
		set  []string
	}{
		{"chart proxy.mode=speaker", true, nil},
		{"chart proxy.mode=standalone", true, []string{"proxy.mode=standalone"}},
		{"chart proxy.mode=disabled", false, []string{"proxy.mode=disabled"}},
		{"chart proxy alone", false, []string{"proxy.mode=standalone", "controller.enabled=false", "speaker.enabled=false"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			objs := decode(t, helmTemplate(t, append(c.set, "metrics.serviceMonitor.enabled=true")...), nil)
			chartMons := monitors(t, objs)
			if len(chartMons) != 1 {
				t.Fatalf("the chart renders %d monitors, want its ServiceMonitor", len(chartMons))
			}
			checkInstall(t, install{c.name, c.full, objs}, slices.Concat(bundlePod, bundleService, chartMons), used)
		})
	}
}

// The proxy's metrics in the speaker's registry come without a second
// copy of the process-wide series, which would fail every scrape.
func TestSpeakerServesProxyMetrics(t *testing.T) {
	t.Setenv("NODE_NAME", "node1")
	cmd, err := parseSpeaker(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	p := cmd.withProxy()
	m, err := speaker.NewMetricsFor(cmd.speaker)
	if err != nil {
		t.Fatal(err)
	}
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, mf := range mfs {
		count[mf.GetName()] = len(mf.GetMetric())
	}
	if count["go_goroutines"] != 1 || count["process_start_time_seconds"] != 1 || count["herald_proxy_sync_proxy_rules_last_timestamp_seconds"] != 1 || count["herald_build_info"] != 2 {
		t.Errorf("series per metric: %v", count)
	}
	// The proxy's own listener keeps kube-proxy's /metrics, runtime too.
	ep := registered(t, p.Metrics().Endpoint)
	for _, name := range []string{"go_goroutines", "herald_proxy_sync_proxy_rules_last_timestamp_seconds"} {
		if !ep.serves(name) {
			t.Errorf("the proxy's endpoint lacks %s", name)
		}
	}
}
