package nft

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/herald-lb/herald/internal/ipfamily"
)

// Kernel applies Changes to the running kernel over netlink, one
// transaction (one netlink batch) per Apply: the kernel takes all of it
// or none of it. It keeps one netlink socket for its life: closing an
// nftables socket after a transaction that replaced rules waits for the
// kernel to release them (measured: 6-18 ms per close at 10,000
// Services, more than the transaction itself took).
type Kernel struct {
	// NetNS, when not zero, is a network namespace fd to work in (tests).
	NetNS int

	mu   sync.Mutex
	conn *nftables.Conn
}

// elementChunk bounds the elements per netlink message: a message's
// attribute length is 16 bits, and the library silently truncates a
// longer element list (measured: 5,000 elements in one call left 266).
const elementChunk = 500

// socketBuffer sizes the socket's buffers: every message of a batch is
// acknowledged and every rule echoed before the library reads any
// reply, so the receive buffer must hold them all (a first sync of
// 10,000 Services is about 10^5 messages). SO_*BUFFORCE needs
// CAP_NET_ADMIN, which the proxy has; the size is a limit, memory is
// only used while replies wait to be read. The kernel takes an int and
// doubles it: stay below a quarter of its range.
const socketBuffer = 1 << 29

func (k *Kernel) dial() (*nftables.Conn, error) {
	opts := []nftables.ConnOption{nftables.AsLasting(), nftables.WithSockOptions(func(c *netlink.Conn) error {
		raw, err := c.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		err = raw.Control(func(fd uintptr) {
			if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, socketBuffer); e != nil {
				serr = fmt.Errorf("SO_SNDBUFFORCE: %w", e)
				return
			}
			if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, socketBuffer); e != nil {
				serr = fmt.Errorf("SO_RCVBUFFORCE: %w", e)
			}
		})
		if err != nil {
			return err
		}
		if serr != nil {
			return serr
		}
		return c.SetOption(netlink.ExtendedAcknowledge, true)
	})}
	if k.NetNS != 0 {
		opts = append(opts, nftables.WithNetNSFd(k.NetNS))
	}
	return nftables.New(opts...)
}

// do runs one request on the kept socket, opening it when needed. After
// an error the socket is closed: replies left unread would be taken for
// the next request's.
func (k *Kernel) do(f func(c *nftables.Conn) error) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.conn == nil {
		c, err := k.dial()
		if err != nil {
			return err
		}
		k.conn = c
	}
	err := f(k.conn)
	if err != nil {
		_ = k.conn.CloseLasting()
		k.conn = nil
	}
	return err
}

// Close closes the socket; a later call opens a new one.
func (k *Kernel) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.conn == nil {
		return nil
	}
	err := k.conn.CloseLasting()
	k.conn = nil
	return err
}

func kernelTable(f ipfamily.Family) *nftables.Table {
	fam := nftables.TableFamilyIPv4
	if f == ipfamily.IPv6 {
		fam = nftables.TableFamilyIPv6
	}
	return &nftables.Table{Name: TableName, Family: fam}
}

// Exists reports whether herald's table of the family is in the kernel
// (the canary: someone running `nft flush ruleset` removes it).
func (k *Kernel) Exists(f ipfamily.Family) (bool, error) {
	found := false
	err := k.do(func(c *nftables.Conn) error {
		_, err := c.ListTableOfFamily(TableName, kernelTable(f).Family)
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		found = err == nil
		return err
	})
	return found, err
}

// Delete removes herald's table of the family, if any (--cleanup).
func (k *Kernel) Delete(f ipfamily.Family) error {
	return k.do(func(c *nftables.Conn) error {
		t := kernelTable(f)
		// Adding first makes the delete succeed whether or not it existed.
		c.AddTable(t)
		c.DelTable(t)
		return c.Flush()
	})
}

