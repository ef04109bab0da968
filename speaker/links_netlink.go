package speaker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// NetlinkLinks reads the interfaces of the process's network namespace
// over rtnetlink.
type NetlinkLinks struct{}

// List implements Links.
func (NetlinkLinks) List() ([]Link, error) {
	nls, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	names := map[int]string{}
	for _, l := range nls {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("listing addresses: %w", err)
	}
	byLink := map[int][]netip.Prefix{}
	for _, a := range addrs {
		if a.IPNet == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ones, _ := a.Mask.Size()
		byLink[a.LinkIndex] = append(byLink[a.LinkIndex], netip.PrefixFrom(ip.Unmap(), ones))
	}
	out := make([]Link, 0, len(nls))
	for _, nl := range nls {
		a := nl.Attrs()
		l := Link{
			Name:     a.Name,
			Index:    a.Index,
			MAC:      a.HardwareAddr,
			Up:       a.Flags&net.FlagUp != 0,
			Carrier:  a.RawFlags&unix.IFF_LOWER_UP != 0,
			Loopback: a.Flags&net.FlagLoopback != 0,
			NoARP:    a.RawFlags&unix.IFF_NOARP != 0,
			Kind:     nl.Type(),
			Addrs:    byLink[a.Index],
		}
		if a.MasterIndex != 0 {
			l.Master = names[a.MasterIndex]
			if l.Master == "" {
				l.Master = fmt.Sprintf("ifindex %d", a.MasterIndex)
			}
		}
		out = append(out, l)
	}
	return out, nil
}

// Watch implements Links over link and address notifications: carrier,
// state, enslavement, renames, new and removed links and addresses.
func (NetlinkLinks) Watch(ctx context.Context, changed func()) error {
	done := make(chan struct{})
	var once sync.Once
	stop := func() { once.Do(func() { close(done) }) }
	defer stop()
	linkCh := make(chan netlink.LinkUpdate, 64)
	addrCh := make(chan netlink.AddrUpdate, 64)
	failed := make(chan error, 2)
	report := func(err error) {
		select {
		case failed <- err:
		default:
		}
	}
	if err := netlink.LinkSubscribeWithOptions(linkCh, done, netlink.LinkSubscribeOptions{ErrorCallback: report}); err != nil {
		return fmt.Errorf("subscribing to link changes: %w", err)
	}
	if err := netlink.AddrSubscribeWithOptions(addrCh, done, netlink.AddrSubscribeOptions{ErrorCallback: report}); err != nil {
		return fmt.Errorf("subscribing to address changes: %w", err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-linkCh:
			if !ok {
				return errors.New("link notifications stopped")
			}
			changed()
		case _, ok := <-addrCh:
			if !ok {
				return errors.New("address notifications stopped")
			}
			changed()
		case err := <-failed:
			// The socket overflowed or failed: what was missed is
			// unknown, so report a change and let the caller resubscribe.
			changed()
			return fmt.Errorf("netlink notifications: %w", err)
		}
	}
}

// NetlinkNeighbors reads the neighbour table of the process's network
// namespace over rtnetlink.
type NetlinkNeighbors struct{}

// Confirmed implements Neighbors.
func (NetlinkNeighbors) Confirmed(iface string) (map[netip.Addr]net.HardwareAddr, error) {
	l, err := netlink.LinkByName(iface)
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", iface, err)
	}
	entries, err := netlink.NeighList(l.Attrs().Index, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("neighbours of %s: %w", iface, err)
	}
	confirmed := unix.NUD_REACHABLE | unix.NUD_DELAY | unix.NUD_PROBE | unix.NUD_PERMANENT
	out := map[netip.Addr]net.HardwareAddr{}
	for _, n := range entries {
		a, ok := netip.AddrFromSlice(n.IP)
		if ok && n.State&confirmed != 0 && len(n.HardwareAddr) == 6 {
			out[a.Unmap()] = slices.Clone(n.HardwareAddr)
		}
	}
	return out, nil
}
