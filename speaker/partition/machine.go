package partition

import "time"

// The machine has two regions, stepped together. The view region says
// where this speaker stands in its memberlist view; the recovery region
// says whether the cluster counted it out lately. A speaker can be
// isolated and recovering at once (an isolation counts it out), so the
// two are kept apart rather than multiplied into one list of states.
//
//	view:      Majority ⇄ Waiting → Isolated ⇄ Survivor, each → Majority
//	recovery:  Healthy → Recovering (counted out) → Healthy (hold over)
//	joined:    false → true (first sync that sees another member), never back

// View is the view region: where this speaker stands in its memberlist
// view, as of the last sync.
type View int

const (
	// Majority: the view holds a majority of the known speakers (or is
	// the whole cluster): it elects on its own.
	Majority View = iota
	// Waiting: the view has been a minority for less than the window;
	// it holds back until the Lease can tell whether the others live.
	Waiting
	// Isolated: a minority, and a speaker outside the view renewed the
	// Lease within the window: the others elect without this side.
	Isolated
	// Survivor: a minority past the window with no renewal from
	// outside: the others are gone and this side takes over.
	Survivor
)

func (v View) String() string {
	switch v {
	case Majority:
		return "majority"
	case Waiting:
		return "waiting"
	case Isolated:
		return "isolated"
	case Survivor:
		return "survivor"
	}
	return "unknown"
}

// HoldsBack tells whether a speaker in v announces only what no other
// node may announce.
func (v View) HoldsBack() bool { return v == Waiting || v == Isolated }

// State is what the machine remembers between two steps.
type State struct {
	// View is the view region as of the last Sync (a Poll does not move
	// it: the loop's last election is what was counted).
	View View
	// Joined: some sync saw another member. Until then being alone is
	// the start-up join, not an isolation, and a refuted death is the
	// previous process's on this node.
	Joined bool
	// MinoritySince is when the view became a minority; zero while it
	// holds a majority. Polls and syncs both move it.
	MinoritySince time.Time
	// CountedOut is when the cluster last counted this speaker out;
	// zero: never.
	CountedOut time.Time
	// HoldingBackSince is when the syncs began to hold back; zero while
	// they do not. Only syncs move it (a Poll may see the view healed
	// before the sync that ends the hold-back).
	HoldingBackSince time.Time
}

// MinIsolation is how long a hold-back must last to count this speaker
// out. A speaker's view also loses the others when another speaker, not
// it, is too slow to answer probes for a moment, and in a cluster of two
// the healthy one is then the minority by the tie-break: counting that
// out gave its addresses to the slow node (TestHelm on real nodes). A
// shorter hold-back is a blip: the speaker answered nothing meanwhile,
// and if the others did declare it dead, its refutation counts it out;
// the takeover check keeps two nodes from answering at once. Measured
// blips under load held a speaker back for 0.3–0.44 s; a cut the others
// act on lasts at least their lone suspicion time (1.8 s with herald's
// memberlist timers).
const MinIsolation = 2 * time.Second

// Event is what steps the machine.
type Event int

const (
	// Sync: the loop elects; every region steps.
	Sync Event = iota
	// Poll: the heartbeat asks whether this speaker holds back; only the
	// minority clock moves.
	Poll
	// Refuted: memberlist says this speaker refuted its death, declared
	// by Input.From.
	Refuted
)

// Input is one step's inputs.
type Input struct {
	Event Event
	Now   time.Time
	// Standing is the view (Sync, Poll).
	Standing Standing
	// RenewedOutside: a speaker outside the view renewed the Lease
	// within Window (Sync, Poll).
	RenewedOutside bool
	// From is the member that declared this speaker dead (Refuted).
	From string
	// Window is how long a fresh minority waits for the Lease; 0 turns
	// isolation off (a minority then always takes over).
	Window time.Duration
	// Hold is the recovery hold; 0 turns recovery off.
	Hold time.Duration
}

// Decision is what a step tells the speaker to do.
type Decision struct {
	// View is where the speaker stands after this step (for a Poll,
	// where it would stand).
	View View
	// HoldBack: announce only what no other node may announce.
	HoldBack bool
	// Recovering: rank this speaker after healthy nodes (published in
	// its metadata) for RecoveryLeft unless it is counted out again.
	Recovering   bool
	RecoveryLeft time.Duration
	// CountedOut: this step counted the speaker out.
	CountedOut bool
	// Ignored: a Refuted that concerns the previous process on this node
	// (its own leave, or a death refuted during the start-up join).
	Ignored bool
}

// Step is the machine: the state after in, and what to do. It is pure.
func Step(s State, in Input) (State, Decision) {
	switch in.Event {
	case Poll:
		var v View
		s.MinoritySince, v = standing(s.MinoritySince, in)
		return s, Decision{View: v, HoldBack: v.HoldsBack()}
	case Refuted:
		if in.From == in.Standing.Self || !s.Joined {
			return s, Decision{View: s.View, Ignored: true}
		}
		s = countOut(s, in)
		return s, recovery(s, in, Decision{View: s.View, CountedOut: true})
	}
	var v View
	s.MinoritySince, v = standing(s.MinoritySince, in)
	d := Decision{View: v, HoldBack: v.HoldsBack()}
	// Counted out until the sync that ends an isolation: the hold starts
	// then, if the hold-back lasted MinIsolation. A speaker still joining
	// is alone too, but the others never counted it out and moved
	// nothing away from it: a hold would only move addresses assigned
	// meanwhile to it once it ends.
	if v.HoldsBack() && s.HoldingBackSince.IsZero() {
		s.HoldingBackSince = in.Now
	}
	if !s.HoldingBackSince.IsZero() && in.Now.Sub(s.HoldingBackSince) >= MinIsolation && s.Joined {
		s = countOut(s, in)
		d.CountedOut = true
	}
	if !v.HoldsBack() {
		s.HoldingBackSince = time.Time{}
	}
	if !in.Standing.Lonely() {
		s.Joined = true
	}
	s.View = v
	return s, recovery(s, in, d)
}

// standing steps the view region's clock and names where the view
// stands: a minority waits for the window, then the Lease decides.
func standing(since time.Time, in Input) (time.Time, View) {
	if !in.Standing.Minority() {
		return time.Time{}, Majority
	}
	if since.IsZero() {
		since = in.Now
	}
	switch {
	case in.Now.Sub(since) < in.Window:
		return since, Waiting
	case in.RenewedOutside:
		return since, Isolated
	}
	return since, Survivor
}

func countOut(s State, in Input) State {
	if in.Hold > 0 {
		s.CountedOut = in.Now
	}
	return s
}

// recovery fills in the recovery region: recovering for Hold after the
// last time the speaker was counted out.
func recovery(s State, in Input, d Decision) Decision {
	if in.Hold <= 0 || s.CountedOut.IsZero() {
		return d
	}
	if left := in.Hold - in.Now.Sub(s.CountedOut); left > 0 {
		d.Recovering, d.RecoveryLeft = true, left
	}
	return d
}
