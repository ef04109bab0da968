package allocator

// freeSet holds the free addresses of one pool range as maximal intervals of
// usable addresses in a treap keyed by interval start. Usable means inside
// the range and, when skip is set (avoidBuggyIPs on an IPv4 range), not
// ending in .0 or .255. Skipped addresses are never stored: every interval
// starts and ends on a usable address, and two intervals are merged when
// only skipped addresses lie between them. So the lowest free address is the
// start of the leftmost interval, and taking or returning an address touches
// at most two intervals: all O(log n) in the number of intervals, which is
// at most one more than the number of addresses in use, whatever the size of
// the range (a /64 starts as one interval).
type freeSet struct {
	first, last u128 // lowest and highest usable addresses
	empty       bool // the range has no usable address at all
	skip        bool
	root        *node
	intervals   int
	seed        uint64 // drives treap priorities; deterministic
}

type node struct {
	start, end  u128
	prio        uint64
	left, right *node
}

// newFreeSet returns the range [first, last] with every usable address free.
func newFreeSet(first, last u128, skip bool) *freeSet {
	s := &freeSet{skip: skip}
	lo, okLo := s.atOrAfter(first, last)
	hi, okHi := s.atOrBefore(last, first)
	if !okLo || !okHi || hi.less(lo) {
		s.empty = true
		return s
	}
	s.first, s.last = lo, hi
	s.root = s.newNode(lo, hi)
	s.intervals = 1
	return s
}

// buggy reports whether x is skipped: an IPv4 address ending in .0 or .255.
func (s *freeSet) buggy(x u128) bool {
	b := x.lo & 0xff
	return s.skip && (b == 0 || b == 0xff)
}

// usable reports whether x can ever be handed out from this range.
func (s *freeSet) usable(x u128) bool {
	return !s.empty && !x.less(s.first) && !s.last.less(x) && !s.buggy(x)
}

// atOrAfter returns the lowest usable address >= x and <= limit.
func (s *freeSet) atOrAfter(x, limit u128) (u128, bool) {
	if s.skip {
		// At most two skipped addresses in a row (.255 then .0).
		switch x.lo & 0xff {
		case 0xff:
			if limit.lo-x.lo < 2 || limit.less(x) {
				return u128{}, false
			}
			x = x.add(2)
		case 0:
			if limit.lo-x.lo < 1 || limit.less(x) {
				return u128{}, false
			}
			x = x.add(1)
		}
	}
	return x, !limit.less(x)
}

// atOrBefore returns the highest usable address <= x and >= limit.
func (s *freeSet) atOrBefore(x, limit u128) (u128, bool) {
	if s.skip {
		switch x.lo & 0xff {
		case 0:
			if x.lo-limit.lo < 2 || x.less(limit) {
				return u128{}, false
			}
			x = x.sub(2)
		case 0xff:
			if x.lo-limit.lo < 1 || x.less(limit) {
				return u128{}, false
			}
			x = x.sub(1)
		}
	}
	return x, !x.less(limit)
}

// next returns the usable address after the usable address x, if any.
func (s *freeSet) next(x u128) (u128, bool) {
	if !x.less(s.last) {
		return u128{}, false
	}
	return s.atOrAfter(x.add(1), s.last)
}

// prev returns the usable address before the usable address x, if any.
func (s *freeSet) prev(x u128) (u128, bool) {
	if !s.first.less(x) {
		return u128{}, false
	}
	return s.atOrBefore(x.sub(1), s.first)
}

func (s *freeSet) newNode(start, end u128) *node {
	// splitmix64: well-mixed priorities from a counter, so runs repeat.
	s.seed += 0x9e3779b97f4a7c15
	z := s.seed
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return &node{start: start, end: end, prio: z ^ (z >> 31)}
}

// lowest returns the lowest free address.
func (s *freeSet) lowest() (u128, bool) {
	n := s.root
	if n == nil {
		return u128{}, false
	}
	for n.left != nil {
		n = n.left
	}
	return n.start, true
}

