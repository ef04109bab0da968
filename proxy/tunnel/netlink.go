package tunnel

import (
	"errors"
	"fmt"
	"math/bits"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Netlink is the kernel side, in the network namespace of the calling
// process.
type Netlink struct {
	// Sysctl is where the /proc/sys files are; "" means /proc/sys.
	Sysctl string
}

func (n Netlink) sysctl(path, value string) error {
	root := n.Sysctl
	if root == "" {
		root = "/proc/sys"
	}
	return os.WriteFile(filepath.Join(root, path), []byte(value), 0o644)
}

// EnsureDevice implements Kernel: the VXLAN device, made anew when one
// of that name differs, up, with its reverse-path address and loose
// rp_filter.
func (n Netlink) EnsureDevice(d Device) (created bool, err error) {
	parent, err := linkWithAddr(d.Underlay)
	if err != nil {
		return false, err
	}
	want := &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: d.Name, HardwareAddr: d.MAC}, VxlanId: int(d.VNI), Port: d.Port,
		SrcAddr: net.IP(d.Underlay.AsSlice()), VtepDevIndex: parent}
	if l, err := netlink.LinkByName(d.Name); err == nil {
		v, ok := l.(*netlink.Vxlan)
		same := ok && v.VxlanId == want.VxlanId && v.Port == want.Port && v.SrcAddr.Equal(want.SrcAddr) && v.HardwareAddr.String() == d.MAC.String() && !v.Learning
		if !same {
			if err := netlink.LinkDel(l); err != nil {
				return false, fmt.Errorf("removing the old %s: %w", d.Name, err)
			}
		}
	}
	if _, err := netlink.LinkByName(d.Name); err != nil {
		if err := netlink.LinkAdd(want); err != nil {
			return false, fmt.Errorf("creating vxlan %s (vni %d, port %d, from %s): %w", d.Name, d.VNI, d.Port, d.Underlay, err)
		}
		created = true
	}
	l, err := netlink.LinkByName(d.Name)
	if err != nil {
		return created, err
	}
	if !created && l.Attrs().Flags&net.FlagUp != 0 {
		return false, nil
	}
	if err := netlink.AddrReplace(l, &netlink.Addr{IPNet: prefixNet(d.RPAddr), Scope: unix.RT_SCOPE_LINK}); err != nil {
		return created, fmt.Errorf("address %s on %s: %w", d.RPAddr, d.Name, err)
	}
	if d.ProbeAddr.IsValid() {
		// No duplicate address detection: the address is unique by
		// construction, and DAD would hold it tentative for a second.
		a := &netlink.Addr{IPNet: prefixNet(netip.PrefixFrom(d.ProbeAddr, 64)), Scope: unix.RT_SCOPE_LINK, Flags: unix.IFA_F_NODAD}
		if err := netlink.AddrReplace(l, a); err != nil {
			return created, fmt.Errorf("address %s on %s: %w", d.ProbeAddr, d.Name, err)
		}
	}
	if err := looseRPFilter(l.Attrs().Index); err != nil {
		// A kernel that refuses devconf over netlink: the file.
		if ferr := n.sysctl("net/ipv4/conf/"+d.Name+"/rp_filter", "2"); ferr != nil {
			return created, fmt.Errorf("loose rp_filter on %s: %w; %w", d.Name, err, ferr)
		}
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return created, fmt.Errorf("setting %s up: %w", d.Name, err)
	}
	return created, nil
}

// Netlink attributes of an interface's IPv4 settings (linux/if_link.h,
// linux/ip.h), which set them without /proc/sys, read-only in an
// unprivileged container.
const (
	iflaInetConf        = 1
	ipv4DevconfRPFilter = 8
)

// looseRPFilter sets rp_filter=2 on the interface over netlink.
func looseRPFilter(index int) error {
	req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	req.AddData(msg)
	spec := nl.NewRtAttr(unix.IFLA_AF_SPEC, nil)
	conf := spec.AddRtAttr(unix.AF_INET, nil).AddRtAttr(iflaInetConf, nil)
	conf.AddRtAttr(ipv4DevconfRPFilter, nl.Uint32Attr(2))
	req.AddData(spec)
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}

