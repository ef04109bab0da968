package rules

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strconv"
)

// Ruleset is the output of a render: iptables-restore input for the filter
// and nat tables plus what the syncer, metrics and health checks need.
type Ruleset struct {
	Family  Family
	Partial bool
	// Filter and NAT are complete "*table ... COMMIT" sections, meant for a
	// single `iptables-restore --noflush` (see Bytes). Only herald chains are
	// declared, so nothing else in the tables is touched.
	Filter []byte
	NAT    []byte
	// NATChunks replaces NAT (left nil) when a full render declares more
	// per-service chains than Options.ChunkChains: the nat table as
	// "*nat ... COMMIT" sections to restore one by one, in order (see
	// Inputs). iptables-nft-restore's cost grows with the square of its
	// input (it looks up each rule's chain among the input's chains), so
	// 10,000 Services in one input take minutes and in chunks seconds.
	// First come the chains every Service chain jumps to, then whole
	// Services (every chain of one Service in one chunk, so none is ever
	// half-written), then the dispatch chains and the deletion of stale
	// chains. After each chunk every jump resolves, and a Service that
	// worked before still does: its old dispatch rule leads to chains
	// that are complete, old or new.
	NATChunks [][]byte
	// NATChains lists every per-service and per-endpoint nat chain in use
	// once this ruleset is applied, including those a partial render did not
	// rewrite. Pass it as Options.Existing next time.
	NATChains []string
	// Deleted lists stale chains from Options.Existing that this ruleset
	// flushes and deletes.
	Deleted []string
	Stats   Stats
	// Health has one entry per Service port with a healthCheckNodePort.
	Health   []ServiceHealth
	Problems []Problem
}

// Bytes returns the restore input, filter table first like kube-proxy.
// With NATChunks it holds every chunk in order, which one restore takes
// as well (slowly, with iptables-nft).
func (r Ruleset) Bytes() []byte {
	n := len(r.Filter) + len(r.NAT)
	for _, c := range r.NATChunks {
		n += len(c)
	}
	out := make([]byte, 0, n)
	out = append(append(out, r.Filter...), r.NAT...)
	for _, c := range r.NATChunks {
		out = append(out, c...)
	}
	return out
}

// Inputs returns the restore inputs to apply in order: Bytes when NAT is
// one section, else the filter table with the first nat chunk, then each
// other chunk alone. The filter table goes first, as in Bytes.
func (r Ruleset) Inputs() [][]byte {
	if len(r.NATChunks) == 0 {
		return [][]byte{r.Bytes()}
	}
	out := make([][]byte, 0, len(r.NATChunks))
	first := make([]byte, 0, len(r.Filter)+len(r.NATChunks[0]))
	out = append(out, append(append(first, r.Filter...), r.NATChunks[0]...))
	return append(out, r.NATChunks[1:]...)
}

// Stats are counts for metrics and logs.
type Stats struct {
	Services    int // Service ports with rules in this family
	FilterRules int
	// NATRules counts -A lines in this restore input; NATRulesTotal also
	// counts those of unchanged Services a partial render left in place.
	NATRules, NATRulesTotal int
	NATChains               int // chains declared in this restore input
	// Services whose internal / external traffic has endpoints somewhere
	// but none on this node (kube-proxy's
	// sync_proxy_rules_no_local_endpoints_total).
	NoLocalEndpointsInternal, NoLocalEndpointsExternal int
}

// ServiceHealth feeds the healthCheckNodePort servers.
type ServiceHealth struct {
	Service             ServicePortName
	HealthCheckNodePort int
	// LocalEndpoints counts ready endpoints on this node; terminating ones
	// are left out so that load balancers drain the node.
	LocalEndpoints int
}