// Apply sends ch for the table of family f in one transaction.
func (k *Kernel) Apply(f ipfamily.Family, want *Table, ch Changes) error {
	added, deleted := ch.Elements()
	return k.do(func(c *nftables.Conn) error {
		b := &batch{c: c, f: f, t: kernelTable(f), sets: map[string]*nftables.Set{}}
		if err := b.build(want, ch); err != nil {
			return err // nothing sent; do drops the socket with what was queued
		}
		if err := c.Flush(); err != nil {
			return fmt.Errorf("nftables transaction (%s, %d rules, +%d/-%d elements): %w", ch.Mode, ch.Rules(), added, deleted, err)
		}
		return nil
	})
}

// batch turns Changes into the library's queued messages.
type batch struct {
	c    *nftables.Conn
	f    ipfamily.Family
	t    *nftables.Table
	sets map[string]*nftables.Set
}

func (b *batch) build(want *Table, ch Changes) error {
	if ch.Mode == Recreate {
		b.c.AddTable(b.t)
		b.c.DelTable(b.t)
	}
	b.c.AddTable(b.t)
	// Every set of the table is known by name for lookups, whether this
	// transaction creates it or not.
	for _, s := range want.Sets {
		ks, err := b.kernelSet(s)
		if err != nil {
			return err
		}
		b.sets[s.Name] = ks
	}
	for _, s := range ch.AddSets {
		if err := b.c.AddSet(b.sets[s.Name], nil); err != nil {
			return fmt.Errorf("set %s: %w", s.Name, err)
		}
	}
	for _, name := range ch.FlushSets {
		b.c.FlushSet(b.sets[name])
	}
	created := map[string]bool{}
	for _, c := range ch.AddChains {
		b.c.AddChain(b.chain(c))
		created[c.Name] = true
	}
	// Elements whose verdict goes away are deleted before the chains they
	// point to, and new ones added once their chains exist.
	for name, els := range ch.DelElements {
		s := b.sets[name]
		if s == nil {
			s = &nftables.Set{Table: b.t, Name: name}
		}
		for i := 0; i < len(els); i += elementChunk {
			ke, err := b.elements(want.Set(name), els[i:min(i+elementChunk, len(els))], false)
			if err != nil {
				return err
			}
			if err := b.c.SetDeleteElements(s, ke); err != nil {
				return fmt.Errorf("set %s: %w", name, err)
			}
		}
	}
	for _, c := range ch.Rewrite {
		kc := b.chain(c)
		if !created[c.Name] {
			if ch.Mode != Recreate {
				b.c.FlushChain(kc)
			}
			if c.Base != nil {
				// Base chains are (re)added to be sure they exist.
				b.c.AddChain(kc)
			}
		}
		for _, r := range c.Rules {
			exprs, err := b.rule(r)
			if err != nil {
				return fmt.Errorf("chain %s: %w", c.Name, err)
			}
			kr := &nftables.Rule{Table: b.t, Chain: kc, Exprs: exprs}
			if r.Comment != "" {
				kr.UserData = userdata.AppendString(nil, userdata.TypeComment, r.Comment)
			}
			b.c.AddRule(kr)
		}
	}
	for name, els := range ch.AddElements {
		s := want.Set(name)
		for i := 0; i < len(els); i += elementChunk {
			ke, err := b.elements(s, els[i:min(i+elementChunk, len(els))], true)
			if err != nil {
				return err
			}
			if err := b.c.SetAddElements(b.sets[name], ke); err != nil {
				return fmt.Errorf("set %s: %w", name, err)
			}
		}
	}
	for _, name := range ch.DelChains {
		kc := &nftables.Chain{Name: name, Table: b.t}
		b.c.FlushChain(kc)
	}
	for _, name := range ch.DelChains {
		b.c.DelChain(&nftables.Chain{Name: name, Table: b.t})
	}
	for _, name := range ch.DelSets {
		b.c.DelSet(&nftables.Set{Table: b.t, Name: name})
	}
	return nil
}

