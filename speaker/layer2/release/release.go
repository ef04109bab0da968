// Package release orders a planned move of a layer-2 address between two
// live speakers, so that one node answers for it at a time and the gap
// between them is one message, not a gossip round.
//
// Every speaker runs the same election, but each learns of a change
// (a node leaving recovery, a drain or its undo) at its own moment: the
// node that changed its metadata at once, the others when gossip reaches
// them, tens to hundreds of milliseconds later. Left to itself, the node
// gaining an address starts answering when it decides, and the node
// losing it stops when it decides: two answers, or none, for as long as
// they disagree. With this package the gainer waits (Waits) and the loser,
// once it has stopped, says so in a message to the gainer (Message),
// which then answers. The wait is bounded (MaxWait): a former holder
// that says nothing is answered over, as before.
//
// Only members that advertise it (members.Meta.Releases) are waited for,
// so a cluster of mixed versions behaves as the older one did.
package release

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// MaxWait bounds how long a gainer waits for the former holder's
// release. The release normally follows the gainer's decision by one
// gossip round and a sync, well under a second; a former holder that
// has not released by then either has not learned of the change (its
// view lags) or lost the message, and the address is answered
// regardless, as speakers without this package always did.
const MaxWait = 2 * time.Second

// Keep is how long a release received before this node decided to take
// the address (the former holder learned first) stays good: well above a
// gossip round, short enough that a sender that won the address back
// meanwhile (views flapping within seconds) is rarely taken for silent.
const Keep = 5 * time.Second

// kind tags the message, for the speakers' later messages to differ.
const kind = "release"

// maxAddrs bounds a decoded message: more addresses than a pool of the
// largest size herald announces on one node is not a real message.
const maxAddrs = 1 << 16

// Message says that From stopped answering for Addrs, which the election
// gives To.
type Message struct {
	From  string
	To    string
	Addrs []netip.Addr
}

type wire struct {
	Kind  string       `json:"k"`
	From  string       `json:"f"`
	To    string       `json:"t"`
	Addrs []netip.Addr `json:"a"`
}

// Encode is the message's bytes on the wire.
func Encode(m Message) []byte {
	b, _ := json.Marshal(wire{Kind: kind, From: m.From, To: m.To, Addrs: m.Addrs})
	return b
}

// Decode reads a message, naming what is wrong with a bad one.
func Decode(b []byte) (Message, error) {
	var w wire
	if err := json.Unmarshal(b, &w); err != nil {
		return Message{}, fmt.Errorf("release message: %w", err)
	}
	switch {
	case w.Kind != kind:
		return Message{}, fmt.Errorf("release message: kind %q, want %q", w.Kind, kind)
	case w.From == "" || w.To == "":
		return Message{}, errors.New("release message: no sender or receiver name")
	case len(w.Addrs) == 0 || len(w.Addrs) > maxAddrs:
		return Message{}, fmt.Errorf("release message: %d addresses", len(w.Addrs))
	}
	for _, a := range w.Addrs {
		if !a.IsValid() {
			return Message{}, errors.New("release message: an invalid address")
		}
	}
	return Message{From: w.From, To: w.To, Addrs: w.Addrs}, nil
}

// Outcome is how a wait ended, for herald_speaker_handoffs_total.
type Outcome string

const (
	// Released: the former holder said it stopped.
	Released Outcome = "released"
	// TimedOut: it said nothing within MaxWait.
	TimedOut Outcome = "timeout"
	// Gone: it left the members while this node waited.
	Gone Outcome = "gone"
)

// Ended is a wait that ended with this node answering.
type Ended struct {
	Addr    netip.Addr
	From    string
	Outcome Outcome
	Waited  time.Duration
}

// Waits are, on one node, the addresses it won from a live member and
// does not answer until that member released them, and the releases
// received. The loop calls Awaited before an election, Settle after it
// and sets what the node answers in Do; Received is called from the
// membership's goroutines.
type Waits struct {
	self string
	now  func() time.Time

	mu sync.Mutex
	// released: per address, when each sender released it.
	released map[netip.Addr]map[string]time.Time
	waiting  map[netip.Addr]wait
	// onRelease answers for released addresses at once (Notify).
	onRelease func(from string, ips map[netip.Addr][]string)
}

type wait struct {
	from  string
	since time.Time
	// ifaces are where this node answers once the address is released.
	ifaces []string
}

// New returns the waits of node self; now is the clock (nil: time.Now).
func New(self string, now func() time.Time) *Waits {
	if now == nil {
		now = time.Now
	}
	return &Waits{self: self, now: now, released: map[netip.Addr]map[string]time.Time{}, waiting: map[netip.Addr]wait{}}
}

// Notify sets what answers for released addresses the moment their
// release arrives (their interfaces as Settle last saw them), not at the
// next election: the gap between the two nodes is then the message's
// time alone. It runs with the waits locked, as Do's function does, so
// the two never interleave.
func (w *Waits) Notify(fn func(from string, ips map[netip.Addr][]string)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.onRelease = fn
}

