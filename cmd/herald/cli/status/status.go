// Package status is `herald status`: for each LoadBalancer Service, its
// external IPs, the pool they came from and who announces each of them
// how, read from the API: Services, the speakers' ServiceAnnouncements
// and, for BGP Services with externalTrafficPolicy Cluster, their
// NodeAnnouncements with the configuration (cluster.go).
package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/config/informer"
	"github.com/herald-lb/herald/config/v1beta1"
	"github.com/herald-lb/herald/internal/flagusage"
	"github.com/herald-lb/herald/internal/kubeclient"
	"github.com/herald-lb/herald/internal/lbapi"
)

// Options configure `herald status`.
type Options struct {
	Cluster kubeclient.Flags
	// Output is the format: text (a table), json or yaml.
	Output string
	// BGP: `herald status bgp`, the speakers' BGP sessions.
	BGP bool
	// HeraldNamespace holds the ServiceAnnouncements, NodeAnnouncements
	// and configuration.
	HeraldNamespace string
	// LBClass is the spec.loadBalancerClass herald handles, as the
	// controller's and the speakers' --lb-class: "" for Services without
	// a class.
	LBClass string
	// Namespace and Name select Services; empty means all.
	Namespace, Name string
	// AllNamespaces is -A: Services of every namespace, which is also
	// what no -n and no Service name give.
	AllNamespaces bool
}

// Usage is the synopsis of `herald status`, after "herald ".
const Usage = "status [NAMESPACE/NAME | NAME] [flags]\nstatus bgp [flags]"

// Description says what `herald status` shows.
const Description = `Shows each LoadBalancer Service's external IPs, their pool, and which node announces
each IP, how and on which interfaces or to which BGP peers (from the speakers'
ServiceAnnouncements and, for BGP Services with externalTrafficPolicy Cluster, their
NodeAnnouncements). Without NAME and -n it lists the Services of every namespace (as -A);
NAME without a namespace is a Service of namespace default, or of -n.
` + "`herald status bgp`" + ` shows each speaker's BGP sessions (state, BFD, prefixes), read from
the speakers' metrics through the API server (get on pods/proxy in herald's namespace).`

// Flags defines the flags of `herald status` on fs, into o.
func Flags(fs *pflag.FlagSet, o *Options) {
	o.Cluster.Register(fs)
	fs.StringVarP(&o.Output, "output", "o", "text", "output format: text, json or yaml")
	fs.StringVarP(&o.Namespace, "namespace", "n", "", "the Services' namespace: only Services of this namespace, or NAME's (default: every namespace; with NAME, default)")
	fs.BoolVarP(&o.AllNamespaces, "all-namespaces", "A", false, "Services of every namespace (what no -n and no NAME give too)")
	fs.StringVar(&o.HeraldNamespace, "herald-namespace", "herald-system", "herald's namespace, where the ServiceAnnouncements, NodeAnnouncements and configuration are")
	fs.StringVar(&o.LBClass, "lb-class", "", "the spec.loadBalancerClass herald handles, as the controller's and the speakers' --lb-class (default: Services without a class)")
}

// ParseFlags reads `herald status [NAMESPACE/NAME | NAME] [flags]`, or
// `herald status bgp [flags]`: flags before and after the arguments.
func ParseFlags(args []string, out io.Writer) (Options, error) {
	var o Options
	err := flagusage.ParseArgs("status", args, out, func(fs *pflag.FlagSet) func([]string) error {
		Flags(fs, &o)
		return o.Complete
	})
	return o, err
}