func (b *batch) chain(c *Chain) *nftables.Chain {
	kc := &nftables.Chain{Name: c.Name, Table: b.t}
	if c.Base != nil {
		kc.Type = nftables.ChainType(c.Base.Type)
		switch c.Base.Hook {
		case HookPrerouting:
			kc.Hooknum = nftables.ChainHookPrerouting
		case HookInput:
			kc.Hooknum = nftables.ChainHookInput
		case HookForward:
			kc.Hooknum = nftables.ChainHookForward
		case HookOutput:
			kc.Hooknum = nftables.ChainHookOutput
		case HookPostrouting:
			kc.Hooknum = nftables.ChainHookPostrouting
		}
		kc.Priority = nftables.ChainPriorityRef(nftables.ChainPriority(c.Base.Priority))
		accept := nftables.ChainPolicyAccept
		kc.Policy = &accept
	}
	return kc
}

func (b *batch) addrType() nftables.SetDatatype {
	if b.f == ipfamily.IPv6 {
		return nftables.TypeIP6Addr
	}
	return nftables.TypeIPAddr
}

func (b *batch) keyType(k KeyType) (nftables.SetDatatype, bool, error) {
	var types []nftables.SetDatatype
	for _, f := range k {
		switch f {
		case Saddr, Daddr:
			types = append(types, b.addrType())
		case L4Proto:
			types = append(types, nftables.TypeInetProto)
		case Dport, Sport:
			types = append(types, nftables.TypeInetService)
		case Slot:
			types = append(types, nftables.TypeInteger)
		default:
			return nftables.SetDatatype{}, false, fmt.Errorf("unknown key field %d", f)
		}
	}
	if len(types) == 1 {
		return types[0], false, nil
	}
	t, err := nftables.ConcatSetType(types...)
	return t, true, err
}

func (b *batch) kernelSet(s *Set) (*nftables.Set, error) {
	kt, concat, err := b.keyType(s.Key)
	if err != nil {
		return nil, fmt.Errorf("set %s: %w", s.Name, err)
	}
	ks := &nftables.Set{Table: b.t, Name: s.Name, KeyType: kt, Concatenation: concat}
	switch {
	case s.Map:
		ks.IsMap, ks.DataType = true, nftables.TypeVerdict
	case s.Endpoints:
		dt, err := nftables.ConcatSetType(b.addrType(), nftables.TypeInetService)
		if err != nil {
			return nil, fmt.Errorf("set %s: %w", s.Name, err)
		}
		ks.IsMap, ks.DataType = true, dt
		// The slots are numgen's host-order numbers; told so, nft lists
		// them as numbers.
		ks.KeyByteOrder = binaryutil.NativeEndian
	case s.Marks:
		ks.IsMap, ks.DataType = true, nftables.TypeMark
		if slices.Equal(s.Key, KeyType{Slot}) {
			ks.KeyByteOrder = binaryutil.NativeEndian
		}
	}
	ks.Size = s.Size
	if s.Timeout > 0 {
		ks.HasTimeout, ks.Timeout = true, s.Timeout
	}
	ks.Dynamic = s.Dynamic
	return ks, nil
}

// keyBytes encodes a key as the kernel compares it: in a concatenation
// every field takes a multiple of 4 bytes (the registers'), zero padded.
func keyBytes(k KeyType, key Key) []byte {
	var out []byte
	pad := len(k) > 1
	addrs := 0
	for _, f := range k {
		var part []byte
		switch f {
		case Saddr, Daddr:
			part = key.addr(addrs).AsSlice()
			addrs++
		case L4Proto:
			part = []byte{byte(key.Proto)}
		case Dport, Sport:
			part = binaryutil.BigEndian.PutUint16(key.Port)
		case Slot:
			// numgen writes its number in host order.
			part = native32(key.Slot)
		}
		out = append(out, part...)
		if pad {
			for len(part)%4 != 0 {
				part = append(part, 0)
				out = append(out, 0)
			}
		}
	}
	return out
}

