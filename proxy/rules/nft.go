package rules

import (
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/herald-lb/herald/proxy/nft"
)

// The nftables layout (one "herald" table per family; see RenderNFT).
// Base chains hook the same places the iptables mode's jumps do, so both
// modes see the same packets at the same points.
const (
	NFTChainNATPrerouting  = "nat-prerouting"
	NFTChainNATOutput      = "nat-output"
	NFTChainNATPostrouting = "nat-postrouting"
	NFTChainFilterInput    = "filter-input"
	NFTChainFilterForward  = "filter-forward"
	NFTChainFilterOutput   = "filter-output"

	NFTChainServices      = "services"                // nat: dispatch by destination
	NFTChainMasquerading  = "masquerading"            // nat: SNAT of marked packets
	NFTChainMarkMasq      = "mark-for-masquerade"     // nat
	NFTChainReject        = "reject-chain"            // filter: the target of "no endpoints"
	NFTChainEndpointCheck = "service-endpoints-check" // filter: cluster IPs without endpoints
	NFTChainExternalCheck = "external-services-check" // filter: external/LB IPs and NodePorts without endpoints
	NFTChainFirewallCheck = "firewall-check"          // filter: loadBalancerSourceRanges
	NFTChainForward       = "forward"                 // filter: forwarded service traffic

	NFTMapServiceIPs       = "service-ips"           // daddr . proto . port : goto chain
	NFTMapServiceNodePorts = "service-nodeports"     // proto . port : goto chain
	NFTMapNoEndpoints      = "no-endpoint-services"  // cluster IPs: reject or drop
	NFTMapNoEndpointsExt   = "no-endpoint-external"  // external and LB IPs: reject or drop
	NFTMapNoEndpointsNP    = "no-endpoint-nodeports" // proto . port: reject or drop
	NFTSetFirewallIPs      = "firewall-ips"          // LB IP . proto . port behind source ranges
	NFTSetHealthCheckPorts = "health-check-nodeports"
	// NFTSetNodePortIPs holds the addresses --nodeport-addresses allows;
	// it exists only when that restricts the family.
	NFTSetNodePortIPs = "nodeport-ips"
	// NFTSetHairpin holds endpoint . endpoint for the endpoints DNATed
	// straight from a Service chain: a connection an endpoint opens to
	// its own Service and that comes back to it is masqueraded, which an
	// endpoint chain's source check does in the iptables mode.
	NFTSetHairpin = "hairpin-endpoints"
	// NFTMapEndpoints (+ "-" + protocol + "-" + shard) maps a slot to an
	// endpoint's address . port. A Service chain without affinity owns a
	// block of NFTSlotBlock slots and picks its endpoint with one rule,
	// numgen random mod n offset <block> map @endpoints-tcp-7: endpoints
	// change as map elements, and the chain's rule only when their
	// number does.
	NFTMapEndpoints = "endpoints"
	// NFTSlotBlock is the most endpoints a chain picks from the map; a
	// chain with more picks with a cascade of DNAT rules instead.
	NFTSlotBlock = 1024

	// Per-service and per-endpoint chains (and affinity sets) are named
	// prefix + hash16 (the iptables mode's hash) + a readable part.
	NFTPrefixService  = "svc-"
	NFTPrefixLocal    = "svl-"
	NFTPrefixExternal = "ext-"
	NFTPrefixFirewall = "fw-"
	NFTPrefixEndpoint = "sep-"
	NFTPrefixAffinity = "affinity-"
)

// NFTRuleset is the output of RenderNFT.
type NFTRuleset struct {
	Family Family
	// Table is the whole desired table, sorted.
	Table *nft.Table
	// ServiceChains names, per Service port, the per-service and
	// per-endpoint chains (and affinity sets) it owns, so a partial sync
	// can tell which chains a changed Service rewrote.
	ServiceChains map[ServicePortName][]string
	Stats         Stats
	Health        []ServiceHealth
	Problems      []Problem
	// Slots is each chain's block in the endpoints map (its first slot),
	// and NextSlot the first block no chain has had: a chain keeps its
	// block from render to render (NFTOptions.Prev), so an endpoint
	// change does not touch its rule.
	Slots    map[string]uint32
	NextSlot uint32
	// Delta, when not nil, is the transaction from the previous render's
	// table to this one: a render that patched the previous one
	// (NFTOptions, nft_patch.go) computed it, and no diff is needed.
	Delta *nft.Changes

	patch *nftPatchState
}

// nftMaxBlocks is how many blocks the 32-bit slot space holds.
const nftMaxBlocks = 1 << 32 / NFTSlotBlock

