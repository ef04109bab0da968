package allocator

import (
	"encoding/binary"
	"net/netip"
)

// u128 is an address as a 128-bit unsigned integer; IPv4 addresses use only
// the low 32 bits. Address arithmetic runs on every assignment, so it avoids
// math/big.
type u128 struct{ hi, lo uint64 }

func addrToU128(a netip.Addr) u128 {
	if a.Is4() {
		b := a.As4()
		return u128{lo: uint64(binary.BigEndian.Uint32(b[:]))}
	}
	b := a.As16()
	return u128{hi: binary.BigEndian.Uint64(b[:8]), lo: binary.BigEndian.Uint64(b[8:])}
}

func (x u128) addr(v6 bool) netip.Addr {
	if !v6 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(x.lo))
		return netip.AddrFrom4(b)
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], x.hi)
	binary.BigEndian.PutUint64(b[8:], x.lo)
	return netip.AddrFrom16(b)
}

func (x u128) cmp(y u128) int {
	switch {
	case x.hi < y.hi:
		return -1
	case x.hi > y.hi:
		return 1
	case x.lo < y.lo:
		return -1
	case x.lo > y.lo:
		return 1
	}
	return 0
}

func (x u128) less(y u128) bool { return x.cmp(y) < 0 }

// add returns x+n, wrapping at 2^128 (callers never let it wrap).
func (x u128) add(n uint64) u128 {
	lo := x.lo + n
	hi := x.hi
	if lo < x.lo {
		hi++
	}
	return u128{hi: hi, lo: lo}
}

// sub returns x-n, wrapping below 0 (callers never let it wrap).
func (x u128) sub(n uint64) u128 {
	lo := x.lo - n
	hi := x.hi
	if lo > x.lo {
		hi--
	}
	return u128{hi: hi, lo: lo}
}