// floor returns the interval with the greatest start <= x.
func (s *freeSet) floor(x u128) *node {
	var best *node
	for n := s.root; n != nil; {
		if x.less(n.start) {
			n = n.left
		} else {
			best = n
			n = n.right
		}
	}
	return best
}

// ceilAbove returns the interval with the least start > x.
func (s *freeSet) ceilAbove(x u128) *node {
	var best *node
	for n := s.root; n != nil; {
		if x.less(n.start) {
			best = n
			n = n.left
		} else {
			n = n.right
		}
	}
	return best
}

// isFree reports whether x is usable and not taken.
func (s *freeSet) isFree(x u128) bool {
	if !s.usable(x) {
		return false
	}
	n := s.floor(x)
	return n != nil && !n.end.less(x)
}

// take marks x as used; false when x is not free.
func (s *freeSet) take(x u128) bool {
	if !s.usable(x) {
		return false
	}
	n := s.floor(x)
	if n == nil || n.end.less(x) {
		return false
	}
	// Changing a start or end in place keeps the tree ordered: intervals
	// never overlap, so the new start stays between its neighbours.
	switch {
	case n.start == x && n.end == x:
		s.root = s.remove(s.root, x)
		s.intervals--
	case n.start == x:
		n.start, _ = s.next(x)
	case n.end == x:
		n.end, _ = s.prev(x)
	default:
		end := n.end
		n.end, _ = s.prev(x)
		after, _ := s.next(x)
		s.root = s.insert(s.root, s.newNode(after, end))
		s.intervals++
	}
	return true
}

// put marks x as free again; false when x is not usable or already free.
func (s *freeSet) put(x u128) bool {
	if !s.usable(x) {
		return false
	}
	l := s.floor(x)
	if l != nil && !l.end.less(x) {
		return false
	}
	r := s.ceilAbove(x)
	var joinL, joinR bool
	if l != nil {
		nx, ok := s.next(l.end)
		joinL = ok && nx == x
	}
	if r != nil {
		nx, ok := s.next(x)
		joinR = ok && nx == r.start
	}
	switch {
	case joinL && joinR:
		l.end = r.end
		s.root = s.remove(s.root, r.start)
		s.intervals--
	case joinL:
		l.end = x
	case joinR:
		r.start = x
	default:
		s.root = s.insert(s.root, s.newNode(x, x))
		s.intervals++
	}
	return true
}

func (s *freeSet) insert(t, n *node) *node {
	if t == nil {
		return n
	}
	if n.prio > t.prio {
		n.left, n.right = split(t, n.start)
		return n
	}
	if n.start.less(t.start) {
		t.left = s.insert(t.left, n)
	} else {
		t.right = s.insert(t.right, n)
	}
	return t
}

func (s *freeSet) remove(t *node, start u128) *node {
	if t == nil {
		return nil
	}
	switch c := start.cmp(t.start); {
	case c < 0:
		t.left = s.remove(t.left, start)
	case c > 0:
		t.right = s.remove(t.right, start)
	default:
		return merge(t.left, t.right)
	}
	return t
}

// split divides t into the nodes with start < key and those with start >= key.
func split(t *node, key u128) (*node, *node) {
	if t == nil {
		return nil, nil
	}
	if t.start.less(key) {
		l, r := split(t.right, key)
		t.right = l
		return t, r
	}
	l, r := split(t.left, key)
	t.left = r
	return l, t
}

// merge joins two treaps where every start in a is below every start in b.
func merge(a, b *node) *node {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case a.prio > b.prio:
		a.right = merge(a.right, b)
		return a
	default:
		b.left = merge(a, b.left)
		return b
	}
}

// walk calls f for each interval in address order (tests and debugging).
func (s *freeSet) walk(f func(start, end u128)) {
	var rec func(*node)
	rec = func(n *node) {
		if n == nil {
			return
		}
		rec(n.left)
		f(n.start, n.end)
		rec(n.right)
	}
	rec(s.root)
}
