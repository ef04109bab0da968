// Package plan decides, as a pure function, what one node advertises
// over BGP: the sessions it opens (the BGPPeers selecting it) and, per
// session, the prefixes with their attributes (from the BGPAdvertisements
// covering each LoadBalancer IP this node may serve).
//
// Unlike layer 2 there is no election: every eligible node advertises and
// the routers spread traffic over them (ECMP). A node is eligible for an
// IP when its network is available, it is not excluded from external load
// balancers, a BGPAdvertisement for the IP's pool and Service selects it,
// and the Service can be served from it: under externalTrafficPolicy
// Cluster while the Service has any serving endpoint anywhere, under Local
// only while this node has a ready local endpoint (or, when no node has a
// ready one, a serving terminating one, as in the layer-2 election).
//
// The package does no I/O; speaker/bgp applies Plans to the embedded BGP
// implementation.
package plan

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/speaker/layer2/election"
	"github.com/herald-lb/herald/speaker/view"
)

// Protocol is the ServiceAnnouncement protocol of BGP advertisements.
const Protocol = "bgp"

// Input is everything Compute reads.
type Input struct {
	Config   *config.Config
	Services []view.Service
	Nodes    []view.Node
	// Node is this node's name; NodeIPs its addresses (InternalIPs), the
	// default router ID being the first IPv4 one.
	Node    string
	NodeIPs []netip.Addr
	Options view.Options
	// Reporter: this speaker publishes the reasons that hold on every
	// node (no serving endpoint, no BGPAdvertisement selects the
	// Service), once for the cluster; see layer2/plan.Input.Reporter.
	Reporter bool
	// Unprogrammed are addresses this node's proxy has no rules for
	// yet; they are not advertised until it has.
	Unprogrammed map[netip.Addr]bool
	// Drain is how far this node is in taking its routes away after
	// herald drain marked it.
	Drain DrainPhase
}

// DrainPhase is a drained node's progress in moving traffic away.
type DrainPhase int

// The drain phases, in order.
const (
	NotDrained DrainPhase = iota
	// DrainShutdown: every route goes out again with the
	// GRACEFUL_SHUTDOWN community (RFC 8326), so routers that honour it
	// prefer the other nodes' paths while this node still forwards; a
	// path no other node offers stays in use.
	DrainShutdown
	// DrainWithdrawn: every route is withdrawn (ReasonDrained); the
	// sessions stay up, so undo only advertises again.
	DrainWithdrawn
)

// GracefulShutdown is the well-known GRACEFUL_SHUTDOWN community,
// 65535:0 (RFC 8326).
const GracefulShutdown uint32 = 0xFFFF0000

func (d DrainPhase) String() string {
	switch d {
	case NotDrained:
		return "not drained"
	case DrainShutdown:
		return "graceful shutdown"
	case DrainWithdrawn:
		return "withdrawn"
	}
	return fmt.Sprintf("DrainPhase(%d)", int(d))
}

// Route is one prefix advertised to one peer, with its attributes.
type Route struct {
	Prefix netip.Prefix
	// Communities and LargeCommunities are sorted and without duplicates.
	Communities      []uint32
	LargeCommunities [][3]uint32
	// LocalPref is 0 when unset; it is set only towards iBGP peers.
	LocalPref uint32
	// LocalPrefZero sends LOCAL_PREF 0 (LocalPref is then 0): a drained
	// node's routes towards iBGP peers (RFC 8326 §4.1).
	LocalPrefZero bool
	// Advertisements are the BGPAdvertisements behind the route, sorted.
	Advertisements []string
}

// Equal compares two routes, attributes included.
func (r Route) Equal(o Route) bool {
	return r.Prefix == o.Prefix && slices.Equal(r.Communities, o.Communities) &&
		slices.Equal(r.LargeCommunities, o.LargeCommunities) && r.LocalPref == o.LocalPref &&
		r.LocalPrefZero == o.LocalPrefZero && slices.Equal(r.Advertisements, o.Advertisements)
}

// SameAttributes compares what reaches the peer: prefix and attributes.
func (r Route) SameAttributes(o Route) bool {
	return r.Prefix == o.Prefix && slices.Equal(r.Communities, o.Communities) &&
		slices.Equal(r.LargeCommunities, o.LargeCommunities) && r.LocalPref == o.LocalPref &&
		r.LocalPrefZero == o.LocalPrefZero
}