// Options tune a render.
type Options struct {
	// Changed, when non-nil, makes the render partial: only the Services in
	// it (added, updated, deleted, or with changed endpoints) get their
	// per-service and per-endpoint chains rewritten; the dispatch chains and
	// the whole filter table are always rewritten. The chains of every other
	// Service must already be in the kernel from an earlier render.
	Changed map[ServiceKey]bool
	// Existing lists the nat chains currently in the kernel (from
	// iptables-save, or the previous Ruleset.NATChains). Per-service chains
	// in it that are no longer used are deleted, and in a partial render an
	// unchanged Service whose chains are missing from it is rewritten
	// anyway. Nil means unknown: nothing is deleted.
	Existing []string
	// ChunkChains is the most per-service and per-endpoint chains a full
	// render puts in one nat restore input; above it, NATChunks replaces
	// NAT. 0 means DefaultChunkChains; negative never splits.
	ChunkChains int
}

// DefaultChunkChains is about 90 Services with 10 endpoints each. Smaller
// chunks cost less of iptables-nft's quadratic lookup, but every run also
// reads the table already in the kernel, so their number costs too.
// Measured (TestBenchIPTRestore, iptables-nft 1.8.9, 10,000 Services x 10
// endpoints, first sync / full resync over the same rules): one input
// 8 min 2 s; chunks of 11,000 chains 17.5 / 16.8 s, 5,000 10.3 / 11.4 s,
// 2,200 6.9 / 8.4 s, 1,100 6.1-6.4 / 8.2-9.8 s, 1,000 5.7 / 7.9 s,
// 550 6.6 / 10.0 s, 275 6.9 / 12.7 s.
const DefaultChunkChains = 1000

// Render renders the complete desired state of one family.
func Render(f Family, services []Service, endpoints map[ServicePortName][]Endpoint, node NodeConfig) Ruleset {
	return RenderWith(f, services, endpoints, node, Options{})
}

// RenderWith is Render with options (partial renders, stale-chain deletion).
// It is a pure function of its arguments.
func RenderWith(f Family, services []Service, endpoints map[ServicePortName][]Endpoint, node NodeConfig, opts Options) Ruleset {
	rs := Ruleset{Family: f, Partial: opts.Changed != nil}
	if f != IPv4 && f != IPv6 {
		rs.Problems = append(rs.Problems, Problem{Field: "family", Message: fmt.Sprintf("unknown address family %d; nothing rendered", int(f))})
		return rs
	}
	np, probs := normalizeNode(f, &node)
	rs.Problems = append(rs.Problems, probs...)

	r := &renderer{f: f, node: np, opts: opts, rs: &rs, chunking: opts.Changed == nil && opts.ChunkChains >= 0}
	if len(opts.Existing) > 0 {
		r.existing = make(map[string]bool, len(opts.Existing))
		for _, c := range opts.Existing {
			r.existing[c] = true
		}
		r.active = make(map[string]bool, len(opts.Existing))
	}
	// Rough sizes (measured: ~1.3 KB of nat text per ClusterIP service with
	// two endpoints, ~0.2 KB of it dispatch) keep appends from re-copying
	// large buffers; a partial render mostly writes dispatch rules.
	perService, perChains := 1400, 160
	if opts.Changed != nil {
		perService, perChains = 200, 0
	}
	if r.chunking {
		// The per-service part goes to its own buffers.
		r.svcRules.b = make([]byte, 0, len(services)*(perService-200))
		r.svcChains.b = make([]byte, 0, len(services)*perChains)
		perService, perChains = 200, 0
	}
	r.natRules.b = make([]byte, 0, 4096+len(services)*perService+len(opts.Changed)*1400)
	r.natChains.b = make([]byte, 0, 1024+len(services)*perChains+len(opts.Changed)*160)
	r.skipped.discard = true
	r.skippedChains.discard = true

	r.static()

	rs.Problems = eachServicePort(f, services, endpoints, np, rs.Problems, r.service)
	rs.Problems = append(rs.Problems, r.dsrProblems...)

	r.finish()
	return rs
}

// lines accumulates restore lines; with discard set it only counts them,
// which is how a partial render accounts for rules it leaves in place.
type lines struct {
	b       []byte
	n       int
	discard bool
}

func (l *lines) add(parts ...string) {
	l.n++
	if l.discard {
		return
	}
	for i, p := range parts {
		if i > 0 {
			l.b = append(l.b, ' ')
		}
		l.b = append(l.b, p...)
	}
	l.b = append(l.b, '\n')
}

