// Package announce turns what a speaker knows — the configuration, the
// LoadBalancer Services and their endpoints, the Nodes and the memberlist
// members — into what this node announces over layer 2, as a pure
// function (Compute), and tells the speaker loop what changed (Diff).
//
// It does no I/O: the speaker feeds it plain structs built from informers
// and memberlist, hands State.Announced to the layer-2 responders, sends
// gratuitous bursts for Changes.Gained and writes the ServiceAnnouncement
// objects of Changes.Create/Update/Delete.
//
// Every speaker runs the same election (speaker/election) over the same
// inputs, so the nodes agree on one winner per IP without talking. For
// that the election reads every node's interfaces, this one's included,
// from the memberlist metadata; this node's own, fresher view (Local) only
// decides on which interfaces it answers once it has won.
package announce

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/speaker/election"
)

// Protocol is the ServiceAnnouncement protocol of layer-2 announcements.
const Protocol = "layer2"

// ServiceRef names a Service.
type ServiceRef struct {
	Namespace, Name string
}

func (r ServiceRef) String() string { return r.Namespace + "/" + r.Name }

func (r ServiceRef) compare(o ServiceRef) int {
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
}

// Member is a live speaker with its memberlist metadata.
type Member struct {
	Name           string
	Interfaces     []string
	DownInterfaces []string
	// Recovering: the speaker says the cluster counted it out lately
	// (election.Node.Recovering).
	Recovering bool
}

// Local is this node: its name and its own view of its interfaces.
type Local struct {
	Name string
	// Interfaces are the suitable interfaces (up, not loopback, not a
	// bond slave or pod interface).
	Interfaces []string
	// DownInterfaces are those of Interfaces without carrier.
	DownInterfaces []string
}

// Options tune eligibility.
type Options struct {
	// IgnoreExcludeLabel lets nodes labelled
	// node.kubernetes.io/exclude-from-external-load-balancers announce.
	IgnoreExcludeLabel bool
}

// Input is everything Compute reads.
type Input struct {
	Config   *config.Config
	Services []Service
	Nodes    []Node
	// Members are the live memberlist members.
	Members []Member
	Local   Local
	Options Options
	// Isolated: this speaker reaches no other speaker while the API shows
	// that others are alive, so the others elect without it. It then
	// announces only the addresses no other node could announce
	// (ReasonIsolated for the rest), so a client never gets two answers.
	Isolated bool
}

// Why a Service's IP is not considered at all.
const (
	ReasonNoConfig           = "no valid configuration"
	ReasonNoIP               = "no LoadBalancer IP assigned"
	ReasonInvalidIP          = "invalid IP address"
	ReasonOutsidePools       = "IP is in no configured IPAddressPool"
	ReasonNotAllocated       = "no herald.io/ip-allocated-from-pool annotation: the IP was not assigned by herald"
	ReasonPoolMismatch       = "IP is not in the pool the herald.io/ip-allocated-from-pool annotation names"
	ReasonNoAdvertisement    = "no L2Advertisement announces the IP's pool"
	ReasonServiceNotSelected = "no L2Advertisement for the IP's pool selects the Service"
	ReasonDuplicateService   = "Service given twice; the first is used"
)

// Why an elected IP is not announced.
const (
	ReasonNoCandidate = "no node is eligible to announce the IP"
	ReasonLocalDown   = "this node won the IP but none of its interfaces for it is up"
	ReasonIsolated    = "this speaker reaches no other speaker while the API shows others alive; it announces only addresses no other node may announce"
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

// IP is the election result for one address.
type IP struct {
	Addr netip.Addr
	Pool string
	// Services share the address and are announced with it.
	Services []ServiceRef
	// Advertisements are the names of the L2Advertisements covering it.
	Advertisements []string
	// Winner is the announcing node; "" when none is eligible.
	Winner string
	// Excluded says why each non-candidate node is not one.
	Excluded map[string]string
	// Interfaces are where this node answers for the address, sorted;
	// empty unless this node won and has one of them up.
	Interfaces []string
	// Reason is set when no node announces the address, or this node won
	// but cannot.
	Reason string
}

// Announced reports whether this node announces the address.
func (ip IP) Announced() bool { return len(ip.Interfaces) > 0 }

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
}

