package maglev

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// The flow hash herald's nftables rules compute with the kernel's jhash
// expression:
//
//	jhash ip saddr . th sport . ip daddr . th dport mod M seed S
//
// FlowHash computes the same value in Go, so that tests and the tracer
// pick the slot the kernel picks (TestKernelJHash checks it against the
// kernel, as root). Both the key's layout and the hash are a contract
// between nodes, like the table's seeds.

// FlowKey is the bytes nftables hands to jhash for that concatenation: each
// field in whole 32-bit registers, in network byte order, a partly used
// register zero-padded (the payload expression clears it), so 16 bytes
// for IPv4 and 40 for IPv6. src and dst must be of one family.
func FlowKey(src, dst netip.AddrPort) ([]byte, bool) {
	s, d := src.Addr().Unmap(), dst.Addr().Unmap()
	if !s.IsValid() || !d.IsValid() || s.Is4() != d.Is4() {
		return nil, false
	}
	var key []byte
	add := func(a netip.Addr, port uint16) {
		key = append(key, a.AsSlice()...)
		key = binary.BigEndian.AppendUint16(key, port)
		key = append(key, 0, 0)
	}
	add(s, src.Port())
	add(d, dst.Port())
	return key, true
}

// FlowHash is jhash over FlowKey(src, dst) with seed, as the kernel
// computes it on this machine; false when the addresses are not of one
// family.
func FlowHash(src, dst netip.AddrPort, seed uint32) (uint32, bool) {
	key, ok := FlowKey(src, dst)
	if !ok {
		return 0, false
	}
	return JHash(key, seed), true
}

// JHash is the Linux kernel's jhash (Bob Jenkins' lookup3 as
// include/linux/jhash.h has it): whole 12-byte blocks read as three
// CPU-endian words, the tail added byte by byte, then the final mix. The
// kernel reads words in the CPU's byte order, so nodes of different
// endianness would disagree; binary.NativeEndian does what this
// machine's kernel does.
func JHash(key []byte, seed uint32) uint32 {
	const initval = 0xdeadbeef
	n := uint32(len(key))
	a := initval + n + seed
	b, c := a, a
	for len(key) > 12 {
		a += binary.NativeEndian.Uint32(key[0:])
		b += binary.NativeEndian.Uint32(key[4:])
		c += binary.NativeEndian.Uint32(key[8:])
		a, b, c = jhashMix(a, b, c)
		key = key[12:]
	}
	if len(key) == 0 {
		return c
	}
	// The tail, as the kernel adds it: byte i of the block goes to word
	// i/4 at bit 8*(i%4), whatever the CPU's byte order.
	for i, v := range key {
		w := uint32(v) << (8 * (i % 4))
		switch i / 4 {
		case 0:
			a += w
		case 1:
			b += w
		default:
			c += w
		}
	}
	return jhashFinal(a, b, c)
}

func jhashMix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= bits.RotateLeft32(c, 4)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 6)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 8)
	b += a
	a -= c
	a ^= bits.RotateLeft32(c, 16)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 19)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 4)
	b += a
	return a, b, c
}

func jhashFinal(a, b, c uint32) uint32 {
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return c
}

// Scale maps a hash onto m values as the kernel's reciprocal_scale does
// (nftables' "mod m" on a hash, and HMARK's): h * m / 2^32.
func Scale(h, m uint32) uint32 { return uint32(uint64(h) * uint64(m) >> 32) }
