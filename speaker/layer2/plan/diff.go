package plan

import (
	"net/netip"
	"slices"

	"github.com/herald-lb/herald/speaker/view"
)

// IPChange is an address and the interfaces it was gained or lost on.
type IPChange struct {
	Addr       netip.Addr
	Interfaces []string
}

// Move is an address whose winner changed, "" meaning no node (or the
// address was not elected before or after), for events and metrics.
type Move struct {
	Addr     netip.Addr
	From, To string
}

// Changes is what the speaker loop has to do between two States.
type Changes struct {
	// Gained are addresses this node now answers for on these interfaces
	// and did not before: send a gratuitous burst there. An address that
	// stays but gains an interface (its link came back) is here with that
	// interface.
	Gained []IPChange
	// Lost are addresses no longer answered for on these interfaces.
	Lost []IPChange
	// Moved are the addresses whose winner changed, on any node.
	Moved []Move
	// Create, Update and Delete are this node's announcements of
	// addresses (those only reporting reasons left out) that started,
	// changed or ended, for events; Delete holds the old values.
	Create, Update, Delete []view.Announcement
}

// Empty reports whether nothing changed.
func (c Changes) Empty() bool {
	return len(c.Gained)+len(c.Lost)+len(c.Moved)+len(c.Create)+len(c.Update)+len(c.Delete) == 0
}

// Diff compares two States of the same node; every list comes out sorted.
// Start from the zero State to get everything to do on start.
func Diff(old, cur State) Changes {
	var c Changes
	oldIPs, curIPs := byAddr(old), byAddr(cur)
	for a, ip := range curIPs {
		prev := oldIPs[a]
		if add := minus(ip.Interfaces, prev.Interfaces); len(add) > 0 {
			c.Gained = append(c.Gained, IPChange{a, add})
		}
		if prev.Winner != ip.Winner {
			c.Moved = append(c.Moved, Move{a, prev.Winner, ip.Winner})
		}
	}
	for a, ip := range oldIPs {
		now := curIPs[a]
		if del := minus(ip.Interfaces, now.Interfaces); len(del) > 0 {
			c.Lost = append(c.Lost, IPChange{a, del})
		}
		if _, still := curIPs[a]; !still && ip.Winner != "" {
			c.Moved = append(c.Moved, Move{a, ip.Winner, ""})
		}
	}
	byIP := func(a, b IPChange) int { return a.Addr.Compare(b.Addr) }
	slices.SortFunc(c.Gained, byIP)
	slices.SortFunc(c.Lost, byIP)
	slices.SortFunc(c.Moved, func(a, b Move) int { return a.Addr.Compare(b.Addr) })

	oldAn := map[view.ServiceRef]view.Announcement{}
	for _, a := range announcing(old.Announcements) {
		oldAn[a.Service] = a
	}
	curAn := map[view.ServiceRef]bool{}
	for _, a := range announcing(cur.Announcements) {
		curAn[a.Service] = true
		prev, ok := oldAn[a.Service]
		switch {
		case !ok:
			c.Create = append(c.Create, a)
		case !prev.Equal(a):
			c.Update = append(c.Update, a)
		}
	}
	for _, a := range announcing(old.Announcements) {
		if !curAn[a.Service] {
			c.Delete = append(c.Delete, a)
		}
	}
	return c
}

// announcing is the announcements that carry addresses, without the
// reasons for the others: what Create, Update and Delete are about.
func announcing(anns []view.Announcement) []view.Announcement {
	var out []view.Announcement
	for _, a := range anns {
		if len(a.IPs) > 0 {
			a.Unannounced = nil
			out = append(out, a)
		}
	}
	return out
}

func byAddr(s State) map[netip.Addr]IP {
	m := make(map[netip.Addr]IP, len(s.IPs))
	for _, ip := range s.IPs {
		m[ip.Addr] = ip
	}
	return m
}

// minus returns the elements of a not in b, in a's order.
func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}