func (a Announcement) equal(b Announcement) bool {
	return a.Service == b.Service && a.Node == b.Node && a.Protocol == b.Protocol &&
		slices.Equal(a.Interfaces, b.Interfaces) && slices.Equal(a.Peers, b.Peers) && slices.Equal(a.IPs, b.IPs)
}

// State is the result of Compute; every list is sorted.
type State struct {
	// Node is this node's name.
	Node string
	// IPs are the elected addresses, by address.
	IPs []IP
	// Ignored are the Services and addresses left out, and why.
	Ignored []Ignored
	// Announcements are this node's, by Service.
	Announcements []Announcement
	// Isolated is Input.Isolated.
	Isolated bool
}

// Lookup returns the election result for addr.
func (s State) Lookup(addr netip.Addr) (IP, bool) {
	i, ok := slices.BinarySearchFunc(s.IPs, addr.Unmap(), func(ip IP, a netip.Addr) int { return ip.Addr.Compare(a) })
	if !ok {
		return IP{}, false
	}
	return s.IPs[i], true
}

// Announced maps each address this node announces to its interfaces, the
// form layer2.Announcements.Set takes.
func (s State) Announced() map[netip.Addr][]string {
	out := map[netip.Addr][]string{}
	for _, ip := range s.IPs {
		if ip.Announced() {
			out[ip.Addr] = slices.Clone(ip.Interfaces)
		}
	}
	return out
}