// Session is one BGP session this node opens, with what it advertises.
type Session struct {
	Peer *config.Peer
	// Routes are sorted by prefix.
	Routes []Route
}

// Name is the BGPPeer's name.
func (s Session) Name() string { return s.Peer.Name }

// IP is the decision for one LoadBalancer IP on this node.
type IP struct {
	Addr     netip.Addr
	Pool     string
	Services []view.ServiceRef
	// Advertisements are the BGPAdvertisements covering the IP for its
	// Services, sorted.
	Advertisements []string
	// Peers are the sessions the IP (or a prefix holding it) goes to,
	// sorted; empty when this node does not advertise it.
	Peers []string
	// Reason says why this node does not advertise the IP.
	Reason string
	// Cluster: no Service sharing the IP has externalTrafficPolicy
	// Local, so every eligible node decides it alike and the node's
	// Summary, not a ServiceAnnouncement, publishes it.
	Cluster bool
}

// Advertised reports whether this node advertises the IP to any peer.
func (ip IP) Advertised() bool { return len(ip.Peers) > 0 }

// Plan is the result of Compute; every list is sorted.
type Plan struct {
	Node string
	// ASN and RouterID are the BGP speaker's own: the first session's
	// myASN (each session also carries its own) and router ID.
	ASN      uint32
	RouterID netip.Addr
	Sessions []Session
	IPs      []IP
	// Ignored are Services and IPs left out before deciding, and why.
	Ignored []view.Ignored
	// Announcements are this node's ServiceAnnouncements, by Service:
	// the addresses of Services with externalTrafficPolicy Local it
	// advertises, and, from the reporter, the addresses nobody
	// advertises and why.
	Announcements []view.Announcement
	// Advertising lists, by Service, every address this node advertises
	// (Local and Cluster), for the Services' events.
	Advertising []view.Announcement
	// Summary is this node's NodeAnnouncement, which publishes what it
	// advertises for the Cluster addresses; nil when BGP has nothing to
	// do here (no session and no BGPAdvertisement at all).
	Summary *view.NodeSummary
	// Problems are configuration this node cannot honour; they name the
	// object and field.
	Problems []string
	// Unadvertised counts, by reason, the IPs no node advertises for a
	// reason that holds on every node (no serving endpoint, no
	// BGPAdvertisement selects the Service): every speaker computes the
	// same counts, for the metric and the alert.
	Unadvertised map[string]int
}

// Session returns the session of the named peer.
func (p Plan) Session(name string) (Session, bool) {
	i, ok := slices.BinarySearchFunc(p.Sessions, name, func(s Session, n string) int { return strings.Compare(s.Name(), n) })
	if !ok {
		return Session{}, false
	}
	return p.Sessions[i], true
}

// Lookup returns the decision for addr.
func (p Plan) Lookup(addr netip.Addr) (IP, bool) {
	i, ok := slices.BinarySearchFunc(p.IPs, addr.Unmap(), func(ip IP, a netip.Addr) int { return ip.Addr.Compare(a) })
	if !ok {
		return IP{}, false
	}
	return p.IPs[i], true
}

// Why an IP is not advertised by this node (besides the announce
// package's reasons for ignoring a Service's IP).
const (
	ReasonNoAdvertisement    = "no BGPAdvertisement announces the IP's pool"
	ReasonServiceNotSelected = "no BGPAdvertisement for the IP's pool selects the Service"
	ReasonNodeUnknown        = "this node has no Node object"
	ReasonNetworkUnavailable = election.ReasonNetworkUnavailable
	ReasonExcluded           = election.ReasonExcluded
	ReasonNodeNotSelected    = "no BGPAdvertisement for the IP selects this node"
	ReasonNoEndpoints        = "the Service has no serving endpoint"
	ReasonNoLocalEndpoint    = election.ReasonNoLocalEndpoint
	ReasonNoSession          = "no BGP session of this node is selected by the IP's BGPAdvertisements"
	ReasonNoSessionOfFamily  = "no BGP session of this node is of the IP's family (IPv4 prefixes go to IPv4 peers, IPv6 to IPv6)"
	ReasonUnprogrammed       = view.ReasonUnprogrammed
	ReasonDrained            = "node drained (herald drain): its routes were sent with GRACEFUL_SHUTDOWN, then withdrawn"
)

