package rules

import (
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// svcPort is a Service port reduced to what one family's rules need.
type svcPort struct {
	id    ServicePortName
	name  string // id.String(), used in every comment
	proto string // lower-case
	port  string // decimal, ready to print

	clusterIP   netip.Addr
	nodePort    int
	externalIPs []netip.Addr
	lbVIPs      []netip.Addr
	// restricted: loadBalancerSourceRanges is set at all (any family, or
	// unparseable); allowed holds the ranges of this family.
	restricted bool
	allowed    []netip.Prefix

	eTPLocal, iTPLocal bool
	hcnp               int
	affinity           int // seconds; 0 = no affinity

	hash string // shared suffix of SVC/SVL/EXT/FW chain names

	// dsr: the Service asks for ForwardingDSR (nft_dsr.go decides
	// whether it gets it).
	dsr bool
}

// externallyAccessible mirrors kube-proxy: anything besides the cluster IP.
func (s *svcPort) externallyAccessible() bool {
	return s.nodePort != 0 || len(s.externalIPs) > 0 || len(s.lbVIPs) > 0
}

// usesClusterEndpoints: Cluster-policy endpoints are needed for ClusterIP
// traffic under iTP=Cluster and for any external traffic (even under eTP=Local
// the pod/node short-circuit goes to them).
func (s *svcPort) usesClusterEndpoints() bool {
	return !s.iTPLocal || s.externallyAccessible()
}

func (s *svcPort) usesLocalEndpoints() bool {
	return s.iTPLocal || (s.eTPLocal && s.externallyAccessible())
}

// dnsLabelish accepts the characters Kubernetes allows in namespaces, names
// and port names. Anything else is refused because these strings end up in
// rule comments and recent-list names, where a quote or space would break
// (or inject into) the restore text.
func dnsLabelish(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
		if alnum {
			continue
		}
		if (c == '-' || c == '.') && i > 0 && i < len(s)-1 {
			continue
		}
		return false
	}
	return true
}