// Complete reads the arguments left once the flags are parsed: bgp, or
// the Service, and checks the options.
func (o *Options) Complete(pos []string) error {
	switch o.Output {
	case "text", "json", "yaml":
	default:
		return fmt.Errorf("-o %q: use text, json or yaml", o.Output)
	}
	if len(pos) > 0 && pos[0] == "bgp" {
		// `herald status bgp`, the flags before or after it (a Service
		// called bgp is default/bgp).
		o.BGP, pos = true, pos[1:]
	}
	if o.BGP {
		switch {
		case len(pos) > 0:
			return fmt.Errorf("herald status bgp takes no Service, got %q", pos)
		case o.Namespace != "" || o.AllNamespaces:
			return errors.New("herald status bgp lists every speaker's sessions: -n and -A do not apply")
		}
		return nil
	}
	if o.AllNamespaces && o.Namespace != "" {
		return errors.New("-A and -n: give one of them")
	}
	switch len(pos) {
	case 0:
	case 1:
		arg := pos[0]
		if o.AllNamespaces {
			return fmt.Errorf("-A lists every Service; it takes no Service name, got %q", arg)
		}
		if ns, name, ok := strings.Cut(arg, "/"); ok {
			if o.Namespace != "" && o.Namespace != ns {
				return fmt.Errorf("%q names namespace %s, -n says %s", arg, ns, o.Namespace)
			}
			o.Namespace, o.Name = ns, name
		} else {
			o.Name = arg
			if o.Namespace == "" {
				o.Namespace = "default"
			}
		}
		if o.Name == "" || o.Namespace == "" {
			return fmt.Errorf("%q: give NAMESPACE/NAME or NAME", arg)
		}
	default:
		return fmt.Errorf("at most one Service, got %d arguments", len(pos))
	}
	return nil
}

// Run prints the status to out.
func Run(ctx context.Context, o Options, out io.Writer) error {
	rc, err := o.Cluster.Config()
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	if o.BGP {
		return RunBGP(ctx, o, kube, out)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	return run(ctx, o, kube, dyn, out)
}

func run(ctx context.Context, o Options, kube kubernetes.Interface, dyn dynamic.Interface, out io.Writer) error {
	var svcs []corev1.Service
	if o.Name != "" {
		s, err := kube.CoreV1().Services(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s.Spec.Type != corev1.ServiceTypeLoadBalancer {
			return fmt.Errorf("service %s/%s is of type %s, not LoadBalancer", o.Namespace, o.Name, s.Spec.Type)
		}
		svcs = []corev1.Service{*s}
	}
	// Every Service: the configuration in force depends on the addresses
	// they hold, and an address may be shared across namespaces.
	all, err := kube.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing Services: %w", err)
	}
	if o.Name == "" {
		for _, s := range all.Items {
			if o.Namespace == "" || s.Namespace == o.Namespace {
				svcs = append(svcs, s)
			}
		}
	}
	ul, err := dyn.Resource(v1beta1.GroupVersion.WithResource("serviceannouncements")).Namespace(o.HeraldNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing ServiceAnnouncements in %s: %w", o.HeraldNamespace, err)
	}
	var anns []v1beta1.ServiceAnnouncement
	for _, u := range ul.Items {
		var a v1beta1.ServiceAnnouncement
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &a); err == nil {
			anns = append(anns, a)
		}
	}
	sums, noCRD, err := listNodeSummaries(ctx, dyn, o.HeraldNamespace)
	if err != nil {
		return err
	}
	var objs []ConfigObject
	cfgObjs := map[string][]unstructured.Unstructured{}
	for _, k := range informer.Kinds {
		l, err := dyn.Resource(informer.GVR(k.Resource)).Namespace(o.HeraldNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("listing %s in %s: %w", k.Resource, o.HeraldNamespace, err)
		}
		cfgObjs[k.Kind] = l.Items
		for _, u := range l.Items {
			c := ConfigObject{Kind: k.Kind, Name: u.GetName(), Generation: u.GetGeneration()}
			var st v1beta1.ConfigStatus // the pools' status has the same two fields
			if raw, ok := u.Object["status"].(map[string]any); ok {
				_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st)
			}
			c.InForce, c.Valid = st.InForce, apimeta.FindStatusCondition(st.Conditions, v1beta1.ConditionValid)
			c.Advertised = apimeta.FindStatusCondition(st.Conditions, lbapi.ConditionAdvertised)
			objs = append(objs, c)
		}
	}
	facts := Facts{Unadvertised: map[string]string{}}
	for _, c := range objs {
		if c.Kind == config.KindIPAddressPool && c.Advertised != nil && c.Advertised.Status == metav1.ConditionFalse {
			facts.Unadvertised[c.Name] = c.Advertised.Message
		}
	}
	// The Services whose addresses are resolved: those shown and those
	// sharing an address with them, with their EndpointSlices.
	sharing := sharingWith(all.Items, svcs, o.LBClass)
	var eps []discoveryv1.EndpointSlice
	for _, ns := range namespaces(o.Namespace, sharing) {
		l, err := kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			where := "all namespaces"
			if ns != "" {
				where = ns
			}
			return fmt.Errorf("listing EndpointSlices in %s: %w", where, err)
		}
		eps = append(eps, l.Items...)
	}
	facts.ReadyEndpoints = readyEndpoints(eps)
	cfg := ParseConfig(o.HeraldNamespace, cfgObjs, all.Items, o.LBClass)
	facts.Cluster = ResolveCluster(cfg, ViewServices(sharing, o.LBClass, eps), sums)
	report := Report{Services: BuildWith(svcs, anns, facts), Configuration: BuildConfig(objs)}
	if noCRD {
		report.Warnings = append(report.Warnings, WarningNoNodeAnnouncementCRD)
	}
	var warn string
	if report.Drained, warn = DrainedNodes(ctx, kube); warn != "" {
		report.Warnings = append(report.Warnings, warn)
	}
	if o.Output == "json" || o.Output == "yaml" {
		return writeData(out, o.Output, report)
	}
	if err := renderText(out, report.Services); err != nil {
		return err
	}
	if err := renderDrainedText(out, report.Drained); err != nil {
		return err
	}
	for _, w := range report.Warnings {
		if _, err := fmt.Fprintln(out, "warning: "+w); err != nil {
			return err
		}
	}
	return renderConfigText(out, report.Configuration)
}

