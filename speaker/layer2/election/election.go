// Package election decides, as a pure function, which node announces each
// LoadBalancer IP over layer 2.
//
// Every speaker computes the same answer from the same inputs (the
// memberlist view, the Nodes, the configuration and the EndpointSlices),
// so no coordination beyond membership is needed. Candidates are filtered
// (see Candidates) and ranked by rendezvous hashing of (node, IP): each
// node gets a pseudo-random score per IP and the highest score wins. That
// spreads IPs evenly over nodes, puts Services that share an IP on the
// same node (the score depends on the IP only), and when a node leaves
// only the IPs it held move; when one joins, only the IPs it now wins
// move to it.
package election

import (
	"crypto/sha256"
	"encoding/binary"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/herald-lb/herald/config"
)

// Node is what election needs to know about one node.
type Node struct {
	Name   string
	Labels map[string]string
	// Live: the node's speaker is a member of the memberlist cluster.
	Live bool
	// NetworkUnavailable: the Node's NetworkUnavailable condition is true.
	NetworkUnavailable bool
	// DownInterfaces are interfaces the speaker reports without carrier
	// (memberlist metadata), so it must not win IPs announced only there.
	DownInterfaces []string
	// Interfaces are the node's interfaces suitable for announcing (up,
	// not loopback, not a bridge port); used when an advertisement names
	// no interfaces.
	Interfaces []string
	// Recovering: the speaker says (memberlist metadata) that the cluster
	// counted it out lately; it wins an IP only when no other candidate
	// is left (see Candidates).
	Recovering bool
	// CountedOutAt is when the cluster last counted the speaker out, by
	// its own clock (memberlist metadata; zero: never, or an older
	// speaker). Recovering nodes counted out together are peers, not
	// one another's betters (see Together).
	CountedOutAt time.Time
	// Drained: the node carries herald drain's mark (memberlist
	// metadata); it wins an IP only when no other candidate is left,
	// recovering ones included (see Candidates).
	Drained bool
	// HoldsTogether: the speaker holds a node out of its recovery hold
	// back while one counted out with it is still in its hold (see
	// Candidates); speakers that release what they lose do
	// (members.Meta.Releases). While a live speaker does not, none
	// does, so that every speaker elects alike.
	HoldsTogether bool
}

// ExcludeLabel keeps a node out of external load balancing, as for
// cloud load balancers.
const ExcludeLabel = "node.kubernetes.io/exclude-from-external-load-balancers"

// Options tune eligibility.
type Options struct {
	// IgnoreExcludeLabel lets nodes carrying ExcludeLabel announce.
	IgnoreExcludeLabel bool
}

// Service is one Service holding the IP.
type Service struct {
	// Local: externalTrafficPolicy Local.
	Local bool
	// ReadyNodes are nodes with a ready endpoint; ServingTerminatingNodes
	// those with an endpoint that is terminating but still serving.
	ReadyNodes              map[string]bool
	ServingTerminatingNodes map[string]bool
}

// IP is one LoadBalancer IP to elect a node for.
type IP struct {
	Addr netip.Addr
	// Advertisements are the L2Advertisements that announce the IP's pool
	// for its Services (already filtered by pool and Service selectors).
	Advertisements []*config.L2Advertisement
	// Services sharing the IP (usually one).
	Services []Service
}

// Why a node is not a candidate.
const (
	ReasonNotLive            = "speaker not in the memberlist cluster"
	ReasonNetworkUnavailable = "node NetworkUnavailable"
	ReasonExcluded           = "node labelled " + ExcludeLabel
	ReasonNoAdvertisement    = "no L2Advertisement selects the node for this IP"
	ReasonInterfacesDown     = "no interface to announce the IP on is present and up"
	ReasonNoLocalEndpoint    = "externalTrafficPolicy Local and no local endpoint"
	ReasonRecovering         = "speaker recovering: the cluster declared it dead or it was isolated lately, and another candidate, not counted out with it, is healthy"
	ReasonDrained            = "node drained (herald drain), and another candidate is not"
	ReasonHeldTogether       = "speaker out of its recovery hold, waiting for a node counted out with it that is still in its hold, while another candidate is healthy"
)

