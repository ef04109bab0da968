// Package handover keeps TCP connections open across a move of a layer-2
// address whose former holder is a live member: a planned move (herald
// drain and --undo, the move back to a node that recovered or restarted,
// an advertisement that changed), or a move away from a member declared
// dead that was not (a speaker starved of CPU misses memberlist's probes
// and refutes its death a moment later, its kernel and its conntrack
// untouched; it keeps off its addresses for the hold while clients' next
// packets already reach the new holder).
//
// The address's new holder has no conntrack entry for the connections
// the former holder carried. Their next packet reaches it as a TCP segment
// without SYN that conntrack sees as new; the proxy's rules would send it
// to an endpoint that never saw the connection, and the client gets a
// reset. For a while after the move the new holder instead sends such
// packets, unchanged, to the former holder's address on the same segment
// (nftables' dup to it, then drop), where conntrack still knows them and
// the replies go straight to the client. A connection this node opened
// began with a SYN, so conntrack knows it and no rule matches it.
//
// Only the current holder forwards, to the holder before it, and, for
// LostGrace after it lost the address, the node that held it just before
// (clients still sending there until the new holder's announcement
// reaches them), so packets do not go round in circles. Two nodes may still point at each
// other for the moment both think they hold an address; the kernel's dup
// takes a hop of TTL from each copy (wrapping at 0), so the rules match
// only packets with a TTL (hop limit) above 1: a packet known to neither
// bounces at most that many times.
package handover

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Entry says: TCP packets to Addr arriving on Iface that belong to no
// connection this node tracks go to Via, the address of From, the former
// holder, since At.
type Entry struct {
	Addr  netip.Addr
	Iface string
	Via   netip.Addr
	From  string
	At    time.Time
}

func (e Entry) String() string {
	return fmt.Sprintf("%s on %s via %s (%s)", e.Addr, e.Iface, e.Via, e.From)
}

// Kernel puts a set of entries in place, replacing the last; nil or empty
// removes them. List reads what is in place (a speaker restarting in
// place left it for its successor). Netlink is the real one, Fake the
// tests'.
type Kernel interface {
	Apply(entries []Entry) error
	List() ([]Entry, error)
}

// move is an address this node took over from another member.
type move struct {
	from string
	at   time.Time
	// ifaces are where this node answered for the address; lost is
	// when it stopped (zero: it still does).
	ifaces []string
	lost   time.Time
}

// LostGrace is how long a node that lost an address goes on forwarding
// its former holder's connections: clients keep sending to it until the
// new holder's gratuitous announcement reaches them, or, for one that
// missed it, until their neighbour entry goes stale and is resolved
// again (Linux: up to about 45 s reachable, 5 s delay, then probes).
const LostGrace = time.Minute

// Tracker follows the addresses this node holds and which of them it took
// over from another member lately. Pure: the caller passes the time.
type Tracker struct {
	held  map[netip.Addr]bool
	moves map[netip.Addr]move
	// other is each elected address's last winner that was not this
	// node: the former holder once this node answers for it, also when
	// rounds in which it won without answering yet (its proxy not
	// ready, its link down) came between.
	other map[netip.Addr]string
}

// NewTracker returns an empty Tracker.
func NewTracker() *Tracker {
	return &Tracker{held: map[netip.Addr]bool{}, moves: map[netip.Addr]move{}, other: map[netip.Addr]string{}}
}

// Adopt takes over entries a predecessor left in the kernel (a speaker
// restarting in place): their moves go on as if made here. Call it before
// the first Update.
func (t *Tracker) Adopt(entries []Entry) {
	for _, e := range entries {
		if e.From == "" || e.At.IsZero() {
			continue
		}
		t.held[e.Addr] = true
		m := t.moves[e.Addr]
		m.from, m.at = e.From, e.At
		if !slices.Contains(m.ifaces, e.Iface) {
			m.ifaces = append(m.ifaces, e.Iface)
		}
		t.moves[e.Addr] = m
	}
}