func (l *lines) chain(name string) { l.add(":" + name + " - [0:0]") }

type renderer struct {
	f    Family
	node nodeParams
	opts Options
	rs   *Ruleset
	// dsrProblems: ports asking for ForwardingDSR, which this mode has not.
	dsrProblems []Problem

	filterChains, filterRules lines
	natChains, natRules       lines
	skippedChains, skipped    lines

	// In a full render, each Service's own chains go to svcChains and
	// svcRules, one svcSeg per Service, so that finish can write them
	// either in their place in NAT or in chunks.
	chunking            bool
	svcChains, svcRules lines
	segs                []svcSeg
	helperEnd           int // natRules written by static: the helper chains' rules

	existing map[string]bool // nil when unknown
	active   map[string]bool // only kept when existing is known
}

// svcSeg marks where one Service's chains end in svcChains and svcRules,
// and where its rules belong among natRules (after its dispatch rules).
type svcSeg struct {
	at, declEnd, rulesEnd, chains int
}

func (r *renderer) useChain(c string) {
	r.rs.NATChains = append(r.rs.NATChains, c)
	if r.active != nil {
		r.active[c] = true
	}
}

func (r *renderer) rejectTarget() string {
	if r.f == IPv6 {
		return "REJECT --reject-with icmp6-port-unreachable"
	}
	return "REJECT --reject-with icmp-port-unreachable"
}

func (r *renderer) static() {
	for _, c := range staticFilterChains {
		r.filterChains.chain(c)
	}
	for _, c := range staticNATChains {
		r.natChains.chain(c)
	}
	n := &r.node
	if !n.ctLiberal {
		// Out-of-window packets would otherwise reach a pod un-NATed and
		// be answered with a RST that kills the connection.
		r.filterRules.add("-A", ChainForward, "-m conntrack --ctstate INVALID -j DROP")
	}
	r.filterRules.add("-A", ChainForward, "-m comment --comment", quote("herald forwarding rules"), "-m mark --mark", n.markMask, "-j ACCEPT")
	r.filterRules.add("-A", ChainForward, "-m comment --comment", quote("herald forwarding conntrack rule"), "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT")

	// Unmarked packets leave untouched; marked ones lose the mark (so it
	// cannot leak into other routing decisions) and are masqueraded.
	r.natRules.add("-A", ChainPostrouting, "-m mark ! --mark", n.markMask, "-j RETURN")
	r.natRules.add("-A", ChainPostrouting, "-j MARK --xor-mark", n.mark)
	masq := "-j MASQUERADE"
	if n.random {
		masq += " --random-fully"
	}
	r.natRules.add("-A", ChainPostrouting, "-m comment --comment", quote("herald service traffic requiring SNAT"), masq)
	r.natRules.add("-A", ChainMarkMasq, "-j MARK --or-mark", n.mark)
	r.helperEnd = len(r.natRules.b)
}