// writeData writes v as JSON (indented) or YAML, as -o asks.
func writeData(out io.Writer, format string, v any) error {
	if format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	data, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	_, err = out.Write(data)
	return err
}

// Report is `herald status -o json|yaml`.
type Report struct {
	Services []ServiceStatus `json:"services"`
	// Configuration lists the objects herald does not use as written.
	Configuration []ConfigIssue `json:"configuration,omitempty"`
	// Warnings say what status could not read, and what that hides.
	Warnings []string `json:"warnings,omitempty"`
	// Drained are the nodes herald drain marked.
	Drained []DrainedNode `json:"drainedNodes,omitempty"`
}

// ConfigIssue is a configuration object herald does not use as written.
type ConfigIssue struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	// State is "in force: generation N, refused: generation M", or
	// "not in force" for an object left out.
	State   string `json:"state"`
	Message string `json:"message"`
}

// readyEndpoints counts the ready endpoints of each Service
// ("namespace/name") in its EndpointSlices.
func readyEndpoints(slices []discoveryv1.EndpointSlice) map[string]int {
	out := map[string]int{}
	for _, sl := range slices {
		svc := sl.Labels[discoveryv1.LabelServiceName]
		if svc == "" {
			continue
		}
		key := sl.Namespace + "/" + svc
		out[key] += 0
		for _, ep := range sl.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				out[key]++
			}
		}
	}
	return out
}

// ConfigObject is what `herald status` shows of a configuration object.
type ConfigObject struct {
	Kind, Name string
	Generation int64
	InForce    *v1beta1.InForce
	Valid      *metav1.Condition
	// Advertised is a pool's Advertised condition.
	Advertised *metav1.Condition
}