// Candidates returns the nodes eligible to announce ip, sorted by name,
// and why each other node is not. A node is eligible when its speaker is
// live, its network is available, it is not excluded, an advertisement
// for the IP selects it with at least one announce interface up, and,
// under externalTrafficPolicy Local, it has a ready endpoint of every
// Service sharing the IP — or, when no node has a ready one, a serving
// terminating one (so a rolling update does not blackhole the IP).
//
// A recovering node is a candidate only when every eligible node is
// recovering: a node that flaps (declared dead, back, dead again, as a
// speaker starved of CPU does) then loses its IPs once and does not take
// them back until it has stayed counted in for a while, instead of
// moving them back and forth on every flap.
//
// Nodes counted out together (Together: one symmetric blip, each side
// declaring the other dead, or a partition with no majority) are peers:
// one whose hold ended first does not outrank the others, so when the
// holds end a few hundred milliseconds apart the addresses stay where
// they are instead of moving to the first node out and back.
//
// A drained node is a candidate only when every eligible node is
// drained: its addresses go to the others, but one that no other node
// may announce (Local with its only endpoint there) stays answered
// until the endpoint goes.
func Candidates(ip IP, nodes []Node, opts Options) (candidates []string, excluded map[string]string) {
	candidates, x, _ := Eligible(ip.Advertisements, nodes, opts).Candidates(ip.Services)
	return candidates, x.Map()
}

// Eligibility is the part of Candidates that depends on the nodes and
// the advertisements only: IPs with the same advertisements share it, so
// a sync over many IPs checks each node once per set of advertisements,
// not once per IP.
type Eligibility struct {
	// eligible passed every check but the local endpoint one, by name.
	eligible map[string]Node
	// names are eligible's names, sorted, when none is recovering or
	// drained.
	names    []string
	excluded map[string]string
	// holdTogether: every live node holds together (Node.HoldsTogether).
	holdTogether bool
}

// Eligible checks nodes (with unique names) against everything but the
// Services of an IP announced by ads.
func Eligible(ads []*config.L2Advertisement, nodes []Node, opts Options) Eligibility {
	e := Eligibility{excluded: map[string]string{}, eligible: map[string]Node{}, holdTogether: true}
	ip := IP{Advertisements: ads}
	lesser := false
	for _, n := range nodes {
		if n.Live && !n.HoldsTogether {
			e.holdTogether = false
		}
		if why := ineligible(n, ip, opts, nil); why != "" {
			e.excluded[n.Name] = why
			continue
		}
		e.eligible[n.Name] = n
		lesser = lesser || n.Recovering || n.Drained
	}
	if !lesser {
		e.names = slices.Sorted(maps.Keys(e.eligible))
	}
	return e
}

// Exclusions says why nodes are not candidates for an IP. It is kept as
// the parts Candidates found them in, since under Local most nodes are
// out for want of an endpoint, and spelling that out per node per IP
// would cost a map of every node per IP and sync.
type Exclusions struct {
	base     map[string]string
	eligible map[string]Node
	// localNeed is the IP's Local Services' nodes: eligible nodes
	// outside one of them have no local endpoint.
	localNeed  []map[string]bool
	recovering []string
	drained    []string
}

// Reason is why node is not a candidate, "" when it is one (or unknown).
func (x Exclusions) Reason(node string) string {
	if why, ok := x.base[node]; ok {
		return why
	}
	if _, ok := x.eligible[node]; ok && !local(node, x.localNeed) {
		return ReasonNoLocalEndpoint
	}
	if slices.Contains(x.recovering, node) {
		return x.recoveringReason(node)
	}
	if slices.Contains(x.drained, node) {
		return ReasonDrained
	}
	return ""
}

// recoveringReason tells a node in its recovery hold from one out of it
// that waits for a node counted out with it.
func (x Exclusions) recoveringReason(node string) string {
	if x.eligible[node].Recovering {
		return ReasonRecovering
	}
	return ReasonHeldTogether
}

// Map is every excluded node with its reason.
func (x Exclusions) Map() map[string]string {
	out := maps.Clone(x.base)
	if out == nil {
		out = map[string]string{}
	}
	if x.localNeed != nil {
		for n := range x.eligible {
			if !local(n, x.localNeed) {
				out[n] = ReasonNoLocalEndpoint
			}
		}
	}
	for _, n := range x.recovering {
		out[n] = x.recoveringReason(n)
	}
	for _, n := range x.drained {
		out[n] = ReasonDrained
	}
	return out
}