// Compute decides what this node advertises.
func Compute(in Input) Plan {
	p := Plan{Node: in.Node, Unadvertised: map[string]int{}}
	var node *view.Node
	for i := range in.Nodes {
		if in.Nodes[i].Name == in.Node {
			node = &in.Nodes[i]
			break
		}
	}
	var labels map[string]string
	if node != nil {
		labels = node.Labels
	}
	p.Sessions, p.ASN, p.RouterID, p.Problems = sessions(in, labels)

	var ads []*config.BGPAdvertisement
	if in.Config != nil {
		ads = in.Config.BGPAdvertisements
	}
	groups, ignored := view.GroupIPs(in.Config, in.Services, ads, ReasonNoAdvertisement, ReasonServiceNotSelected)
	p.Ignored = ignored

	// routes[peer][prefix] accumulates the attributes of every
	// advertisement sending the prefix to the peer.
	routes := map[string]map[netip.Prefix]*Route{}
	perService := map[view.ServiceRef]*view.Announcement{}
	announcement := func(ref view.ServiceRef) *view.Announcement {
		an := perService[ref]
		if an == nil {
			an = &view.Announcement{Service: ref, Node: in.Node, Protocol: Protocol}
			perService[ref] = an
		}
		return an
	}
	advertising := map[view.ServiceRef]*view.Announcement{}
	nodeWhy := nodeIneligible(node, in.Options)
	if nodeWhy == "" && in.Drain == DrainWithdrawn {
		nodeWhy = ReasonDrained
	}
	p.Summary = summary(in.Node, nodeWhy, labels, p.Sessions, ads)
	for a, g := range groups {
		ip := IP{Addr: a, Pool: g.Pool, Cluster: true}
		for _, s := range g.Services {
			ip.Services = append(ip.Services, s.Ref())
			ip.Cluster = ip.Cluster && !s.Local
		}
		slices.SortFunc(ip.Services, compareRefs)
		for _, ad := range g.Ads {
			ip.Advertisements = append(ip.Advertisements, ad.Name)
		}
		slices.Sort(ip.Advertisements)
		ip.Advertisements = slices.Compact(ip.Advertisements)
		ip.Reason = nodeWhy
		if ip.Reason == "" {
			ip.Reason = serviceIneligible(g.Services, in.Node)
		}
		if ip.Reason == "" && in.Unprogrammed[a] {
			ip.Reason = ReasonUnprogrammed
		}
		if ip.Reason == "" {
			ip.Peers, ip.Reason = selectPeers(routes, a, g.Ads, labels, p.Sessions)
		}
		if !serving(g.Services) {
			p.Unadvertised[ReasonNoEndpoints]++
		}
		switch {
		case ip.Advertised():
			for _, ref := range ip.Services {
				adv := advertising[ref]
				if adv == nil {
					adv = &view.Announcement{Service: ref, Node: in.Node, Protocol: Protocol}
					advertising[ref] = adv
				}
				adv.IPs = append(adv.IPs, a)
				adv.Peers = append(adv.Peers, ip.Peers...)
				if !ip.Cluster {
					an := announcement(ref)
					an.IPs = append(an.IPs, a)
					an.Peers = append(an.Peers, ip.Peers...)
				}
			}
		case in.Reporter && !serving(g.Services):
			for _, ref := range ip.Services {
				an := announcement(ref)
				an.Unannounced = append(an.Unannounced, view.Unannounced{Addr: a, Reason: ReasonNoEndpoints})
			}
		}
		p.IPs = append(p.IPs, ip)
	}
	notSelected := map[netip.Addr]bool{}
	for _, ig := range p.Ignored {
		if ig.Reason == ReasonServiceNotSelected && ig.Addr.IsValid() {
			notSelected[ig.Addr] = true
			if in.Reporter {
				an := announcement(ig.Service)
				an.Unannounced = append(an.Unannounced, view.Unannounced{Addr: ig.Addr, Reason: ig.Reason, Detail: ig.Detail})
			}
		}
	}
	for a := range notSelected {
		if _, elected := groups[a]; !elected {
			p.Unadvertised[ReasonServiceNotSelected]++
		}
	}
	slices.SortFunc(p.IPs, func(a, b IP) int { return a.Addr.Compare(b.Addr) })
	for i := range p.Sessions {
		s := &p.Sessions[i]
		for _, r := range routes[s.Name()] {
			if in.Drain == DrainShutdown {
				if !slices.Contains(r.Communities, GracefulShutdown) {
					r.Communities = append(r.Communities, GracefulShutdown)
					slices.Sort(r.Communities)
				}
				// RFC 8326 §4.1: towards iBGP, LOCAL_PREF 0 as well, for
				// routers that do not act on the community.
				if !s.Peer.External() {
					r.LocalPref, r.LocalPrefZero = 0, true
				}
			}
			s.Routes = append(s.Routes, *r)
		}
		slices.SortFunc(s.Routes, func(a, b Route) int { return comparePrefixes(a.Prefix, b.Prefix) })
	}
	p.Announcements = sortedAnnouncements(perService)
	p.Advertising = sortedAnnouncements(advertising)
	slices.SortStableFunc(p.Ignored, func(a, b view.Ignored) int {
		return cmp.Or(compareRefs(a.Service, b.Service), a.Addr.Compare(b.Addr))
	})
	return p
}