func (b *batch) elements(s *Set, els []Element, withVerdict bool) ([]nftables.SetElement, error) {
	if s == nil {
		return nil, errors.New("elements of a set the table does not have")
	}
	out := make([]nftables.SetElement, len(els))
	for i, e := range els {
		for _, a := range []netip.Addr{e.Key.Addr, e.Key.Addr2} {
			if a.IsValid() && ipfamily.Of(a) != b.f {
				return nil, fmt.Errorf("set %s: %s is not %s", s.Name, a, b.f)
			}
		}
		out[i].Key = keyBytes(s.Key, e.Key)
		switch {
		case !withVerdict:
		case s.Map:
			v, err := verdict(e.Verdict)
			if err != nil {
				return nil, err
			}
			out[i].VerdictData = v
		case s.Endpoints:
			a := e.To.Addr()
			if !a.IsValid() || ipfamily.Of(a) != b.f {
				return nil, fmt.Errorf("set %s: endpoint %s is not %s", s.Name, e.To, b.f)
			}
			// address . port, the port padded to a register.
			out[i].Val = append(append(a.AsSlice(), binaryutil.BigEndian.PutUint16(e.To.Port())...), 0, 0)
		case s.Marks:
			out[i].Val = native32(e.Mark)
		}
	}
	return out, nil
}

func verdict(v Verdict) (*expr.Verdict, error) {
	switch v.Kind {
	case Accept:
		return &expr.Verdict{Kind: expr.VerdictAccept}, nil
	case Drop:
		return &expr.Verdict{Kind: expr.VerdictDrop}, nil
	case Return:
		return &expr.Verdict{Kind: expr.VerdictReturn}, nil
	case Jump:
		return &expr.Verdict{Kind: expr.VerdictJump, Chain: v.Chain}, nil
	case Goto:
		return &expr.Verdict{Kind: expr.VerdictGoto, Chain: v.Chain}, nil
	}
	return nil, fmt.Errorf("unknown verdict %d", v.Kind)
}

// Registers: NFT_REG_1 is 16 bytes wide, the 32-bit registers 8..11
// (NFT_REG32_00..03) alias it; a concatenation loads its fields into
// consecutive 32-bit registers from there.
const (
	reg1    = unix.NFT_REG_1
	reg2    = unix.NFT_REG_2
	reg32_0 = unix.NFT_REG32_00
)

func (b *batch) addrOffset(f Field) uint32 {
	switch {
	case b.f == ipfamily.IPv6 && f == Saddr:
		return 8
	case b.f == ipfamily.IPv6:
		return 24
	case f == Saddr:
		return 12
	}
	return 16
}

// load puts the key's fields into consecutive registers from NFT_REG_1
// and returns the expressions.
func (b *batch) load(k KeyType) []expr.Any {
	var out []expr.Any
	r := uint32(reg32_0)
	for i, f := range k {
		dst := r
		if i == 0 {
			dst = reg1
		}
		switch f {
		case Saddr, Daddr:
			n := uint32(4)
			if b.f == ipfamily.IPv6 {
				n = 16
			}
			out = append(out, &expr.Payload{DestRegister: dst, Base: expr.PayloadBaseNetworkHeader, Offset: b.addrOffset(f), Len: n})
			r += n / 4
		case L4Proto:
			out = append(out, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: dst})
			r++
		case Dport:
			out = append(out, &expr.Payload{DestRegister: dst, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2})
			r++
		case Sport:
			out = append(out, &expr.Payload{DestRegister: dst, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 2})
			r++
		}
	}
	return out
}

// ctStatusDstNAT is conntrack's IPS_DST_NAT status bit.
const ctStatusDstNAT = 1 << 5

func native32(v uint32) []byte { return binaryutil.NativeEndian.PutUint32(v) }