// BuildConfig picks the configuration objects herald does not use as
// written: a refused edit with the version kept in force, or an object
// left out, sorted by kind and name.
func BuildConfig(objs []ConfigObject) []ConfigIssue {
	var out []ConfigIssue
	for _, o := range objs {
		if o.Valid == nil || o.Valid.Status == metav1.ConditionTrue || o.Valid.Reason == lbapi.ReasonPartlyIgnored {
			continue
		}
		// The controller's verdict, worded as the parser words it.
		st := config.ObjectState{Generation: o.Generation}
		if o.InForce != nil && o.Valid.Reason == lbapi.ReasonEditRefused {
			st.InForce, st.Stale = o.InForce.Generation, true
		}
		out = append(out, ConfigIssue{Kind: o.Kind, Name: o.Name, State: st.Describe(), Message: o.Valid.Message})
	}
	slices.SortFunc(out, func(a, b ConfigIssue) int { return strings.Compare(a.Kind+"/"+a.Name, b.Kind+"/"+b.Name) })
	return out
}

// RenderConfig lists the configuration objects herald does not use as
// written: a refused edit with the version kept in force, or an object
// left out. Nothing is printed when every object is in use.
func RenderConfig(out io.Writer, objs []ConfigObject) error {
	return renderConfigText(out, BuildConfig(objs))
}

func renderConfigText(out io.Writer, issues []ConfigIssue) error {
	if len(issues) == 0 {
		return nil
	}
	if _, err := fmt.Fprintln(out, "\nConfiguration herald does not use as written (kubectl describe shows the events):"); err != nil {
		return err
	}
	for _, c := range issues {
		if _, err := fmt.Fprintf(out, "  %s %s: %s\n    %s\n", c.Kind, c.Name, c.State, c.Message); err != nil {
			return err
		}
	}
	return nil
}

// Announcer is one node announcing an address, and how.
type Announcer struct {
	Node       string   `json:"node"`
	Protocol   string   `json:"protocol"`
	Interfaces []string `json:"interfaces,omitempty"`
	Peers      []string `json:"peers,omitempty"`
}

func (a Announcer) String() string {
	how := a.Node + " (" + a.Protocol
	switch {
	case len(a.Interfaces) > 0:
		how += " on " + strings.Join(a.Interfaces, ",")
	case len(a.Peers) > 0:
		how += " to " + strings.Join(a.Peers, ",")
	}
	return how + ")"
}

// Address is one external IP of a Service and who announces it.
type Address struct {
	IP          string      `json:"ip"`
	AnnouncedBy []Announcer `json:"announcedBy"`
	// Problem says what is wrong: nobody announces the address, or more
	// than one node does over layer 2.
	Problem string `json:"problem,omitempty"`
	// Reasons are why nobody announces it, as the speakers published
	// them in their ServiceAnnouncements (status.unannounced).
	Reasons []Reason `json:"reasons,omitempty"`
}

// Reason is a speaker's reason for not announcing an address.
type Reason struct {
	// Node is the speaker that published it: the one that won the
	// address but cannot announce it, or the one reporting for all.
	Node     string `json:"node"`
	Protocol string `json:"protocol"`
	Reason   string `json:"reason"`
	Detail   string `json:"detail,omitempty"`
}

func (r Reason) String() string {
	s := r.Protocol + ": " + r.Reason
	if r.Detail != "" {
		s += " (" + r.Detail + ")"
	}
	return s
}

// ServiceStatus is what `herald status` shows of one LoadBalancer
// Service.
type ServiceStatus struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Pool is the herald.io/ip-allocated-from-pool annotation.
	Pool   string `json:"pool,omitempty"`
	Policy string `json:"externalTrafficPolicy"`
	// Pending says why the Service has no address yet.
	Pending   string    `json:"pending,omitempty"`
	Addresses []Address `json:"addresses,omitempty"`
}

// Problems of an address, as Build words them.
const (
	ProblemNobody      = "nobody announces it (no speaker published a reason: see the speakers' logs)"
	ProblemTwoOverL2   = "more than one node announces it over layer 2"
	textNobody         = "nobody (no speaker published a reason: see the speakers' logs)"
	textMoreThanOneL2  = "  <- more than one node over layer 2"
	pendingNoClassText = "<pending>"
)