func sortedAnnouncements(m map[view.ServiceRef]*view.Announcement) []view.Announcement {
	var out []view.Announcement
	for _, an := range m {
		slices.SortFunc(an.IPs, netip.Addr.Compare)
		slices.Sort(an.Peers)
		an.Peers = slices.Compact(an.Peers)
		an.Unannounced = view.SortUnannounced(an.Unannounced)
		out = append(out, *an)
	}
	slices.SortFunc(out, func(a, b view.Announcement) int { return compareRefs(a.Service, b.Service) })
	return out
}

// summary is what this node advertises for every Cluster address: the
// BGPAdvertisements selecting it and, per family, the sessions each
// sends to, as the per-IP loop in Compute decides them; nil when there
// is no session and no advertisement at all.
func summary(node, nodeWhy string, labels map[string]string, sessions []Session, ads []*config.BGPAdvertisement) *view.NodeSummary {
	if len(sessions) == 0 && len(ads) == 0 {
		return nil
	}
	sum := &view.NodeSummary{Node: node, Protocol: Protocol, Reason: nodeWhy}
	if nodeWhy != "" {
		return sum
	}
	for _, ad := range ads {
		if ad == nil || !ad.NodeSelectors.MatchesOrEmpty(labels) {
			continue
		}
		na := view.NodeAdvertisement{Name: ad.Name}
		for _, sess := range sessions {
			if len(ad.Peers) > 0 && !slices.Contains(ad.Peers, sess.Name()) {
				continue
			}
			if sess.Peer.Address.Unmap().Is4() {
				na.IPv4Peers = append(na.IPv4Peers, sess.Name())
			} else {
				na.IPv6Peers = append(na.IPv6Peers, sess.Name())
			}
		}
		// Two advertisements of one name cannot come out of the parser;
		// merge them anyway so the published list stays a map by name.
		if i := slices.IndexFunc(sum.Advertisements, func(x view.NodeAdvertisement) bool { return x.Name == na.Name }); i >= 0 {
			old := &sum.Advertisements[i]
			old.IPv4Peers = append(old.IPv4Peers, na.IPv4Peers...)
			old.IPv6Peers = append(old.IPv6Peers, na.IPv6Peers...)
			continue
		}
		sum.Advertisements = append(sum.Advertisements, na)
	}
	for i := range sum.Advertisements {
		na := &sum.Advertisements[i]
		slices.Sort(na.IPv4Peers)
		na.IPv4Peers = slices.Compact(na.IPv4Peers)
		slices.Sort(na.IPv6Peers)
		na.IPv6Peers = slices.Compact(na.IPv6Peers)
	}
	slices.SortFunc(sum.Advertisements, func(a, b view.NodeAdvertisement) int { return strings.Compare(a.Name, b.Name) })
	return sum
}

