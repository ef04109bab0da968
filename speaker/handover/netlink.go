package handover

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
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
// family per Apply, so the kernel holds a family's old entries or its new
// ones, never a mix.
type Netlink struct {
	// NetNS, when not zero, is a network namespace fd to work in (tests).
	NetNS int
	// Index finds an interface's index and its addresses; nil:
	// net.InterfaceByName.
	Index func(name string) (int, []netip.Prefix, error)
}

func (n Netlink) conn() (*nftables.Conn, error) {
	var opts []nftables.ConnOption
	if n.NetNS != 0 {
		opts = append(opts, nftables.WithNetNSFd(n.NetNS))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("handover: nftables: %w", err)
	}
	return c, nil
}

func hostIndex(name string) (int, []netip.Prefix, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return 0, nil, err
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return 0, nil, err
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p)
		}
	}
	return ifi.Index, out, nil
}

var families = map[bool]nftables.TableFamily{true: nftables.TableFamilyIPv4, false: nftables.TableFamilyIPv6}

// Apply replaces the tables' contents with entries; none removes the
// tables. An entry whose interface is gone, or whose former holder's
// address is on no subnet of that interface (the copy could reach it
// nowhere, and the connection would hang rather than reset), is left out
// and named in the error; the others are applied.
func (n Netlink) Apply(entries []Entry) error {
	c, err := n.conn()
	if err != nil {
		return err
	}
	index := n.Index
	if index == nil {
		index = hostIndex
	}
	var errs []error
	for _, v4 := range []bool{true, false} {
		// add, delete, add in one transaction: the old table goes whether
		// it was there or not, and the new one comes with it.
		t := &nftables.Table{Name: TableName, Family: families[v4]}
		c.AddTable(t)
		c.DelTable(t)
		var rules [][]expr.Any
		var notes [][]byte
		for _, e := range entries {
			if e.Addr.Is4() != v4 || e.Via.Is4() != v4 {
				continue
			}
			idx, prefixes, err := index(e.Iface)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", e, err))
				continue
			}
			if !slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.Contains(e.Via) }) {
				errs = append(errs, fmt.Errorf("%s: %s is on no subnet of %s (%v)", e, e.Via, e.Iface, prefixes))
				continue
			}
			rules = append(rules, ruleExprs(e, idx))
			notes = append(notes, userdata.AppendString(nil, userdata.TypeComment, comment(e)))
		}
		if len(rules) > 0 {
			c.AddTable(t)
			ch := c.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeFilter,
				Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(priority)})
			for i, r := range rules {
				c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: r, UserData: notes[i]})
			}
		}
		if err := c.Flush(); err != nil {
			errs = append(errs, fmt.Errorf("handover: applying the %s table: %w", familyName(v4), err))
		}
	}
	return errors.Join(errs...)
}

func familyName(v4 bool) string {
	if v4 {
		return "ip"
	}
	return "ip6"
}

// List reads the entries in the tables back from the rules' comments.
func (n Netlink) List() ([]Entry, error) {
	c, err := n.conn()
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, v4 := range []bool{true, false} {
		t := &nftables.Table{Name: TableName, Family: families[v4]}
		rules, err := c.GetRules(t, &nftables.Chain{Name: "prerouting", Table: t})
		if err != nil {
			continue // no table: nothing left
		}
		for _, r := range rules {
			s, _ := userdata.GetString(r.UserData, userdata.TypeComment)
			if e, ok := parseComment(s); ok {
				out = append(out, e)
			}
		}
	}
	return out, nil
}

const commentPrefix = "herald handover"

// comment is an entry as its rule's comment: what List reads back, and
// what an operator reads in `nft list table ip herald-handover`.
func comment(e Entry) string {
	return fmt.Sprintf("%s %s %s %s %s %d", commentPrefix, e.Addr, e.Iface, e.Via, e.From, e.At.UnixMilli())
}

func parseComment(s string) (Entry, bool) {
	rest, ok := strings.CutPrefix(s, commentPrefix+" ")
	if !ok {
		return Entry{}, false
	}
	f := strings.Fields(rest)
	if len(f) != 5 {
		return Entry{}, false
	}
	addr, err1 := netip.ParseAddr(f[0])
	via, err2 := netip.ParseAddr(f[2])
	ms, err3 := strconv.ParseInt(f[4], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return Entry{}, false
	}
	return Entry{Addr: addr, Iface: f[1], Via: via, From: f[3], At: time.UnixMilli(ms)}, true
}

// ruleExprs is one entry's rule:
//
//	iifname IFACE daddr ADDR ttl|hoplimit > 1 ct state new meta l4proto tcp
//	tcp flags & syn == 0 counter dup to VIA device IFACE drop
func ruleExprs(e Entry, ifindex int) []expr.Any {
	daddrOff, daddrLen, ttlOff := uint32(16), uint32(4), uint32(8)
	if e.Addr.Is6() {
		daddrOff, daddrLen, ttlOff = 24, 16, 7
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(e.Iface)},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: daddrOff, Len: daddrLen},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: e.Addr.AsSlice()},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: ttlOff, Len: 1},
		&expr.Cmp{Op: expr.CmpOpGt, Register: 1, Data: []byte{1}},
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
