package status

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/config/informer"
	"github.com/herald-lb/herald/config/v1beta1"
	"github.com/herald-lb/herald/internal/lbapi"
	"github.com/herald-lb/herald/speaker/bgp/plan"
	"github.com/herald-lb/herald/speaker/view"
)

// Services with externalTrafficPolicy Cluster get no ServiceAnnouncement
// per node over BGP: every speaker running BGP publishes one
// NodeAnnouncement (the BGPAdvertisements selecting its node and their
// peers), and status resolves who advertises each such address from them
// with the speakers' own rule (plan.ResolveCluster). Nothing read here
// grows with Services × nodes.

// NodeAnnouncementsGVR is the NodeAnnouncement resource.
var NodeAnnouncementsGVR = v1beta1.GroupVersion.WithResource("nodeannouncements")

// WarningNoNodeAnnouncementCRD is printed when the NodeAnnouncement
// resource does not exist.
const WarningNoNodeAnnouncementCRD = "the NodeAnnouncement CRD (nodeannouncements.herald.io) is not installed, so BGP Services with externalTrafficPolicy Cluster may show as unannounced; Helm does not upgrade crds/: kubectl apply --server-side -f charts/herald/crds/"

// listNodeSummaries reads the NodeAnnouncements of ns as the summaries the
// speakers published, sorted by node; missing reports that the resource
// does not exist (its CRD is not installed).
func listNodeSummaries(ctx context.Context, dyn dynamic.Interface, ns string) (sums []view.NodeSummary, missing bool, err error) {
	l, err := dyn.Resource(NodeAnnouncementsGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err) || apimeta.IsNoMatchError(err):
		return nil, true, nil
	case err != nil:
		return nil, false, fmt.Errorf("listing NodeAnnouncements in %s: %w", ns, err)
	}
	for _, u := range l.Items {
		var na v1beta1.NodeAnnouncement
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &na); err != nil || na.Status.Node == "" {
			// Not readable, or created and not written yet.
			continue
		}
		sums = append(sums, NodeSummary(na.Status))
	}
	slices.SortFunc(sums, func(a, b view.NodeSummary) int { return strings.Compare(a.Node, b.Node) })
	return sums, false, nil
}

// NodeSummary is a NodeAnnouncement's status as the speaker computed it.
func NodeSummary(st v1beta1.NodeAnnouncementStatus) view.NodeSummary {
	sum := view.NodeSummary{Node: st.Node, Protocol: string(st.Protocol), Reason: st.Reason}
	for _, a := range st.Advertisements {
		sum.Advertisements = append(sum.Advertisements, view.NodeAdvertisement{Name: a.Name, IPv4Peers: a.IPv4Peers, IPv6Peers: a.IPv6Peers})
	}
	return sum
}

// ParseConfig builds the configuration as the speakers do: the listed
// objects of each configuration kind (informer.Kinds) decoded by the
// speakers' decoder, the Secrets unseen, and the addresses the Services
// of the class hold in use (a pool edit dropping one stays refused).
func ParseConfig(ns string, objs map[string][]unstructured.Unstructured, svcs []corev1.Service, lbClass string) *config.Config {
	listers := informer.Listers{}
	for _, k := range informer.Kinds {
		idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		for i := range objs[k.Kind] {
			_ = idx.Add(&objs[k.Kind][i])
		}
		listers[k.Kind] = cache.NewGenericLister(idx, informer.GVR(k.Resource).GroupResource())
	}
	// Objects that do not decode are left out, as the speakers leave them.
	res, _ := listers.Resources(ns)
	res.SecretsUnavailable = true
	res.InUse = lbapi.InUse(pointers(svcs), lbClass)
	cfg, _ := config.Parse(res)
	return cfg
}

func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

// ViewServices are the Services of the class with addresses as the
// speakers see them (view.FromService), their endpoints' nodes from
// eps, sorted by namespace and name. A Service whose status does not
// read is left out, as the speakers leave it.
func ViewServices(svcs []corev1.Service, lbClass string, eps []discoveryv1.EndpointSlice) []view.Service {
	bySvc := map[string][]*discoveryv1.EndpointSlice{}
	for i := range eps {
		sl := &eps[i]
		if name := sl.Labels[discoveryv1.LabelServiceName]; name != "" {
			bySvc[sl.Namespace+"/"+name] = append(bySvc[sl.Namespace+"/"+name], sl)
		}
	}
	var out []view.Service
	for i := range svcs {
		svc := &svcs[i]
		if !lbapi.Handles(svc, lbClass) || len(svc.Status.LoadBalancer.Ingress) == 0 {
			continue
		}
		ips, err := lbapi.StatusIPs(svc)
		if err != nil {
			continue
		}
		ready, servingTerminating := view.EndpointNodes(bySvc[svc.Namespace+"/"+svc.Name])
		out = append(out, view.FromService(svc, ips, ready, servingTerminating))
	}
	slices.SortFunc(out, func(a, b view.Service) int { return a.Ref().Compare(b.Ref()) })
	return out
}

