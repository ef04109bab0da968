package proxy

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/herald-lb/herald/proxy/rules"
)

// NodePortAddresses is --nodeport-addresses: the CIDRs whose local
// addresses serve NodePorts, or Primary for the node's primary IPs. The
// zero value serves NodePorts on every local address but loopback.
type NodePortAddresses struct {
	CIDRs   []netip.Prefix
	Primary bool
}

// NodePortAddressesPrimary is the flag's word for the node's primary IPs.
const NodePortAddressesPrimary = "primary"

// IsSet reports whether the flag restricts anything.
func (n NodePortAddresses) IsSet() bool { return n.Primary || len(n.CIDRs) > 0 }

func (n NodePortAddresses) String() string {
	if n.Primary {
		return NodePortAddressesPrimary
	}
	s := make([]string, len(n.CIDRs))
	for i, p := range n.CIDRs {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// ParseNodePortAddresses reads the flag's value: comma-separated CIDRs
// of either family, or "primary" alone; empty means unset. Host bits
// are masked, as kube-proxy does.
func ParseNodePortAddresses(s string) (NodePortAddresses, error) {
	var out NodePortAddresses
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	fields := strings.Split(s, ",")
	for _, f := range fields {
		f = strings.TrimSpace(f)
		switch {
		case f == NodePortAddressesPrimary:
			if len(fields) > 1 {
				return NodePortAddresses{}, fmt.Errorf("%q cannot be combined with CIDRs", NodePortAddressesPrimary)
			}
			out.Primary = true
			continue
		case f == "":
			return NodePortAddresses{}, fmt.Errorf("empty entry in %q", s)
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			if a, aerr := netip.ParseAddr(f); aerr == nil {
				return NodePortAddresses{}, fmt.Errorf("%q is not a CIDR (for one address write %s)", f, netip.PrefixFrom(a, a.BitLen()))
			}
			return NodePortAddresses{}, fmt.Errorf("%q is not a CIDR (nor %q)", f, NodePortAddressesPrimary)
		}
		if p.Addr().Is4In6() {
			return NodePortAddresses{}, fmt.Errorf("%q: write IPv4 prefixes as IPv4", f)
		}
		if p.Addr().Zone() != "" {
			return NodePortAddresses{}, fmt.Errorf("%q: a CIDR has no zone", f)
		}
		out.CIDRs = append(out.CIDRs, p.Masked())
	}
	return out, nil
}

// allowed returns rules.NodeConfig.NodePortAddresses: for each family
// the flag restricts, the local addresses inside its CIDRs (primary: the
// node's primary IPs, when local). As in kube-proxy, a family without a
// CIDR of its own, or with a zero-length one (0.0.0.0/0, ::/0), is not
// restricted; neither is a family without a primary IP under "primary".
// nil when nothing is restricted.
func (n NodePortAddresses) allowed(primary, local []netip.Addr) map[rules.Family][]netip.Addr {
	cidrs := n.CIDRs
	if n.Primary {
		cidrs = nil
		for _, ip := range primary {
			if !ip.IsLoopback() {
				cidrs = append(cidrs, netip.PrefixFrom(ip, ip.BitLen()))
			}
		}
	}
	var out map[rules.Family][]netip.Addr
	for _, f := range []rules.Family{rules.IPv4, rules.IPv6} {
		var mine []netip.Prefix
		for _, p := range cidrs {
			if f.Has(p.Addr()) {
				mine = append(mine, p)
			}
		}
		if len(mine) == 0 || slices.ContainsFunc(mine, func(p netip.Prefix) bool { return p.Bits() == 0 }) {
			continue
		}
		ips := []netip.Addr{}
		for _, a := range local {
			if slices.ContainsFunc(mine, func(p netip.Prefix) bool { return p.Contains(a) }) && !slices.Contains(ips, a) {
				ips = append(ips, a)
			}
		}
		slices.SortFunc(ips, netip.Addr.Compare)
		if out == nil {
			out = map[rules.Family][]netip.Addr{}
		}
		out[f] = ips
	}
	return out
}

// LocalAddrs lists the addresses of the node's interfaces (in the
// proxy's network namespace, the host's).
type LocalAddrs interface {
	LocalAddrs() ([]netip.Addr, error)
}

// InterfaceAddrs is the real LocalAddrs.
type InterfaceAddrs struct{}

// LocalAddrs implements LocalAddrs.
func (InterfaceAddrs) LocalAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("listing the node's addresses: %w", err)
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		var ip net.IP
		switch v := a.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		}
		if ip, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}