// Round is one election round's outcome as the tracker needs it.
type Round struct {
	Now time.Time
	// Keep is how long after a move its connections are forwarded; 0
	// forwards none.
	Keep time.Duration
	// Self is this node's name.
	Self string
	// Held are the addresses this node answers for now, or will once
	// their former holder releases them (speaker/layer2/release), with
	// their interfaces.
	Held map[netip.Addr][]string
	// Winners are this round's winner of every elected address.
	Winners map[netip.Addr]string
	// Before, when set, tells who held an address before the first
	// round this tracker saw (a speaker that just started).
	Before func(netip.Addr) string
	// Live are the members alive now, and those held for a restart in
	// place (their rules stay in the kernel). A former holder that is not
	// (dead, gone) is not forwarded to until it is again: packets sent
	// to a node that is down are lost, where here they are reset at once.
	Live map[string]bool
	// Addresses are the nodes' addresses (their InternalIPs).
	Addresses map[string][]netip.Addr
}

// Result is what to put in the kernel.
type Result struct {
	Entries []Entry
	// Unreachable names moves that forward nowhere: the former holder has
	// no address of the family (logged, once per change by the caller).
	Unreachable []string
	// Next is when an entry expires (zero: none will): sync again then.
	Next time.Time
}

// Update takes a round and returns the entries for it.
func (t *Tracker) Update(r Round) Result {
	if r.Before != nil {
		for a := range r.Winners {
			if _, ok := t.other[a]; !ok {
				if w := r.Before(a); w != "" && w != r.Self {
					t.other[a] = w
				}
			}
		}
	}
	for a := range r.Held {
		if t.held[a] {
			continue
		}
		// Recorded whether or not prev is alive now: a member declared
		// dead by mistake is back within a second, with every connection
		// it carried still in its conntrack.
		if prev := t.other[a]; r.Keep > 0 && prev != "" && prev != r.Self {
			t.moves[a] = move{from: prev, at: r.Now, ifaces: r.Held[a]}
		}
	}
	for a := range t.other {
		if _, ok := r.Winners[a]; !ok {
			delete(t.other, a)
		}
	}
	for a, w := range r.Winners {
		if w != "" && w != r.Self {
			t.other[a] = w
		}
	}
	clear(t.held)
	for a := range r.Held {
		t.held[a] = true
	}
	var res Result
	for a, m := range t.moves {
		end := m.at.Add(r.Keep)
		switch {
		case t.held[a]:
			m.ifaces, m.lost = r.Held[a], time.Time{}
		case m.lost.IsZero():
			m.lost = r.Now
		}
		if g := m.lost.Add(LostGrace); !m.lost.IsZero() && g.Before(end) {
			end = g
		}
		t.moves[a] = m
		if !r.Now.Before(end) {
			delete(t.moves, a)
			continue
		}
		if res.Next.IsZero() || end.Before(res.Next) {
			res.Next = end
		}
		if !r.Live[m.from] {
			continue
		}
		via, ok := sameFamily(r.Addresses[m.from], a)
		if !ok {
			res.Unreachable = append(res.Unreachable, fmt.Sprintf("%s from %s (no address of its family)", a, m.from))
			continue
		}
		for _, i := range m.ifaces {
			res.Entries = append(res.Entries, Entry{Addr: a, Iface: i, Via: via, From: m.from, At: m.at})
		}
	}
	slices.SortFunc(res.Entries, func(x, y Entry) int {
		if c := x.Addr.Compare(y.Addr); c != 0 {
			return c
		}
		return strings.Compare(x.Iface, y.Iface)
	})
	slices.Sort(res.Unreachable)
	return res
}

func sameFamily(addrs []netip.Addr, a netip.Addr) (netip.Addr, bool) {
	for _, x := range addrs {
		if x = x.Unmap(); x.Is4() == a.Is4() && x.IsValid() {
			return x, true
		}
	}
	return netip.Addr{}, false
}

// Fake is a Kernel that keeps what it was given.
type Fake struct {
	Entries []Entry
	Applied int
	Err     error
}

// Apply records entries.
func (f *Fake) Apply(entries []Entry) error {
	if f.Err != nil {
		return f.Err
	}
	f.Entries = slices.Clone(entries)
	f.Applied++
	return nil
}

// List returns the entries last applied.
func (f *Fake) List() ([]Entry, error) { return slices.Clone(f.Entries), f.Err }