func (r *renderer) finish() {
	// NodePorts are matched on any local address, so this must come after
	// every exact-destination rule. Loopback is excluded: herald does not
	// set route_localnet (kube-proxy's localhost NodePorts are a known
	// security hole) and IPv6 cannot route ::1 at all.
	// With --nodeport-addresses, one jump per allowed address instead,
	// as kube-proxy does; none at all when no address is allowed.
	comment := quote("herald service nodeports; NOTE: this must be the last rule in this chain")
	if r.node.npRestricted {
		for _, ip := range r.node.npIPs {
			r.natRules.add("-A", ChainServices, "-m comment --comment", comment, "-d", ip.String(), "-j", ChainNodePorts)
		}
	} else {
		loop := "127.0.0.0/8"
		if r.f == IPv6 {
			loop = "::1/128"
		}
		r.natRules.add("-A", ChainServices, "-m comment --comment", comment, "-m addrtype --dst-type LOCAL ! -d", loop, "-j", ChainNodePorts)
	}

	if r.existing != nil {
		stale := make([]string, 0)
		for _, c := range r.opts.Existing {
			if IsServiceChain(c) && !r.active[c] && !slices.Contains(stale, c) {
				stale = append(stale, c)
			}
		}
		slices.Sort(stale)
		for _, c := range stale {
			// Declaring flushes it; then it can go.
			r.natChains.chain(c)
			r.natRules.add("-X", c)
		}
		r.rs.Deleted = stale
	}

	rs := r.rs
	rs.Filter = make([]byte, 0, len(r.filterChains.b)+len(r.filterRules.b)+16)
	rs.Filter = append(rs.Filter, "*filter\n"...)
	rs.Filter = append(append(rs.Filter, r.filterChains.b...), r.filterRules.b...)
	rs.Filter = append(rs.Filter, "COMMIT\n"...)
	limit := cmp.Or(r.opts.ChunkChains, DefaultChunkChains)
	if r.chunking && r.svcChains.n > limit {
		rs.NATChunks = r.chunks(limit)
	} else {
		rs.NAT = r.oneNAT()
	}

	nDeleted := len(rs.Deleted)
	rs.Stats.FilterRules = r.filterRules.n
	rs.Stats.NATRules = r.natRules.n + r.svcRules.n - nDeleted
	rs.Stats.NATRulesTotal = r.natRules.n + r.svcRules.n - nDeleted + r.skipped.n
	rs.Stats.NATChains = r.natChains.n + r.svcChains.n
}

// oneNAT is the nat table as one section: every chain declared, in name
// order, then the rules in the order they were rendered, each Service's
// own rules right after its dispatch rules.
func (r *renderer) oneNAT() []byte {
	decl := r.natChains.b
	if len(r.svcChains.b) > 0 {
		decl = append(slices.Clip(decl), r.svcChains.b...)
	}
	out := make([]byte, 0, len(decl)+len(r.natRules.b)+len(r.svcRules.b)+16)
	out = append(out, "*nat\n"...)
	out = append(out, sortLines(decl)...)
	at, from := 0, 0
	for _, s := range r.segs {
		out = append(out, r.natRules.b[at:s.at]...)
		out = append(out, r.svcRules.b[from:s.rulesEnd]...)
		at, from = s.at, s.rulesEnd
	}
	out = append(out, r.natRules.b[at:]...)
	return append(out, "COMMIT\n"...)
}

// chunks is the nat table as NATChunks, with at most limit per-service
// chains in a chunk unless one Service alone has more.
func (r *renderer) chunks(limit int) [][]byte {
	section := func(decl, rules []byte) []byte {
		out := make([]byte, 0, len(decl)+len(rules)+16)
		out = append(out, "*nat\n"...)
		out = append(append(out, sortLines(decl)...), rules...)
		return append(out, "COMMIT\n"...)
	}
	var head, tail lines
	for _, c := range helperNATChains {
		head.chain(c)
	}
	out := [][]byte{section(head.b, r.natRules.b[:r.helperEnd])}

	decl, rules, n := 0, 0, 0
	for i, s := range r.segs {
		n += s.chains
		if n >= limit || i == len(r.segs)-1 {
			out = append(out, section(r.svcChains.b[decl:s.declEnd], r.svcRules.b[rules:s.rulesEnd]))
			decl, rules, n = s.declEnd, s.rulesEnd, 0
		}
	}

	for _, c := range staticNATChains {
		if !slices.Contains(helperNATChains, c) {
			tail.chain(c)
		}
	}
	for _, c := range r.rs.Deleted {
		tail.chain(c)
	}
	return append(out, section(tail.b, r.natRules.b[r.helperEnd:]))
}

// sortLines sorts newline-terminated lines. Chains are declared in name
// order, as iptables-save lists them: iptables-nft (1.8.9) takes over
// three times the CPU to restore 1,000 Services x 10 endpoints when the
// declarations come in any other order (4.3s instead of 1.3s), while the
// order of the -A lines does not matter.
func sortLines(b []byte) []byte {
	lines := bytes.SplitAfter(b, []byte("\n"))
	if n := len(lines); n > 0 && len(lines[n-1]) == 0 {
		lines = lines[:n-1]
	}
	slices.SortFunc(lines, bytes.Compare)
	return bytes.Join(lines, nil)
}

