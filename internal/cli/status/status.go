// Package status is `herald status`: for each LoadBalancer Service, its
// external IPs, the pool they came from and who announces each of them
// how, read from the API (Services and the speakers' ServiceAnnouncement
// objects).
package status

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	// HeraldNamespace holds the ServiceAnnouncements.
	HeraldNamespace string
	// Namespace and Name select Services; empty means all.
	Namespace, Name string
}

// ParseFlags reads `herald status [flags] [NAMESPACE/NAME | NAME]`.
func ParseFlags(args []string, out io.Writer) (Options, error) {
	o := Options{HeraldNamespace: "herald-system"}
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(out)
	o.Cluster.Register(fs)
	fs.StringVar(&o.Namespace, "n", "", "only Services of this namespace (default: all)")
	fs.StringVar(&o.HeraldNamespace, "herald-namespace", o.HeraldNamespace, "herald's namespace, where the ServiceAnnouncements are")
	fs.Usage = func() {
		fmt.Fprintln(out, "usage: herald status [flags] [NAMESPACE/NAME | NAME]\n\nShows each LoadBalancer Service's external IPs, their pool, and which node announces\neach IP, how and on which interfaces (from the speakers' ServiceAnnouncements).")
		flagusage.PrintDefaults(out, fs)
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch fs.NArg() {
	case 0:
	case 1:
		arg := fs.Arg(0)
		if ns, name, ok := strings.Cut(arg, "/"); ok {
			if o.Namespace != "" && o.Namespace != ns {
				return o, fmt.Errorf("%q names namespace %s, -n says %s", arg, ns, o.Namespace)
			}
			o.Namespace, o.Name = ns, name
		} else {
			o.Name = arg
			if o.Namespace == "" {
				o.Namespace = "default"
			}
		}
		if o.Name == "" || o.Namespace == "" {
			return o, fmt.Errorf("%q: give NAMESPACE/NAME or NAME", arg)
		}
	default:
		return o, fmt.Errorf("at most one Service, got %d arguments", fs.NArg())
	}
	return o, nil
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
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
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
	} else {
		l, err := kube.CoreV1().Services(o.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		svcs = l.Items
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
	if err := Render(out, svcs, anns); err != nil {
		return err
	}
	var objs []ConfigObject
	for _, k := range informer.Kinds {
		l, err := dyn.Resource(informer.GVR(k.Resource)).Namespace(o.HeraldNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("listing %s in %s: %w", k.Resource, o.HeraldNamespace, err)
		}
		for _, u := range l.Items {
			c := ConfigObject{Kind: k.Kind, Name: u.GetName(), Generation: u.GetGeneration()}
			var st v1beta1.ConfigStatus // the pools' status has the same two fields
			if raw, ok := u.Object["status"].(map[string]any); ok {
				_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st)
			}
			c.InForce, c.Valid = st.InForce, apimeta.FindStatusCondition(st.Conditions, v1beta1.ConditionValid)
			objs = append(objs, c)
		}
	}
	return RenderConfig(out, objs)
}

// ConfigObject is what `herald status` shows of a configuration object.
type ConfigObject struct {
	Kind, Name string
	Generation int64
	InForce    *v1beta1.InForce
	Valid      *metav1.Condition
}

// RenderConfig lists the configuration objects herald does not use as
// written: a refused edit with the version kept in force, or an object
// left out. Nothing is printed when every object is in use.
func RenderConfig(out io.Writer, objs []ConfigObject) error {
	var lines []string
	for _, o := range objs {
		if o.Valid == nil || o.Valid.Status == metav1.ConditionTrue || o.Valid.Reason == lbapi.ReasonPartlyIgnored {
			continue
		}
		// The controller's verdict, worded as the parser words it.
		st := config.ObjectState{Generation: o.Generation}
		if o.InForce != nil && o.Valid.Reason == lbapi.ReasonEditRefused {
			st.InForce, st.Stale = o.InForce.Generation, true
		}
		lines = append(lines, fmt.Sprintf("%s %s: %s\n    %s", o.Kind, o.Name, st.Describe(), o.Valid.Message))
	}
	if len(lines) == 0 {
		return nil
	}
	slices.Sort(lines)
	if _, err := fmt.Fprintln(out, "\nConfiguration herald does not use as written (kubectl describe shows the events):"); err != nil {
		return err
	}
	for _, l := range lines {
		if _, err := fmt.Fprintln(out, "  "+l); err != nil {
			return err
		}
	}
	return nil
}

// Render writes one line per LoadBalancer Service IP: the pool, the
// traffic policy and who announces it (node, protocol, interfaces or
// peers). An IP nobody announces says so; one that two nodes claim (a
// moment during a failover, or a partition) lists both.
func Render(out io.Writer, svcs []corev1.Service, anns []v1beta1.ServiceAnnouncement) error {
	svcs = slices.Clone(svcs)
	slices.SortFunc(svcs, func(a, b corev1.Service) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	type key struct{ ns, name, ip string }
	by := map[key][]string{}
	for _, a := range anns {
		how := a.Status.Node + " (" + string(a.Status.Protocol)
		switch {
		case len(a.Status.Interfaces) > 0:
			how += " on " + strings.Join(a.Status.Interfaces, ",")
		case len(a.Status.Peers) > 0:
			how += " to " + strings.Join(a.Status.Peers, ",")
		}
		how += ")"
		for _, ip := range a.Status.IPs {
			k := key{a.Status.Service.Namespace, a.Status.Service.Name, canonical(ip)}
			by[k] = append(by[k], how)
		}
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tSERVICE\tIP\tPOOL\tPOLICY\tANNOUNCED BY")
	n := 0
	for _, s := range svcs {
		if s.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		n++
		pool := s.Annotations[lbapi.AnnotationAllocatedFromPool]
		if pool == "" {
			pool = "-"
		}
		policy := string(s.Spec.ExternalTrafficPolicy)
		if policy == "" {
			policy = string(corev1.ServiceExternalTrafficPolicyCluster)
		}
		var ips []string
		for _, in := range s.Status.LoadBalancer.Ingress {
			if in.IP != "" {
				ips = append(ips, in.IP)
			}
		}
		if len(ips) == 0 {
			why := "<pending>"
			if s.Spec.LoadBalancerClass != nil {
				why = "<pending> (loadBalancerClass " + *s.Spec.LoadBalancerClass + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Namespace, s.Name, why, pool, policy, "-")
			continue
		}
		for _, ip := range ips {
			who := by[key{s.Namespace, s.Name, canonical(ip)}]
			slices.Sort(who)
			text := strings.Join(who, ", ")
			switch {
			case len(who) == 0:
				text = "nobody (see the speakers' logs: no eligible node, or no advertisement)"
			case layer2Claims(who) > 1:
				// Over BGP many nodes advertise at once (ECMP); over
				// layer 2 only one may answer ARP/NDP.
				text += "  <- more than one node over layer 2"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Namespace, s.Name, ip, pool, policy, text)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n == 0 {
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

// Main is the command: it exits 2 on a bad command line, 1 on failure.
func Main(ctx context.Context, args []string) int {
	o, err := ParseFlags(args, flagusage.Output(args))
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "herald status: %v\n", err)
		return 2
	}
	if err := Run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "herald status: %v\n", err)
		return 1
	}
	return 0
}

// layer2Claims counts the layer-2 announcers in Render's "node (protocol
// ...)" descriptions.
func layer2Claims(who []string) int {
	n := 0
	for _, w := range who {
		if strings.Contains(w, " (layer2") {
			n++
		}
	}
	return n
}
