package partition

import (
	"fmt"
	"testing"
	"time"
)

func names(n ...int) []string {
	out := make([]string, len(n))
	for i, k := range n {
		out[i] = fmt.Sprintf("node%d", k)
	}
	return out
}

func TestMinority(t *testing.T) {
	for _, tc := range []struct {
		name        string
		self        int
		live, known []int
		want        bool
	}{
		{"whole cluster of 5", 1, []int{1, 2, 3, 4, 5}, []int{1, 2, 3, 4, 5}, false},
		{"2 of 4 holding the lowest (tie, keeps announcing)", 2, []int{1, 2}, []int{1, 2, 3, 4}, false},
		{"2 of 4 without the lowest (tie, holds back)", 3, []int{3, 4}, []int{1, 2, 3, 4}, true},
		{"2 of 5", 1, []int{1, 2}, []int{1, 2, 3, 4, 5}, true},
		{"3 of 5", 5, []int{3, 4, 5}, []int{1, 2, 3, 4, 5}, false},
		{"1 of 3 (the lonely case)", 3, []int{3}, []int{1, 2, 3}, true},
		{"2 of 3", 1, []int{1, 2}, []int{1, 2, 3}, false},
		{"alone knowing nobody (start-up)", 1, nil, nil, true},
		{"1 of 2 holding the lowest", 1, []int{1}, []int{1, 2}, false},
		{"1 of 2 without the lowest", 2, []int{2}, []int{1, 2}, true},
		{"the view counts as known", 1, []int{1, 2, 3}, []int{1}, false},
		{"self counts in the view when not listed", 1, []int{2}, []int{1, 2, 3}, false},
		// Three of five left gracefully: they are not known any more.
		{"2 left of 5 after 3 graceful leaves", 4, []int{4, 5}, []int{4, 5}, false},
		// Three of five died: known, so the rest asks the Lease.
		{"2 left of 5 after 3 deaths", 4, []int{4, 5}, []int{1, 2, 3, 4, 5}, true},
	} {
		s := Standing{Self: fmt.Sprintf("node%d", tc.self), Live: names(tc.live...), Known: names(tc.known...)}
		if got := s.Minority(); got != tc.want {
			t.Errorf("%s: Minority(%+v) = %v, want %v", tc.name, s, got, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		s    Standing
		want bool
	}{
		// Two nodes, node1's peer restarting in place: it counts.
		{"1 of 2, the other restarting in place", Standing{Self: "node2", Live: names(2), Known: names(1, 2), Held: names(1)}, false},
		{"alone, the only peer restarting (it left the known)", Standing{Self: "node2", Live: names(2), Known: names(2), Held: names(1), Joined: true}, false},
		{"2 of 5, 2 more restarting", Standing{Self: "node4", Live: names(4, 5), Known: names(1, 2, 3, 4, 5), Held: names(1, 2)}, false},
		{"1 of 5, 1 restarting", Standing{Self: "node4", Live: names(4), Known: names(1, 2, 3, 4, 5), Held: names(3)}, true},
		// Every peer left gracefully after this one joined: the whole
		// cluster. Before any join: a start-up.
		{"alone after every peer left gracefully", Standing{Self: "node1", Live: names(1), Known: names(1), Joined: true}, false},
		{"alone before any join", Standing{Self: "node1", Live: names(1), Known: names(1)}, true},
		{"alone after a join, the peer dead", Standing{Self: "node2", Live: names(2), Known: names(1, 2), Joined: true}, true},
	} {
		if got := tc.s.Minority(); got != tc.want {
			t.Errorf("%s: Minority(%+v) = %v, want %v", tc.name, tc.s, got, tc.want)
		}
	}
}

// TestIsolatedMinority runs the trackers of a four- and a five-node
// cluster through a partition, a real failure and a graceful leave.
func TestIsolatedMinority(t *testing.T) {
	const w = 3 * time.Second
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	all5 := names(1, 2, 3, 4, 5)

	t.Run("2 vs 2", func(t *testing.T) {
		c := &clock{t: start}
		a := NewTracker("node1", w, c.now)
		b := NewTracker("node3", w, c.now)
		all := names(1, 2, 3, 4)
		sa := Standing{Self: "node1", Live: names(1, 2), Known: all}
		sb := Standing{Self: "node3", Live: names(3, 4), Known: all}
		for i := range 10 {
			// Each side's lowest renews when its tracker lets it.
			if a.ShouldRenew(true, sa) {
				b.Observe("node1", c.t)
			}
			if b.ShouldRenew(true, sb) {
				a.Observe("node3", c.t)
			}
			if a.Isolated(sa) {
				t.Errorf("second %d: the half holding node1 held back", i)
			}
			if !b.Isolated(sb) {
				t.Errorf("second %d: the other half announced next to it", i)
			}
			c.advance(time.Second)
		}
	})

	t.Run("2 vs 3", func(t *testing.T) {
		c := &clock{t: start}
		small := NewTracker("node1", w, c.now)
		big := NewTracker("node3", w, c.now)
		ss := Standing{Self: "node1", Live: names(1, 2), Known: all5}
		sb := Standing{Self: "node3", Live: names(3, 4, 5), Known: all5}
		for i := range 10 {
			if big.ShouldRenew(true, sb) {
				small.Observe("node3", c.t)
			}
			if small.ShouldRenew(true, ss) {
				t.Errorf("second %d: the minority renewed", i)
			}
			if big.Isolated(sb) || !small.Isolated(ss) {
				t.Errorf("second %d: majority isolated %v, minority isolated %v", i, big.Isolated(sb), small.Isolated(ss))
			}
			c.advance(time.Second)
		}
	})

	t.Run("renewals inside the view prove nothing", func(t *testing.T) {
		c := &clock{t: start}
		tr := NewTracker("node2", w, c.now)
		s := Standing{Self: "node2", Live: names(1, 2), Known: all5}
		tr.Isolated(s)
		for range 5 {
			tr.Observe("node1", c.t) // its own group's lowest
			c.advance(time.Second)
		}
		if tr.Isolated(s) {
			t.Error("the only renewals are node1's, in the view: the others are gone")
		}
	})

	t.Run("1 vs 2", func(t *testing.T) {
		c := &clock{t: start}
		tr := NewTracker("node3", w, c.now)
		s := Standing{Self: "node3", Known: names(1, 2, 3)}
		tr.Observe("node1", c.t)
		c.advance(5 * time.Second)
		tr.Observe("node1", c.t)
		if !tr.Isolated(s) {
			t.Error("alone while node1 renews: isolated")
		}
		other := NewTracker("node1", w, c.now)
		if other.Isolated(Standing{Self: "node1", Live: names(1, 2), Known: names(1, 2, 3)}) {
			t.Error("the two are a majority")
		}
	})

	t.Run("real failure of 3 of 5", func(t *testing.T) {
		c := &clock{t: start}
		tr := NewTracker("node4", w, c.now)
		tr.Observe("node1", c.t) // the last renewal before the failure
		s := Standing{Self: "node4", Live: names(4, 5), Known: all5}
		var took time.Duration
		for took = 0; tr.Isolated(s); took += 100 * time.Millisecond {
			c.advance(100 * time.Millisecond)
			if took > time.Minute {
				t.Fatal("never took over")
			}
		}
		t.Logf("the 2 survivors of 5 take over %s after they found themselves a minority (window %s)", took, w)
		if took != w {
			t.Errorf("took over after %s, want the window %s", took, w)
		}
	})

	t.Run("graceful leave not counted", func(t *testing.T) {
		c := &clock{t: start}
		tr := NewTracker("node4", w, c.now)
		tr.Observe("node1", c.t)
		// node1, node2 and node3 left gracefully: not known any more.
		if tr.Isolated(Standing{Self: "node4", Live: names(4, 5), Known: names(4, 5)}) {
			t.Error("the rest after graceful leaves is the whole cluster")
		}
	})
}
