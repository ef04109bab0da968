package speaker

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/herald-lb/herald/speaker/members"
)

// Link is what the speaker needs to know about one network interface.
type Link struct {
	Name  string
	Index int
	MAC   net.HardwareAddr
	// Up is the administrative state (IFF_UP); Carrier is IFF_LOWER_UP.
	Up, Carrier bool
	Loopback    bool
	NoARP       bool
	// Master is the bond or bridge this link is enslaved to; "" for none.
	Master string
	// Kind is the netlink link type ("device", "veth", "bridge", ...).
	Kind  string
	Addrs []netip.Prefix
}

// Neighbors reads the node's neighbour table: the MACs other hosts have
// on one of this node's links.
type Neighbors interface {
	// Confirmed are the entries of iface the kernel confirmed lately
	// (reachable, or being checked again: delay, probe) and the permanent
	// ones, by address. A stale entry is left out: the host may have
	// changed its MAC since.
	Confirmed(iface string) (map[netip.Addr]net.HardwareAddr, error)
}

// Links lists and watches the node's network interfaces. The netlink
// implementation reads the speaker's network namespace (the node's, with
// hostNetwork); tests use a fake.
type Links interface {
	List() ([]Link, error)
	// Watch calls changed after every link change until ctx ends; it
	// returns an error only when it cannot watch at all.
	Watch(ctx context.Context, changed func()) error
}

// podInterfacePrefixes name the devices of common pod networks (CNI
// bridges, per-pod veths of routed CNIs, overlay and tunnel devices).
// Answering ARP there would offer the LoadBalancer IP to pods rather than
// to the LAN.
var podInterfacePrefixes = []string{
	"cni", "cbr", "docker", "cali", "lxc", "cilium_", "flannel", "vxlan.", "tunl", "kube-ipvs", "kube-bridge",
	"weave", "vethwe", "nodelocaldns", "genev", "antrea-", "ovn-k8s",
}

// Interfaces is the speaker's choice of interfaces, as published in its
// memberlist metadata and used for its own answers.
type Interfaces struct {
	// Names are the interfaces it may announce on, with or without
	// carrier; Down are those of them without carrier (or down).
	Names, Down []string
	// Skipped says why each other interface is not used.
	Skipped map[string]string
	// Links are the usable links by name, for the responders.
	Links map[string]Link
}

// Meta is the memberlist metadata for ifs.
func (ifs Interfaces) Meta() members.Meta {
	// Releases is set here, not per round, so that fitMeta counts it.
	return members.Meta{Interfaces: slices.Clone(ifs.Names), DownInterfaces: slices.Clone(ifs.Down), Releases: true}
}

// SelectInterfaces picks the interfaces this node may answer ARP and NDP
// on. Never: loopback, NOARP links, links that are not Ethernet, and links
// enslaved to a bond or bridge (the master answers for them). By default
// also not: interfaces without an address outside the link-local range
// (nothing routes the LAN there), and pod-network interfaces, recognised
// by an address inside the node's pod CIDRs or by a well-known CNI name
// (cbr0, cni0, cali*, ...); a pod's veth in a bridge is a bridge port, and
// one of a routed CNI has no address of its own. An interface an L2Advertisement names
// (named) is used even when it looks like a pod interface or has no
// address: the operator asked for it.
func SelectInterfaces(links []Link, podCIDRs []netip.Prefix, named map[string]bool) Interfaces {
	out := Interfaces{Skipped: map[string]string{}, Links: map[string]Link{}}
	for _, l := range links {
		if why := unusable(l, podCIDRs, named[l.Name]); why != "" {
			out.Skipped[l.Name] = why
			continue
		}
		out.Names = append(out.Names, l.Name)
		out.Links[l.Name] = l
		if !l.Up || !l.Carrier {
			out.Down = append(out.Down, l.Name)
		}
	}
	slices.Sort(out.Names)
	slices.Sort(out.Down)
	return out
}

func unusable(l Link, podCIDRs []netip.Prefix, named bool) string {
	switch {
	case l.Name == "" || l.Index <= 0:
		return "no name or index"
	case l.Loopback:
		return "loopback"
	case l.NoARP:
		return "NOARP"
	case len(l.MAC) != 6 || bytes.Equal(l.MAC, make([]byte, 6)) || l.MAC[0]&1 == 1:
		return "not an Ethernet interface with a unicast MAC"
	case l.Master != "":
		return "enslaved to " + l.Master + " (the master answers)"
	case named:
		return ""
	}
	for _, p := range podInterfacePrefixes {
		if strings.HasPrefix(l.Name, p) {
			return fmt.Sprintf("pod network interface (name %s*); name it in an L2Advertisement to use it", p)
		}
	}
	global := false
	for _, a := range l.Addrs {
		if inPodCIDRs([]netip.Prefix{a}, podCIDRs) {
			return fmt.Sprintf("pod network interface (%s is in the node's pod CIDRs); name it in an L2Advertisement to use it", a)
		}
		if !a.Addr().IsLinkLocalUnicast() && !a.Addr().IsLoopback() {
			global = true
		}
	}
	if !global {
		return "no address outside link-local; name it in an L2Advertisement to use it"
	}
	return ""
}

func inPodCIDRs(addrs, podCIDRs []netip.Prefix) bool {
	for _, a := range addrs {
		for _, p := range podCIDRs {
			if p.Contains(a.Addr()) {
				return true
			}
		}
	}
	return false
}

// fitMeta drops interfaces (the last by name first) until the metadata
// fits memberlist's limit; a node with that many interfaces still
// announces on those that fit.
func fitMeta(m members.Meta) (members.Meta, []string) {
	var dropped []string
	for {
		if _, err := members.EncodeMeta(m); err == nil || len(m.Interfaces) == 0 {
			return m, dropped
		}
		last := m.Interfaces[len(m.Interfaces)-1]
		dropped = append(dropped, last)
		m.Interfaces = m.Interfaces[:len(m.Interfaces)-1]
		m.DownInterfaces = slices.DeleteFunc(m.DownInterfaces, func(s string) bool { return s == last })
	}
}