func (b *batch) rule(r Rule) ([]expr.Any, error) {
	var out []expr.Any
	for _, e := range r.Exprs {
		x, err := b.encode(e)
		if err != nil {
			return nil, err
		}
		out = append(out, x...)
	}
	return out, nil
}

// encode is one expression's netlink form: a match, else an action.
func (b *batch) encode(e Expr) ([]expr.Any, error) {
	if m, ok, err := b.match(e); ok || err != nil {
		return m, err
	}
	return b.action(e)
}

// match encodes the expressions that test a packet; ok is false for
// any other kind.
func (b *batch) match(e Expr) (out []expr.Any, ok bool, err error) {
	switch x := e.(type) {
	case MatchAddr:
		if !x.Prefix.IsValid() || ipfamily.Of(x.Prefix.Addr()) != b.f {
			return nil, true, fmt.Errorf("%s: not an %s prefix", x.Prefix, b.f)
		}
		out = append(out, b.load(KeyType{x.Field})...)
		n := uint32(len(x.Prefix.Addr().AsSlice()))
		if !x.Prefix.IsSingleIP() {
			mask := netip.PrefixFrom(x.Prefix.Addr(), x.Prefix.Bits()).Masked()
			out = append(out, &expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: n,
				Mask: prefixMask(x.Prefix.Bits(), int(n)), Xor: make([]byte, n)})
			x.Prefix = mask
		}
		op := expr.CmpOpEq
		if x.Not {
			op = expr.CmpOpNeq
		}
		out = append(out, &expr.Cmp{Op: op, Register: reg1, Data: x.Prefix.Addr().AsSlice()})
	case MatchProto:
		out = append(out, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{byte(x.Proto)}})
	case MatchDport:
		out = append(out, &expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binaryutil.BigEndian.PutUint16(x.Port)})
	case MatchFibLocal:
		out = append(out, &expr.Fib{Register: reg1, FlagSADDR: x.Field == Saddr, FlagDADDR: x.Field != Saddr, ResultADDRTYPE: true},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: native32(unix.RTN_LOCAL)})
	case MatchIifname:
		// The kernel compares the register's bytes: the whole
		// IFNAMSIZ-padded name, or only the prefix's bytes.
		if len(x.Name) == 0 || len(x.Name) >= unix.IFNAMSIZ {
			return nil, true, fmt.Errorf("iifname %q: not an interface name", x.Name)
		}
		data := []byte(x.Name)
		if !x.Prefix {
			data = append(data, make([]byte, unix.IFNAMSIZ-len(data))...)
		}
		op := expr.CmpOpEq
		if x.Not {
			op = expr.CmpOpNeq
		}
		out = append(out, &expr.Meta{Key: expr.MetaKeyIIFNAME, Register: reg1}, &expr.Cmp{Op: op, Register: reg1, Data: data})
	case MatchMark:
		// meta mark & bit != 0 (== 0 with Not)
		out = append(out, markCmp(x.Bit, 0, !x.Not)...)
	case MatchMarkValue:
		out = append(out, markCmp(x.Mask, x.Value, x.Not)...)
	case MatchCtDNAT:
		out = append(out, &expr.Ct{Key: expr.CtKeySTATUS, Register: reg1},
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: native32(ctStatusDstNAT), Xor: native32(0)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: native32(0)})
	case MatchCtState:
		var bits uint32
		for _, s := range x.States {
			switch s {
			case CtInvalid:
				bits |= expr.CtStateBitINVALID
			case CtEstablished:
				bits |= expr.CtStateBitESTABLISHED
			case CtRelated:
				bits |= expr.CtStateBitRELATED
			case CtNew:
				bits |= expr.CtStateBitNEW
			}
		}
		out = append(out, &expr.Ct{Register: reg1, Key: expr.CtKeySTATE},
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: native32(bits), Xor: native32(0)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: native32(0)})
	case MatchSet:
		s := b.sets[x.Set]
		if s == nil {
			return nil, true, fmt.Errorf("lookup in unknown set %s", x.Set)
		}
		out = append(out, b.load(x.Key)...)
		out = append(out, &expr.Lookup{SourceRegister: reg1, SetName: s.Name, SetID: s.ID})
	default:
		return nil, false, nil
	}
	return out, true, nil
}