// Received records m and answers at once (Notify) for the addresses it
// releases that are waited for; it reports whether m was for this node.
func (w *Waits) Received(m Message) bool {
	if m.To != w.self || m.From == w.self {
		return false
	}
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	answer := map[netip.Addr][]string{}
	for _, a := range m.Addrs {
		if w.released[a] == nil {
			w.released[a] = map[string]time.Time{}
		}
		w.released[a][m.From] = now
		if wt, ok := w.waiting[a]; ok && wt.from == m.From && len(wt.ifaces) > 0 {
			answer[a] = wt.ifaces
		}
	}
	if len(answer) > 0 && w.onRelease != nil {
		w.onRelease(m.From, answer)
	}
	return true
}

// Do runs fn with the waits locked and the addresses released since
// Settle (with their interfaces): the loop sets what it answers for in
// fn, so that a release arriving meanwhile is not undone by an election
// that did not know of it yet.
func (w *Waits) Do(fn func(released map[netip.Addr][]string)) {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[netip.Addr][]string{}
	for a, wt := range w.waiting {
		if len(wt.ifaces) > 0 && w.releasedBy(a, wt.from, now) {
			out[a] = wt.ifaces
		}
	}
	fn(out)
}

// releasedBy tells whether from released a lately; w.mu is held.
func (w *Waits) releasedBy(a netip.Addr, from string, now time.Time) bool {
	at, ok := w.released[a][from]
	return ok && now.Sub(at) < Keep
}

// Awaited are the addresses the election must not answer yet if this
// node wins them: those waited for already, and those whose last winner
// (last) is another member that sends releases (releasing: live, and
// advertising it) and has not released them. A wait past MaxWait, or
// whose former holder stopped being a releasing member, is not awaited.
func (w *Waits) Awaited(last map[netip.Addr]string, releasing map[string]bool) map[netip.Addr]bool {
	now := w.now()
	out := map[netip.Addr]bool{}
	w.mu.Lock()
	defer w.mu.Unlock()
	for a, wt := range w.waiting {
		if releasing[wt.from] && !w.releasedBy(a, wt.from, now) && now.Sub(wt.since) < MaxWait {
			out[a] = true
		}
	}
	for a, from := range last {
		if _, ok := w.waiting[a]; ok || from == "" || from == w.self || !releasing[from] {
			continue
		}
		if !w.releasedBy(a, from, now) {
			out[a] = true
		}
	}
	return out
}

// Round is an election's outcome as Settle needs it.
type Round struct {
	// Held are the addresses the election holds back as awaited, with
	// the interfaces this node answers on once they are released.
	Held map[netip.Addr][]string
	// Answered are the addresses this node answers for now.
	Answered map[netip.Addr]bool
	// Last is an address's winner in the election before.
	Last func(netip.Addr) string
	// Releasing are the live members that release what they lose.
	Releasing map[string]bool
}

// Settle takes the election's outcome. It starts the waits of newly held
// addresses, ends those of addresses answered (returned, with how they
// ended; a release that came before this node decided ends one with no
// wait) or no longer won, uses up the releases of answered addresses and
// forgets stale ones. next
// is when the earliest wait times out (zero: none), for a sync then.
func (w *Waits) Settle(r Round) (ended []Ended, next time.Time) {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for a, ifaces := range r.Held {
		wt, ok := w.waiting[a]
		if !ok {
			wt = wait{from: r.Last(a), since: now}
		}
		wt.ifaces = slices.Clone(ifaces)
		w.waiting[a] = wt
	}
	for a, wt := range w.waiting {
		if _, ok := r.Held[a]; ok {
			continue
		}
		if r.Answered[a] {
			e := Ended{Addr: a, From: wt.from, Outcome: TimedOut, Waited: now.Sub(wt.since)}
			switch {
			case w.releasedBy(a, wt.from, now):
				e.Outcome = Released
			case !r.Releasing[wt.from]:
				e.Outcome = Gone
			}
			ended = append(ended, e)
		}
		delete(w.waiting, a)
	}
	for a, senders := range w.released {
		if r.Answered[a] {
			if _, waited := w.waiting[a]; !waited {
				if from := r.Last(a); from != w.self && w.releasedBy(a, from, now) && !slices.ContainsFunc(ended, func(e Ended) bool { return e.Addr == a }) {
					ended = append(ended, Ended{Addr: a, From: from, Outcome: Released})
				}
			}
			delete(w.released, a)
			continue
		}
		// A release is kept even while this node's election still
		// names its sender the winner: the sender learned of the change
		// first, and this node's view catches up within a gossip round.
		for from, at := range senders {
			if now.Sub(at) >= Keep {
				delete(senders, from)
			}
		}
		if len(senders) == 0 {
			delete(w.released, a)
		}
	}
	for _, wt := range w.waiting {
		if d := wt.since.Add(MaxWait); next.IsZero() || d.Before(next) {
			next = d
		}
	}
	slices.SortFunc(ended, func(x, y Ended) int { return x.Addr.Compare(y.Addr) })
	return ended, next
}

// Len is how many addresses are waited for.
func (w *Waits) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.waiting)
}
