package e2e

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/herald-lb/herald/e2e/lab/netns"
)

// arpAsk sends, from iface in the namespace ns, one broadcast ARP
// request for each of ips at once, and collects for wait every reply:
// per address, the distinct sender hardware addresses, which are what a
// client's kernel caches (a node answering for another node sends that
// node's MAC there from its own Ethernet address, which arping -r would
// print instead).
func arpAsk(ns, iface string, ips []string, wait time.Duration) (map[string][]string, error) {
	out := make(map[string]map[string]bool, len(ips))
	for _, ip := range ips {
		out[ip] = map[string]bool{}
	}
	var fd int
	var ifi *net.Interface
	var src netip.Addr
	err := netns.Do(ns, func() error {
		var err error
		if ifi, err = net.InterfaceByName(iface); err != nil {
			return err
		}
		addrs, err := ifi.Addrs()
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
				src = p.Addr()
				break
			}
		}
		if !src.IsValid() {
			return fmt.Errorf("%s has no IPv4 address", iface)
		}
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ARP)))
		if err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: ifi.Index}); err != nil {
			unix.Close(fd)
			return err
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ARP socket on %s in %s: %w", iface, ns, err)
	}
	defer unix.Close(fd)
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: ifi.Index, Halen: 6}
	copy(to.Addr[:], bcast)
	for _, ip := range ips {
		tpa, err := netip.ParseAddr(ip)
		if err != nil || !tpa.Is4() {
			return nil, fmt.Errorf("ARP for %q: not an IPv4 address", ip)
		}
		if err := unix.Sendto(fd, arpRequestFrame(ifi.HardwareAddr, src, tpa), 0, to); err != nil {
			return nil, fmt.Errorf("sending the ARP request for %s: %w", ip, err)
		}
	}
	buf := make([]byte, 1600)
	for deadline := time.Now().Add(wait); ; {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		tv := unix.NsecToTimeval(left.Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return nil, err
		}
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			if err == unix.EAGAIN || err == unix.EINTR {
				continue
			}
			return nil, err
		}
		spa, sha, ok := arpReplyFields(buf[:n], ifi.HardwareAddr, src)
		if seen, want := out[spa.String()]; ok && want {
			seen[strings.ToLower(sha.String())] = true
		}
	}
	res := make(map[string][]string, len(out))
	for ip, set := range out {
		macs := make([]string, 0, len(set))
		for m := range set {
			macs = append(macs, m)
		}
		slices.Sort(macs)
		res[ip] = macs
	}
	return res, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// arpRequestFrame is "who has tpa? tell spa" from mac, broadcast.
func arpRequestFrame(mac net.HardwareAddr, spa, tpa netip.Addr) []byte {
	f := make([]byte, 42)
	copy(f[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(f[6:12], mac)
	binary.BigEndian.PutUint16(f[12:], unix.ETH_P_ARP)
	binary.BigEndian.PutUint16(f[14:], 1)      // Ethernet
	binary.BigEndian.PutUint16(f[16:], 0x0800) // IPv4
	f[18], f[19] = 6, 4
	binary.BigEndian.PutUint16(f[20:], 1) // request
	copy(f[22:28], mac)
	s, t := spa.As4(), tpa.As4()
	copy(f[28:32], s[:])
	copy(f[38:42], t[:])
	return f
}

// arpReplyFields are the sender protocol and hardware addresses of an
// ARP reply to own at ownIP: the answer to a request of ours, not a
// gratuitous announcement (which targets everyone, or the sender).
func arpReplyFields(f []byte, own net.HardwareAddr, ownIP netip.Addr) (netip.Addr, net.HardwareAddr, bool) {
	if len(f) < 42 || binary.BigEndian.Uint16(f[12:]) != unix.ETH_P_ARP || binary.BigEndian.Uint16(f[20:]) != 2 ||
		f[18] != 6 || f[19] != 4 || bytes.Equal(f[6:12], own) || !bytes.Equal(f[32:38], own) {
		return netip.Addr{}, nil, false
	}
	if tpa, _ := netip.AddrFromSlice(f[38:42]); tpa != ownIP {
		return netip.Addr{}, nil, false
	}
	spa, _ := netip.AddrFromSlice(f[28:32])
	return spa, net.HardwareAddr(slices.Clone(f[22:28])), true
}
