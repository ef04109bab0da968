// Package view is what a speaker knows of the cluster, in the plain
// structs both protocols' plans read: the LoadBalancer Services with
// their endpoints' nodes, the Nodes, and the ServiceAnnouncements it
// writes; and the checks every protocol makes before announcing an
// address (GroupIPs: inside a pool, assigned by herald, covered by an
// advertisement).
package view

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/herald-lb/herald/config"
)

// ServiceRef names a Service.
type ServiceRef struct {
	Namespace, Name string
}

// String is "namespace/name".
func (r ServiceRef) String() string { return r.Namespace + "/" + r.Name }

// Compare orders refs by namespace, then name.
func (r ServiceRef) Compare(o ServiceRef) int {
	return cmp.Or(strings.Compare(r.Namespace, o.Namespace), strings.Compare(r.Name, o.Name))
}

// Service is a LoadBalancer Service this speaker's class handles.
type Service struct {
	Namespace, Name string
	Labels          map[string]string
	// IPs are the addresses in status.loadBalancer.ingress.
	IPs []netip.Addr
	// Pool is the herald.io/ip-allocated-from-pool annotation, which the
	// controller writes together with the IPs; "" when absent.
	Pool string
	// Local: externalTrafficPolicy Local.
	Local bool
	// ReadyNodes are the nodes with a ready endpoint, from the
	// EndpointSlices; ServingTerminatingNodes those with an endpoint that
	// is terminating but still serving.
	ReadyNodes              map[string]bool
	ServingTerminatingNodes map[string]bool
}

// Ref is the Service's name.
func (s Service) Ref() ServiceRef { return ServiceRef{s.Namespace, s.Name} }

// Node is a Kubernetes Node.
type Node struct {
	Name   string
	Labels map[string]string
	// NetworkUnavailable: the NetworkUnavailable condition is true.
	NetworkUnavailable bool
	// Drained: the Node carries herald drain's mark
	// (lbapi.AnnotationDrain). Only the node's own speaker reads it;
	// the others learn it from that speaker, once it acts on it.
	Drained bool
	// DrainErr: the mark has a value herald does not read; Drained is
	// then false and the speaker keeps the drain state it had.
	DrainErr error
	// Addresses are the Node's InternalIPs: where a planned layer-2 move
	// forwards the connections of the address's former holder
	// (speaker/handover).
	Addresses []netip.Addr
}

// Options tune eligibility.
type Options struct {
	// IgnoreExcludeLabel lets nodes labelled
	// node.kubernetes.io/exclude-from-external-load-balancers announce.
	IgnoreExcludeLabel bool
}

// Why a Service's IP is not considered at all, whatever the protocol.
const (
	ReasonNoConfig         = "no valid configuration"
	ReasonNoIP             = "no LoadBalancer IP assigned"
	ReasonInvalidIP        = "invalid IP address"
	ReasonOutsidePools     = "IP is in no configured IPAddressPool"
	ReasonNotAllocated     = "no herald.io/ip-allocated-from-pool annotation: the IP was not assigned by herald"
	ReasonPoolMismatch     = "IP is not in the pool the herald.io/ip-allocated-from-pool annotation names"
	ReasonDuplicateService = "Service given twice; the first is used"
	// ReasonUnprogrammed: this node's proxy has not written the rules
	// for the address yet; announcing it would route its first packets
	// onwards un-NATed.
	ReasonUnprogrammed = "waiting for this node's proxy to program the address"
)

// Ignored is a Service's IP left out before the election, or a Service
// without IPs (Addr invalid).
type Ignored struct {
	Service ServiceRef
	Addr    netip.Addr
	Reason  string
	// Detail adds the names involved, for logs and events.
	Detail string
}

// Announcement is the ServiceAnnouncement status this node should publish
// for one Service: the addresses of it the node announces and where.
type Announcement struct {
	Service    ServiceRef
	Node       string
	Protocol   string
	Interfaces []string
	// Peers are the BGP sessions the IPs are advertised to (BGP only).
	Peers []string
	IPs   []netip.Addr
	// Unannounced are addresses of the Service this node reports as not
	// announced, by address; an Announcement may carry only these.
	Unannounced []Unannounced
}

// NodeSummary is the NodeAnnouncement status a node publishes: what it
// advertises over BGP for every address of a Service with
// externalTrafficPolicy Cluster (see bgp/plan.ResolveCluster).
type NodeSummary struct {
	Node     string
	Protocol string
	// Reason is why the node advertises nothing at all; "" when it may.
	Reason string
	// Advertisements are the BGPAdvertisements selecting the node, by
	// name, each with the peers it sends this node's prefixes to.
	Advertisements []NodeAdvertisement
}

// NodeAdvertisement is one BGPAdvertisement as one node applies it.
type NodeAdvertisement struct {
	Name                 string
	IPv4Peers, IPv6Peers []string
}

// Equal reports whether a and b publish the same status.
func (a NodeSummary) Equal(b NodeSummary) bool {
	return a.Node == b.Node && a.Protocol == b.Protocol && a.Reason == b.Reason &&
		slices.EqualFunc(a.Advertisements, b.Advertisements, func(x, y NodeAdvertisement) bool {
			return x.Name == y.Name && slices.Equal(x.IPv4Peers, y.IPv4Peers) && slices.Equal(x.IPv6Peers, y.IPv6Peers)
		})
}

// Unannounced is an address nobody announces, with the reason a speaker
// computed, published so that `herald status` can say why.
type Unannounced struct {
	Addr   netip.Addr
	Reason string
	Detail string
}