// IsNFTServiceChain reports whether an nft chain or set belongs to one
// Service port (and is deleted with it).
func IsNFTServiceChain(name string) bool {
	for _, p := range []string{NFTPrefixService, NFTPrefixLocal, NFTPrefixExternal, NFTPrefixFirewall, NFTPrefixEndpoint, NFTPrefixAffinity,
		NFTPrefixDSR, NFTPrefixDSRRaw, NFTPrefixDSRMarks, NFTPrefixDSREndpts, NFTPrefixDSRPins} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// RenderNFT renders the complete desired state of one family as an
// nftables table with the semantics of Render's iptables rules, rule for
// rule where nftables has the same construct:
//
//	nat-prerouting, nat-output -> services:
//	    daddr . proto . port vmap @service-ips  (cluster IP -> svc/svl,
//	        external IP -> ext, LB IP -> ext or fw)
//	    fib daddr local, daddr not loopback (NodeConfig.NodePortAddresses:
//	        daddr @nodeport-ips): proto . port vmap @service-nodeports -> ext
//	svc-/svl-<h>  masquerade mark for off-cluster sources of the cluster IP,
//	              affinity lookups, then numgen random mod n vmap -> sep
//	ext-<h>, fw-<h>  as HERALD-EXT / HERALD-FW
//	sep-<e>  hairpin mark, affinity update, dnat
//	nat-postrouting -> masquerading: marked packets lose the mark, masquerade
//	filter-input/forward/output (new connections): firewall-check (drop
//	    what a source range refused), the no-endpoint maps (reject: none at
//	    all; drop: none on this node), health-check ports accepted, and
//	    forward accepts marked and established traffic.
//
// It is a pure function of its arguments.
func RenderNFT(f Family, services []Service, endpoints map[ServicePortName][]Endpoint, node NodeConfig) NFTRuleset {
	return RenderNFTWith(f, services, endpoints, node, NFTOptions{})
}

// NFTOptions make a render incremental.
type NFTOptions struct {
	// Prev is the previous render for the same node configuration, and
	// Changed the Services changed since (as Options.Changed): the
	// chains and affinity sets of every other Service port are taken
	// from Prev as they are instead of being built again. The maps and
	// sets of the dispatch are always computed whole. Nil Prev renders
	// everything.
	Prev    *NFTRuleset
	Changed map[ServiceKey]bool
}

// RenderNFTWith is RenderNFT reusing an earlier render's per-service
// chains (NFTOptions); the result is the same as a full render's.
func RenderNFTWith(f Family, services []Service, endpoints map[ServicePortName][]Endpoint, node NodeConfig, opts NFTOptions) NFTRuleset {
	rs := NFTRuleset{Family: f, ServiceChains: map[ServicePortName][]string{}, Slots: map[string]uint32{}}
	if p := opts.Prev; p != nil && int(p.NextSlot)+2*len(services) > nftMaxBlocks {
		// Blocks of gone chains are not reused: when the space runs out,
		// number every chain anew (and rewrite them all).
		opts.Prev = nil
	}
	t := &nft.Table{Family: f}
	rs.Table = t
	if f != IPv4 && f != IPv6 {
		rs.Problems = append(rs.Problems, Problem{Field: "family", Message: "unknown address family; nothing rendered"})
		return rs
	}
	np, probs := normalizeNode(f, &node)
	rs.Problems = append(rs.Problems, probs...)
	if out, ok := patchNFT(f, services, endpoints, np, rs.Problems, opts); ok {
		return out
	}
	r := newNFTRenderer(f, np, &rs, opts)
	if opts.Prev != nil && opts.Prev.Family == f && opts.Prev.Table != nil {
		t.Chains = make([]*nft.Chain, 0, len(opts.Prev.Table.Chains))
		t.Sets = make([]*nft.Set, 0, len(opts.Prev.Table.Sets))
	}
	r.static()

	rs.Problems = eachServicePort(f, services, endpoints, np, rs.Problems, r.recordService)
	rs.Problems = append(rs.Problems, r.dsrProblems...)
	r.finish()
	rs.NextSlot = r.next
	t.Sort()
	// Services without a port in this family (the other family's, in a
	// dual-stack proxy) are known too, with no records: a patch must not
	// take them for new ones and walk them all.
	for i := range services {
		if k := services[i].ID().Key(); r.records[k] == nil {
			r.records[k] = []*nftPortRecord{}
		}
	}
	rs.patch = r.patchState()
	for _, c := range t.Chains {
		if c.Base == nil {
			rs.Stats.NATRulesTotal += len(c.Rules)
		}
	}
	rs.Stats.NATRules = rs.Stats.NATRulesTotal
	rs.Stats.NATChains = len(t.Chains)
	return rs
}

type nftRenderer struct {
	f    Family
	node nodeParams
	rs   *NFTRuleset
	t    *nft.Table
	sets map[string]*nft.Set
	// keys counts, per set, the Service ports that put each key there.
	keys map[string]map[nft.Key]int32
	opts NFTOptions
	next uint32 // the next block to give a chain

	// What each Service port contributed, for the next render to patch
	// (nft_patch.go): cur is the port being rendered.
	cur     *nftPortRecord
	records map[ServiceKey][]*nftPortRecord
	// conflicts counts map keys two Service ports wanted (the first won).
	conflicts int
	// dsrProblems are the ports whose ForwardingDSR was refused.
	dsrProblems []Problem
}

func newNFTRenderer(f Family, np nodeParams, rs *NFTRuleset, opts NFTOptions) *nftRenderer {
	r := &nftRenderer{f: f, node: np, rs: rs, t: rs.Table, sets: map[string]*nft.Set{}, keys: map[string]map[nft.Key]int32{},
		opts: opts, records: map[ServiceKey][]*nftPortRecord{}}
	if opts.Prev != nil && opts.Prev.Family == f {
		r.next = opts.Prev.NextSlot
	}
	return r
}

// recordService renders a Service port and records what it added.
func (r *nftRenderer) recordService(s *svcPort, eps []epInfo) {
	rec := &nftPortRecord{id: s.id}
	before, nh := r.rs.Stats, len(r.rs.Health)
	r.cur = rec
	r.service(s, eps)
	r.cur = nil
	rec.noLocalInt = r.rs.Stats.NoLocalEndpointsInternal - before.NoLocalEndpointsInternal
	rec.noLocalExt = r.rs.Stats.NoLocalEndpointsExternal - before.NoLocalEndpointsExternal
	if len(r.rs.Health) > nh {
		h := r.rs.Health[nh]
		rec.health = &h
	}
	k := s.id.Key()
	r.records[k] = append(r.records[k], rec)
}

// slot returns the first slot of chain's block in the endpoints map:
// the one it had in the previous render, or a new block.
func (r *nftRenderer) slot(chain string) uint32 {
	if off, ok := r.rs.Slots[chain]; ok {
		return off
	}
	off, ok := uint32(0), false
	if p := r.opts.Prev; p != nil && p.Family == r.f {
		off, ok = p.Slots[chain]
	}
	if !ok {
		off = r.next * NFTSlotBlock
		r.next++
	}
	r.rs.Slots[chain] = off
	return off
}

// nftEndpointShards spreads the blocks over this many maps per protocol.
// The kernel checks each element it adds to a map against every rule
// bound to the map: one map for all Services made a first sync of
// 10,000 Services x 10 endpoints take 16.8 s (10^9 checks), and every
// endpoint change 30 ms.
const nftEndpointShards = 256

// NFTEndpointsMap names the endpoints map holding slot of protocol p.
func NFTEndpointsMap(p nft.Proto, slot uint32) string {
	return NFTMapEndpoints + "-" + p.String() + "-" + strconv.Itoa(int(slot/NFTSlotBlock%nftEndpointShards))
}

// endpointElements puts a chain's endpoints in its block of an
// endpoints map, when it picks from the map, and returns the map.
func (r *nftRenderer) endpointElements(chain string, p nft.Proto, eps []epInfo) {
	if len(eps) == 0 || len(eps) > NFTSlotBlock {
		return
	}
	off := r.slot(chain)
	m := NFTEndpointsMap(p, off)
	if r.sets[m] == nil {
		r.set(&nft.Set{Name: m, Key: nft.KeyType{nft.Slot}, Endpoints: true, Proto: p})
	}
	for i, e := range eps {
		r.addElement(m, nft.Element{Key: nft.Key{Slot: off + uint32(i)}, To: e.addr})
	}
}

// reuse takes a Service port's chains and affinity sets from the previous
// render when the port did not change, and reports whether it did.
func (r *nftRenderer) reuse(id ServicePortName) bool {
	p := r.opts.Prev
	if p == nil || p.Family != r.f || p.Table == nil || r.opts.Changed[id.Key()] {
		return false
	}
	owned, ok := p.ServiceChains[id]
	if !ok {
		return false
	}
	chains := make([]*nft.Chain, 0, len(owned))
	var sets []*nft.Set
	for _, name := range owned {
		if c := p.Table.Chain(name); c != nil {
			chains = append(chains, c)
		} else if s := p.Table.Set(name); s != nil {
			sets = append(sets, s)
		} else {
			return false // not in the previous table after all: build
		}
	}
	r.t.Chains = append(r.t.Chains, chains...)
	for _, s := range sets {
		r.set(s)
	}
	if r.cur != nil {
		r.cur.chains = append(r.cur.chains, chains...)
		r.cur.sets = append(r.cur.sets, sets...)
	}
	r.rs.ServiceChains[id] = owned
	return true
}

func (r *nftRenderer) chain(name string, base *nft.Base) *nft.Chain {
	c := &nft.Chain{Name: name, Base: base}
	r.t.Chains = append(r.t.Chains, c)
	if r.cur != nil {
		r.cur.chains = append(r.cur.chains, c)
	}
	return c
}

func (r *nftRenderer) set(s *nft.Set) *nft.Set {
	r.t.Sets = append(r.t.Sets, s)
	r.sets[s.Name] = s
	return s
}

// add adds an element; a key already there keeps its first verdict (the
// Service first by name wins, as the first iptables rule would).
func (r *nftRenderer) add(set string, key nft.Key, v nft.Verdict) {
	r.addElement(set, nft.Element{Key: key, Verdict: v})
}

func (r *nftRenderer) addElement(set string, e nft.Element) {
	m := r.keys[set]
	if m == nil {
		m = map[nft.Key]int32{}
		r.keys[set] = m
	}
	s := r.sets[set]
	if n := m[e.Key]; n > 0 {
		if s.Map || s.Endpoints {
			r.conflicts++
			return
		}
		// A plain set's element two Services want (an endpoint of
		// both in the hairpin set) is there once, counted twice.
		m[e.Key] = n + 1
	} else {
		m[e.Key] = 1
		s.Elements = append(s.Elements, e)
	}
	if r.cur != nil {
		r.cur.elems = append(r.cur.elems, nftElemRef{set: set, key: e.Key})
	}
}

var (
	keyAddrProtoPort = nft.KeyType{nft.Daddr, nft.L4Proto, nft.Dport}
	keyProtoPort     = nft.KeyType{nft.L4Proto, nft.Dport}
	ctNewOnly        = nft.MatchCtState{States: []nft.CtState{nft.CtNew}}
)

func rule(comment string, exprs ...nft.Expr) nft.Rule {
	return nft.Rule{Exprs: exprs, Comment: comment}
}

func jump(c string) nft.Verdict { return nft.Verdict{Kind: nft.Jump, Chain: c} }
func goTo(c string) nft.Verdict { return nft.Verdict{Kind: nft.Goto, Chain: c} }

func (r *nftRenderer) static() {
	n := &r.node
	base := func(name string, typ nft.ChainType, hook nft.Hook, prio int) *nft.Chain {
		return r.chain(name, &nft.Base{Type: typ, Hook: hook, Priority: prio})
	}
	for _, c := range []*nft.Chain{
		base(NFTChainNATPrerouting, nft.TypeNAT, nft.HookPrerouting, nft.PriorityDstNAT),
		base(NFTChainNATOutput, nft.TypeNAT, nft.HookOutput, nft.PriorityDstNAT),
	} {
		c.Rules = append(c.Rules, rule("herald service portals", jump(NFTChainServices)))
	}
	base(NFTChainNATPostrouting, nft.TypeNAT, nft.HookPostrouting, nft.PrioritySrcNAT).Rules =
		[]nft.Rule{rule("herald postrouting rules", jump(NFTChainMasquerading))}

	in := base(NFTChainFilterInput, nft.TypeFilter, nft.HookInput, nft.PriorityFilter)
	in.Rules = []nft.Rule{
		rule("herald load balancer firewall", ctNewOnly, jump(NFTChainFirewallCheck)),
		rule("herald health check service ports", nft.MatchProto{Proto: nft.TCP},
			nft.MatchSet{Key: nft.KeyType{nft.Dport}, Set: NFTSetHealthCheckPorts}, nft.Verdict{Kind: nft.Accept}),
		rule("herald externally-visible service portals", ctNewOnly, jump(NFTChainExternalCheck)),
	}
	fwd := base(NFTChainFilterForward, nft.TypeFilter, nft.HookForward, nft.PriorityFilter)
	fwd.Rules = []nft.Rule{
		rule("herald load balancer firewall", ctNewOnly, jump(NFTChainFirewallCheck)),
		rule("herald forwarding rules", jump(NFTChainForward)),
		rule("herald service portals", ctNewOnly, jump(NFTChainEndpointCheck)),
		rule("herald externally-visible service portals", ctNewOnly, jump(NFTChainExternalCheck)),
	}
	out := base(NFTChainFilterOutput, nft.TypeFilter, nft.HookOutput, nft.PriorityFilter)
	out.Rules = []nft.Rule{
		rule("herald load balancer firewall", ctNewOnly, jump(NFTChainFirewallCheck)),
		rule("herald service portals", ctNewOnly, jump(NFTChainEndpointCheck)),
	}

	r.set(&nft.Set{Name: NFTMapServiceIPs, Key: keyAddrProtoPort, Map: true})
	r.set(&nft.Set{Name: NFTMapServiceNodePorts, Key: keyProtoPort, Map: true})
	r.set(&nft.Set{Name: NFTMapNoEndpoints, Key: keyAddrProtoPort, Map: true})
	r.set(&nft.Set{Name: NFTMapNoEndpointsExt, Key: keyAddrProtoPort, Map: true})
	r.set(&nft.Set{Name: NFTMapNoEndpointsNP, Key: keyProtoPort, Map: true})
	r.set(&nft.Set{Name: NFTSetFirewallIPs, Key: keyAddrProtoPort})
	r.set(&nft.Set{Name: NFTSetHealthCheckPorts, Key: nft.KeyType{nft.Dport}})
	r.set(&nft.Set{Name: NFTSetHairpin, Key: nft.KeyType{nft.Saddr, nft.Daddr}})

	r.chain(NFTChainReject, nil).Rules = []nft.Rule{rule("herald services without endpoints", nft.Counter{}, nft.Reject{})}
	r.chain(NFTChainEndpointCheck, nil).Rules = []nft.Rule{
		rule("", nft.VmapLookup{Key: keyAddrProtoPort, Map: NFTMapNoEndpoints}),
	}
	if n.npRestricted {
		s := r.set(&nft.Set{Name: NFTSetNodePortIPs, Key: nft.KeyType{nft.Daddr}})
		for _, ip := range n.npIPs {
			s.Elements = append(s.Elements, nft.Element{Key: nft.Key{Addr: ip}})
		}
	}
	// NodePorts without endpoints are refused where NodePorts are served.
	r.chain(NFTChainExternalCheck, nil).Rules = []nft.Rule{
		rule("", nft.VmapLookup{Key: keyAddrProtoPort, Map: NFTMapNoEndpointsExt}),
		rule("", append(r.nodePortDst(false), nft.VmapLookup{Key: keyProtoPort, Map: NFTMapNoEndpointsNP})...),
	}
	r.chain(NFTChainFirewallCheck, nil).Rules = []nft.Rule{
		rule("traffic a loadBalancerSourceRanges refused", nft.MatchSet{Key: keyAddrProtoPort, Set: NFTSetFirewallIPs}, nft.Verdict{Kind: nft.Drop}),
	}
	var fwdRules []nft.Rule
	if !n.ctLiberal {
		// Out-of-window packets would otherwise reach a pod un-NATed and
		// be answered with a RST that kills the connection.
		fwdRules = append(fwdRules, rule("", nft.MatchCtState{States: []nft.CtState{nft.CtInvalid}}, nft.Verdict{Kind: nft.Drop}))
	}
	fwdRules = append(fwdRules, r.dsrForwardRules()...)
	fwdRules = append(fwdRules,
		rule("herald forwarding rules", nft.MatchMark{Bit: n.markBit}, nft.Verdict{Kind: nft.Accept}),
		rule("herald forwarding conntrack rule", nft.MatchCtState{States: []nft.CtState{nft.CtEstablished, nft.CtRelated}}, nft.Verdict{Kind: nft.Accept}))
	r.chain(NFTChainForward, nil).Rules = fwdRules

	// Unmarked packets leave untouched; marked ones lose the mark and are
	// masqueraded.
	r.chain(NFTChainMasquerading, nil).Rules = []nft.Rule{
		// Only DNATed packets: a node reaching its own address, which a
		// hostNetwork endpoint shares, is no hairpin (iptables marks in
		// the endpoint chain, after the DNAT decision, alike).
		rule("hairpin: an endpoint reaching itself through its Service", nft.MatchCtDNAT{}, nft.MatchSet{Key: nft.KeyType{nft.Saddr, nft.Daddr}, Set: NFTSetHairpin}, nft.MarkOr{Bit: n.markBit}),
		rule("", nft.MatchMark{Bit: n.markBit, Not: true}, nft.Verdict{Kind: nft.Return}),
		rule("", nft.MarkXor{Bit: n.markBit}),
		rule("herald service traffic requiring SNAT", nft.Masquerade{FullyRandom: n.random}),
	}
	r.chain(NFTChainMarkMasq, nil).Rules = []nft.Rule{rule("", nft.MarkOr{Bit: n.markBit})}
	r.dsrStatic()
}

// nodePortDst is the destination match of NodePort rules: the
// nodeport-ips set under --nodeport-addresses, else any local address
// (with notLoopback, any but loopback).
func (r *nftRenderer) nodePortDst(notLoopback bool) []nft.Expr {
	if r.node.npRestricted {
		return []nft.Expr{nft.MatchSet{Key: nft.KeyType{nft.Daddr}, Set: NFTSetNodePortIPs}}
	}
	m := []nft.Expr{nft.MatchFibLocal{Field: nft.Daddr}}
	if notLoopback {
		loop := netip.MustParsePrefix("127.0.0.0/8")
		if r.f == IPv6 {
			loop = netip.MustParsePrefix("::1/128")
		}
		m = append(m, nft.MatchAddr{Field: nft.Daddr, Prefix: loop, Not: true})
	}
	return m
}

func (r *nftRenderer) finish() {
	// NodePorts are matched after every exact destination; loopback is
	// excluded as in the iptables mode (the set never holds it).
	np := append(r.nodePortDst(true), nft.VmapLookup{Key: keyProtoPort, Map: NFTMapServiceNodePorts})
	r.chain(NFTChainServices, nil).Rules = []nft.Rule{
		rule("", nft.VmapLookup{Key: keyAddrProtoPort, Map: NFTMapServiceIPs}),
		rule("herald service nodeports", np...),
	}
}

func nftProto(p string) nft.Proto {
	switch p {
	case "udp":
		return nft.UDP
	case "sctp":
		return nft.SCTP
	}
	return nft.TCP
}

// nftReadable is the readable tail of a Service port's chain names:
// namespace/name/protocol/port name, in the characters nft names allow.
func nftReadable(s *svcPort) string {
	return s.id.Namespace + "/" + s.id.Name + "/" + s.proto + "/" + s.id.Port
}

func (r *nftRenderer) service(s *svcPort, eps []epInfo) {
	pl := planService(s, eps)
	pl.record(&r.rs.Stats, &r.rs.Health, s, eps)
	readable := nftReadable(s)
	n := nftNames{
		svc: NFTPrefixService + s.hash + "-" + readable, svl: NFTPrefixLocal + s.hash + "-" + readable,
		ext: NFTPrefixExternal + s.hash + "-" + readable, fw: NFTPrefixFirewall + s.hash + "-" + readable,
	}
	dsr, refused := r.planDSR(s, pl)
	if refused != nil {
		r.dsrProblems = append(r.dsrProblems, *refused)
	}
	if s.dsr && r.cur != nil {
		r.cur.dsr = true
	}
	if dsr != nil {
		n.dsr = dsr
		r.dsrDispatch(s, dsr)
	}
	r.dispatch(s, pl, n)
	if s.affinity == 0 {
		for _, e := range pl.reachable {
			a := e.addr.Addr()
			r.add(NFTSetHairpin, nft.Key{Addr: a, Addr2: a}, nft.Verdict{})
		}
		if pl.clusterChain {
			r.endpointElements(n.svc, nftProto(s.proto), pl.cluster)
		}
		if pl.localChain {
			r.endpointElements(n.svl, nftProto(s.proto), pl.local)
		}
	}
	if r.reuse(s.id) {
		return
	}
	r.serviceChains(s, pl, n)
}

// nftNames are a Service port's chains in the nftables mode, and its
// direct server return when it has it.
type nftNames struct {
	svc, svl, ext, fw string
	dsr               *dsrPlan
}

// sep and aff are an endpoint's chain and affinity set.
func nftSep(e epInfo) string { return NFTPrefixEndpoint + strings.TrimPrefix(e.chain, PrefixEndpoint) }
func nftAff(e epInfo) string { return NFTPrefixAffinity + strings.TrimPrefix(e.chain, PrefixEndpoint) }

// blockVerdict is the verdict for traffic a plan blocks.
func blockVerdict(b block) nft.Verdict {
	if b == reject {
		return goTo(NFTChainReject)
	}
	return nft.Verdict{Kind: nft.Drop}
}

// dispatch adds the map and set elements that lead a Service port's
// addresses to its chains or block them.
func (r *nftRenderer) dispatch(s *svcPort, pl servicePlan, n nftNames) {
	intV, extV := blockVerdict(pl.internalBlock), blockVerdict(pl.externalBlock)
	lbChain := n.ext
	switch {
	case pl.fwChain:
		lbChain = n.fw
	case n.dsr != nil:
		lbChain = n.dsr.nat
	}
	p := nftProto(s.proto)
	port, _ := strconv.Atoi(s.port)
	key := func(a netip.Addr) nft.Key { return nft.Key{Addr: a, Proto: p, Port: uint16(port)} }
	if pl.hasInternal {
		r.add(NFTMapServiceIPs, key(s.clusterIP), goTo(pick(pl.internalLocal, n.svc, n.svl)))
	} else {
		r.add(NFTMapNoEndpoints, key(s.clusterIP), intV)
	}
	for _, ip := range s.externalIPs {
		if pl.hasAny {
			r.add(NFTMapServiceIPs, key(ip), goTo(n.ext))
		}
		if !pl.hasExternal {
			r.add(NFTMapNoEndpointsExt, key(ip), extV)
		}
	}
	for _, ip := range s.lbVIPs {
		if pl.hasAny {
			r.add(NFTMapServiceIPs, key(ip), goTo(lbChain))
		}
		if pl.fwChain {
			r.add(NFTSetFirewallIPs, key(ip), nft.Verdict{})
		}
		if !pl.hasExternal {
			r.add(NFTMapNoEndpointsExt, key(ip), extV)
		}
	}
	if s.nodePort != 0 {
		k := nft.Key{Proto: p, Port: uint16(s.nodePort)}
		if pl.hasAny {
			r.add(NFTMapServiceNodePorts, k, goTo(n.ext))
		}
		if !pl.hasExternal {
			r.add(NFTMapNoEndpointsNP, k, extV)
		}
	}
	if s.hcnp != 0 {
		r.add(NFTSetHealthCheckPorts, nft.Key{Port: uint16(s.hcnp)}, nft.Verdict{})
	}
}

// serviceChains makes a Service port's own chains and their rules.
func (r *nftRenderer) serviceChains(s *svcPort, pl servicePlan, n nftNames) {
	var owned []string
	mk := func(name string) *nft.Chain {
		owned = append(owned, name)
		return r.chain(name, nil)
	}
	var ext, fw, svc, svl *nft.Chain
	if pl.extChain {
		ext = mk(n.ext)
	}
	if pl.fwChain {
		fw = mk(n.fw)
	}
	if pl.clusterChain {
		svc = mk(n.svc)
	}
	if pl.localChain {
		svl = mk(n.svl)
	}
	if n.dsr != nil {
		owned = append(owned, r.dsrChains(s, n.dsr, n.ext)...)
	}
	seps := make([]*nft.Chain, len(pl.reachable))
	for i, e := range pl.reachable {
		if s.affinity == 0 {
			continue
		}
		seps[i] = mk(nftSep(e))
		if s.affinity > 0 {
			owned = append(owned, nftAff(e))
			as := r.set(&nft.Set{Name: nftAff(e), Key: nft.KeyType{nft.Saddr}, Dynamic: true, Timeout: time.Duration(s.affinity) * time.Second})
			if r.cur != nil {
				r.cur.sets = append(r.cur.sets, as)
			}
		}
	}
	r.rs.ServiceChains[s.id] = owned

	p := nftProto(s.proto)
	port, _ := strconv.Atoi(s.port)
	proto := nft.MatchProto{Proto: p}
	if pl.hasInternal {
		// Off-cluster clients of a cluster IP may be answered from another
		// node: SNAT them; pods keep their source.
		c := svc
		if pl.internalLocal {
			c = svl
		}
		m := []nft.Expr{nft.MatchAddr{Field: nft.Daddr, Prefix: netip.PrefixFrom(s.clusterIP, s.clusterIP.BitLen())}, proto, nft.MatchDport{Port: uint16(port)}}
		switch {
		case r.node.masqAll:
			c.Rules = append(c.Rules, rule(s.name+" cluster IP", append(m, jump(NFTChainMarkMasq))...))
		case r.node.pods.ok():
			m = append(m, r.node.pods.nft(true), jump(NFTChainMarkMasq))
			c.Rules = append(c.Rules, rule(s.name+" cluster IP", m...))
		}
	}
	if ext != nil {
		if !s.eTPLocal {
			ext.Rules = append(ext.Rules, rule("masquerade traffic for "+s.name+" external destinations", jump(NFTChainMarkMasq)))
		} else {
			if r.node.pods.ok() {
				ext.Rules = append(ext.Rules, rule("pod traffic for "+s.name+" external destinations",
					r.node.pods.nft(false), goTo(n.svc)))
			}
			ext.Rules = append(ext.Rules,
				rule("masquerade LOCAL traffic for "+s.name+" external destinations", nft.MatchFibLocal{Field: nft.Saddr}, jump(NFTChainMarkMasq)),
				rule("route LOCAL traffic for "+s.name+" external destinations", nft.MatchFibLocal{Field: nft.Saddr}, goTo(n.svc)))
		}
		if pl.hasExternal {
			ext.Rules = append(ext.Rules, rule("", goTo(pick(pl.externalLocal, n.svc, n.svl))))
		}
	}
	if fw != nil {
		fromNode := false
		for _, pfx := range s.allowed {
			fw.Rules = append(fw.Rules, rule(s.name+" loadbalancer IP", nft.MatchAddr{Field: nft.Saddr, Prefix: pfx}, goTo(n.ext)))
			for _, ip := range r.node.ips {
				fromNode = fromNode || pfx.Contains(ip)
			}
		}
		if fromNode {
			for _, ip := range s.lbVIPs {
				fw.Rules = append(fw.Rules, rule(s.name+" loadbalancer IP", nft.MatchAddr{Field: nft.Saddr, Prefix: netip.PrefixFrom(ip, ip.BitLen())}, goTo(n.ext)))
			}
		}
		fw.Rules = append(fw.Rules, rule("other traffic to "+s.name+" will be dropped by "+NFTChainFirewallCheck, nft.Counter{}))
	}
	if svc != nil {
		r.endpointRules(svc, s, pl.cluster, nftSep, nftAff)
	}
	if svl != nil {
		r.endpointRules(svl, s, pl.local, nftSep, nftAff)
	}
	for i, e := range pl.reachable {
		c := seps[i]
		if c == nil {
			continue
		}
		c.Rules = append(c.Rules, rule(s.name, nft.MatchAddr{Field: nft.Saddr, Prefix: netip.PrefixFrom(e.addr.Addr(), e.addr.Addr().BitLen())}, jump(NFTChainMarkMasq)))
		if s.affinity > 0 {
			c.Rules = append(c.Rules, rule(s.name, nft.UpdateSet{Field: nft.Saddr, Set: nftAff(e)}))
		}
		c.Rules = append(c.Rules, rule(s.name, proto, nft.DNAT{To: e.addr}))
	}
}

// endpointRules: affinity lookups first, so a known client sticks to its
// endpoint, then one random pick among all of them.
func (r *nftRenderer) endpointRules(c *nft.Chain, s *svcPort, eps []epInfo, sep, aff func(epInfo) string) {
	if s.affinity > 0 {
		for _, e := range eps {
			c.Rules = append(c.Rules, rule(s.name+" -> "+e.str, nft.MatchSet{Key: nft.KeyType{nft.Saddr}, Set: aff(e)}, goTo(sep(e))))
		}
	}
	if s.affinity == 0 {
		// No endpoint chains (fewer chains and rules make every
		// transaction cheaper for the kernel); hairpin goes by the set.
		proto := nft.MatchProto{Proto: nftProto(s.proto)}
		if off, ok := r.rs.Slots[c.Name]; ok {
			c.Rules = append(c.Rules, rule(s.name+" endpoints", proto, nft.DNATMap{Mod: uint32(len(eps)), Offset: off, Map: NFTEndpointsMap(proto.Proto, off)}))
			return
		}
		for i, e := range eps {
			if i < len(eps)-1 {
				c.Rules = append(c.Rules, rule(s.name+" -> "+e.str, nft.NumgenMatch{Mod: uint32(len(eps) - i)}, proto, nft.DNAT{To: e.addr}))
			} else {
				c.Rules = append(c.Rules, rule(s.name+" -> "+e.str, proto, nft.DNAT{To: e.addr}))
			}
		}
		return
	}
	if len(eps) == 1 {
		c.Rules = append(c.Rules, rule(s.name+" -> "+eps[0].str, goTo(sep(eps[0]))))
		return
	}
	// One rule per endpoint, each drawing anew: rule i of n matches 1 in
	// n-i of what reaches it. A single numgen vmap would need an
	// anonymous map per Service, and the kernel's cost of creating many
	// of those in one transaction grows with their square (measured:
	// 4,000 Services x 10 endpoints took 14.1 s with maps, 2.4 s with
	// plain rules).
	for i, e := range eps {
		if i < len(eps)-1 {
			c.Rules = append(c.Rules, rule(s.name+" -> "+e.str, nft.NumgenMatch{Mod: uint32(len(eps) - i)}, goTo(sep(e))))
		} else {
			c.Rules = append(c.Rules, rule(s.name+" -> "+e.str, goTo(sep(e))))
		}
	}
}

// nft is the nftables match of pod traffic, or with not of the rest.
func (m podMatch) nft(not bool) nft.Expr {
	if m.iface != "" {
		return nft.MatchIifname{Name: m.iface, Prefix: m.prefix, Not: not}
	}
	return nft.MatchAddr{Field: nft.Saddr, Prefix: m.cidr, Not: not}
}