// Candidates is Candidates for an IP held by svcs. With no Local Service
// and no recovering node, every IP gets the same slice (shared): callers
// must not modify it.
func (e Eligibility) Candidates(svcs []Service) (candidates []string, excluded Exclusions, shared bool) {
	localNeed := localRequirement(svcs)
	excluded = Exclusions{base: e.excluded, eligible: e.eligible, localNeed: localNeed}
	if localNeed == nil && (e.names != nil || len(e.eligible) == 0) {
		return e.names, excluded, true
	}
	// Under Local only the nodes of the smallest need can qualify.
	var from []string
	if localNeed == nil {
		from = slices.Collect(maps.Keys(e.eligible))
	} else {
		smallest := localNeed[0]
		for _, need := range localNeed[1:] {
			if len(need) < len(smallest) {
				smallest = need
			}
		}
		for n := range smallest {
			if _, ok := e.eligible[n]; ok {
				from = append(from, n)
			}
		}
	}
	// Preferred first: healthy, then recovering, then drained nodes; a
	// node of a later tier is a candidate only when the earlier ones
	// are empty.
	var recovering, drained []string
	for _, name := range from {
		if !local(name, localNeed) {
			continue
		}
		switch n := e.eligible[name]; {
		case n.Drained:
			drained = append(drained, name)
		case n.Recovering:
			recovering = append(recovering, name)
		default:
			candidates = append(candidates, name)
		}
	}
	// A node out of its hold counted out together with one still in its
	// hold waits for it: the holds of one event end together, so an
	// address moves once, where it goes when all are back, not first to
	// the node whose hold ended a moment earlier. When no healthy node
	// is left but those, they stay the healthy ones, and the peer rule
	// below adds those still in their holds.
	var waiting []string
	if e.holdTogether && len(candidates) > 0 && len(recovering) > 0 {
		var healthy []string
		for _, c := range candidates {
			if togetherWithAny(e.eligible[c], recovering, e.eligible) {
				waiting = append(waiting, c)
			} else {
				healthy = append(healthy, c)
			}
		}
		if len(healthy) > 0 {
			candidates = healthy
		} else {
			waiting = nil
		}
	}
	// A recovering node counted out together with every healthy
	// candidate is their peer.
	if len(candidates) > 0 && len(recovering) > 0 {
		var lesser []string
		healthy := slices.Clone(candidates)
		for _, r := range recovering {
			if togetherWithAll(e.eligible[r], healthy, e.eligible) {
				candidates = append(candidates, r)
			} else {
				lesser = append(lesser, r)
			}
		}
		recovering = lesser
	}
	// Those waiting are not peers of the healthy nodes: that would hand
	// them what the node they wait for wins when it is back.
	recovering = append(recovering, waiting...)
	sort.Strings(recovering)
	sort.Strings(drained)
	switch {
	case len(candidates) > 0:
		excluded.recovering, excluded.drained = recovering, drained
	case len(recovering) > 0:
		candidates, excluded.drained = recovering, drained
	default:
		candidates = drained
	}
	sort.Strings(candidates)
	return candidates, excluded, false
}

// TogetherWindow is how close two speakers' count-outs must be for them
// to count as one event: well above memberlist's detection spread (a lone
// suspicion lasts 1.8 s) and clock skew between NTP-synced nodes, well
// below a recovery hold (30 s).
const TogetherWindow = 5 * time.Second

// Together tells whether a and b were counted out by one event: both at
// some time, within TogetherWindow of each other.
func Together(a, b Node) bool {
	if a.CountedOutAt.IsZero() || b.CountedOutAt.IsZero() {
		return false
	}
	d := a.CountedOutAt.Sub(b.CountedOutAt)
	return d <= TogetherWindow && d >= -TogetherWindow
}

func togetherWithAny(n Node, others []string, nodes map[string]Node) bool {
	for _, o := range others {
		if Together(n, nodes[o]) {
			return true
		}
	}
	return false
}

func togetherWithAll(n Node, healthy []string, nodes map[string]Node) bool {
	for _, h := range healthy {
		if !Together(n, nodes[h]) {
			return false
		}
	}
	return true
}

// localRequirement returns, per Local Service, the nodes that may announce
// for it; nil when no Service is Local.
func localRequirement(svcs []Service) []map[string]bool {
	var need []map[string]bool
	for _, s := range svcs {
		if !s.Local {
			continue
		}
		if len(s.ReadyNodes) > 0 {
			need = append(need, s.ReadyNodes)
		} else {
			need = append(need, s.ServingTerminatingNodes)
		}
	}
	return need
}