// normalize checks one Service port for the family. It returns ok=false with
// a Problem when the port cannot be programmed at all, ok=false without a
// Problem when it simply has nothing in this family (headless or
// single-stack other family), and ok=true possibly with Problems for parts
// that were dropped.
func normalize(f Family, in *Service) (out svcPort, ok bool, probs []Problem) {
	id := in.ID()
	skip := func(field, format string, args ...any) (svcPort, bool, []Problem) {
		return svcPort{}, false, append(probs, Problem{Service: id, Field: field, Message: fmt.Sprintf(format, args...), Skipped: true})
	}
	drop := func(field, format string, args ...any) {
		probs = append(probs, Problem{Service: id, Field: field, Message: fmt.Sprintf(format, args...)})
	}

	if !dnsLabelish(in.Namespace, 63) {
		return skip("namespace", "%q is not a valid namespace", in.Namespace)
	}
	if !dnsLabelish(in.Name, 253) {
		return skip("name", "%q is not a valid name", in.Name)
	}
	if in.PortName != "" && !dnsLabelish(in.PortName, 63) {
		return skip("port.name", "%q is not a valid port name", in.PortName)
	}
	proto := in.Protocol.lower()
	if proto == "" {
		return skip("port.protocol", "unsupported protocol %q (want TCP, UDP or SCTP)", in.Protocol)
	}
	if in.Port < 1 || in.Port > 65535 {
		return skip("port.port", "%d is out of range 1-65535", in.Port)
	}
	if in.NodePort < 0 || in.NodePort > 65535 {
		return skip("port.nodePort", "%d is out of range 0-65535", in.NodePort)
	}

	var cip netip.Addr
	for i, a := range in.ClusterIPs {
		a, bad := plainAddr(a)
		if bad != "" {
			drop(fmt.Sprintf("clusterIPs[%d]", i), "%s", bad)
			continue
		}
		if !f.Has(a) {
			continue
		}
		if cip.IsValid() {
			return skip(fmt.Sprintf("clusterIPs[%d]", i), "second %s cluster IP %s (already %s)", f, a, cip)
		}
		cip = a
	}
	if !cip.IsValid() {
		// Headless, or nothing in this family: kube-proxy ignores it too.
		return svcPort{}, false, probs
	}

	out = svcPort{
		id:        id,
		name:      id.String(),
		proto:     proto,
		port:      strconv.Itoa(in.Port),
		clusterIP: cip,
		nodePort:  in.NodePort,
		eTPLocal:  in.ExternalTrafficPolicy == PolicyLocal,
		iTPLocal:  in.InternalTrafficPolicy == PolicyLocal,
	}
	if in.ExternalTrafficPolicy != PolicyCluster && in.ExternalTrafficPolicy != PolicyLocal {
		return skip("externalTrafficPolicy", "unknown policy %d", in.ExternalTrafficPolicy)
	}
	if in.InternalTrafficPolicy != PolicyCluster && in.InternalTrafficPolicy != PolicyLocal {
		return skip("internalTrafficPolicy", "unknown policy %d", in.InternalTrafficPolicy)
	}

	seen := map[netip.Addr]bool{}
	for i, a := range in.ExternalIPs {
		a, bad := plainAddr(a)
		switch {
		case bad != "":
			drop(fmt.Sprintf("externalIPs[%d]", i), "%s", bad)
		case !f.Has(a) || seen[a]:
		case a.IsLoopback() || a.IsUnspecified() || a.IsMulticast():
			drop(fmt.Sprintf("externalIPs[%d]", i), "%s cannot be a service address", a)
		default:
			seen[a] = true
			out.externalIPs = append(out.externalIPs, a)
		}
	}
	clear(seen)
	for i, ing := range in.LoadBalancerIngress {
		a, bad := plainAddr(ing.IP)
		switch {
		case bad != "":
			drop(fmt.Sprintf("loadBalancer.ingress[%d].ip", i), "%s", bad)
		case ing.Mode != IPModeVIP && ing.Mode != IPModeProxy:
			drop(fmt.Sprintf("loadBalancer.ingress[%d].ipMode", i), "unknown mode %d", ing.Mode)
		case ing.Mode == IPModeProxy || !f.Has(a) || seen[a]:
		case a.IsLoopback() || a.IsUnspecified() || a.IsMulticast():
			drop(fmt.Sprintf("loadBalancer.ingress[%d].ip", i), "%s cannot be a service address", a)
		default:
			seen[a] = true
			out.lbVIPs = append(out.lbVIPs, a)
		}
	}

	out.restricted = len(in.LoadBalancerSourceRanges) > 0 || in.SourceRangesInvalid
	for i, p := range in.LoadBalancerSourceRanges {
		p, valid := unmapPrefix(p)
		if !valid {
			drop(fmt.Sprintf("loadBalancerSourceRanges[%d]", i), "invalid prefix; the service stays restricted to the valid ranges")
			continue
		}
		if f.Has(p.Addr()) {
			out.allowed = append(out.allowed, p)
		}
	}

	if in.HealthCheckNodePort < 0 || in.HealthCheckNodePort > 65535 {
		drop("healthCheckNodePort", "%d is out of range 0-65535; ignored", in.HealthCheckNodePort)
	} else {
		out.hcnp = in.HealthCheckNodePort
	}

	switch in.SessionAffinity {
	case AffinityNone:
	case AffinityClientIP:
		out.affinity = in.AffinityTimeout
		if out.affinity == 0 {
			out.affinity = DefaultAffinityTimeout
		}
		if out.affinity < 0 || out.affinity > maxAffinityTimeout {
			drop("sessionAffinityConfig.clientIP.timeoutSeconds", "%d is out of range 1-%d; using %d", in.AffinityTimeout, maxAffinityTimeout, DefaultAffinityTimeout)
			out.affinity = DefaultAffinityTimeout
		}
	default:
		drop("sessionAffinity", "unknown affinity %d; using None", in.SessionAffinity)
	}

	switch in.Forwarding {
	case ForwardingSNAT:
	case ForwardingDSR:
		out.dsr = true
	default:
		drop("forwarding", "unknown forwarding %d; using SNAT", in.Forwarding)
	}

	out.hash = serviceHash(out.name, proto)
	return out, true, probs
}

// nodeParams is NodeConfig reduced for one family.
type nodeParams struct {
	name      string
	zone      string
	ips       []netip.Addr
	pods      podMatch
	masqAll   bool
	mark      string // "0x4000"
	markBit   uint32
	markMask  string // "0x4000/0x4000"
	random    bool
	ctLiberal bool
	// npRestricted: NodePorts only on npIPs (sorted, no loopback), not
	// on every local address.
	npRestricted bool
	npIPs        []netip.Addr
	dsr          dsrParams
}