// Compute elects a node for every address that may be announced over
// layer 2 and derives what this node announces. Only an address inside a
// configured pool, assigned from that pool by herald and covered by an
// L2Advertisement for one of its Services is elected; every other one is
// in Ignored with the reason. Services sharing an address are elected
// together: an advertisement for any of them announces it, and under
// externalTrafficPolicy Local the winner needs a local endpoint of every
// one of them.
func Compute(in Input) State {
	st := State{Node: in.Local.Name, Isolated: in.Isolated}
	var ads []*config.L2Advertisement
	if in.Config != nil {
		ads = in.Config.L2Advertisements
	}
	groups, ignored := GroupIPs(in.Config, in.Services, ads, ReasonNoAdvertisement, ReasonServiceNotSelected)
	st.Ignored = ignored

	nodes, localLabels, localKnown := electionNodes(in)
	opts := election.Options{IgnoreExcludeLabel: in.Options.IgnoreExcludeLabel}
	var apiNodes []election.Node
	if in.Isolated {
		apiNodes = assumeAlive(nodes, in)
	}
	perService := map[ServiceRef]*Announcement{}
	for a, g := range groups {
		ip := IP{Addr: a, Pool: g.Pool}
		eip := election.IP{Addr: a, Advertisements: g.Ads}
		for _, s := range g.Services {
			ip.Services = append(ip.Services, s.Ref())
			eip.Services = append(eip.Services, election.Service{
				Local: s.Local, ReadyNodes: s.ReadyNodes, ServingTerminatingNodes: s.ServingTerminatingNodes,
			})
		}
		slices.SortFunc(ip.Services, ServiceRef.compare)
		for _, ad := range g.Ads {
			ip.Advertisements = append(ip.Advertisements, ad.Name)
		}
		slices.Sort(ip.Advertisements)
		ip.Advertisements = slices.Compact(ip.Advertisements)
		ip.Winner, ip.Excluded = election.Elect(eip, nodes, opts)
		if in.Isolated && ip.Winner == in.Local.Name {
			if c, _ := election.Candidates(eip, apiNodes, opts); len(c) != 1 || c[0] != in.Local.Name {
				ip.Winner, ip.Reason = "", ReasonIsolated
			}
		}
		switch {
		case ip.Reason == ReasonIsolated:
		case ip.Winner == "":
			ip.Reason = ReasonNoCandidate
		case ip.Winner == in.Local.Name && localKnown:
			ip.Interfaces = localInterfaces(g.Ads, localLabels, in.Local)
			if len(ip.Interfaces) == 0 {
				ip.Reason = ReasonLocalDown
			}
		}
		if ip.Announced() {
			for _, ref := range ip.Services {
				an := perService[ref]
				if an == nil {
					an = &Announcement{Service: ref, Node: in.Local.Name, Protocol: Protocol}
					perService[ref] = an
				}
				an.IPs = append(an.IPs, a)
				an.Interfaces = append(an.Interfaces, ip.Interfaces...)
			}
		}
		st.IPs = append(st.IPs, ip)
	}
	slices.SortFunc(st.IPs, func(a, b IP) int { return a.Addr.Compare(b.Addr) })
	for _, an := range perService {
		slices.SortFunc(an.IPs, netip.Addr.Compare)
		slices.Sort(an.Interfaces)
		an.Interfaces = slices.Compact(an.Interfaces)
		st.Announcements = append(st.Announcements, *an)
	}
	slices.SortFunc(st.Announcements, func(a, b Announcement) int { return a.Service.compare(b.Service) })
	slices.SortStableFunc(st.Ignored, func(a, b Ignored) int {
		return cmp.Or(a.Service.compare(b.Service), a.Addr.Compare(b.Addr))
	})
	return st
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

// electionNodes joins the Nodes with the members: a Node without a member
// is not live; a member without a Node is unknown and left out.
func electionNodes(in Input) (nodes []election.Node, localLabels map[string]string, localKnown bool) {
	members := map[string]Member{}
	for _, m := range in.Members {
		if _, dup := members[m.Name]; !dup {
			members[m.Name] = m
		}
	}
	seen := map[string]bool{}
	for _, n := range in.Nodes {
		if n.Name == "" || seen[n.Name] {
			continue
		}
		seen[n.Name] = true
		m, live := members[n.Name]
		nodes = append(nodes, election.Node{
			Name:               n.Name,
			Labels:             n.Labels,
			Live:               live,
			NetworkUnavailable: n.NetworkUnavailable,
			Interfaces:         m.Interfaces,
			DownInterfaces:     m.DownInterfaces,
			Recovering:         m.Recovering,
		})
		if n.Name == in.Local.Name {
			localLabels, localKnown = n.Labels, true
		}
	}
	return nodes, localLabels, localKnown
}

// assumeAlive is the nodes as an isolated speaker must count them: every
// Node's speaker alive, and a speaker it cannot hear from with every
// interface up, since it cannot know better.
func assumeAlive(nodes []election.Node, in Input) []election.Node {
	all := slices.Clone(in.Local.Interfaces)
	if in.Config != nil {
		for _, ad := range in.Config.L2Advertisements {
			all = append(all, ad.Interfaces...)
		}
	}
	for _, m := range in.Members {
		all = append(all, m.Interfaces...)
	}
	slices.Sort(all)
	all = slices.Compact(all)
	out := make([]election.Node, len(nodes))
	for i, n := range nodes {
		if !n.Live {
			n.Live, n.Interfaces, n.DownInterfaces = true, all, nil
		}
		out[i] = n
	}
	return out
}

// localInterfaces is where this node answers for an address it won: for
// each advertisement selecting it, the interfaces the advertisement names
// (or all suitable ones when it names none) that exist here and have
// carrier.
func localInterfaces(ads []*config.L2Advertisement, labels map[string]string, l Local) []string {
	var out []string
	for _, ad := range ads {
		if !ad.NodeSelectors.MatchesOrEmpty(labels) {
			continue
		}
		want := ad.Interfaces
		if len(want) == 0 {
			want = l.Interfaces
		}
		for _, i := range want {
			if slices.Contains(l.Interfaces, i) && !slices.Contains(l.DownInterfaces, i) {
				out = append(out, i)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