// action encodes the expressions that act on a packet.
func (b *batch) action(e Expr) ([]expr.Any, error) {
	var out []expr.Any
	switch x := e.(type) {
	case Counter:
		out = append(out, &expr.Counter{})
	case Reject:
		// ICMP port unreachable is code 3, ICMPv6's is code 4.
		code := uint8(3)
		if b.f == ipfamily.IPv6 {
			code = 4
		}
		out = append(out, &expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: code})
	case DNAT:
		a := x.To.Addr()
		if ipfamily.Of(a) != b.f {
			return nil, fmt.Errorf("dnat to %s in the %s table", x.To, b.f)
		}
		fam := uint32(unix.NFPROTO_IPV4)
		if b.f == ipfamily.IPv6 {
			fam = unix.NFPROTO_IPV6
		}
		out = append(out, &expr.Immediate{Register: reg1, Data: a.AsSlice()},
			&expr.Immediate{Register: reg2, Data: binaryutil.BigEndian.PutUint16(x.To.Port())},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: fam, RegAddrMin: reg1, RegProtoMin: reg2, Specified: true})
	case Masquerade:
		out = append(out, &expr.Masq{FullyRandom: x.FullyRandom})
	case MarkOr:
		out = append(out, &expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: native32(^x.Bit), Xor: native32(x.Bit)},
			&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1})
	case MarkXor:
		out = append(out, &expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: native32(^uint32(0)), Xor: native32(x.Bit)},
			&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1})
	case VmapLookup:
		s := b.sets[x.Map]
		if s == nil || !s.IsMap {
			return nil, fmt.Errorf("vmap lookup in unknown map %s", x.Map)
		}
		out = append(out, b.load(x.Key)...)
		out = append(out, &expr.Lookup{SourceRegister: reg1, IsDestRegSet: true, DestRegister: 0, SetName: s.Name, SetID: s.ID})
	case DNATMap:
		s := b.sets[x.Map]
		if s == nil || !s.IsMap {
			return nil, fmt.Errorf("dnat through unknown map %s", x.Map)
		}
		// The value lands from NFT_REG32_00: the address in its first
		// 4 or 16 bytes, the port in the 32-bit register after.
		port := uint32(reg32_0 + 1)
		fam := uint32(unix.NFPROTO_IPV4)
		if b.f == ipfamily.IPv6 {
			port, fam = reg32_0+4, unix.NFPROTO_IPV6
		}
		out = append(out, &expr.Numgen{Register: reg1, Modulus: x.Mod, Type: unix.NFT_NG_RANDOM, Offset: x.Offset},
			&expr.Lookup{SourceRegister: reg1, IsDestRegSet: true, DestRegister: reg1, SetName: s.Name, SetID: s.ID},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: fam, RegAddrMin: reg1, RegProtoMin: port, Specified: true})
	case DNATHash:
		hashed, err := b.flowSlotLookup(x.Map, x.Mod, x.Seed)
		if err != nil {
			return nil, err
		}
		port := uint32(reg32_0 + 1)
		fam := uint32(unix.NFPROTO_IPV4)
		if b.f == ipfamily.IPv6 {
			port, fam = reg32_0+4, unix.NFPROTO_IPV6
		}
		out = append(append(out, hashed...),
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: fam, RegAddrMin: reg1, RegProtoMin: port, Specified: true})
	case MarkHash:
		hashed, err := b.flowSlotLookup(x.Map, x.Mod, x.Seed)
		if err != nil {
			return nil, err
		}
		out = append(append(out, hashed...), &expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1})
	case NoTrack:
		out = append(out, &expr.Notrack{})
	case MarkLookup:
		s := b.sets[x.Map]
		if s == nil || !s.IsMap {
			return nil, fmt.Errorf("mark lookup in unknown map %s", x.Map)
		}
		out = append(out, b.load(x.Key)...)
		// The value to a register past the longest key (40 bytes).
		out = append(out, &expr.Lookup{SourceRegister: reg1, IsDestRegSet: true, DestRegister: reg32_0 + 12, SetName: s.Name, SetID: s.ID},
			&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg32_0 + 12})
	case UpdateMap:
		s := b.sets[x.Map]
		if s == nil || !s.IsMap {
			return nil, fmt.Errorf("update of unknown map %s", x.Map)
		}
		// The key fills NFT_REG_1 and, for IPv6, the registers after it:
		// the mark goes to a register past the longest key (40 bytes).
		out = append(out, b.load(x.Key)...)
		out = append(out, &expr.Meta{Key: expr.MetaKeyMARK, Register: reg32_0 + 12},
			&expr.Dynset{SrcRegKey: reg1, SrcRegData: reg32_0 + 12, SetName: s.Name, SetID: s.ID, Operation: unix.NFT_DYNSET_OP_UPDATE, Timeout: s.Timeout})
	case MarkAnd:
		out = append(out, &expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: native32(x.Mask), Xor: native32(0)},
			&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1})
	case NumgenMatch:
		out = append(out, &expr.Numgen{Register: reg1, Modulus: x.Mod, Type: unix.NFT_NG_RANDOM},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: native32(0)})
	case UpdateSet:
		s := b.sets[x.Set]
		if s == nil {
			return nil, fmt.Errorf("update of unknown set %s", x.Set)
		}
		out = append(out, b.load(KeyType{x.Field})...)
		out = append(out, &expr.Dynset{SrcRegKey: reg1, SetName: s.Name, SetID: s.ID, Operation: unix.NFT_DYNSET_OP_UPDATE, Timeout: s.Timeout})
	case Verdict:
		v, err := verdict(x)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	default:
		return nil, fmt.Errorf("no netlink encoding for %T", e)
	}
	return out, nil
}

