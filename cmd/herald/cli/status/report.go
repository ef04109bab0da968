package status

import (
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/config/v1beta1"
	"github.com/herald-lb/herald/internal/lbapi"
	"github.com/herald-lb/herald/proxy"
)

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
	// Forwarding is "dsr" when the Service asks for direct server return
	// (herald.io/forwarding; the proxies report, as Events on the
	// Service, a node that cannot give it), else "snat".
	Forwarding string `json:"forwarding"`
	// ForwardingProblems are what nodes report about a DSR Service:
	// SNAT kept, or endpoints left out, and why (their proxies' Events,
	// newest per node).
	ForwardingProblems []string `json:"forwardingProblems,omitempty"`
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
	// DSRProblems are, by "namespace/name", the nodes that keep SNAT
	// forwarding for a Service that asks for DSR (DSRProblems).
	DSRProblems map[string][]string
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
		st.Forwarding = "snat"
		if strings.EqualFold(strings.TrimSpace(s.Annotations[proxy.AnnotationForwarding]), "dsr") {
			st.Forwarding = "dsr"
			st.ForwardingProblems = facts.DSRProblems[s.Namespace+"/"+s.Name]
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