// Build gathers, for each LoadBalancer Service (sorted by namespace and
// name), its addresses and the nodes announcing each from the
// ServiceAnnouncements. An address nobody announces says so; one that
// two nodes claim over layer 2 (a moment during a failover, or a
// partition) lists both.
func Build(svcs []corev1.Service, anns []v1beta1.ServiceAnnouncement) []ServiceStatus {
	return BuildWith(svcs, anns, Facts{})
}

// Facts are what the API tells besides the ServiceAnnouncements: who
// advertises the addresses of BGP Services with externalTrafficPolicy
// Cluster, and why nobody announces an address.
type Facts struct {
	// Cluster are the nodes advertising the addresses of Services with
	// externalTrafficPolicy Cluster over BGP, resolved from the
	// NodeAnnouncements (ResolveCluster), by Service and address.
	Cluster map[ServiceIP]Resolved
	// Unadvertised maps the pools no advertisement selects to the
	// message of their Advertised condition (the controller's).
	Unadvertised map[string]string
	// ReadyEndpoints counts each Service's ready endpoints
	// ("namespace/name"), from its EndpointSlices; nil when unknown.
	ReadyEndpoints map[string]int
}

// nobodyBecause is why nobody announces the address of s, when the facts
// tell: its pool is advertised by nothing, or under
// externalTrafficPolicy Local no node has a ready endpoint.
func (f Facts) nobodyBecause(s ServiceStatus) string {
	if msg, ok := f.Unadvertised[s.Pool]; ok && s.Pool != "" {
		if msg == "" {
			msg = "no L2Advertisement or BGPAdvertisement selects it"
		}
		return "pool " + s.Pool + ": " + msg
	}
	if f.ReadyEndpoints != nil && s.Policy == string(corev1.ServiceExternalTrafficPolicyLocal) && f.ReadyEndpoints[s.Namespace+"/"+s.Name] == 0 {
		return "externalTrafficPolicy is Local and no node has a ready endpoint"
	}
	return ""
}