func normalizeNode(f Family, n *NodeConfig) (nodeParams, []Problem) {
	var probs []Problem
	np := nodeParams{name: n.Name, zone: n.Zone, masqAll: n.MasqueradeAll, random: !n.NoRandomFully, ctLiberal: n.ConntrackLiberal}
	if n.Name == "" {
		probs = append(probs, Problem{Field: "name", Message: "empty node name: no endpoint counts as local, so externalTrafficPolicy/internalTrafficPolicy Local services drop traffic"})
	}
	for i, a := range n.IPs {
		a, bad := plainAddr(a)
		if bad != "" {
			probs = append(probs, Problem{Field: fmt.Sprintf("ips[%d]", i), Message: bad})
			continue
		}
		if f.Has(a) {
			np.ips = append(np.ips, a)
		}
	}
	for i, p := range n.ClusterCIDRs {
		p, valid := unmapPrefix(p)
		if !valid {
			probs = append(probs, Problem{Field: fmt.Sprintf("clusterCIDRs[%d]", i), Message: "invalid prefix"})
			continue
		}
		if !f.Has(p.Addr()) {
			continue
		}
		if np.pods.cidr.IsValid() {
			probs = append(probs, Problem{Field: fmt.Sprintf("clusterCIDRs[%d]", i), Message: fmt.Sprintf("only one %s cluster CIDR is supported; ignoring %s, using %s", f, p, np.pods.cidr)})
			continue
		}
		np.pods.cidr = p
	}
	if pi := n.PodInterface; pi.Name != "" {
		if bad := InterfaceNameProblem(pi.Name); bad != "" {
			probs = append(probs, Problem{Field: "podInterface", Message: bad + "; pod traffic is not told apart"})
			np.pods = podMatch{}
		} else {
			np.pods = podMatch{iface: pi.Name, prefix: pi.Prefix}
		}
	}
	np.npRestricted, np.npIPs, probs = nodePortIPs(f, n.NodePortAddresses, probs)
	np.dsr, probs = normalizeDSR(f, n, probs)
	mark := n.MasqueradeMark
	if mark == 0 {
		mark = DefaultMasqueradeMark
	}
	if bits.OnesCount32(mark) != 1 {
		probs = append(probs, Problem{Field: "masqueradeMark", Message: fmt.Sprintf("%#x must have exactly one bit set; using %#x", mark, DefaultMasqueradeMark)})
		mark = DefaultMasqueradeMark
	}
	np.mark, np.markBit = fmt.Sprintf("%#x", mark), mark
	np.markMask = np.mark + "/" + np.mark
	return np, probs
}

// podMatch is the local-traffic detector, kube-proxy's: traffic from
// the pods is that from a pod CIDR, or that arriving on a pod interface
// (a bridge, or interfaces named with a prefix). Zero: none.
type podMatch struct {
	cidr   netip.Prefix
	iface  string
	prefix bool
}

func (m podMatch) ok() bool { return m.cidr.IsValid() || m.iface != "" }