func ineligible(n Node, ip IP, opts Options, localNeed []map[string]bool) string {
	switch {
	case !n.Live:
		return ReasonNotLive
	case n.NetworkUnavailable:
		return ReasonNetworkUnavailable
	}
	if _, ok := n.Labels[ExcludeLabel]; ok && !opts.IgnoreExcludeLabel {
		return ReasonExcluded
	}
	selected, up := false, false
	for _, adv := range ip.Advertisements {
		if !adv.NodeSelectors.MatchesOrEmpty(n.Labels) {
			continue
		}
		selected = true
		ifaces := adv.Interfaces
		if len(ifaces) == 0 {
			ifaces = n.Interfaces
		}
		for _, i := range ifaces {
			if !contains(n.DownInterfaces, i) && (len(adv.Interfaces) == 0 || contains(n.Interfaces, i)) {
				up = true
			}
		}
	}
	switch {
	case !selected:
		return ReasonNoAdvertisement
	case !up:
		return ReasonInterfacesDown
	}
	if !local(n.Name, localNeed) {
		return ReasonNoLocalEndpoint
	}
	return ""
}

// local tells whether node meets every Local Service's need.
func local(node string, localNeed []map[string]bool) bool {
	for _, nodes := range localNeed {
		if !nodes[node] {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// score is the node's rendezvous weight for the IP: the first 8 bytes of
// SHA-256(node, 0, ip). Hashed into a stack buffer, since a sync hashes
// every (candidate, IP) pair.
func score(node string, ip netip.Addr) uint64 {
	var buf [128]byte
	b := append(buf[:0], node...)
	b = append(b, 0)
	if ip.Is4() {
		a := ip.As4()
		b = append(b, a[:]...)
	} else if ip.Is6() {
		a := ip.As16()
		b = append(b, a[:]...)
		if z := ip.Zone(); z != "" {
			b = append(b, z...)
		}
	}
	sum := sha256.Sum256(b)
	return binary.BigEndian.Uint64(sum[:8])
}

// ahead tells whether a node with score sa and name a ranks before one
// with sb and b: the higher score first, ties by name.
func ahead(sa uint64, a string, sb uint64, b string) bool {
	if sa != sb {
		return sa > sb
	}
	return a < b
}

// Rank orders candidates for ip, the winner first. Ties (which need a
// hash collision) fall back to the name, so every speaker agrees.
func Rank(ip netip.Addr, candidates []string) []string {
	type ranked struct {
		name  string
		score uint64
	}
	rs := make([]ranked, len(candidates))
	for i, c := range candidates {
		rs[i] = ranked{c, score(c, ip)}
	}
	sort.Slice(rs, func(i, j int) bool { return ahead(rs[i].score, rs[i].name, rs[j].score, rs[j].name) })
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.name
	}
	return out
}

// Winner is the node that announces ip, or "" when there is no candidate:
// Rank's first, found with one hash per candidate.
func Winner(ip netip.Addr, candidates []string) string {
	best, bestScore := "", uint64(0)
	for i, c := range candidates {
		if sc := score(c, ip); i == 0 || ahead(sc, c, bestScore, best) {
			best, bestScore = c, sc
		}
	}
	return best
}

// WinnerWith is the winner for ip among candidates when winner won
// among an earlier set of candidates and added are the candidates that
// were not in it: a node that was ranks below winner and still does, so
// only the added ones are hashed.
func WinnerWith(ip netip.Addr, winner string, added []string) string {
	if len(added) == 0 {
		return winner
	}
	return Winner(ip, append(slices.Clone(added), winner))
}

// Added is the names of now that are not in before; both sorted.
func Added(before, now []string) []string {
	var out []string
	i := 0
	for _, n := range now {
		for i < len(before) && before[i] < n {
			i++
		}
		if i == len(before) || before[i] != n {
			out = append(out, n)
		}
	}
	return out
}

// Elect returns the announcing node of ip among nodes ("" for none) and
// why the others are not candidates.
func Elect(ip IP, nodes []Node, opts Options) (string, map[string]string) {
	c, excluded := Candidates(ip, nodes, opts)
	return Winner(ip.Addr, c), excluded
}