// Advertiser is a node advertising an address over BGP, and to which
// peers.
type Advertiser struct {
	Node  string
	Peers []string
}

// ResolveCluster says which nodes advertise each address of the Services
// with externalTrafficPolicy Cluster, and to which peers, from the nodes'
// Summaries: what Compute decides on each of those nodes, except the wait
// for the node's proxy (at most MaxProxyWait, never published). An
// address nobody advertises maps to an empty list; addresses a Local
// Service shares, and those left out before deciding (GroupIPs), are not
// in the map. summaries need not be sorted.
func ResolveCluster(cfg *config.Config, svcs []view.Service, summaries []view.NodeSummary) map[netip.Addr][]Advertiser {
	var ads []*config.BGPAdvertisement
	if cfg != nil {
		ads = cfg.BGPAdvertisements
	}
	groups, _ := view.GroupIPs(cfg, svcs, ads, ReasonNoAdvertisement, ReasonServiceNotSelected)
	sums := slices.Clone(summaries)
	slices.SortFunc(sums, func(a, b view.NodeSummary) int { return strings.Compare(a.Node, b.Node) })
	out := map[netip.Addr][]Advertiser{}
	for a, g := range groups {
		if slices.ContainsFunc(g.Services, func(s view.Service) bool { return s.Local }) {
			continue
		}
		covering := map[string]bool{}
		for _, ad := range g.Ads {
			covering[ad.Name] = true
		}
		who := []Advertiser{}
		if !serving(g.Services) {
			out[a] = who
			continue
		}
		for _, sum := range sums {
			if sum.Reason != "" {
				continue
			}
			var peers []string
			for _, na := range sum.Advertisements {
				if !covering[na.Name] {
					continue
				}
				if a.Is4() {
					peers = append(peers, na.IPv4Peers...)
				} else {
					peers = append(peers, na.IPv6Peers...)
				}
			}
			if len(peers) > 0 {
				slices.Sort(peers)
				who = append(who, Advertiser{Node: sum.Node, Peers: slices.Compact(peers)})
			}
		}
		out[a] = who
	}
	return out
}