// service writes everything for one Service port. The structure follows
// kube-proxy's iptables mode; see the package documentation for the layout.
func (r *renderer) service(s *svcPort, eps []epInfo) {
	if s.dsr && len(s.lbVIPs) > 0 {
		r.dsrProblems = append(r.dsrProblems, Problem{Service: s.id, Field: "forwarding",
			Message: "dsr: the consistent backend choice needs the nftables mode (--proxy-mode=nftables); forwarding stays SNAT"})
	}
	pl := planService(s, eps)
	pl.record(&r.rs.Stats, &r.rs.Health, s, eps)
	n := iptNames{
		svc: PrefixService + s.hash, svl: PrefixLocal + s.hash,
		ext: PrefixExternal + s.hash, fw: PrefixFirewall + s.hash,
	}
	r.dispatch(s, pl, n)

	// Per-service chains: the part a partial render can skip.
	var chains []string
	if pl.extChain {
		chains = append(chains, n.ext)
	}
	if pl.fwChain {
		chains = append(chains, n.fw)
	}
	if pl.clusterChain {
		chains = append(chains, n.svc)
	}
	if pl.localChain {
		chains = append(chains, n.svl)
	}
	for _, e := range pl.reachable {
		chains = append(chains, e.chain)
	}
	for _, c := range chains {
		r.useChain(c)
	}
	decl, w := &r.natChains, &r.natRules
	if r.opts.Changed != nil && !r.opts.Changed[s.id.Key()] && r.allExist(chains) {
		decl, w = &r.skippedChains, &r.skipped
	}
	if r.chunking {
		decl, w = &r.svcChains, &r.svcRules
	}
	for _, c := range chains {
		decl.chain(c)
	}
	r.serviceChains(w, s, pl, n)
	if r.chunking && len(chains) > 0 {
		r.segs = append(r.segs, svcSeg{at: len(r.natRules.b), declEnd: len(r.svcChains.b), rulesEnd: len(r.svcRules.b), chains: len(chains)})
	}
}

// iptNames are a Service port's chains in the iptables mode.
type iptNames struct{ svc, svl, ext, fw string }

// blockRule is the filter target and comment of traffic a plan blocks.
func (r *renderer) blockRule(s *svcPort, b block) (target, comment string) {
	switch b {
	case pass:
		return "", ""
	case reject:
		return r.rejectTarget(), quote(s.name + " has no endpoints")
	}
	return "DROP", quote(s.name + " has no local endpoints")
}

