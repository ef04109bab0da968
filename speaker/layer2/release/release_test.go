package release

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

var (
	a = netip.MustParseAddr("198.51.100.10")
	b = netip.MustParseAddr("2001:db8::10")
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time      { return c.t }
func (c *clock) add(d time.Duration) { c.t = c.t.Add(d) }
func newWaits(self string) (*Waits, *clock) {
	c := &clock{t: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)}
	return New(self, c.now), c
}

// is is a winner function: every address's winner is node.
func is(node string) func(netip.Addr) string { return func(netip.Addr) string { return node } }

// hold is the round in which node4 wins a from node2 and holds it back.
func hold(rel map[string]bool) Round {
	return Round{Held: map[netip.Addr][]string{a: {"eth0"}}, Last: is("node2"), Releasing: rel}
}

// answered is a round in which node4 answers a, whose last winner was
// last.
func answered(rel map[string]bool, last string) Round {
	return Round{Answered: map[netip.Addr]bool{a: true}, Last: is(last), Releasing: rel}
}

func TestMessageRoundTrip(t *testing.T) {
	m := Message{From: "node2", To: "node4", Addrs: []netip.Addr{a, b}}
	got, err := Decode(Encode(m))
	if err != nil {
		t.Fatal(err)
	}
	if got.From != m.From || got.To != m.To || len(got.Addrs) != 2 || got.Addrs[0] != a || got.Addrs[1] != b {
		t.Fatalf("round trip: %+v, want %+v", got, m)
	}
}

