package rules

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/herald-lb/herald/proxy/maglev"
	"github.com/herald-lb/herald/proxy/nft"
)

// Direct server return in the nftables mode (ForwardingDSR; docs/dsr.md).
//
// For a Service port in this mode every node builds the same Maglev
// table from its cluster-wide endpoints, and a flow's slot is the
// kernel's jhash of saddr . sport . daddr . dport with the cluster's seed:
// every node picks the same endpoint for a flow. A packet for one of the
// port's LB addresses that arrives from the network meets, before
// conntrack:
//
//	raw-prerouting: from the tunnel or from a pod, leave
//	    it; else daddr . proto . port vmap @dsr-services -> dsrr-<h>
//	dsrr-<h>: the flow's mark pinned in @dsrp-<h>, else meta mark set
//	    jhash ... map @dsrm-<h> (per slot: the mark that routes to the
//	    tunnel of the endpoint's node, or this node's own mark); the
//	    mark pinned (or its timeout refreshed); this node's own flows
//	    go on to conntrack and the nat chain, the others are not
//	    tracked: this node only forwards them, unchanged, and never
//	    sees the replies.
//
// Pinning keeps a flow where it went while the endpoints change: the
// table then remaps some slots, and a flow sent elsewhere mid-connection
// would be reset by a pod that never saw it. A node that takes over a
// flow (failover, ECMP change) has no pin and uses the table.
//
// Policy routing sends marked packets into the tunnel (proxy/tunnel); the
// mangle postrouting chain clears the mark bits so that the tunnel's own
// packet is routed normally. The endpoint's node receives the packet on
// its tunnel interface, tracks it, and its nat chain dsrn-<h> DNATs it by
// the same hash to the local endpoint (dsre-<h>), without SNAT: the
// reply leaves that node with the LB address as its source, straight to
// the client. Packets whose slot is this node's own take the same nat
// chain. Pods and the node itself reach the address as before (ext-<h>).
const (
	NFTChainDSRPrerouting  = "raw-prerouting"     // filter, prerouting, raw priority
	NFTChainDSRPostrouting = "mangle-postrouting" // filter, postrouting, mangle priority
	NFTMapDSRServices      = "dsr-services"       // LB IP . proto . port : goto dsrr-<h>

	NFTPrefixDSR       = "dsrn-" // nat: DNAT by the hash to a local endpoint
	NFTPrefixDSRRaw    = "dsrr-" // raw: mark and untrack flows of other nodes' endpoints
	NFTPrefixDSRMarks  = "dsrm-" // map slot : mark
	NFTPrefixDSREndpts = "dsre-" // map slot : local endpoint
	NFTPrefixDSRPins   = "dsrp-" // dynamic map flow : mark

	// DSRPinTimeout is how long a pinned flow stays without a packet,
	// DSRPinSize the most flows pinned per Service port (past it, new
	// flows go by the table alone).
	DSRPinTimeout = 10 * time.Minute
	DSRPinSize    = 65536
)

// dsrParams is DSRConfig for one family; zero when the mode is off.
type dsrParams struct {
	seed   uint32
	tunnel string
	mask   uint32
	peers  map[string]uint32
	lost   map[string]bool
}

func (d dsrParams) on() bool { return d.seed != 0 && d.tunnel != "" && d.mask != 0 }

