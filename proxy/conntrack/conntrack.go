// Package conntrack is the proxy's only way to touch the kernel's
// connection tracking table: it deletes UDP entries that a caller's
// predicate calls stale. UDP has no connection to close, so an entry
// that DNATs a client to an endpoint that is gone keeps black-holing the
// client's packets for as long as the client keeps sending; deleting it
// makes the next packet go through the current rules. Everything above
// works against Interface, so tests use the Fake.
package conntrack

import (
	"net/netip"
	"sync"

	"github.com/herald-lb/herald/proxy/rules"
)

// Flow is one conntrack entry as the proxy sees it: the original tuple
// (what the client sent) and the reply tuple (what comes back; after
// DNAT its source is the endpoint).
type Flow struct {
	Proto    uint8 // IP protocol number; 17 for UDP
	OrigSrc  netip.AddrPort
	OrigDst  netip.AddrPort
	ReplySrc netip.AddrPort
	ReplyDst netip.AddrPort
}

// ProtoUDP is UDP's IP protocol number.
const ProtoUDP = 17

// Interface deletes conntrack entries.
type Interface interface {
	// DeleteUDP deletes the UDP entries of one family for which stale
	// returns true and returns how many it deleted.
	DeleteUDP(family rules.Family, stale func(Flow) bool) (int, error)
}

// Fake is an in-memory conntrack table.
type Fake struct {
	mu    sync.Mutex
	flows []Flow
	// Deleted records every deleted flow, in order.
	Deleted []Flow
	// Calls counts DeleteUDP calls (each is a table dump on a real node).
	Calls int
	// Err, when set, is returned by DeleteUDP after deleting nothing.
	Err error
}

// Add puts flows into the table.
func (f *Fake) Add(flows ...Flow) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flows = append(f.flows, flows...)
}

// Flows returns the entries left.
func (f *Fake) Flows() []Flow {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Flow(nil), f.flows...)
}

// DeleteUDP implements Interface.
func (f *Fake) DeleteUDP(family rules.Family, stale func(Flow) bool) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Calls++
	if f.Err != nil {
		return 0, f.Err
	}
	kept := f.flows[:0]
	n := 0
	for _, fl := range f.flows {
		a := fl.OrigDst.Addr()
		inFamily := (family == rules.IPv4 && a.Is4()) || (family == rules.IPv6 && a.Is6())
		if inFamily && fl.Proto == ProtoUDP && stale(fl) {
			f.Deleted = append(f.Deleted, fl)
			n++
			continue
		}
		kept = append(kept, fl)
	}
	f.flows = kept
	return n, nil
}
