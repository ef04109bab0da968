package cli

// docs/reference.md is generated from the code by this test: every flag
// of every subcommand (from `herald COMMAND -h`, the live flag sets),
// every herald metric (from the registries the components serve), and
// every annotation, label and taint herald reads or writes (from the
// constants, with a scan of the source for keys the table lacks). The
// test fails when the file differs; -update rewrites the generated parts:
//
//	go test ./cmd/herald/cli -run '^TestReference$' -update

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/herald-lb/herald/controller"
	"github.com/herald-lb/herald/internal/lbapi"
	"github.com/herald-lb/herald/internal/podsecurity"
	"github.com/herald-lb/herald/proxy"
	"github.com/herald-lb/herald/speaker"
	"github.com/herald-lb/herald/speaker/layer2/election"
)

const referencePath = "../../../docs/reference.md"

func TestReference(t *testing.T) {
	sections := map[string]string{
		"flags":       referenceFlags(t),
		"metrics":     referenceMetrics(t),
		"annotations": referenceAnnotations(t),
	}
	old, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(old)
	for _, name := range []string{"flags", "metrics", "annotations"} {
		begin, end := "<!-- generated: "+name+" -->\n", "<!-- end generated: "+name+" -->"
		i, j := strings.Index(doc, begin), strings.Index(doc, end)
		if i < 0 || j < i {
			t.Fatalf("%s: no %q ... %q markers", referencePath, strings.TrimSpace(begin), end)
		}
		doc = doc[:i+len(begin)] + sections[name] + doc[j:]
	}
	if doc == string(old) {
		return
	}
	if *updateGolden {
		if err := os.WriteFile(referencePath, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	a, b := strings.Split(string(old), "\n"), strings.Split(doc, "\n")
	for k := range min(len(a), len(b)) {
		if a[k] != b[k] {
			t.Fatalf("docs/reference.md differs from the code at line %d:\n  file: %s\n  code: %s\nrun: go test ./cmd/herald/cli -run '^TestReference$' -update", k+1, a[k], b[k])
		}
	}
	t.Fatalf("docs/reference.md differs from the code in length (%d lines, %d generated); run: go test ./cmd/herald/cli -run '^TestReference$' -update", len(a), len(b))
}

// clearEnv unsets what the components take defaults from, so that the
// reference does not depend on the machine that runs the test.
func clearEnv(t *testing.T) {
	for _, k := range []string{"POD_NAMESPACE", "POD_NAME", "POD_UID", "NODE_NAME", "NODE_IP", "KUBECONFIG", proxy.EnvClusterCIDR} {
		t.Setenv(k, "")
	}
}

type flagDoc struct{ short, name, arg, def, usage string }

var (
	flagLine   = regexp.MustCompile(`^  (?:-(\S), |    )--([^ \t]+)(?: ([^ \t]+))?$`)
	pkgDefault = regexp.MustCompile(`^(.*) \(default (.*)\)$`)
	ownDefault = regexp.MustCompile(`\s*\(default: ([^()]*(?:\([^()]*\)[^()]*)*)\)`)
)

// parseUsage reads a command's help: its text up to "Flags:", then the
// flags as internal/flagusage.Write lists them.
func parseUsage(t *testing.T, cmd, s string) (header string, flags []flagDoc) {
	head, list, ok := strings.Cut(strings.TrimRight(s, "\n"), "\nFlags:\n")
	if !ok {
		t.Fatalf("herald %s -h: no flags:\n%s", cmd, s)
	}
	for _, line := range strings.Split(list, "\n") {
		switch m := flagLine.FindStringSubmatch(line); {
		case m != nil:
			flags = append(flags, flagDoc{short: m[1], name: m[2], arg: m[3]})
		case strings.HasPrefix(line, "        ") && len(flags) > 0:
			f := &flags[len(flags)-1]
			f.usage = strings.TrimSpace(f.usage + " " + strings.TrimSpace(line))
		default:
			t.Fatalf("herald %s -h: cannot read %q", cmd, line)
		}
	}
	for i := range flags {
		f := &flags[i]
		if m := pkgDefault.FindStringSubmatch(f.usage); m != nil {
			f.usage, f.def = m[1], "`"+strings.Trim(m[2], `"`)+"`"
		} else if m := ownDefault.FindStringSubmatch(f.usage); m != nil {
			f.usage, f.def = strings.Replace(f.usage, m[0], "", 1), m[1]
		} else {
			switch f.arg {
			case "":
				f.def = "`false`"
			case "duration":
				f.def = "`0s`"
			case "int", "uint", "float":
				f.def = "`0`"
			}
		}
	}
	return strings.TrimSpace(head), flags
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func referenceFlags(t *testing.T) string {
	clearEnv(t)
	root := newRoot()
	var b strings.Builder
	for _, name := range order {
		if name == "version" {
			continue
		}
		var out strings.Builder
		if code := run([]string{name, "-h"}, &out, io.Discard); code != 0 {
			t.Fatalf("herald %s -h: exit %d", name, code)
		}
		header, flags := parseUsage(t, name, out.String())
		if len(flags) < 2 {
			t.Fatalf("herald %s -h lists no flag but -h:\n%s", name, out.String())
		}
		cmd, _, err := root.Find([]string{name})
		if err != nil {
			t.Fatal(err)
		}
		summary := cmd.Short
		fmt.Fprintf(&b, "### `herald %s`\n\n%s.\n\n```text\n%s\n```\n\n| flag | default | meaning |\n| --- | --- | --- |\n", name, strings.ToUpper(summary[:1])+summary[1:], header)
		for _, f := range flags {
			if f.name == "help" {
				continue // every command's
			}
			n := "`--" + f.name
			if f.short != "" {
				n = "`-" + f.short + ", --" + f.name
			}
			if f.arg != "" {
				n += " " + f.arg
			}
			fmt.Fprintf(&b, "| %s` | %s | %s |\n", n, cell(f.def), cell(f.usage))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// constMetricTypes are the types of the metrics whose collectors show
// them only with a running speaker (constant metrics made at scrape
// time); every other type comes from the registry or the collector.
var constMetricTypes = map[string]string{
	"herald_speaker_requests_received_total": "counter",
	"herald_speaker_responses_sent_total":    "counter",
	"herald_speaker_gratuitous_sent_total":   "counter",
	"herald_speaker_requests_ignored_total":  "counter",
	"herald_speaker_socket_errors_total":     "counter",
	"herald_speaker_bgp_session_up":          "gauge",
	"herald_speaker_bgp_bfd_up":              "gauge",
	"herald_speaker_bgp_prefixes_advertised": "gauge",
	"herald_speaker_bgp_prefixes_configured": "gauge",
	"herald_speaker_bgp_updates_sent_total":  "counter",
	"herald_speaker_bgp_session_flaps_total": "counter",
}

var descFields = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), unit: "[^"]*", constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}\}$`)

// descs lists what a collector describes.
func descs(c prometheus.Collector) []*prometheus.Desc {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	var out []*prometheus.Desc
	for d := range ch {
		out = append(out, d)
	}
	return out
}

type metricDoc struct{ name, typ, labels, help string }

// vectorTypes reads the types of the vectors among a Metrics struct's
// fields, which a registry shows only once they have series.
func vectorTypes(m any) map[string]string {
	out := map[string]string{}
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() != reflect.Pointer {
			continue
		}
		x := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface()
		var typ string
		switch x.(type) {
		case *prometheus.CounterVec:
			typ = "counter"
		case *prometheus.GaugeVec:
			typ = "gauge"
		case *prometheus.HistogramVec:
			typ = "histogram"
		case *prometheus.SummaryVec:
			typ = "summary"
		default:
			continue
		}
		for _, d := range descs(x.(prometheus.Collector)) {
			if m := descFields.FindStringSubmatch(d.String()); m != nil {
				name, _ := strconv.Unquote(m[1])
				out[name] = typ
			}
		}
	}
	return out
}

func metricDocs(t *testing.T, r *prometheus.Registry, vectors map[string]string, usedConst map[string]bool) []metricDoc {
	t.Helper()
	types := map[string]string{}
	mfs, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		types[mf.GetName()] = strings.ToLower(mf.GetType().String())
	}
	var out []metricDoc
	for _, d := range descs(r) {
		m := descFields.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read %s", d)
		}
		name, _ := strconv.Unquote(m[1])
		help, _ := strconv.Unquote(m[2])
		if !strings.HasPrefix(name, "herald_") {
			continue // Go runtime and process metrics
		}
		typ := types[name]
		if typ == "" {
			typ = vectors[name]
		}
		if typ == "" {
			typ = constMetricTypes[name]
			usedConst[name] = true
		}
		if typ == "" {
			t.Errorf("metric %s: no type known; add it to constMetricTypes", name)
		}
		labels := strings.Split(m[4], ",")
		for _, l := range strings.Split(m[3], ",") {
			// const labels by name: their values (the Go version, the
			// revision) are the build's
			labels = append(labels, strings.SplitN(l, "=", 2)[0])
		}
		labels = slices.DeleteFunc(labels, func(s string) bool { return s == "" })
		for i, l := range labels {
			labels[i] = "`" + l + "`"
		}
		out = append(out, metricDoc{name, typ, strings.Join(labels, ", "), help})
	}
	slices.SortFunc(out, func(a, b metricDoc) int { return strings.Compare(a.name, b.name) })
	return out
}

func referenceMetrics(t *testing.T) string {
	clearEnv(t)
	t.Setenv("NODE_NAME", "node1")
	cm := controller.NewMetrics()
	cmd, err := parseSpeaker([]string{"--proxy=false"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	sm, err := speaker.NewMetricsFor(cmd.speaker)
	if err != nil {
		t.Fatal(err)
	}
	po, err := proxy.ParseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	pm := proxy.New(po).Metrics()
	usedConst := map[string]bool{}
	var b strings.Builder
	for _, c := range []struct {
		title string
		r     *prometheus.Registry
		m     any
	}{
		{"controller (`herald controller`, `--metrics-addr`, `:7472`)", cm.Registry, cm},
		{"speaker (`herald speaker`, `--metrics-addr`, `:7473`; with the proxy in its process, the proxy's metrics too)", sm.Registry, sm},
		{"proxy (`herald proxy`, `--metrics-bind-address`; in the speaker's process also the speaker's `--metrics-addr`)", pm.Registry, pm},
	} {
		fmt.Fprintf(&b, "### %s\n\n| metric | type | labels | help |\n| --- | --- | --- | --- |\n", c.title)
		for _, d := range metricDocs(t, c.r, vectorTypes(c.m), usedConst) {
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", d.name, d.typ, d.labels, cell(d.help))
		}
		b.WriteString("\n")
	}
	for name := range constMetricTypes {
		if !usedConst[name] {
			t.Errorf("constMetricTypes: %s is not a metric whose type is otherwise unknown; remove it", name)
		}
	}
	return b.String()
}

// A keyDoc is an annotation, label or taint herald reads or writes.
type keyDoc struct{ key, kind, on, use string }

func referenceKeys() []keyDoc {
	keys := []keyDoc{
		{lbapi.AnnotationLoadBalancerIPs, "annotation", "Service", "read by the controller: the addresses to assign (one, or one per family, comma-separated)"},
		{lbapi.AnnotationAddressPool, "annotation", "Service", "read by the controller: the pool to assign from"},
		{lbapi.AnnotationAllowSharedIP, "annotation", "Service", "read by the controller: the sharing key; Services with the same key may share an address"},
		{lbapi.AnnotationAllocatedFromPool, "annotation", "Service", "written by the controller (with `status.loadBalancer.ingress`): the pool of the Service's addresses; read by the speakers and `herald status`"},
		{proxy.AnnotationForwarding, "annotation", "Service", "read by the proxy: `dsr` forwards the Service's load-balancer traffic by direct server return (nftables mode with `--dsr`; docs/dsr.md), `snat` (the default) as kube-proxy does"},
		{lbapi.AnnotationDrain, "annotation", "Node", "written by `herald drain` (`" + lbapi.DrainValue + "`; removed by `--undo`), read by the node's speaker: hand the node's addresses over before maintenance"},
		{speaker.LabelServiceNamespace, "label", "ServiceAnnouncement", "written by the speaker: the Service's namespace"},
		{speaker.LabelServiceName, "label", "ServiceAnnouncement", "written by the speaker: the Service's name"},
		{speaker.LabelNode, "label", "ServiceAnnouncement", "written by the speaker: the announcing node (for `kubectl get -l`)"},
		{speaker.AnnotationNode, "annotation", "ServiceAnnouncement", "written by the speaker: the announcing node, whole (a node name may be longer than a label value)"},
		{"app.kubernetes.io/name", "label", "Secrets `herald-memberlist`, `herald-bgp-passwords`, Lease `herald-speakers`, ServiceAnnouncements, NodeAnnouncements", "written with the value `herald` on the objects herald creates"},
		{podsecurity.EnforceLabel, "label", "Namespace", "written by `herald label-namespace` (the chart's hook) on herald's namespace"},
		{podsecurity.AuditLabel, "label", "Namespace", "written by `herald label-namespace`, as the one above"},
		{podsecurity.WarnLabel, "label", "Namespace", "written by `herald label-namespace`, as the one above"},
		{election.ExcludeLabel, "label", "Node", "read by the speaker: a labelled node announces nothing, unless `--ignore-exclude-lb`"},
		{"node.kubernetes.io/out-of-service", "taint", "Node", "read by the speaker at its stop: on such a node it hands its addresses over instead of keeping them for a restart in place"},
		{proxy.TaintToBeDeleted, "taint", "Node", "read by the proxy: its `/healthz` answers 503 on a node the cluster autoscaler is deleting"},
		{corev1.LabelTopologyZone, "label", "Node", "read by the proxy: this node's zone, for the EndpointSlices' zone hints"},
		{proxy.LabelServiceProxyName, "label", "Service, EndpointSlice", "read by the proxy and the speaker: a Service another proxy serves; herald's proxy writes no rules for it and the speaker does not wait for them"},
		{proxy.LabelHeadless, "label", "EndpointSlice", "read by the proxy: a headless Service's slices, left out"},
		{discoveryv1.LabelServiceName, "label", "EndpointSlice", "read by the proxy, the speaker and `herald status`: the slice's Service"},
		{corev1.EndpointsLastChangeTriggerTime, "annotation", "EndpointSlice", "read by the proxy: the start of `herald_proxy_network_programming_duration_seconds`"},
		{"app.kubernetes.io/instance", "label", "MetalLB's objects", "read by `herald migrate`: a tool's ownership label, not copied to herald's objects"},
		{"app.kubernetes.io/managed-by", "label", "MetalLB's objects", "read by `herald migrate`, as the one above"},
	}
	for _, name := range []string{lbapi.AnnotationLoadBalancerIPs, lbapi.AnnotationAddressPool, lbapi.AnnotationAllowSharedIP} {
		for _, alias := range lbapi.AnnotationAliases[name] {
			keys = append(keys, keyDoc{alias, "annotation", "Service", "MetalLB's name, read by the controller as `" + name + "` when that is not set"})
		}
	}
	return keys
}

var keyLiteral = regexp.MustCompile(`"((?:[a-z0-9-]+\.)*(?:herald\.io|kubernetes\.io|metallb\.io|metallb\.universe\.tf)/[A-Za-z0-9._-]+)"`)

func referenceAnnotations(t *testing.T) string {
	keys := referenceKeys()
	known := map[string]bool{}
	for _, k := range keys {
		known[k.key] = true
	}
	// Every such key written in the code (outside tests and the lab) is
	// in the table, so a new one fails here until it is documented.
	root := "../../.."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "e2e" || rel == "bin" || path != root && strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasPrefix(d.Name(), "zz_generated") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range keyLiteral.FindAllSubmatch(src, -1) {
			if k := string(m[1]); !known[k] && !strings.HasPrefix(k, "herald.io/v") {
				t.Errorf("%s: %q is not in the reference's table (referenceKeys)", rel, k)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.WriteString("| key | kind | on | use |\n| --- | --- | --- | --- |\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", k.key, k.kind, k.on, cell(k.use))
	}
	b.WriteString("\n")
	return b.String()
}