// normalizeDSR checks n.DSR; a configuration that cannot work turns the
// mode off, reported.
func normalizeDSR(f Family, n *NodeConfig, probs []Problem) (dsrParams, []Problem) {
	c := n.DSR
	if c.Seed == 0 && c.Tunnel == "" && c.MarkMask == 0 {
		return dsrParams{}, probs
	}
	off := func(field, format string, args ...any) (dsrParams, []Problem) {
		return dsrParams{}, append(probs, Problem{Field: "dsr." + field, Message: fmt.Sprintf(format, args...) + "; Services asking for DSR keep SNAT forwarding"})
	}
	masq := n.MasqueradeMark
	if masq == 0 {
		masq = DefaultMasqueradeMark
	}
	switch {
	case c.Seed == 0:
		return off("seed", "0 would let the kernel draw a random seed per rule, and nodes would disagree")
	case InterfaceNameProblem(c.Tunnel) != "" || c.Tunnel == "":
		return off("tunnel", "%s", cmpOr(InterfaceNameProblem(c.Tunnel), "no tunnel interface"))
	case c.MarkMask == 0 || c.MarkMask&masq != 0:
		return off("markMask", "%#x must be non-zero and leave the masquerade bit %#x alone", c.MarkMask, masq)
	}
	d := dsrParams{seed: c.Seed, tunnel: c.Tunnel, mask: c.MarkMask, peers: map[string]uint32{}, lost: map[string]bool{}}
	for n, l := range c.Lost {
		if l {
			d.lost[n] = true
		}
	}
	for name, m := range c.Peers[f] {
		if m == 0 || m&^c.MarkMask != 0 || m == c.MarkMask {
			probs = append(probs, Problem{Field: "dsr.peers[" + name + "]", Message: fmt.Sprintf("mark %#x is not within the mask %#x, or is the mask itself (this node's own); the node is not reachable by DSR", m, c.MarkMask)})
			continue
		}
		d.peers[name] = m
	}
	return d, probs
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// dsrPlan is what one Service port in the mode renders.
type dsrPlan struct {
	mod uint32
	// marks: slot -> mark: the peer's for slots whose endpoint runs on
	// another node, the mask itself for this node's (localMark).
	marks []nft.Element
	// local: slot -> endpoint on this node. A slot whose endpoint is
	// remote gets a local endpoint too, so that a packet another node
	// tunneled here by a table that disagrees with this node's (an
	// endpoint change on its way) still finds one.
	local []nft.Element
	// remote: some slot's endpoint runs on another node.
	remote bool
	// names
	nat, raw, marksMap, localMap, pins string
}

// planDSR decides whether s gets direct server return on this node, and
// with what; a refusal says why (the Service keeps SNAT forwarding), and
// so does a plan that leaves endpoints out.
func (r *nftRenderer) planDSR(s *svcPort, pl servicePlan) (*dsrPlan, *Problem) {
	if !s.dsr || len(s.lbVIPs) == 0 || !pl.hasAny {
		return nil, nil
	}
	refuse := func(format string, args ...any) (*dsrPlan, *Problem) {
		return nil, &Problem{Service: s.id, Field: "forwarding", Message: "dsr: " + fmt.Sprintf(format, args...) + "; forwarding stays SNAT"}
	}
	d := r.node.dsr
	switch {
	case !d.on():
		return refuse("this proxy has no DSR tunnel (it runs without --dsr, or the tunnel could not be made: see its log)")
	case s.eTPLocal:
		return refuse("externalTrafficPolicy Local keeps the client's address already, and only local endpoints serve")
	case s.affinity > 0:
		return refuse("sessionAffinity ClientIP is not supported with DSR yet")
	case s.restricted:
		return refuse("loadBalancerSourceRanges are not supported with DSR yet")
	case len(pl.cluster) > maglev.MaxEndpoints:
		return refuse("%d endpoints, more than a table holds (%d)", len(pl.cluster), maglev.MaxEndpoints)
	}
	addrs := make([]netip.AddrPort, 0, len(pl.cluster))
	byAddr := make(map[netip.AddrPort]epInfo, len(pl.cluster))
	var local []netip.AddrPort
	var lost []string
	for _, e := range pl.cluster {
		if !e.local && d.lost[e.node] {
			lost = append(lost, e.str+" on "+e.node)
			continue
		}
		addrs = append(addrs, e.addr)
		byAddr[e.addr] = e
		if e.local {
			local = append(local, e.addr)
			continue
		}
		if e.node == "" {
			return refuse("endpoint %s has no node name", e.str)
		}
		if _, ok := d.peers[e.node]; !ok {
			return refuse("no working tunnel to node %s (endpoint %s): herald's proxy must run there with --dsr, with an address of the tunnel's family, and the tunnel's UDP port must pass between the nodes", e.node, e.str)
		}
	}
	if len(addrs) == 0 {
		return refuse("every endpoint's node stopped answering over the tunnel (%s)", strings.Join(lost, ", "))
	}
	t, err := maglev.New(addrs)
	if err != nil {
		return refuse("%v", err)
	}
	var note *Problem
	if len(lost) > 0 {
		note = &Problem{Service: s.id, Field: "forwarding", Message: "dsr: endpoints " + strings.Join(lost, ", ") +
			" left out of the table: their nodes stopped answering over the tunnel"}
	}
	readable := nftReadable(s)
	p := &dsrPlan{mod: uint32(t.Size()),
		nat: NFTPrefixDSR + s.hash + "-" + readable, raw: NFTPrefixDSRRaw + s.hash + "-" + readable,
		marksMap: NFTPrefixDSRMarks + s.hash + "-" + readable, localMap: NFTPrefixDSREndpts + s.hash + "-" + readable,
		pins: NFTPrefixDSRPins + s.hash + "-" + readable}
	eps := t.Endpoints()
	for i := range t.Size() {
		owner := byAddr[eps[t.Owner(i)]]
		key := nft.Key{Slot: uint32(i)}
		switch {
		case owner.local:
			p.local = append(p.local, nft.Element{Key: key, To: owner.addr})
			p.marks = append(p.marks, nft.Element{Key: key, Mark: d.mask})
		default:
			p.remote = true
			p.marks = append(p.marks, nft.Element{Key: key, Mark: d.peers[owner.node]})
			if len(local) > 0 {
				p.local = append(p.local, nft.Element{Key: key, To: local[i%len(local)]})
			}
		}
	}
	return p, note
}

// dsrStatic adds the base chains and the dispatch map of the mode.
func (r *nftRenderer) dsrStatic() {
	n := &r.node
	if !n.dsr.on() {
		return
	}
	pre := r.chain(NFTChainDSRPrerouting, &nft.Base{Type: nft.TypeFilter, Hook: nft.HookPrerouting, Priority: nft.PriorityRaw})
	pre.Rules = append(pre.Rules, rule("tunneled here by another node: DNATed to a local endpoint", nft.MatchIifname{Name: n.dsr.tunnel}, nft.Verdict{Kind: nft.Return}))
	if n.pods.ok() {
		pre.Rules = append(pre.Rules, rule("pods reach DSR Services as any other", n.pods.nft(false), nft.Verdict{Kind: nft.Return}))
	}
	pre.Rules = append(pre.Rules, rule("herald DSR services", nft.VmapLookup{Key: keyAddrProtoPort, Map: NFTMapDSRServices}))
	r.set(&nft.Set{Name: NFTMapDSRServices, Key: keyAddrProtoPort, Map: true})
	post := r.chain(NFTChainDSRPostrouting, &nft.Base{Type: nft.TypeFilter, Hook: nft.HookPostrouting, Priority: nft.PriorityMangle})
	post.Rules = []nft.Rule{rule("routed into the DSR tunnel: the tunnel's own packet is routed normally",
		nft.MatchMark{Bit: n.dsr.mask}, nft.MarkAnd{Mask: ^n.dsr.mask})}
}

// dsrForwardRules accept what this node tunnels for DSR Services: it is
// untracked, so no conntrack rule would.
func (r *nftRenderer) dsrForwardRules() []nft.Rule {
	if !r.node.dsr.on() {
		return nil
	}
	return []nft.Rule{rule("herald DSR: forwarded into the tunnel", nft.MatchMark{Bit: r.node.dsr.mask}, nft.Verdict{Kind: nft.Accept})}
}

// dsrDispatch adds the raw dispatch of the port's LB addresses.
func (r *nftRenderer) dsrDispatch(s *svcPort, p *dsrPlan) {
	proto := nftProto(s.proto)
	port, _ := strconv.Atoi(s.port)
	for _, ip := range s.lbVIPs {
		r.add(NFTMapDSRServices, nft.Key{Addr: ip, Proto: proto, Port: uint16(port)}, goTo(p.raw))
	}
}

// dsrChains makes the port's chains and maps; it returns their names.
func (r *nftRenderer) dsrChains(s *svcPort, p *dsrPlan, ext string) []string {
	proto := nft.MatchProto{Proto: nftProto(s.proto)}
	mask := r.node.dsr.mask
	m := r.set(&nft.Set{Name: p.marksMap, Key: nft.KeyType{nft.Slot}, Marks: true, Elements: p.marks})
	pins := r.set(&nft.Set{Name: p.pins, Key: nft.FlowKey, Marks: true, Dynamic: true, Timeout: DSRPinTimeout, Size: DSRPinSize})
	raw := r.chain(p.raw, nil)
	raw.Rules = []nft.Rule{
		rule(s.name+" DSR: a flow already seen goes where it went", nft.MarkLookup{Key: nft.FlowKey, Map: pins.Name}),
		rule(s.name+" DSR: a new flow goes by the table", nft.MatchMarkValue{Mask: mask}, nft.MarkHash{Mod: p.mod, Seed: r.node.dsr.seed, Map: m.Name}),
		rule(s.name+" DSR: pinned", nft.MatchMark{Bit: mask}, nft.UpdateMap{Key: nft.FlowKey, Map: pins.Name}),
		rule(s.name+" DSR: this node's endpoint: conntrack and the nat chain", nft.MatchMarkValue{Mask: mask, Value: mask}, nft.MarkAnd{Mask: ^mask}, nft.Verdict{Kind: nft.Return}),
		rule(s.name+" DSR: tunneled, tracked by the endpoint's node", nft.MatchMark{Bit: mask}, nft.NoTrack{}),
	}
	owned := []string{p.raw, p.marksMap, p.pins}
	r.trackSet(m)
	r.trackSet(pins)
	nat := r.chain(p.nat, nil)
	owned = append(owned, p.nat)
	if r.node.pods.ok() {
		nat.Rules = append(nat.Rules, rule("pod traffic for "+s.name+" takes the usual path", r.node.pods.nft(false), goTo(ext)))
	}
	nat.Rules = append(nat.Rules, rule("LOCAL traffic for "+s.name+" takes the usual path", nft.MatchFibLocal{Field: nft.Saddr}, goTo(ext)))
	if len(p.local) > 0 {
		m := r.set(&nft.Set{Name: p.localMap, Key: nft.KeyType{nft.Slot}, Endpoints: true, Proto: proto.Proto, Elements: p.local})
		nat.Rules = append(nat.Rules, rule(s.name+" DSR endpoints", proto, nft.DNATHash{Mod: p.mod, Seed: r.node.dsr.seed, Map: m.Name}))
		owned = append(owned, p.localMap)
		r.trackSet(m)
	}
	// No local endpoint for the flow (tables that disagree for a moment):
	// the usual path still serves it, through this node.
	nat.Rules = append(nat.Rules, rule(s.name+" without a local endpoint", goTo(ext)))
	return owned
}

// trackSet records a Service port's own set for the next render.
func (r *nftRenderer) trackSet(s *nft.Set) {
	if r.cur != nil {
		r.cur.sets = append(r.cur.sets, s)
	}
}
