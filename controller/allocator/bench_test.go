package allocator

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// Pool sizes for the benchmarks: 10^3, 10^4, 10^5 addresses. Costs should
// grow with log(size) at most; the figures are printed, never asserted.
var benchSizes = []int{1_000, 10_000, 100_000}

// benchPool returns an allocator over one IPv4 pool of n addresses (a range
// over many /24s, avoidBuggyIPs on, so skipping is on the hot path too),
// with half the addresses held by Services "fill-i" and every other one of
// those released again, leaving about n/4 holes: a fragmented free set of
// ~n/4 intervals, the expensive shape for a tree of intervals.
func benchPool(b *testing.B, n int) (*Allocator, []Key) {
	b.Helper()
	first := netip.MustParseAddr("10.0.0.1")
	last := first
	// Stretch the range so it holds n usable addresses despite skipping.
	for usable := 1; usable < n; {
		last = last.Next()
		if o := last.As4()[3]; o != 0 && o != 255 {
			usable++
		}
	}
	p := buggy(pool("bench", first.String()+"-"+last.String()))
	a := newWith(b, p)
	var held []Key
	for i := 0; i < n/2; i++ {
		s := svc("fill", fmt.Sprint(i))
		if _, err := a.Assign(s); err != nil {
			b.Fatal(err)
		}
		if i%2 == 0 {
			a.Release(s.Key())
		} else {
			held = append(held, s.Key())
		}
	}
	return a, held
}

func BenchmarkAssign(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("addrs=%d", n), func(b *testing.B) {
			a, _ := benchPool(b, n)
			svcs := make([]Service, b.N)
			for i := range svcs {
				svcs[i] = svc("bench", fmt.Sprint(i))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := a.Assign(svcs[i]); err != nil {
					b.Fatal(err)
				}
				// Give the address back outside the timing, so every
				// iteration sees the same fragmented pool.
				b.StopTimer()
				a.Release(svcs[i].Key())
				b.StartTimer()
			}
		})
	}
}

func BenchmarkAssignRequested(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("addrs=%d", n), func(b *testing.B) {
			a, _ := benchPool(b, n)
			r := rand.New(rand.NewPCG(1, 1))
			e := a.pools["bench"].ranges[0]
			svcs := make([]Service, b.N)
			for i := range svcs {
				svcs[i] = svc("bench", fmt.Sprint(i))
				// A random free address in the upper half of the range.
				for {
					x := e.first.add(uint64(n/2 + r.IntN(n/2)))
					if e.free.isFree(x) {
						svcs[i].RequestedIPs = []netip.Addr{x.addr(false)}
						break
					}
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := a.Assign(svcs[i]); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				a.Release(svcs[i].Key())
				b.StartTimer()
			}
		})
	}
}

func BenchmarkRelease(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("addrs=%d", n), func(b *testing.B) {
			a, held := benchPool(b, n)
			r := rand.New(rand.NewPCG(2, 2))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				k := held[r.IntN(len(held))]
				as, ok := a.Release(k)
				if !ok {
					b.Fatal("nothing to release")
				}
				// Take the same address back outside the timing.
				b.StopTimer()
				s := svc(k.Namespace, k.Name)
				s.RequestedIPs = as.IPs
				if _, err := a.Assign(s); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// BenchmarkChurn releases a random Service and assigns a new one per
// iteration, both timed, on a pool kept about 3/4 full.
func BenchmarkChurn(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("addrs=%d", n), func(b *testing.B) {
			a, held := benchPool(b, n)
			for i := 0; i < n/2; i++ {
				s := svc("more", fmt.Sprint(i))
				if _, err := a.Assign(s); err != nil {
					b.Fatal(err)
				}
				held = append(held, s.Key())
			}
			r := rand.New(rand.NewPCG(3, 3))
			svcs := make([]Service, b.N)
			for i := range svcs {
				svcs[i] = svc("churn", fmt.Sprint(i))
				svcs[i].Ports = tcp(80)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				j := r.IntN(len(held))
				a.Release(held[j])
				if _, err := a.Assign(svcs[i]); err != nil {
					b.Fatal(err)
				}
				held[j] = svcs[i].Key()
			}
		})
	}
}

// BenchmarkAssignIPv6Slash64 shows a /64 costs what a small pool does.
func BenchmarkAssignIPv6Slash64(b *testing.B) {
	a := newWith(b, pool("v6", "2001:db8::/64"))
	svcs := make([]Service, b.N)
	for i := range svcs {
		svcs[i] = svc("bench", fmt.Sprint(i))
		svcs[i].Families = []Family{IPv6}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := a.Assign(svcs[i]); err != nil {
			b.Fatal(err)
		}
	}
}