// InterfaceNameProblem says why name cannot be matched as an interface
// name (or a prefix of one) in iptables and nftables rules; "" if it can.
func InterfaceNameProblem(name string) string {
	if len(name) >= 16 { // IFNAMSIZ, with its NUL
		return fmt.Sprintf("%q is longer than an interface name (15 bytes)", name)
	}
	if i := strings.IndexFunc(name, func(r rune) bool {
		return r <= ' ' || r >= 0x7f || strings.ContainsRune(`/:"'*+!\`, r)
	}); i >= 0 {
		return fmt.Sprintf("%q: %q cannot be in an interface name here", name, name[i])
	}
	return ""
}

// nodePortIPs reduces NodeConfig.NodePortAddresses to the family's
// addresses, sorted and without duplicates; loopback is refused because
// herald does not set route_localnet (and IPv6 cannot route ::1).
func nodePortIPs(f Family, byFamily map[Family][]netip.Addr, probs []Problem) (bool, []netip.Addr, []Problem) {
	in, restricted := byFamily[f]
	if !restricted {
		return false, nil, probs
	}
	out := make([]netip.Addr, 0, len(in))
	for i, a := range in {
		a, bad := plainAddr(a)
		field := fmt.Sprintf("nodePortAddresses[%s][%d]", f, i)
		switch {
		case bad != "":
			probs = append(probs, Problem{Field: field, Message: bad})
		case !f.Has(a):
			probs = append(probs, Problem{Field: field, Message: fmt.Sprintf("%s is not an %s address", a, f)})
		case a.IsLoopback():
			probs = append(probs, Problem{Field: field, Message: fmt.Sprintf("%s is a loopback address; NodePorts are not served on loopback", a)})
		default:
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return true, slices.Compact(out), probs
}

// epInfo is a usable endpoint of one Service port in one family.
type epInfo struct {
	addr                        netip.AddrPort
	str                         string // "ip:port" / "[ip]:port"
	ready, serving, terminating bool
	local                       bool
	node                        string // the node it runs on, "" if unknown
	hints                       epHints
	chain                       string
}

// normalizeEndpoints filters endpoints to the family, drops invalid ones and
// duplicates (keeping the most usable copy), and sorts them so that the
// output does not depend on EndpointSlice order. node and zone are this
// node's name and zone, which the endpoints' hints are read against.
func normalizeEndpoints(f Family, s *svcPort, node, zone string, in []Endpoint) ([]epInfo, []Problem) {
	var probs []Problem
	idx := make(map[netip.AddrPort]int, len(in))
	out := make([]epInfo, 0, len(in))
	for i, e := range in {
		a := e.IP.Unmap()
		if _, bad := plainAddr(a); bad != "" || a.IsUnspecified() || a.IsMulticast() {
			probs = append(probs, Problem{Service: s.id, Field: fmt.Sprintf("endpoints[%d]", i), Message: fmt.Sprintf("unusable address %v; endpoint ignored", e.IP)})
			continue
		}
		if !f.Has(a) {
			continue
		}
		if e.Port < 1 || e.Port > 65535 {
			probs = append(probs, Problem{Service: s.id, Field: fmt.Sprintf("endpoints[%d].port", i), Message: fmt.Sprintf("%d is out of range 1-65535; endpoint ignored", e.Port)})
			continue
		}
		ap := netip.AddrPortFrom(a, uint16(e.Port))
		ep := epInfo{addr: ap, ready: e.Ready, serving: e.Serving, terminating: e.Terminating, local: node != "" && e.NodeName == node,
			node: e.NodeName, hints: hintsFor(e, node, zone)}
		if j, dup := idx[ap]; dup {
			// Two slices listing one address: keep the more usable copy.
			if rank(ep) > rank(out[j]) {
				out[j] = ep
			}
			continue
		}
		idx[ap] = len(out)
		out = append(out, ep)
	}
	sortEndpoints(out)
	for i := range out {
		out[i].str = out[i].addr.String()
		out[i].chain = endpointChain(s.name, s.proto, out[i].str)
	}
	return out, probs
}

func rank(e epInfo) int {
	switch {
	case e.ready:
		return 2
	case e.serving && e.terminating:
		return 1
	}
	return 0
}

// plainAddr unmaps a and says what makes it unfit for a rule: being
// invalid, or an IPv6 zone (fe80::1%eth0), which iptables-restore
// refuses, failing the whole restore, not only the Service's rules.
func plainAddr(a netip.Addr) (netip.Addr, string) {
	a = a.Unmap()
	switch {
	case !a.IsValid():
		return a, "invalid address"
	case a.Zone() != "":
		return a, fmt.Sprintf("%s has an IPv6 zone, which no rule can match", a)
	}
	return a, ""
}

// unmapPrefix turns ::ffff:a.b.c.d/n into a.b.c.d/(n-96) and masks host bits,
// which iptables would otherwise do silently.
func unmapPrefix(p netip.Prefix) (netip.Prefix, bool) {
	if !p.IsValid() {
		return netip.Prefix{}, false
	}
	a, n := p.Addr(), p.Bits()
	if a.Is4In6() {
		a, n = a.Unmap(), n-96
		if n < 0 {
			return netip.Prefix{}, false
		}
	}
	return netip.PrefixFrom(a, n).Masked(), true
}
