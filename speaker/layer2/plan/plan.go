// Package plan turns what a speaker knows — the configuration, the
// LoadBalancer Services and their endpoints, the Nodes and the memberlist
// members — into what this node announces over layer 2, as a pure
// function (Compute), and tells the speaker loop what changed (Diff).
//
// It does no I/O: the speaker feeds it plain structs built from informers
// and memberlist, hands State.Announced to the layer-2 responders, sends
// gratuitous bursts for Changes.Gained and writes the ServiceAnnouncement
// objects of Changes.Create/Update/Delete.
//
// Every speaker runs the same election (speaker/layer2/election) over the same
// inputs, so the nodes agree on one winner per IP without talking. For
// that the election reads every node's interfaces, this one's included,
// from the memberlist metadata; this node's own, fresher view (Local) only
// decides on which interfaces it answers once it has won.
package plan

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/speaker/layer2/election"
	"github.com/herald-lb/herald/speaker/view"
)

// Protocol is the ServiceAnnouncement protocol of layer-2 announcements.
const Protocol = "layer2"

// Member is a live speaker with its memberlist metadata.
type Member struct {
	Name           string
	Interfaces     []string
	DownInterfaces []string
	// Recovering: the speaker says the cluster counted it out lately
	// (election.Node.Recovering).
	Recovering bool
	// CountedOutAt is when the cluster last counted it out
	// (election.Node.CountedOutAt).
	CountedOutAt time.Time
	// Drained: the node carries herald drain's mark
	// (election.Node.Drained).
	Drained bool
	// HoldsTogether: the speaker runs this version's election
	// (election.Node.HoldsTogether).
	HoldsTogether bool
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

// Input is everything Compute reads.
type Input struct {
	Config   *config.Config
	Services []view.Service
	Nodes    []view.Node
	// Members are the live memberlist members.
	Members []Member
	Local   Local
	Options view.Options
	// Isolated: this speaker's memberlist view is a minority of the
	// speakers it knows of while the API shows speakers outside it alive,
	// so those elect without it. It then
	// announces only the addresses no other node could announce
	// (ReasonIsolated for the rest), so a client never gets two answers.
	Isolated bool
	// Reporter: this speaker publishes the reasons that hold on every
	// node (no eligible node, no L2Advertisement selects the Service),
	// so that one object, not one per node, says why. The speakers pick
	// the first live member by name, as for sweeping.
	Reporter bool
	// Previous is the State of the last Compute, if any: an address whose
	// candidates only changed by nodes other than its winner is not
	// ranked again (the result is the same without it).
	Previous *State
	// Unprogrammed are addresses this node's proxy has no rules for yet:
	// won here, they are not answered until it has (the election does
	// not change, so no other node takes them meanwhile).
	Unprogrammed map[netip.Addr]bool
	// Contested are addresses whose former winner was declared dead
	// without leaving: won here, they are not answered (ReasonContested,
	// IP.Checking) until the speaker has seen that the former winner no
	// longer answers for them on the LAN, which it still does when it is
	// the other side of a partition that has not found itself a
	// minority yet.
	Contested map[netip.Addr]bool
	// Awaiting are addresses whose last winner is a live member that
	// says when it stops answering (speaker/layer2/release): won here,
	// they are not answered (ReasonAwaiting) until it has, so that one
	// node answers at a time.
	Awaiting map[netip.Addr]bool
}

// Why a Service's IP is left out of the layer-2 election (besides the
// view.Reason* ones, which hold for every protocol).
const (
	ReasonNoAdvertisement    = "no L2Advertisement announces the IP's pool"
	ReasonServiceNotSelected = "no L2Advertisement for the IP's pool selects the Service"
)

// Why an elected IP is not announced.
const (
	ReasonNoCandidate  = "no node is eligible to announce the IP"
	ReasonLocalDown    = "this node won the IP but none of its interfaces for it is up"
	ReasonIsolated     = "this speaker reaches no more than a minority of the speakers while the API shows the others alive; it announces only addresses no other node may announce"
	ReasonUnprogrammed = view.ReasonUnprogrammed
	ReasonContested    = "this node won the IP from a node declared dead and checks that the latter no longer answers for it on the LAN"
	ReasonAwaiting     = "this node won the IP from a live node and waits for it to say it stopped answering for it"
)

// IP is the election result for one address.
type IP struct {
	Addr netip.Addr
	Pool string
	// Services share the address and are announced with it.
	Services []view.ServiceRef
	// Advertisements are the names of the L2Advertisements covering it.
	Advertisements []string
	// Winner is the announcing node; "" when none is eligible.
	Winner string
	// Excluded says why each non-candidate node is not one.
	Excluded election.Exclusions
	// Interfaces are where this node answers for the address, sorted;
	// empty unless this node won and has one of them up.
	Interfaces []string
	// Checking are where this node would answer for an address it holds
	// back: a contested one (Input.Contested), where it checks that
	// nobody else answers, or an awaited one (Input.Awaiting), where it
	// answers once the former holder released it.
	Checking []string
	// Reason is set when no node announces the address, or this node won
	// but cannot.
	Reason string
}

// Announced reports whether this node announces the address.
func (ip IP) Announced() bool { return len(ip.Interfaces) > 0 }

// State is the result of Compute; every list is sorted.
type State struct {
	// Node is this node's name.
	Node string
	// IPs are the elected addresses, by address.
	IPs []IP
	// Ignored are the Services and addresses left out, and why.
	Ignored []view.Ignored
	// Announcements are this node's, by Service.
	Announcements []view.Announcement
	// Isolated is Input.Isolated.
	Isolated bool

	// winners and classes carry the election to the next Compute: per
	// address that took the shared candidates of its advertisements,
	// the key of those and the winner among them; per key, the shared
	// candidates.
	winners map[netip.Addr]memo
	classes map[string][]string
}

type memo struct {
	class, winner string
}

// classDiff is how a set of shared candidates changed since Previous.
type classDiff struct {
	known   bool
	added   []string
	removed map[string]bool
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
	groups, ignored := view.GroupIPs(in.Config, in.Services, ads, ReasonNoAdvertisement, ReasonServiceNotSelected)
	st.Ignored = ignored

	nodes, localLabels, localKnown := electionNodes(in)
	opts := election.Options{IgnoreExcludeLabel: in.Options.IgnoreExcludeLabel}
	var apiNodes []election.Node
	if in.Isolated {
		apiNodes = assumeAlive(nodes, in)
	}
	adIndex := map[*config.L2Advertisement]int{}
	for i, ad := range ads {
		adIndex[ad] = i
	}
	eligibility := map[string]election.Eligibility{}
	diffs := map[string]classDiff{}
	st.winners, st.classes = map[netip.Addr]memo{}, map[string][]string{}
	perService := map[view.ServiceRef]*view.Announcement{}
	announcement := func(ref view.ServiceRef) *view.Announcement {
		an := perService[ref]
		if an == nil {
			an = &view.Announcement{Service: ref, Node: in.Local.Name, Protocol: Protocol}
			perService[ref] = an
		}
		return an
	}
	for a, g := range groups {
		ip := IP{Addr: a, Pool: g.Pool}
		eip := election.IP{Addr: a, Advertisements: g.Ads}
		for _, s := range g.Services {
			ip.Services = append(ip.Services, s.Ref())
			eip.Services = append(eip.Services, election.Service{
				Local: s.Local, ReadyNodes: s.ReadyNodes, ServingTerminatingNodes: s.ServingTerminatingNodes,
			})
		}
		slices.SortFunc(ip.Services, view.ServiceRef.Compare)
		for _, ad := range g.Ads {
			ip.Advertisements = append(ip.Advertisements, ad.Name)
		}
		slices.Sort(ip.Advertisements)
		ip.Advertisements = slices.Compact(ip.Advertisements)
		// Nodes are checked once per set of advertisements, not once
		// per address: the same winners as election.Elect.
		key := adsKey(g.Ads, adIndex)
		el, ok := eligibility[key]
		if !ok {
			el = election.Eligible(g.Ads, nodes, opts)
			eligibility[key] = el
		}
		cands, excluded, shared := el.Candidates(eip.Services)
		ip.Excluded = excluded
		if shared {
			ip.Winner = st.winnerSince(in.Previous, a, key, cands, diffs)
		} else {
			ip.Winner = election.Winner(a, cands)
		}
		if in.Isolated && ip.Winner == in.Local.Name {
			if c, _ := election.Candidates(eip, apiNodes, opts); len(c) != 1 || c[0] != in.Local.Name {
				ip.Winner, ip.Reason = "", ReasonIsolated
			}
		}
		switch {
		case ip.Reason == ReasonIsolated:
		case ip.Winner == "":
			ip.Reason = ReasonNoCandidate
		case ip.Winner == in.Local.Name && localKnown && in.Unprogrammed[a]:
			ip.Reason = ReasonUnprogrammed
		case ip.Winner == in.Local.Name && localKnown:
			ifs := localInterfaces(g.Ads, localLabels, in.Local)
			switch {
			case len(ifs) == 0:
				ip.Reason = ReasonLocalDown
			case in.Contested[a]:
				ip.Reason, ip.Checking = ReasonContested, ifs
			case in.Awaiting[a]:
				ip.Reason, ip.Checking = ReasonAwaiting, ifs
			default:
				ip.Interfaces = ifs
			}
		}
		switch {
		case ip.Announced():
			for _, ref := range ip.Services {
				an := announcement(ref)
				an.IPs = append(an.IPs, a)
				an.Interfaces = append(an.Interfaces, ip.Interfaces...)
			}
		case ip.Reason == ReasonLocalDown, ip.Reason == ReasonNoCandidate && in.Reporter:
			// The winner that cannot announce says so itself; a
			// reason every node computes alike, only the reporter.
			// An isolated speaker publishes nothing per address: the
			// others elect without it and announce them, and a write
			// per Service from it would only repeat its one problem
			// (herald_speaker_isolated and its log say it).
			u := view.Unannounced{Addr: a, Reason: ip.Reason}
			if ip.Reason == ReasonNoCandidate {
				u.Detail = view.NodesDetail(ip.Excluded.Map())
			}
			for _, ref := range ip.Services {
				an := announcement(ref)
				an.Unannounced = append(an.Unannounced, u)
			}
		}
		st.IPs = append(st.IPs, ip)
	}
	if in.Reporter {
		for _, ig := range st.Ignored {
			if ig.Reason == ReasonServiceNotSelected && ig.Addr.IsValid() {
				an := announcement(ig.Service)
				an.Unannounced = append(an.Unannounced, view.Unannounced{Addr: ig.Addr, Reason: ig.Reason, Detail: ig.Detail})
			}
		}
	}
	slices.SortFunc(st.IPs, func(a, b IP) int { return a.Addr.Compare(b.Addr) })
	for _, an := range perService {
		slices.SortFunc(an.IPs, netip.Addr.Compare)
		slices.Sort(an.Interfaces)
		an.Interfaces = slices.Compact(an.Interfaces)
		an.Unannounced = view.SortUnannounced(an.Unannounced)
		st.Announcements = append(st.Announcements, *an)
	}
	slices.SortFunc(st.Announcements, func(a, b view.Announcement) int { return a.Service.Compare(b.Service) })
	slices.SortStableFunc(st.Ignored, func(a, b view.Ignored) int {
		return cmp.Or(a.Service.Compare(b.Service), a.Addr.Compare(b.Addr))
	})
	return st
}

// winnerSince elects a among the shared candidates of class, from the
// previous winner when the candidates changed only by other nodes, and
// remembers it for the next Compute.
func (st *State) winnerSince(prev *State, a netip.Addr, class string, cands []string, diffs map[string]classDiff) string {
	st.classes[class] = cands
	winner := ""
	m, ok := memo{}, false
	if prev != nil {
		m, ok = prev.winners[a]
	}
	d, seen := diffs[class]
	if ok && m.class == class && m.winner != "" && !seen {
		if before, known := prev.classes[class]; known {
			d = classDiff{known: true, added: election.Added(before, cands), removed: map[string]bool{}}
			for _, n := range election.Added(cands, before) {
				d.removed[n] = true
			}
		}
		diffs[class] = d
	}
	if ok && m.class == class && m.winner != "" && d.known && !d.removed[m.winner] {
		winner = election.WinnerWith(a, m.winner, d.added)
	} else {
		winner = election.Winner(a, cands)
	}
	st.winners[a] = memo{class: class, winner: winner}
	return winner
}

// adsKey names a set of advertisements by their places in the
// configuration (the pointer where one is not there).
func adsKey(ads []*config.L2Advertisement, index map[*config.L2Advertisement]int) string {
	var b strings.Builder
	for _, ad := range ads {
		if i, ok := index[ad]; ok {
			fmt.Fprintf(&b, "%d,", i)
		} else {
			fmt.Fprintf(&b, "%p,", ad)
		}
	}
	return b.String()
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
			CountedOutAt:       m.CountedOutAt,
			Drained:            m.Drained,
			HoldsTogether:      m.HoldsTogether,
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