// sharingWith picks, among all Services, those of the class holding an
// address one of shown holds (shown's own included): all that decides
// who advertises those addresses.
func sharingWith(all, shown []corev1.Service, lbClass string) []corev1.Service {
	ips := map[netip.Addr]bool{}
	for i := range shown {
		addrs, _ := lbapi.StatusIPs(&shown[i])
		for _, a := range addrs {
			ips[a.Unmap()] = true
		}
	}
	var out []corev1.Service
	for i := range all {
		if !lbapi.Handles(&all[i], lbClass) {
			continue
		}
		addrs, _ := lbapi.StatusIPs(&all[i])
		if slices.ContainsFunc(addrs, func(a netip.Addr) bool { return ips[a.Unmap()] }) {
			out = append(out, all[i])
		}
	}
	return out
}

// namespaces are those to list EndpointSlices in: "" (all) when ns is,
// else ns and those of svcs, sorted.
func namespaces(ns string, svcs []corev1.Service) []string {
	if ns == "" {
		return []string{""}
	}
	out := []string{ns}
	for _, s := range svcs {
		out = append(out, s.Namespace)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ServiceIP is one address of one Service.
type ServiceIP struct {
	Namespace, Name string
	IP              netip.Addr
}

// Resolved is who advertises an address of a Service with
// externalTrafficPolicy Cluster over BGP, from the NodeAnnouncements.
type Resolved struct {
	By []Announcer
	// Why nobody does, when By is empty: the speakers' rule applied to
	// what the NodeAnnouncements say.
	Why string
}

// ResolveCluster says, for every address of the Services with
// externalTrafficPolicy Cluster that the speakers decide from their
// NodeAnnouncements (plan.ResolveCluster), which nodes advertise it over
// BGP and to which peers, or why none does.
func ResolveCluster(cfg *config.Config, svcs []view.Service, sums []view.NodeSummary) map[ServiceIP]Resolved {
	resolved := plan.ResolveCluster(cfg, svcs, sums)
	out := map[ServiceIP]Resolved{}
	for _, s := range svcs {
		for _, a := range s.IPs {
			a = a.Unmap()
			advertisers, ok := resolved[a]
			if !ok {
				continue
			}
			r := Resolved{}
			for _, w := range advertisers {
				r.By = append(r.By, Announcer{Node: w.Node, Protocol: plan.Protocol, Peers: w.Peers})
			}
			if len(r.By) == 0 {
				r.Why = nobodyWhy(a, svcs, sums)
			}
			out[ServiceIP{s.Namespace, s.Name, a}] = r
		}
	}
	return out
}

// nobodyWhy says why no node advertises a, a Cluster address: no Service
// holding it has a serving endpoint, or no node's NodeAnnouncement lists
// an advertisement covering it with a peer of its family (with the
// reasons of the nodes that advertise nothing at all).
func nobodyWhy(a netip.Addr, svcs []view.Service, sums []view.NodeSummary) string {
	serving := slices.ContainsFunc(svcs, func(s view.Service) bool {
		return (len(s.ReadyNodes) > 0 || len(s.ServingTerminatingNodes) > 0) && slices.ContainsFunc(s.IPs, func(ip netip.Addr) bool { return ip.Unmap() == a })
	})
	if !serving {
		return plan.Protocol + ": " + plan.ReasonNoEndpoints
	}
	if len(sums) == 0 {
		return plan.Protocol + ": no node has published a NodeAnnouncement"
	}
	family := "IPv4"
	if a.Is6() {
		family = "IPv6"
	}
	why := plan.Protocol + ": no node's NodeAnnouncement lists a BGPAdvertisement covering it with an " + family + " peer"
	idle := map[string]string{}
	for _, s := range sums {
		if s.Reason != "" {
			idle[s.Node] = s.Reason
		}
	}
	if len(idle) > 0 {
		why += " (advertising nothing: " + view.NodesDetail(idle) + ")"
	}
	return why
}

// withResolved adds to the announcers from the ServiceAnnouncements those
// resolved for a Cluster address; a node both name over BGP (a speaker
// not upgraded yet) is listed once.
func withResolved(who []Announcer, r Resolved) []Announcer {
	for _, w := range r.By {
		if !slices.ContainsFunc(who, func(x Announcer) bool { return x.Node == w.Node && x.Protocol == w.Protocol }) {
			who = append(who, w)
		}
	}
	return who
}

// maxListed is how many nodes advertising one address over BGP the table
// names; beyond, it gives their count and peers (-o json lists them all).
const maxListed = 5

// announcersText is the ANNOUNCED BY cell: every announcer, or, when more
// than maxListed nodes advertise over BGP, those over layer 2 and then
// "N nodes (bgp to PEERS)".
func announcersText(who []Announcer) string {
	var parts, peers []string
	bgp := 0
	for _, w := range who {
		if w.Protocol == plan.Protocol {
			bgp++
			peers = append(peers, w.Peers...)
		}
	}
	for _, w := range who {
		if bgp <= maxListed || w.Protocol != plan.Protocol {
			parts = append(parts, w.String())
		}
	}
	if bgp > maxListed {
		slices.Sort(peers)
		parts = append(parts, Announcer{Node: fmt.Sprintf("%d nodes", bgp), Protocol: plan.Protocol, Peers: slices.Compact(peers)}.String())
	}
	return strings.Join(parts, ", ")
}
