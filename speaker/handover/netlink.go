package handover

import (
	"errors"
	"fmt"
	"net"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// TableName is the nftables table (one of family ip, one of ip6) that
// holds the entries; it holds nothing else.
const TableName = "herald-handover"

// priority is the prerouting chain's: after conntrack (-200), so that a
// packet's connection state is known, and before NAT (-100), so that the
// proxy's rules, iptables or nftables alike, never see what goes on.
const priority = -150

// Netlink is the real Kernel: nftables over netlink, one transaction per
// Apply, so the kernel holds the old entries or the new, never a mix.
type Netlink struct {
	// NetNS, when not zero, is a network namespace fd to work in (tests).
	NetNS int
	// Index finds an interface's index; nil: net.InterfaceByName.
	Index func(name string) (int, error)
}

// Apply replaces the tables' contents with entries; none removes the
// tables. An entry whose interface is gone is left out and named in the
// error; the others are applied.
func (n Netlink) Apply(entries []Entry) error {
	var opts []nftables.ConnOption
	if n.NetNS != 0 {
		opts = append(opts, nftables.WithNetNSFd(n.NetNS))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return fmt.Errorf("handover: nftables: %w", err)
	}
	index := n.Index
	if index == nil {
		index = func(name string) (int, error) {
			ifi, err := net.InterfaceByName(name)
			if err != nil {
				return 0, err
			}
			return ifi.Index, nil
		}
	}
	var errs []error
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		// add, delete, add: the old table goes whether it was there or
		// not, and the new one comes in the same transaction.
		t := &nftables.Table{Name: TableName, Family: fam}
		c.AddTable(t)
		c.DelTable(t)
		var mine []Entry
		for _, e := range entries {
			if e.Addr.Is4() == (fam == nftables.TableFamilyIPv4) && e.Via.Is4() == e.Addr.Is4() {
				mine = append(mine, e)
			}
		}
		if len(mine) == 0 {
			continue
		}
		c.AddTable(t)
		ch := c.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(priority)})
		for _, e := range mine {
			idx, err := index(e.Iface)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", e, err))
				continue
			}
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: ruleExprs(e, idx)})
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("handover: applying %d entries: %w", len(entries), err)
	}
	return errors.Join(errs...)
}

// ruleExprs is one entry's rule:
//
//	iifname IFACE daddr ADDR ct state new meta l4proto tcp
//	tcp flags & syn == 0 counter dup to VIA device IFACE drop
func ruleExprs(e Entry, ifindex int) []expr.Any {
	daddrOff, daddrLen := uint32(16), uint32(4)
	if e.Addr.Is6() {
		daddrOff, daddrLen = 24, 16
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(e.Iface)},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: daddrOff, Len: daddrLen},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: e.Addr.AsSlice()},
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitNEW), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{0x02}, Xor: []byte{0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0}},
		&expr.Counter{},
		&expr.Immediate{Register: 1, Data: e.Via.AsSlice()},
		&expr.Immediate{Register: 2, Data: binaryutil.NativeEndian.PutUint32(uint32(ifindex))},
		&expr.Dup{RegAddr: 1, RegDev: 2, IsRegDevSet: true},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}
}

// ifname is an interface name as nftables compares it: NUL-padded to
// IFNAMSIZ.
func ifname(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}
