// Package status is `herald status`: for each LoadBalancer Service, its
// external IPs, the pool they came from and who announces each of them
// how, read from the API: Services, the speakers' ServiceAnnouncements
// and, for BGP Services with externalTrafficPolicy Cluster, their
// NodeAnnouncements with the configuration (cluster.go).
package status

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

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
	anns, err := listServiceAnnouncements(ctx, dyn, o.HeraldNamespace)
	if err != nil {
		return err
	}
	sums, noCRD, err := listNodeSummaries(ctx, dyn, o.HeraldNamespace)
	if err != nil {
		return err
	}
	objs, cfgObjs, err := listConfig(ctx, dyn, o.HeraldNamespace)
	if err != nil {
		return err
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
	if facts.DSRProblems, err = DSRProblems(ctx, kube, svcs, time.Now()); err != nil {
		return err
	}
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

// listServiceAnnouncements reads the speakers' ServiceAnnouncements in
// herald's namespace; one that does not decode is left out.
func listServiceAnnouncements(ctx context.Context, dyn dynamic.Interface, ns string) ([]v1beta1.ServiceAnnouncement, error) {
	ul, err := dyn.Resource(v1beta1.GroupVersion.WithResource("serviceannouncements")).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing ServiceAnnouncements in %s: %w", ns, err)
	}
	var anns []v1beta1.ServiceAnnouncement
	for _, u := range ul.Items {
		var a v1beta1.ServiceAnnouncement
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &a); err == nil {
			anns = append(anns, a)
		}
	}
	return anns, nil
}

// listConfig reads herald's configuration objects in its namespace: as
// status shows them (with their InForce and conditions), and raw by kind
// for ParseConfig.
func listConfig(ctx context.Context, dyn dynamic.Interface, ns string) ([]ConfigObject, map[string][]unstructured.Unstructured, error) {
	var objs []ConfigObject
	raw := map[string][]unstructured.Unstructured{}
	for _, k := range informer.Kinds {
		l, err := dyn.Resource(informer.GVR(k.Resource)).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, nil, fmt.Errorf("listing %s in %s: %w", k.Resource, ns, err)
		}
		raw[k.Kind] = l.Items
		for _, u := range l.Items {
			c := ConfigObject{Kind: k.Kind, Name: u.GetName(), Generation: u.GetGeneration()}
			var st v1beta1.ConfigStatus // the pools' status has the same two fields
			if s, ok := u.Object["status"].(map[string]any); ok {
				_ = runtime.DefaultUnstructuredConverter.FromUnstructured(s, &st)
			}
			c.InForce, c.Valid = st.InForce, apimeta.FindStatusCondition(st.Conditions, v1beta1.ConditionValid)
			c.Advertised = apimeta.FindStatusCondition(st.Conditions, lbapi.ConditionAdvertised)
			objs = append(objs, c)
		}
	}
	return objs, raw, nil
}