// Equal reports whether a and b publish the same status.
func (a Announcement) Equal(b Announcement) bool {
	return a.Service == b.Service && a.Node == b.Node && a.Protocol == b.Protocol &&
		slices.Equal(a.Interfaces, b.Interfaces) && slices.Equal(a.Peers, b.Peers) && slices.Equal(a.IPs, b.IPs) &&
		slices.Equal(a.Unannounced, b.Unannounced)
}

// SortUnannounced sorts by address and drops repeats of one address (a
// shared IP reached twice), keeping the first.
func SortUnannounced(u []Unannounced) []Unannounced {
	slices.SortStableFunc(u, func(a, b Unannounced) int { return a.Addr.Compare(b.Addr) })
	return slices.CompactFunc(u, func(a, b Unannounced) bool { return a.Addr == b.Addr })
}

// maxDetail bounds a published Detail (the API field's MaxLength).
const maxDetail = 1024

// NodesDetail summarises why each node is not eligible, nodes grouped by
// reason ("reason: node1, node2; other reason: node3"), the most common
// reason first, cut to fit the API's limit with a count of what was left
// out: at a thousand nodes the reasons matter, not every name.
func NodesDetail(why map[string]string) string {
	byReason := map[string][]string{}
	for n, r := range why {
		byReason[r] = append(byReason[r], n)
	}
	reasons := make([]string, 0, len(byReason))
	for r, ns := range byReason {
		slices.Sort(ns)
		reasons = append(reasons, r)
	}
	slices.SortFunc(reasons, func(a, b string) int {
		if d := len(byReason[b]) - len(byReason[a]); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	var b strings.Builder
	left := 0
	for _, r := range reasons {
		for i, n := range byReason[r] {
			part := n
			switch {
			case i == 0 && b.Len() == 0:
				part = r + ": " + n
			case i == 0:
				part = "; " + r + ": " + n
			default:
				part = ", " + n
			}
			// Room for the longest tail: " (and 99999 more)".
			if left > 0 || b.Len()+len(part) > maxDetail-20 {
				left++
				continue
			}
			b.WriteString(part)
		}
	}
	if left > 0 {
		fmt.Fprintf(&b, " (and %d more)", left)
	}
	return b.String()
}

// Group is one address with the Services sharing it and the
// advertisements (of one protocol) covering it for them.
type Group[A comparable] struct {
	Pool     string
	Services []Service
	Ads      []A
}

// GroupIPs groups the Services' addresses that may be announced, by
// address. An address may be announced when it is valid, inside a
// configured pool, assigned from that pool by herald (the annotation)
// and covered by one of ads (the protocol's advertisements) selecting
// its Service. Every Service or address left out is in ignored with the
// reason, noAd and notSelected being the protocol's wording of the last
// two.
func GroupIPs[A config.Advertisement](cfg *config.Config, svcs []Service, ads []A, noAd, notSelected string) (map[netip.Addr]*Group[A], []Ignored) {
	groups := map[netip.Addr]*Group[A]{}
	var ignored []Ignored
	seen := map[ServiceRef]bool{}
	ignore := func(s Service, a netip.Addr, reason, detail string) {
		ignored = append(ignored, Ignored{Service: s.Ref(), Addr: a, Reason: reason, Detail: detail})
	}
	for _, s := range svcs {
		if seen[s.Ref()] {
			ignore(s, netip.Addr{}, ReasonDuplicateService, "")
			continue
		}
		seen[s.Ref()] = true
		if len(s.IPs) == 0 {
			ignore(s, netip.Addr{}, ReasonNoIP, "")
			continue
		}
		done := map[netip.Addr]bool{}
		for _, a := range s.IPs {
			a = a.Unmap()
			if done[a] {
				continue
			}
			done[a] = true
			if !a.IsValid() {
				ignore(s, a, ReasonInvalidIP, "")
				continue
			}
			if cfg == nil {
				ignore(s, a, ReasonNoConfig, "")
				continue
			}
			pool := PoolFor(cfg, a)
			switch {
			case pool == nil:
				ignore(s, a, ReasonOutsidePools, "")
				continue
			case s.Pool == "":
				ignore(s, a, ReasonNotAllocated, "the IP is in pool "+pool.Name)
				continue
			case s.Pool != pool.Name:
				ignore(s, a, ReasonPoolMismatch, fmt.Sprintf("the IP is in pool %s, the annotation says %s", pool.Name, s.Pool))
				continue
			}
			ads, covered := selecting(ads, pool.Name, s.Labels)
			if len(ads) == 0 {
				if covered {
					ignore(s, a, notSelected, "pool "+pool.Name)
				} else {
					ignore(s, a, noAd, "pool "+pool.Name)
				}
				continue
			}
			g := groups[a]
			if g == nil {
				g = &Group[A]{Pool: pool.Name}
				groups[a] = g
			}
			g.Services = append(g.Services, s)
			for _, ad := range ads {
				if !slices.Contains(g.Ads, ad) {
					g.Ads = append(g.Ads, ad)
				}
			}
		}
	}
	return groups, ignored
}

// PoolFor finds the pool holding a, by name order so that even a
// hand-built configuration with overlapping pools gives one answer.
func PoolFor(c *config.Config, a netip.Addr) *config.Pool {
	for _, n := range c.PoolNames() {
		if p := c.Pools[n]; p != nil && p.Contains(a) {
			return p
		}
	}
	return nil
}

// selecting returns the advertisements announcing pool for a Service
// with these labels, and whether any of them covers the pool at all (to
// tell the two reasons apart).
func selecting[A config.Advertisement](ads []A, pool string, labels map[string]string) (out []A, poolCovered bool) {
	var none A
	for _, ad := range ads {
		if ad == none {
			continue
		}
		pools, services := ad.Scope()
		if !slices.Contains(pools, pool) {
			continue
		}
		poolCovered = true
		if services.MatchesOrEmpty(labels) {
			out = append(out, ad)
		}
	}
	return out, poolCovered
}