// flowSlotLookup loads the flow key, hashes it with the kernel's jhash
// onto mod slots with seed, and looks the slot up in the map m: the value
// lands from NFT_REG_1 (DNATHash's and MarkHash's common part).
func (b *batch) flowSlotLookup(m string, mod, seed uint32) ([]expr.Any, error) {
	s := b.sets[m]
	if s == nil || !s.IsMap {
		return nil, fmt.Errorf("jhash lookup in unknown map %s", m)
	}
	if seed == 0 {
		// google/nftables leaves a zero seed out, and the kernel then
		// draws one per rule: nodes would disagree.
		return nil, fmt.Errorf("jhash for map %s has seed 0", m)
	}
	keyLen := uint32(16)
	if b.f == ipfamily.IPv6 {
		keyLen = 40
	}
	return append(b.load(FlowKey),
		&expr.Hash{SourceRegister: reg1, DestRegister: reg1, Length: keyLen, Modulus: mod, Seed: seed, Type: expr.HashTypeJenkins},
		&expr.Lookup{SourceRegister: reg1, IsDestRegSet: true, DestRegister: reg1, SetName: s.Name, SetID: s.ID}), nil
}

// markCmp compares the packet's mark, masked, with value (not: unequal).
func markCmp(mask, value uint32, not bool) []expr.Any {
	op := expr.CmpOpEq
	if not {
		op = expr.CmpOpNeq
	}
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: native32(mask), Xor: native32(0)},
		&expr.Cmp{Op: op, Register: reg1, Data: native32(value)}}
}

func prefixMask(bits, n int) []byte {
	m := make([]byte, n)
	for i := 0; i < bits; i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return m
}