// sessions returns the BGPPeers selecting this node, by name, with the
// speaker's own ASN and router ID. GoBGP has one router ID per speaker;
// peers asking for another one are reported and opened with it anyway.
func sessions(in Input, labels map[string]string) (out []Session, asn uint32, routerID netip.Addr, problems []string) {
	if in.Config == nil || labels == nil {
		return nil, 0, netip.Addr{}, nil
	}
	var names []string
	for n, peer := range in.Config.Peers {
		if peer != nil && peer.NodeSelectors.MatchesOrEmpty(labels) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range in.NodeIPs {
		if n.Unmap().Is4() {
			routerID = n.Unmap()
			break
		}
	}
	for _, n := range names {
		if id := in.Config.Peers[n].RouterID; id.IsValid() {
			routerID = id
			break
		}
	}
	// The BGP implementation knows a neighbor by its address alone.
	byAddr := map[netip.Addr]string{}
	for _, n := range names {
		peer := in.Config.Peers[n]
		key := peer.Address.Unmap()
		if first, dup := byAddr[key]; dup {
			problems = append(problems, fmt.Sprintf("BGPPeer %s: spec.peerAddress %s is also BGPPeer %s's on this node; only %s's session is opened", n, peer.Address, first, first))
			continue
		}
		byAddr[key] = n
		if peer.RouterID.IsValid() && peer.RouterID != routerID {
			problems = append(problems, fmt.Sprintf("BGPPeer %s: spec.routerID %s differs from %s, which this node's BGP speaker uses for all its sessions (from the first BGPPeer by name that sets one)", n, peer.RouterID, routerID))
		}
		out = append(out, Session{Peer: peer})
	}
	if len(out) > 0 {
		asn = out[0].Peer.MyASN
		if !routerID.IsValid() {
			problems = append(problems, "no BGP router ID: this node has no IPv4 InternalIP; set spec.routerID on its BGPPeers")
		}
	}
	return out, asn, routerID, problems
}

// selectPeers are the sessions that advertise a under the advertisements
// ads selecting this node, each adding its route to routes; when there is
// none, reason says why.
func selectPeers(routes map[string]map[netip.Prefix]*Route, a netip.Addr, ads []*config.BGPAdvertisement, labels map[string]string, sessions []Session) (peers []string, reason string) {
	reason = ReasonNodeNotSelected
	familyMiss := false
	for _, ad := range ads {
		if !ad.NodeSelectors.MatchesOrEmpty(labels) {
			continue
		}
		if reason == ReasonNodeNotSelected {
			reason = ReasonNoSession
		}
		for _, sess := range sessions {
			if len(ad.Peers) > 0 && !slices.Contains(ad.Peers, sess.Name()) {
				continue
			}
			if sess.Peer.Address.Unmap().Is4() != a.Is4() {
				familyMiss = true
				continue
			}
			addRoute(routes, sess, a, ad)
			peers = append(peers, sess.Name())
		}
	}
	slices.Sort(peers)
	peers = slices.Compact(peers)
	switch {
	case len(peers) > 0:
		return peers, ""
	case familyMiss:
		return peers, ReasonNoSessionOfFamily
	}
	return peers, reason
}

func addRoute(routes map[string]map[netip.Prefix]*Route, sess Session, a netip.Addr, ad *config.BGPAdvertisement) {
	bits := ad.AggregationLength
	if a.Is6() {
		bits = ad.AggregationLengthV6
	}
	if bits <= 0 || bits > a.BitLen() {
		bits = a.BitLen()
	}
	prefix, _ := a.Prefix(bits)
	m := routes[sess.Name()]
	if m == nil {
		m = map[netip.Prefix]*Route{}
		routes[sess.Name()] = m
	}
	r := m[prefix]
	if r == nil {
		r = &Route{Prefix: prefix}
		m[prefix] = r
	}
	if !slices.Contains(r.Advertisements, ad.Name) {
		r.Advertisements = append(r.Advertisements, ad.Name)
		slices.Sort(r.Advertisements)
	}
	for _, c := range ad.Communities {
		if c.Large {
			r.LargeCommunities = append(r.LargeCommunities, c.LargeValue)
		} else {
			r.Communities = append(r.Communities, c.Standard)
		}
	}
	slices.Sort(r.Communities)
	r.Communities = slices.Compact(r.Communities)
	slices.SortFunc(r.LargeCommunities, func(x, y [3]uint32) int {
		return cmp.Or(cmp.Compare(x[0], y[0]), cmp.Compare(x[1], y[1]), cmp.Compare(x[2], y[2]))
	})
	r.LargeCommunities = slices.Compact(r.LargeCommunities)
	// LOCAL_PREF is an iBGP attribute; when several advertisements set
	// it, the highest wins (the most preferred intent).
	if ad.LocalPref != nil && !sess.Peer.External() {
		r.LocalPref = max(r.LocalPref, *ad.LocalPref)
	}
}

// nodeIneligible says why this node advertises nothing, "" when it may.
func nodeIneligible(n *view.Node, opts view.Options) string {
	switch {
	case n == nil:
		return ReasonNodeUnknown
	case n.NetworkUnavailable:
		return ReasonNetworkUnavailable
	}
	if _, ok := n.Labels[election.ExcludeLabel]; ok && !opts.IgnoreExcludeLabel {
		return ReasonExcluded
	}
	return ""
}

// serviceIneligible says why the Services sharing an IP cannot be served
// from node: none has a serving endpoint, or a Local one has none here.
func serviceIneligible(svcs []view.Service, node string) string {
	for _, s := range svcs {
		if !s.Local {
			continue
		}
		nodes := s.ReadyNodes
		if len(nodes) == 0 {
			nodes = s.ServingTerminatingNodes
		}
		if !nodes[node] {
			return ReasonNoLocalEndpoint
		}
	}
	if !serving(svcs) {
		return ReasonNoEndpoints
	}
	return ""
}

// serving reports whether any of the Services has a serving endpoint on
// some node.
func serving(svcs []view.Service) bool {
	for _, s := range svcs {
		if len(s.ReadyNodes) > 0 || len(s.ServingTerminatingNodes) > 0 {
			return true
		}
	}
	return false
}

func compareRefs(a, b view.ServiceRef) int {
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}

func comparePrefixes(a, b netip.Prefix) int {
	return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
}
