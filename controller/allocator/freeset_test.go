package allocator

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

func u(s string) u128 { return addrToU128(netip.MustParseAddr(s)) }

func TestU128(t *testing.T) {
	for _, s := range []string{"0.0.0.0", "192.0.2.255", "255.255.255.255", "::", "2001:db8::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db8:0:0:ffff:ffff:ffff:ffff"} {
		a := netip.MustParseAddr(s)
		if got := addrToU128(a).addr(a.Is6()); got != a {
			t.Errorf("round trip %s = %s", a, got)
		}
	}
	x := u("2001:db8:0:0:ffff:ffff:ffff:ffff")
	if got := x.add(1).addr(true); got != netip.MustParseAddr("2001:db8:0:1::") {
		t.Errorf("carry: %s", got)
	}
	if got := x.add(1).sub(1); got != x {
		t.Errorf("borrow: %v", got)
	}
	if !u("::1").less(u("::2")) || u("1::").less(u("0:ffff::")) || u("::1").cmp(u("::1")) != 0 {
		t.Error("ordering")
	}
}

func TestFreeSetBuggy(t *testing.T) {
	s := newFreeSet(u("192.0.2.0"), u("192.0.2.255"), true)
	if s.first != u("192.0.2.1") || s.last != u("192.0.2.254") {
		t.Fatalf("bounds %v %v", s.first.addr(false), s.last.addr(false))
	}
	// Two /24 boundaries: .254 of the first, then .1 of the next.
	s = newFreeSet(u("10.0.0.254"), u("10.0.2.1"), true)
	var got []string
	for {
		x, ok := s.lowest()
		if !ok {
			break
		}
		s.take(x)
		got = append(got, x.addr(false).String())
	}
	if len(got) != 1+254+1 || got[0] != "10.0.0.254" || got[1] != "10.0.1.1" || got[254] != "10.0.1.254" || got[255] != "10.0.2.1" {
		t.Fatalf("order: %d addresses, %v ... %v", len(got), got[:3], got[len(got)-3:])
	}
	// Returning two addresses around a .255/.0 gap merges them into one interval.
	s.put(u("10.0.1.254"))
	s.put(u("10.0.2.1"))
	if s.intervals != 1 {
		t.Fatalf("intervals %d, want 1 (merged across .255/.0)", s.intervals)
	}
	for _, r := range [][2]string{{"10.0.0.255", "10.0.1.0"}, {"10.0.0.0", "10.0.0.0"}, {"10.0.0.255", "10.0.0.255"}} {
		if e := newFreeSet(u(r[0]), u(r[1]), true); !e.empty {
			t.Errorf("%v should have no usable address", r)
		}
	}
	if e := newFreeSet(u("10.0.0.0"), u("10.0.0.0"), false); e.empty {
		t.Error(".0 is usable without avoidBuggyIPs")
	}
	if s.take(u("10.0.1.0")) || s.put(u("10.0.1.255")) || s.isFree(u("10.0.1.0")) {
		t.Error("skipped addresses must be neither taken nor returned")
	}
}