// dispatch writes the rules that lead a Service port's addresses to its
// chains (nat) or block them (filter); they are rewritten on every
// render.
func (r *renderer) dispatch(s *svcPort, pl servicePlan, n iptNames) {
	intTarget, intComment := r.blockRule(s, pl.internalBlock)
	extTarget, extComment := r.blockRule(s, pl.externalBlock)
	lbChain := n.ext
	if pl.fwChain {
		lbChain = n.fw
	}
	p := s.proto
	cip := s.clusterIP.String()
	if pl.hasInternal {
		r.natRules.add("-A", ChainServices, "-m comment --comment", quote(s.name+" cluster IP"), "-m", p, "-p", p, "-d", cip, "--dport", s.port, "-j", pick(pl.internalLocal, n.svc, n.svl))
	} else {
		r.filterRules.add("-A", ChainServices, "-m comment --comment", intComment, "-m", p, "-p", p, "-d", cip, "--dport", s.port, "-j", intTarget)
	}
	for _, ip := range s.externalIPs {
		a := ip.String()
		if pl.hasAny {
			r.natRules.add("-A", ChainServices, "-m comment --comment", quote(s.name+" external IP"), "-m", p, "-p", p, "-d", a, "--dport", s.port, "-j", n.ext)
		}
		if !pl.hasExternal {
			r.filterRules.add("-A", ChainExternalServices, "-m comment --comment", extComment, "-m", p, "-p", p, "-d", a, "--dport", s.port, "-j", extTarget)
		}
	}
	for _, ip := range s.lbVIPs {
		a := ip.String()
		if pl.hasAny {
			r.natRules.add("-A", ChainServices, "-m comment --comment", quote(s.name+" loadbalancer IP"), "-m", p, "-p", p, "-d", a, "--dport", s.port, "-j", lbChain)
		}
		if pl.fwChain {
			// Whatever the FW chain did not let through is still addressed
			// to the LB IP when it reaches the filter table.
			r.filterRules.add("-A", ChainProxyFirewall, "-m comment --comment", quote(s.name+" traffic not accepted by "+n.fw), "-m", p, "-p", p, "-d", a, "--dport", s.port, "-j DROP")
		}
		if !pl.hasExternal {
			r.filterRules.add("-A", ChainExternalServices, "-m comment --comment", extComment, "-m", p, "-p", p, "-d", a, "--dport", s.port, "-j", extTarget)
		}
	}
	if s.nodePort != 0 {
		np := strconv.Itoa(s.nodePort)
		if pl.hasAny {
			// Like kube-proxy, NodePorts are not subject to
			// loadBalancerSourceRanges.
			r.natRules.add("-A", ChainNodePorts, "-m comment --comment", quote(s.name), "-m", p, "-p", p, "--dport", np, "-j", n.ext)
		}
		if !pl.hasExternal {
			for _, dst := range r.nodePortDsts() {
				r.filterRules.add("-A", ChainExternalServices, "-m comment --comment", extComment, dst, "-m", p, "-p", p, "--dport", np, "-j", extTarget)
			}
		}
	}
	if s.hcnp != 0 {
		r.filterRules.add("-A", ChainNodePorts, "-m comment --comment", quote(s.name+" health check node port"), "-m tcp -p tcp --dport", strconv.Itoa(s.hcnp), "-j ACCEPT")
	}
}

// serviceChains writes the rules of a Service port's own chains into w.
func (r *renderer) serviceChains(w *lines, s *svcPort, pl servicePlan, n iptNames) {
	p := s.proto
	if pl.hasInternal {
		// Off-cluster clients of a cluster IP (e.g. via a static route to
		// the service range) may be answered from another node: SNAT them.
		// Pod traffic keeps its source IP, which is the point of ClusterIP.
		args := []string{"-A", pick(pl.internalLocal, n.svc, n.svl), "-m comment --comment", quote(s.name + " cluster IP"), "-m", p, "-p", p, "-d", s.clusterIP.String(), "--dport", s.port}
		switch {
		case r.node.masqAll:
			w.add(append(args, "-j", ChainMarkMasq)...)
		case r.node.pods.ok():
			w.add(append(args, r.node.pods.ipt(true), "-j", ChainMarkMasq)...)
		}
	}
	if pl.extChain {
		if !s.eTPLocal {
			// Cluster policy may forward to another node, whose reply must
			// come back through us.
			w.add("-A", n.ext, "-m comment --comment", quote("masquerade traffic for "+s.name+" external destinations"), "-j", ChainMarkMasq)
		} else {
			if r.node.pods.ok() {
				// Pods reaching an external address behave as if they went
				// out to the LB and came back: all endpoints, source kept.
				w.add("-A", n.ext, "-m comment --comment", quote("pod traffic for "+s.name+" external destinations"), r.node.pods.ipt(false), "-j", n.svc)
			}
			// The node itself would otherwise use the (local) external IP
			// as its source, which the endpoint cannot answer.
			w.add("-A", n.ext, "-m comment --comment", quote("masquerade LOCAL traffic for "+s.name+" external destinations"), "-m addrtype --src-type LOCAL -j", ChainMarkMasq)
			w.add("-A", n.ext, "-m comment --comment", quote("route LOCAL traffic for "+s.name+" external destinations"), "-m addrtype --src-type LOCAL -j", n.svc)
		}
		if pl.hasExternal {
			w.add("-A", n.ext, "-j", pick(pl.externalLocal, n.svc, n.svl))
		}
	}
	if pl.fwChain {
		c := quote(s.name + " loadbalancer IP")
		fromNode := false
		for _, pfx := range s.allowed {
			w.add("-A", n.fw, "-m comment --comment", c, "-s", pfx.String(), "-j", n.ext)
			for _, ip := range r.node.ips {
				fromNode = fromNode || pfx.Contains(ip)
			}
		}
		if fromNode {
			// A node reaching its own LB IP may have that IP as its
			// source; let it through when the node itself is allowed.
			for _, ip := range s.lbVIPs {
				w.add("-A", n.fw, "-m comment --comment", c, "-s", ip.String(), "-j", n.ext)
			}
		}
		// Counts what falls through to the PROXY-FIREWALL DROP.
		w.add("-A", n.fw, "-m comment --comment", quote("other traffic to "+s.name+" will be dropped by "+ChainProxyFirewall))
	}
	if pl.clusterChain {
		r.endpointRules(w, s, n.svc, pl.cluster)
	}
	if pl.localChain {
		r.endpointRules(w, s, n.svl, pl.local)
	}
	for _, e := range pl.reachable {
		c := quote(s.name)
		// Hairpin: a pod reaching itself through the Service would see its
		// own address as the source and drop the reply.
		w.add("-A", e.chain, "-m comment --comment", c, "-s", e.addr.Addr().String(), "-j", ChainMarkMasq)
		if s.affinity > 0 {
			w.add("-A", e.chain, "-m comment --comment", c, "-m recent --name", e.chain, "--set -m", p, "-p", p, "-j DNAT --to-destination", e.str)
		} else {
			w.add("-A", e.chain, "-m comment --comment", c, "-m", p, "-p", p, "-j DNAT --to-destination", e.str)
		}
	}
}