// BuildWith is Build with the facts that explain an address nobody
// announces.
func BuildWith(svcs []corev1.Service, anns []v1beta1.ServiceAnnouncement, facts Facts) []ServiceStatus {
	svcs = slices.Clone(svcs)
	slices.SortFunc(svcs, func(a, b corev1.Service) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	type key struct{ ns, name, ip string }
	by := map[key][]Announcer{}
	reasons := map[key][]Reason{}
	for _, a := range anns {
		who := Announcer{Node: a.Status.Node, Protocol: string(a.Status.Protocol), Interfaces: a.Status.Interfaces, Peers: a.Status.Peers}
		for _, ip := range a.Status.IPs {
			k := key{a.Status.Service.Namespace, a.Status.Service.Name, canonical(ip)}
			by[k] = append(by[k], who)
		}
		for _, u := range a.Status.Unannounced {
			k := key{a.Status.Service.Namespace, a.Status.Service.Name, canonical(u.IP)}
			reasons[k] = append(reasons[k], Reason{Node: a.Status.Node, Protocol: string(a.Status.Protocol), Reason: u.Reason, Detail: u.Detail})
		}
	}
	out := []ServiceStatus{}
	for _, s := range svcs {
		if s.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		st := ServiceStatus{Namespace: s.Namespace, Name: s.Name, Pool: s.Annotations[lbapi.AnnotationAllocatedFromPool],
			Policy: string(s.Spec.ExternalTrafficPolicy)}
		if st.Policy == "" {
			st.Policy = string(corev1.ServiceExternalTrafficPolicyCluster)
		}
		for _, in := range s.Status.LoadBalancer.Ingress {
			if in.IP == "" {
				continue
			}
			who := append([]Announcer{}, by[key{s.Namespace, s.Name, canonical(in.IP)}]...)
			var resolved Resolved
			if a, err := netip.ParseAddr(in.IP); err == nil {
				resolved = facts.Cluster[ServiceIP{s.Namespace, s.Name, a.Unmap()}]
				who = withResolved(who, resolved)
			}
			slices.SortFunc(who, func(a, b Announcer) int { return strings.Compare(a.String(), b.String()) })
			addr := Address{IP: in.IP, AnnouncedBy: who}
			switch {
			case len(who) == 0:
				addr.Reasons = sortedReasons(reasons[key{s.Namespace, s.Name, canonical(in.IP)}])
				addr.Problem = ProblemNobody
				why := facts.nobodyBecause(st)
				if why == "" && len(addr.Reasons) > 0 {
					var parts []string
					for _, r := range addr.Reasons {
						parts = append(parts, r.String())
					}
					why = strings.Join(slices.Compact(parts), "; ")
				}
				if why == "" {
					why = resolved.Why
				}
				if why != "" {
					addr.Problem = "nobody announces it: " + why
				}
			case layer2Claims(who) > 1:
				// Over BGP many nodes advertise at once (ECMP); over
				// layer 2 only one may answer ARP/NDP.
				addr.Problem = ProblemTwoOverL2
			}
			st.Addresses = append(st.Addresses, addr)
		}
		if len(st.Addresses) == 0 {
			st.Pending = "no address assigned yet"
			if s.Spec.LoadBalancerClass != nil {
				st.Pending = "loadBalancerClass " + *s.Spec.LoadBalancerClass
			}
		}
		out = append(out, st)
	}
	return out
}

// sortedReasons orders the reasons by protocol, node and text, each once.
func sortedReasons(rs []Reason) []Reason {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b Reason) int {
		return strings.Compare(a.Protocol+"\x00"+a.Node+"\x00"+a.Reason+"\x00"+a.Detail, b.Protocol+"\x00"+b.Node+"\x00"+b.Reason+"\x00"+b.Detail)
	})
	return slices.Compact(rs)
}

// Render writes one line per LoadBalancer Service IP: the pool, the
// traffic policy and who announces it (node, protocol, interfaces or
// peers). An IP nobody announces says so; one that two nodes claim (a
// moment during a failover, or a partition) lists both.
func Render(out io.Writer, svcs []corev1.Service, anns []v1beta1.ServiceAnnouncement) error {
	return renderText(out, Build(svcs, anns))
}

func renderText(out io.Writer, sts []ServiceStatus) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tSERVICE\tIP\tPOOL\tPOLICY\tANNOUNCED BY")
	for _, s := range sts {
		pool := s.Pool
		if pool == "" {
			pool = "-"
		}
		if len(s.Addresses) == 0 {
			why := pendingNoClassText
			if strings.HasPrefix(s.Pending, "loadBalancerClass ") {
				why = "<pending> (" + s.Pending + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Namespace, s.Name, why, pool, s.Policy, "-")
			continue
		}
		for _, a := range s.Addresses {
			text := announcersText(a.AnnouncedBy)
			switch {
			case a.Problem == ProblemNobody:
				text = textNobody
			case strings.HasPrefix(a.Problem, "nobody announces it: "):
				text = "nobody: " + strings.TrimPrefix(a.Problem, "nobody announces it: ")
			case a.Problem == ProblemTwoOverL2:
				text += textMoreThanOneL2
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Namespace, s.Name, a.IP, pool, s.Policy, text)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(sts) == 0 {
		_, err := fmt.Fprintln(out, "no LoadBalancer Services")
		return err
	}
	return nil
}

// canonical makes "2001:db8::0200" and "2001:db8::200" one key.
func canonical(ip string) string {
	if a, err := netip.ParseAddr(ip); err == nil {
		return a.Unmap().String()
	}
	return ip
}

// layer2Claims counts the layer-2 announcers.
func layer2Claims(who []Announcer) int {
	n := 0
	for _, w := range who {
		if w.Protocol == string(v1beta1.ProtocolLayer2) {
			n++
		}
	}
	return n
}