func TestDecodeRejects(t *testing.T) {
	for name, tc := range map[string]struct{ in, want string }{
		"not JSON":     {`{"k":`, "release message"},
		"other kind":   {`{"k":"x","f":"a","t":"b","a":["198.51.100.1"]}`, `kind "x"`},
		"no sender":    {`{"k":"release","t":"b","a":["198.51.100.1"]}`, "no sender"},
		"no addresses": {`{"k":"release","f":"a","t":"b"}`, "0 addresses"},
		"bad address":  {`{"k":"release","f":"a","t":"b","a":["198.51.100.300"]}`, "release message"},
		"zero address": {`{"k":"release","f":"a","t":"b","a":[""]}`, "invalid address"},
	} {
		_, err := Decode([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", name, err, tc.want)
		}
	}
}

// The common order: this node decides first, waits, and the release
// ends the wait.
func TestWaitEndsOnRelease(t *testing.T) {
	w, c := newWaits("node4")
	last := map[netip.Addr]string{a: "node2"}
	rel := map[string]bool{"node2": true}
	if got := w.Awaited(last, rel); !got[a] {
		t.Fatalf("awaited %v, want %s held for node2", got, a)
	}
	ended, next := w.Settle(hold(rel))
	if len(ended) != 0 || !next.Equal(c.t.Add(MaxWait)) {
		t.Fatalf("settle: ended %v next %v", ended, next)
	}
	// The next election sees this node as the last winner.
	last = map[netip.Addr]string{a: "node4"}
	c.add(40 * time.Millisecond)
	if got := w.Awaited(last, rel); !got[a] {
		t.Fatalf("still waiting: awaited %v", got)
	}
	// A release from another member does not count.
	w.Received(Message{From: "node3", To: "node4", Addrs: []netip.Addr{a}})
	if got := w.Awaited(last, rel); !got[a] {
		t.Fatalf("released by node3, not the holder: awaited %v", got)
	}
	if w.Received(Message{From: "node2", To: "node1", Addrs: []netip.Addr{a}}) {
		t.Fatal("a message for another node was taken")
	}
	w.Received(Message{From: "node2", To: "node4", Addrs: []netip.Addr{a}})
	if got := w.Awaited(last, rel); got[a] {
		t.Fatalf("released: awaited %v", got)
	}
	c.add(time.Millisecond)
	ended, next = w.Settle(answered(rel, "node4"))
	if len(ended) != 1 || ended[0].Outcome != Released || ended[0].From != "node2" || ended[0].Waited != 41*time.Millisecond || !next.IsZero() {
		t.Fatalf("ended %+v next %v, want one released after 41ms", ended, next)
	}
	if w.Len() != 0 {
		t.Fatalf("%d waits left", w.Len())
	}
}

// The former holder may learn first: its release, received before this
// node decides, lets it answer at once, once.
func TestReleaseBeforeDecision(t *testing.T) {
	w, c := newWaits("node4")
	rel := map[string]bool{"node2": true}
	w.Received(Message{From: "node2", To: "node4", Addrs: []netip.Addr{a}})
	c.add(300 * time.Millisecond)
	last := map[netip.Addr]string{a: "node2"}
	if got := w.Awaited(last, rel); got[a] {
		t.Fatalf("released before: awaited %v", got)
	}
	ended, _ := w.Settle(answered(rel, "node2"))
	if len(ended) != 1 || ended[0].Outcome != Released || ended[0].From != "node2" || ended[0].Waited != 0 {
		t.Fatalf("ended %+v, want one released by node2 with no wait", ended)
	}
	// Used up: a later move from node2 waits again.
	if got := w.Awaited(last, rel); !got[a] {
		t.Fatalf("the release was used: awaited %v, want %s held", got, a)
	}
}

func TestStaleReleaseIgnored(t *testing.T) {
	w, c := newWaits("node4")
	rel := map[string]bool{"node2": true}
	w.Received(Message{From: "node2", To: "node4", Addrs: []netip.Addr{a}})
	c.add(Keep)
	if got := w.Awaited(map[netip.Addr]string{a: "node2"}, rel); !got[a] {
		t.Fatalf("a release older than Keep counted: awaited %v", got)
	}
}

func TestWaitTimesOut(t *testing.T) {
	w, c := newWaits("node4")
	rel := map[string]bool{"node2": true}
	w.Awaited(map[netip.Addr]string{a: "node2"}, rel)
	w.Settle(hold(rel))
	c.add(MaxWait - time.Millisecond)
	last := map[netip.Addr]string{a: "node4"}
	if got := w.Awaited(last, rel); !got[a] {
		t.Fatalf("before MaxWait: awaited %v", got)
	}
	c.add(time.Millisecond)
	if got := w.Awaited(last, rel); got[a] {
		t.Fatalf("at MaxWait: awaited %v", got)
	}
	ended, _ := w.Settle(answered(rel, "node4"))
	if len(ended) != 1 || ended[0].Outcome != TimedOut {
		t.Fatalf("ended %+v, want a timeout", ended)
	}
}

func TestHolderGone(t *testing.T) {
	w, _ := newWaits("node4")
	rel := map[string]bool{"node2": true}
	w.Awaited(map[netip.Addr]string{a: "node2"}, rel)
	w.Settle(hold(rel))
	gone := map[string]bool{}
	if got := w.Awaited(map[netip.Addr]string{a: "node4"}, gone); got[a] {
		t.Fatalf("holder left: awaited %v", got)
	}
	ended, _ := w.Settle(answered(gone, "node4"))
	if len(ended) != 1 || ended[0].Outcome != Gone {
		t.Fatalf("ended %+v, want gone", ended)
	}
}

// Nothing is awaited from this node itself, from nobody, or from a member
// that does not release (an older speaker): those are answered as before.
func TestNotAwaited(t *testing.T) {
	w, _ := newWaits("node4")
	last := map[netip.Addr]string{a: "node4", b: "", netip.MustParseAddr("198.51.100.11"): "node1"}
	if got := w.Awaited(last, map[string]bool{"node2": true}); len(got) != 0 {
		t.Fatalf("awaited %v, want none", got)
	}
}

// An address no longer won here stops being waited for, without an
// outcome.
func TestWaitDroppedWhenLost(t *testing.T) {
	w, _ := newWaits("node4")
	rel := map[string]bool{"node2": true}
	w.Awaited(map[netip.Addr]string{a: "node2"}, rel)
	w.Settle(hold(rel))
	ended, next := w.Settle(Round{Last: is("node4"), Releasing: rel})
	if len(ended) != 0 || !next.IsZero() || w.Len() != 0 {
		t.Fatalf("ended %v next %v len %d", ended, next, w.Len())
	}
}

// A release answers at once for the addresses waited for from its
// sender, on their interfaces, not at the next election; Do hands the
// loop what was released since its election.
func TestReleaseAnswersAtOnce(t *testing.T) {
	w, _ := newWaits("node4")
	rel := map[string]bool{"node2": true, "node3": true}
	var got []map[netip.Addr][]string
	w.Notify(func(from string, m map[netip.Addr][]string) {
		if from != "node2" {
			t.Errorf("released by %s, want node2", from)
		}
		got = append(got, m)
	})
	w.Awaited(map[netip.Addr]string{a: "node2", b: "node3"}, rel)
	from := func(x netip.Addr) string { return map[netip.Addr]string{a: "node2", b: "node3"}[x] }
	w.Settle(Round{Held: map[netip.Addr][]string{a: {"eth0"}, b: {"eth1"}}, Last: from, Releasing: rel})
	w.Received(Message{From: "node3", To: "node4", Addrs: []netip.Addr{a}}) // not a's holder
	if len(got) != 0 {
		t.Fatalf("a release from another member answered: %v", got)
	}
	w.Received(Message{From: "node2", To: "node4", Addrs: []netip.Addr{a}})
	if len(got) != 1 || len(got[0]) != 1 || got[0][a][0] != "eth0" {
		t.Fatalf("answered %v, want %s on eth0 alone", got, a)
	}
	w.Do(func(released map[netip.Addr][]string) {
		if len(released) != 1 || released[a][0] != "eth0" {
			t.Errorf("Do: released %v, want %s on eth0", released, a)
		}
	})
}

// Releases are kept per sender: a second sender's does not hide the
// holder's.
func TestReleasesPerSender(t *testing.T) {
	w, _ := newWaits("node4")
	rel := map[string]bool{"node2": true, "node3": true}
	w.Awaited(map[netip.Addr]string{a: "node2"}, rel)
	w.Settle(hold(rel))
	w.Received(Message{From: "node2", To: "node4", Addrs: []netip.Addr{a}})
	w.Received(Message{From: "node3", To: "node4", Addrs: []netip.Addr{a}})
	if got := w.Awaited(map[netip.Addr]string{a: "node4"}, rel); got[a] {
		t.Fatalf("node2 released, then node3: awaited %v", got)
	}
	w.Do(func(released map[netip.Addr][]string) {
		if _, ok := released[a]; !ok {
			t.Errorf("Do: %s not released", a)
		}
	})
}

// A release that arrives while this node's election still names its
// sender the winner (the sender learned of the change first) is kept:
// when this node catches up and wins the address, it answers at once.
func TestReleaseKeptWhileViewLags(t *testing.T) {
	w, c := newWaits("node4")
	rel := map[string]bool{"node2": true}
	w.Received(Message{From: "node2", To: "node4", Addrs: []netip.Addr{a}})
	w.Settle(Round{Last: is("node2"), Releasing: rel}) // still node2's here
	c.add(20 * time.Millisecond)
	if got := w.Awaited(map[netip.Addr]string{a: "node2"}, rel); got[a] {
		t.Fatalf("released by node2 before this node caught up: awaited %v", got)
	}
}