// nodePortDsts are the destination matches of the filter rules for
// NodePorts without endpoints: any local address, or each address
// --nodeport-addresses allows, so that an address that does not serve
// NodePorts does not reject them either (kube-proxy's iptables mode
// keeps addrtype LOCAL here; its nftables mode restricts it too).
func (r *renderer) nodePortDsts() []string {
	if !r.node.npRestricted {
		return []string{"-m addrtype --dst-type LOCAL"}
	}
	out := make([]string, len(r.node.npIPs))
	for i, ip := range r.node.npIPs {
		out[i] = "-d " + ip.String()
	}
	return out
}

func (r *renderer) allExist(chains []string) bool {
	if r.existing == nil {
		return true
	}
	for _, c := range chains {
		if !r.existing[c] {
			return false
		}
	}
	return true
}

// endpointRules spreads new connections evenly: rule i of n matches with
// probability 1/(n-i) of what reaches it, the last one always. Affinity
// checks come first so a known client sticks to its endpoint.
func (r *renderer) endpointRules(w *lines, s *svcPort, chain string, eps []epInfo) {
	if s.affinity > 0 {
		secs := strconv.Itoa(s.affinity)
		for _, e := range eps {
			w.add("-A", chain, "-m comment --comment", quote(s.name+" -> "+e.str), "-m recent --name", e.chain, "--rcheck --seconds", secs, "--reap -j", e.chain)
		}
	}
	n := len(eps)
	for i, e := range eps {
		if i < n-1 {
			w.add("-A", chain, "-m comment --comment", quote(s.name+" -> "+e.str), "-m statistic --mode random --probability", probability(n-i), "-j", e.chain)
		} else {
			w.add("-A", chain, "-m comment --comment", quote(s.name+" -> "+e.str), "-j", e.chain)
		}
	}
}

// probability formats 1/n with ten decimals, the precision kube-proxy
// writes (iptables itself stores it as a 32-bit fraction and prints eleven).
func probability(n int) string {
	return strconv.FormatFloat(1/float64(n), 'f', 10, 64)
}

// ipt is the iptables match of pod traffic, or with not of the rest.
func (m podMatch) ipt(not bool) string {
	neg, match := "", "-s "+m.cidr.String()
	if not {
		neg = "! "
	}
	if m.iface != "" {
		match = "-i " + m.iface
		if m.prefix {
			match += "+"
		}
	}
	return neg + match
}
