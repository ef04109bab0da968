package partition

import (
	"maps"
	"slices"
)

// Standing is a speaker's place in its memberlist view: the members it
// sees and the speakers it knows of. Memberlist cannot tell a partition
// from the death of the members on the other side; how many of the known
// speakers the view holds says which side must ask the Lease first.
type Standing struct {
	// Self is this speaker.
	Self string
	// Live are the members of the view (Self is counted whether listed
	// or not).
	Live []string
	// Known are the speakers this one knows of: the live ones and those
	// that died without leaving. A graceful leave drops a speaker from
	// it, so a rolling update never makes the rest a minority.
	Known []string
	// Held are the speakers that left restarting in place and are still
	// held for it: they said they come back, and their node forwards
	// meanwhile, so they count in the view. Without them the last
	// speaker of a two-node cluster would find itself alone during its
	// peer's restart, a minority, and afterwards recovering: the restart
	// would move the addresses it held.
	Held []string
	// Joined: this speaker has seen another member since it started.
	// Alone after that, with nobody else known, every other speaker left
	// gracefully: that is the whole cluster, not a start-up that has not
	// found the others yet.
	Joined bool
}

// Alone is a standing with no peer in the view.
func Alone(self string) Standing { return Standing{Self: self} }

// live is the view as a set, Self included.
func (s Standing) live() map[string]bool {
	out := map[string]bool{s.Self: true}
	for _, n := range s.Live {
		out[n] = true
	}
	for _, n := range s.Held {
		out[n] = true
	}
	return out
}

// known is every known speaker, the view included.
func (s Standing) known() map[string]bool {
	out := s.live()
	for _, n := range s.Known {
		out[n] = true
	}
	return out
}

// Lonely tells whether the view holds no other member.
func (s Standing) Lonely() bool { return len(s.live()) == 1 }

// Minority tells whether the view holds no majority of the known
// speakers: fewer than half, or exactly half without the lowest-named
// known speaker (so of two halves exactly one is a minority). Such a
// view cannot tell from memberlist whether the rest died or is cut off
// and elects on its own next to it; a speaker in it asks the Lease.
//
// A speaker alone that knows of nobody else is a minority too when it
// has just started and not joined yet: the others may be alive.
func (s Standing) Minority() bool {
	live, known := s.live(), s.known()
	switch {
	case len(live) == 1 && len(known) == 1:
		return !s.Joined
	case 2*len(live) < len(known):
		return true
	case 2*len(live) == len(known):
		return !live[slices.Min(slices.Collect(maps.Keys(known)))]
	}
	return false
}

// Outside tells whether holder is a speaker outside the view: its
// renewal is evidence that the rest of the cluster is alive.
func (s Standing) Outside(holder string) bool { return !s.live()[holder] }