// linkWithAddr is the index of the interface that holds a.
func linkWithAddr(a netip.Addr) (int, error) {
	fam := netlink.FAMILY_V4
	if a.Is6() {
		fam = netlink.FAMILY_V6
	}
	addrs, err := netlink.AddrList(nil, fam)
	if err != nil {
		return 0, err
	}
	for _, x := range addrs {
		if ip, ok := netip.AddrFromSlice(x.IP); ok && ip.Unmap() == a {
			return x.LinkIndex, nil
		}
	}
	return 0, fmt.Errorf("no interface holds the node's address %s", a)
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// defaultNet is the default route's destination in a's family.
func defaultNet(a netip.Addr) *net.IPNet {
	if a.Is4() {
		return prefixNet(netip.MustParsePrefix("0.0.0.0/0"))
	}
	return prefixNet(netip.MustParsePrefix("::/0"))
}

// EnsureRoute implements Kernel.
func (n Netlink) EnsureRoute(dev string, r Route) error {
	l, err := netlink.LinkByName(dev)
	if err != nil {
		return err
	}
	idx := l.Attrs().Index
	if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, State: netlink.NUD_PERMANENT, Flags: netlink.NTF_SELF,
		IP: net.IP(r.Underlay.AsSlice()), HardwareAddr: r.MAC}); err != nil {
		return fmt.Errorf("fdb %s -> %s: %w", r.MAC, r.Underlay, err)
	}
	if r.Probe.IsValid() {
		if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: idx, Family: unix.AF_INET6, State: netlink.NUD_PERMANENT, IP: net.IP(r.Probe.AsSlice()), HardwareAddr: r.MAC}); err != nil {
			return fmt.Errorf("neighbour %s: %w", r.Probe, err)
		}
	}
	for _, hop := range []netip.Addr{r.Hop4, r.Hop6} {
		fam := unix.AF_INET
		if hop.Is6() {
			fam = unix.AF_INET6
		}
		if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: idx, Family: fam, State: netlink.NUD_PERMANENT, IP: net.IP(hop.AsSlice()), HardwareAddr: r.MAC}); err != nil {
			return fmt.Errorf("neighbour %s: %w", hop, err)
		}
		if err := netlink.RouteReplace(&netlink.Route{LinkIndex: idx, Dst: defaultNet(hop), Gw: net.IP(hop.AsSlice()), Flags: int(netlink.FLAG_ONLINK), Table: int(r.Table)}); err != nil {
			return fmt.Errorf("route in table %d via %s: %w", r.Table, hop, err)
		}
		if err := ensureRule(fam, r); err != nil {
			return err
		}
	}
	return nil
}

func rule(fam int, r Route) *netlink.Rule {
	x := netlink.NewRule()
	mask := r.Mask
	x.Family, x.Mark, x.Mask, x.Table, x.Priority = fam, r.Mark, &mask, int(r.Table), r.Priority
	return x
}

func ensureRule(fam int, r Route) error {
	have, err := netlink.RuleListFiltered(fam, &netlink.Rule{Table: int(r.Table)}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return err
	}
	for _, h := range have {
		if h.Mark == r.Mark && h.Mask != nil && *h.Mask == r.Mask && h.Priority == r.Priority {
			return nil
		}
	}
	if err := netlink.RuleAdd(rule(fam, r)); err != nil {
		return fmt.Errorf("rule fwmark %#x/%#x lookup %d: %w", r.Mark, r.Mask, r.Table, err)
	}
	return nil
}

// gone is true for the errors of deleting what is not there.
func gone(err error) bool {
	return err == nil || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ENODEV)
}

// DeleteRoute implements Kernel.
func (n Netlink) DeleteRoute(dev string, r Route) error {
	var errs []error
	for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
		if err := netlink.RuleDel(rule(fam, r)); !gone(err) {
			errs = append(errs, err)
		}
	}
	l, err := netlink.LinkByName(dev)
	if err != nil {
		// The device is gone, and its routes, neighbours and FDB with it.
		return errors.Join(errs...)
	}
	idx := l.Attrs().Index
	for _, hop := range []netip.Addr{r.Hop4, r.Hop6} {
		if err := netlink.RouteDel(&netlink.Route{LinkIndex: idx, Dst: defaultNet(hop), Gw: net.IP(hop.AsSlice()), Table: int(r.Table)}); !gone(err) {
			errs = append(errs, err)
		}
		if err := netlink.NeighDel(&netlink.Neigh{LinkIndex: idx, IP: net.IP(hop.AsSlice())}); !gone(err) {
			errs = append(errs, err)
		}
	}
	if r.Probe.IsValid() {
		if err := netlink.NeighDel(&netlink.Neigh{LinkIndex: idx, IP: net.IP(r.Probe.AsSlice())}); !gone(err) {
			errs = append(errs, err)
		}
	}
	if err := netlink.NeighDel(&netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF, IP: net.IP(r.Underlay.AsSlice()), HardwareAddr: r.MAC}); !gone(err) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// DeleteDevice implements Kernel.
func (n Netlink) DeleteDevice(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return nil
	}
	if err := netlink.LinkDel(l); !gone(err) {
		return err
	}
	return nil
}

// Remove deletes what any Manager with cfg's device and tables left:
// the device (with its neighbours, FDB and routes) and every policy
// rule that looks up one of the peers' tables. It is the cleanup of an
// uninstall, which knows no peer ids.
func (n Netlink) Remove(cfg Config) error {
	cfg = cfg.WithDefaults()
	max := uint32(1)<<bits.OnesCount32(cfg.MarkMask) - 1
	var errs []error
	for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
		rs, err := netlink.RuleList(fam)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, r := range rs {
			if t := uint32(r.Table); t > cfg.TableBase && t <= cfg.TableBase+max {
				r := r
				if err := netlink.RuleDel(&r); !gone(err) {
					errs = append(errs, err)
				}
			}
		}
	}
	if err := n.DeleteDevice(cfg.Device); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
