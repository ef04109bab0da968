package election

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sort"
	"testing"
)

// referenceScore and referenceRank are the election as first written
// (issue #19 made it hash once per candidate, on the stack): the
// optimised one must pick the same winners and the same order.
func referenceScore(node string, ip netip.Addr) uint64 {
	h := sha256.New()
	h.Write([]byte(node))
	h.Write([]byte{0})
	b, _ := ip.MarshalBinary()
	h.Write(b)
	return binary.BigEndian.Uint64(h.Sum(nil)[:8])
}

func referenceRank(ip netip.Addr, candidates []string) []string {
	out := append([]string(nil), candidates...)
	sort.Slice(out, func(i, j int) bool {
		si, sj := referenceScore(out[i], ip), referenceScore(out[j], ip)
		if si != sj {
			return si > sj
		}
		return out[i] < out[j]
	})
	return out
}

func TestWinnerMatchesReferenceOnRandomWorlds(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 2))
	for world := range 300 {
		var cand []string
		for i := range r.IntN(40) {
			cand = append(cand, fmt.Sprintf("n%d-%d", world, i*r.IntN(7)))
		}
		if r.IntN(10) == 0 {
			cand = append(cand, string(make([]byte, 200+r.IntN(60)))) // longer than the stack buffer
		}
		var ip netip.Addr
		switch r.IntN(3) {
		case 0:
			ip = netip.AddrFrom4([4]byte{198, 51, 100, byte(r.IntN(256))})
		case 1:
			ip = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(r.IntN(256))})
		default:
			ip = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(r.IntN(256))}).WithZone("eth0")
		}
		want := referenceRank(ip, cand)
		if got := Rank(ip, cand); !slices.Equal(got, want) {
			t.Fatalf("Rank(%s, %q) = %q, reference %q", ip, cand, got, want)
		}
		w := ""
		if len(want) > 0 {
			w = want[0]
		}
		if got := Winner(ip, cand); got != w {
			t.Fatalf("Winner(%s, %q) = %q, reference %q", ip, cand, got, w)
		}
	}
}
