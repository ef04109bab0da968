package topology

import (
	"fmt"
	"net/netip"
	"strings"
)

// RouteProto marks the host's unreachable routes as the lab's (`proto 72`,
// a number no routing daemon uses): teardown deletes a route only when its
// type, destination and this protocol are the lab's.
const RouteProto = "72"

// Route is one route of the root namespace's main table, as
// `ip -o [-6] route show` prints it.
type Route struct {
	Type  string // "unicast" unless ip names another, e.g. "unreachable"
	Dst   netip.Prefix
	Dev   string
	Proto string // as ip prints it ("kernel", "72"); empty for boot
}

func (r Route) String() string {
	s := r.Type + " " + r.Dst.String()
	if r.Dev != "" {
		s += " dev " + r.Dev
	}
	if r.Proto != "" {
		s += " proto " + r.Proto
	}
	return s
}

// unreachableRoutes returns `ip [-6] route <op> unreachable <range> proto
// 72` for each of the lab's ranges. While a lab is up, these make the
// host's traffic to any lab address that is not a member (a LoadBalancer
// or Service IP, the remote subnet, a pod CIDR without a node) fail with
// EHOSTUNREACH instead of following the machine's default route off the
// machine; the routes to the members are more specific and win.
func unreachableRoutes(op string) []Cmd {
	var cmds []Cmd
	for _, r := range unreachableRanges() {
		cmds = append(cmds, unreachableRoute(op, r))
	}
	return cmds
}

// unreachableRanges are the lab ranges that get an unreachable route:
// the LAN (with the layer-2 LoadBalancer pool), the pod and Service
// ranges. Not the remote subnet and the BGP pool (203.0.113.0/24 and
// their IPv6 ranges): the machine's own network may use them for real
// services (this machine's package mirrors are at 203.0.113.80), and an
// unreachable route there cut the Go module proxy and apt off while a lab
// was up. Nothing in the lab's host-side code sends there.
func unreachableRanges() []netip.Prefix {
	var out []netip.Prefix
	for _, r := range labRanges {
		if r != RemoteV4 && r != RemoteV6 && r != BGPPoolV4 && r != BGPPoolV6 {
			out = append(out, r)
		}
	}
	return out
}

func unreachableRoute(op string, r netip.Prefix) Cmd {
	args := []string{"ip", "route", op, "unreachable", r.String(), "proto", RouteProto}
	if r.Addr().Is6() {
		args = append([]string{"ip", "-6"}, args[1:]...)
	}
	return Cmd{Args: args}
}

// ownRouteDels returns the commands that delete the lab's unreachable
// routes among e's, in the order of labRanges.
func ownRouteDels(e Existing) []Cmd {
	var cmds []Cmd
	for _, lr := range labRanges {
		for _, r := range e.Routes {
			if labsOwn(r) && r.Dst == lr {
				cmds = append(cmds, unreachableRoute("del", lr))
			}
		}
	}
	return cmds
}

// labsOwn tells whether r is one of the routes unreachableRoutes adds.
func labsOwn(r Route) bool {
	if r.Type != "unreachable" || r.Proto != RouteProto {
		return false
	}
	for _, l := range labRanges {
		if r.Dst == l {
			return true
		}
	}
	return false
}

// intoLab tells whether a route with destination dst is one for the lab's
// addresses: it overlaps one of the lab's ranges and lies inside the
// documentation ranges. Wider routes (the default route, a VPN's
// 0.0.0.0/1, 2000::/3) are the machine's general routing, which the
// unreachable routes override for the lab's ranges on purpose.
func intoLab(dst netip.Prefix) bool {
	inDoc := false
	for _, d := range DocRanges {
		if d.Bits() <= dst.Bits() && d.Contains(dst.Addr()) {
			inDoc = true
		}
	}
	if !inDoc {
		return false
	}
	for _, l := range labRanges {
		if l.Overlaps(dst) {
			return true
		}
	}
	return false
}

// CheckHostRoutes refuses a machine that already routes any of the lab's
// addresses: another route of the machine's own for them means its real
// network uses them, and the lab would capture that traffic (or leave a
// part of its ranges to it); the lab's own unreachable routes mean a lab
// is up, or a killed one left them.
func CheckHostRoutes(routes []Route) error {
	for _, r := range routes {
		if !intoLab(r.Dst) {
			continue
		}
		if labsOwn(r) {
			return fmt.Errorf("the host already has the lab's route %q: a lab is up or a killed one left it; bring it down first (herald-lab down)", r)
		}
		return fmt.Errorf("this machine has a route %q into the lab's address ranges; the lab would capture real traffic, so it refuses to start", r)
	}
	return nil
}

// otherLabUp tells whether a lab other than the one named prefix is up:
// the host's LAN address is on a link that is not this lab's bridge. The
// unreachable routes are the same for every lab, so they are that lab's.
func otherLabUp(e Existing, prefix string) bool {
	for dev, addrs := range e.AddrsByLink {
		for _, a := range addrs {
			if a.Addr() == HostLANv4 && dev != prefix+"-lan" {
				return true
			}
		}
	}
	return false
}

// otherLabBridge tells whether the link name is the LAN bridge of a lab
// other than the one named prefix.
func otherLabBridge(link, prefix string) bool {
	p, ok := strings.CutSuffix(link, "-lan")
	return ok && p != prefix && checkPrefix(p) == nil
}

// LabRoutes lists the root namespace's routes into the lab's ranges that a
// lab named prefix accounts for: all of them but those on another lab's
// bridge, and but the unreachable routes while another lab's bridge exists
// (they are shared; its bridge outlives them). A lab must leave these as
// it found them.
func LabRoutes(e Existing, prefix string) []string {
	other := false
	for link := range e.Links {
		other = other || otherLabBridge(link, prefix)
	}
	var out []string
	for _, r := range e.Routes {
		if !intoLab(r.Dst) || otherLabBridge(r.Dev, prefix) || other && labsOwn(r) {
			continue
		}
		out = append(out, r.String())
	}
	return out
}

// routeTypes are the route types ip prints before the destination.
var routeTypes = map[string]bool{
	"unicast": true, "local": true, "broadcast": true, "multicast": true, "throw": true,
	"unreachable": true, "prohibit": true, "blackhole": true, "nat": true, "anycast": true,
}

// parseRoutes reads `ip -o [-6] route show` lines such as
// "unreachable 198.51.100.0/24 proto 72" or
// "198.51.100.11 dev hlab-lan scope link src 198.51.100.254"
// (a destination without a length is a single address).
func parseRoutes(out string, v6 bool) []Route {
	var routes []Route
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		r := Route{Type: "unicast"}
		if len(f) > 0 && routeTypes[f[0]] {
			r.Type, f = f[0], f[1:]
		}
		if len(f) == 0 {
			continue
		}
		switch {
		case f[0] == "default" && v6:
			r.Dst = netip.MustParsePrefix("::/0")
		case f[0] == "default":
			r.Dst = netip.MustParsePrefix("0.0.0.0/0")
		case strings.Contains(f[0], "/"):
			p, err := netip.ParsePrefix(f[0])
			if err != nil {
				continue
			}
			r.Dst = p
		default:
			a, err := netip.ParseAddr(f[0])
			if err != nil {
				continue
			}
			r.Dst = netip.PrefixFrom(a, a.BitLen())
		}
		for i := 1; i+1 < len(f); i++ {
			switch f[i] {
			case "dev":
				r.Dev = f[i+1]
			case "proto":
				r.Proto = f[i+1]
			}
		}
		routes = append(routes, r)
	}
	return routes
}