func TestFreeSetHuge(t *testing.T) {
	s := newFreeSet(u("2001:db8::"), u("2001:db8::ffff:ffff:ffff:ffff"), false)
	for i := 0; i < 1000; i++ {
		x, _ := s.lowest()
		s.take(x)
	}
	if x, _ := s.lowest(); x.addr(true) != netip.MustParseAddr("2001:db8::3e8") || s.intervals != 1 {
		t.Fatalf("lowest %s, %d intervals", x.addr(true), s.intervals)
	}
	top := u("2001:db8::ffff:ffff:ffff:ffff")
	if !s.take(top) || s.take(top) || !s.put(top) || s.put(top) {
		t.Fatal("take/put at the top of a /64")
	}
	// The very top of the address space: no wrap-around.
	s = newFreeSet(u("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe"), u("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), false)
	s.take(u("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"))
	s.take(u("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe"))
	if _, ok := s.lowest(); ok || s.root != nil {
		t.Fatal("full set still has an address")
	}
}

// model is the naive reference: one flag per address.
type model struct {
	first u128
	n     int
	skip  bool
	taken []bool
}

func (m *model) buggy(i int) bool {
	b := m.first.add(uint64(i)).lo & 0xff
	return m.skip && (b == 0 || b == 0xff)
}

func (m *model) lowest() (u128, bool) {
	for i := 0; i < m.n; i++ {
		if !m.buggy(i) && !m.taken[i] {
			return m.first.add(uint64(i)), true
		}
	}
	return u128{}, false
}

// checkSet compares the set with the model and checks the treap's
// invariants: ordered, disjoint, maximal intervals with usable ends.
func checkSet(t testing.TB, s *freeSet, m *model) {
	t.Helper()
	var prevEnd *u128
	count := 0
	var heap func(n *node)
	heap = func(n *node) {
		for _, c := range []*node{n.left, n.right} {
			if c != nil {
				if c.prio > n.prio {
					t.Fatalf("heap order broken")
				}
				heap(c)
			}
		}
	}
	if s.root != nil {
		heap(s.root)
	}
	s.walk(func(start, end u128) {
		count++
		if end.less(start) || !s.usable(start) || !s.usable(end) {
			t.Fatalf("bad interval %v-%v", start, end)
		}
		if prevEnd != nil {
			if nx, _ := s.next(*prevEnd); !nx.less(start) {
				t.Fatalf("intervals not separated by a used address: ...%v, %v...", *prevEnd, start)
			}
		}
		e := end
		prevEnd = &e
	})
	if count != s.intervals {
		t.Fatalf("intervals %d, counted %d", s.intervals, count)
	}
	for i := 0; i < m.n; i++ {
		x := m.first.add(uint64(i))
		want := !m.buggy(i) && !m.taken[i]
		if s.isFree(x) != want {
			t.Fatalf("address %d: free=%v, model %v", i, !want, want)
		}
	}
	gx, gok := s.lowest()
	wx, wok := m.lowest()
	if gok != wok || gx != wx {
		t.Fatalf("lowest %v %v, model %v %v", gx, gok, wx, wok)
	}
}

// run applies a sequence of operations to a set and the model, checking
// after each one. ops yields (kind, offset) pairs.
func run(t testing.TB, first u128, n int, skip bool, ops func() (int, int, bool)) {
	s := newFreeSet(first, first.add(uint64(n-1)), skip)
	m := &model{first: first, n: n, skip: skip, taken: make([]bool, n)}
	checkSet(t, s, m)
	for {
		kind, off, ok := ops()
		if !ok {
			return
		}
		off %= n
		x := first.add(uint64(off))
		switch kind % 3 {
		case 0: // take the lowest
			if wx, ok := m.lowest(); ok {
				if !s.take(wx) {
					t.Fatalf("take lowest %v failed", wx)
				}
				m.taken[int(wx.lo-first.lo)] = true
			}
		case 1: // take a given address
			want := !m.buggy(off) && !m.taken[off]
			if got := s.take(x); got != want {
				t.Fatalf("take %d = %v, model %v", off, got, want)
			}
			if want {
				m.taken[off] = true
			}
		case 2: // return a given address
			want := !m.buggy(off) && m.taken[off]
			if got := s.put(x); got != want {
				t.Fatalf("put %d = %v, model %v", off, got, want)
			}
			if want {
				m.taken[off] = false
			}
		}
		checkSet(t, s, m)
	}
}

// starts are range starts that cross /24 boundaries, touch the ends of the
// IPv4 space, and sit at the top of the IPv6 space.
var starts = []struct {
	first string
	max   int
}{
	{"10.0.0.250", 600},
	{"10.0.0.0", 300},
	{"0.0.0.0", 300},
	{"255.255.254.200", 312}, // up to 255.255.255.255
	{"2001:db8::fff0", 600},
	{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ff00", 256},
}

func TestFreeSetAgainstModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 300; round++ {
		st := starts[round%len(starts)]
		first := u(st.first)
		n := 1 + r.IntN(st.max)
		skip := first.hi == 0 && r.IntN(2) == 0
		steps := 3 * n
		run(t, first, n, skip, func() (int, int, bool) {
			steps--
			// Bias towards takes so the set fills up and drains.
			return r.IntN(3), r.IntN(n), steps > 0
		})
	}
}

func FuzzFreeSet(f *testing.F) {
	f.Add([]byte{0, 10, 1, 0, 5, 2, 5, 0, 0, 1, 2, 3})
	f.Add([]byte{1, 255, 0, 0, 0, 0, 2, 0, 2, 1, 2, 2})
	f.Add([]byte{4, 40, 1, 1, 1, 7, 2, 1, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		st := starts[int(data[0]>>1)%len(starts)]
		first := u(st.first)
		skip := first.hi == 0 && data[0]&1 == 1
		n := 1 + int(data[1])%st.max
		data = data[2:]
		run(t, first, n, skip, func() (int, int, bool) {
			if len(data) < 2 {
				return 0, 0, false
			}
			k, off := int(data[0]), int(data[1])
			data = data[2:]
			return k, off, true
		})
	})
}
