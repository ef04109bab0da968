package partition

import (
	"maps"
	"slices"
	"sync"
	"time"

	l2plan "github.com/herald-lb/herald/speaker/layer2/plan"
)

// Config sets a Guard up.
type Config struct {
	// Self is this speaker's name.
	Self string
	// Window is how recent another speaker's Lease renewal must be to
	// prove it alive, and how long a fresh minority waits; 0: never
	// isolated.
	Window time.Duration
	// RecoveryHold is how long a speaker counted out ranks after
	// healthy nodes; 0: never recovering.
	RecoveryHold time.Duration
	// RestartHold is how long a member that left restarting in place
	// stays elected; 0: its addresses move at once.
	RestartHold time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Guard holds the machine's state and what feeds it, for the three
// goroutines that step it: the speaker's loop (Sync), the heartbeat
// (Observe, Isolated, ShouldRenew) and memberlist's callbacks
// (MemberJoined, MemberLeft, Refuted). Every decision is Step's.
type Guard struct {
	cfg Config

	mu    sync.Mutex
	state State
	// renewed is when each other speaker's renewal was last seen: in a
	// partition both sides' lowest members renew, and only a renewal
	// from outside the view is evidence of the others.
	renewed map[string]time.Time
	// known are the speakers this one has seen live and that did not
	// leave gracefully since: the others a partition may hide.
	known map[string]bool
	// held are the members that left restarting in place, still elected
	// until their hold ends.
	held map[string]held
}

// held is a member that left restarting in place, elected as it was
// until until or until it joins again.
type held struct {
	member l2plan.Member
	until  time.Time
}

// New returns a Guard in the start state: not joined, a majority,
// never counted out.
func New(c Config) *Guard {
	if c.Now == nil {
		c.Now = time.Now
	}
	return &Guard{cfg: c, renewed: map[string]time.Time{}, known: map[string]bool{}, held: map[string]held{}}
}

// Self is this speaker's name.
func (g *Guard) Self() string { return g.cfg.Self }

// Window is the heartbeat window.
func (g *Guard) Window() time.Duration { return g.cfg.Window }

// RestartHold is how long a member restarting in place stays elected.
func (g *Guard) RestartHold() time.Duration { return g.cfg.RestartHold }

// Observe records a renewal of the Lease by holder at renewed. A renewal
// by this speaker is not evidence of anyone else.
func (g *Guard) Observe(holder string, renewed time.Time) {
	if holder == "" || holder == g.cfg.Self {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if renewed.After(g.renewed[holder]) {
		g.renewed[holder] = renewed
	}
}

// Isolated tells whether a speaker with standing s holds back (the
// machine's Poll): its view is a minority, and a speaker outside it
// renewed within the window or the view has been a minority for less
// than a window. A majority never is.
func (g *Guard) Isolated(s Standing) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	var d Decision
	g.state, d = Step(g.state, g.input(Poll, s))
	return d.HoldBack
}

// ShouldRenew tells whether this speaker renews the Lease: it is the
// lowest-named member of its view (first) and does not hold back. An
// isolated speaker never renews, so another minority cannot take its
// renewal for the rest of the cluster.
func (g *Guard) ShouldRenew(first bool, s Standing) bool {
	return first && !g.Isolated(s)
}

// Sync steps the machine for an election over the live members and
// returns the standing it used with the decision.
func (g *Guard) Sync(live []string) (Standing, Decision) {
	st := g.Standing(live)
	g.mu.Lock()
	defer g.mu.Unlock()
	var d Decision
	g.state, d = Step(g.state, g.input(Sync, st))
	return st, d
}

// Refuted steps the machine for a death of this speaker that from
// declared and this speaker refuted.
func (g *Guard) Refuted(from string) Decision {
	g.mu.Lock()
	defer g.mu.Unlock()
	in := g.input(Refuted, Standing{Self: g.cfg.Self})
	in.From = from
	var d Decision
	g.state, d = Step(g.state, in)
	return d
}

// CountedOutAt is when the cluster last counted this speaker out (zero:
// never), published so that speakers counted out together are peers.
func (g *Guard) CountedOutAt() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state.CountedOut
}

// Recovering tells whether this speaker recovers now, and for how long
// unless it is counted out again.
func (g *Guard) Recovering() (bool, time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	d := recovery(g.state, Input{Now: g.cfg.Now(), Hold: g.cfg.RecoveryHold}, Decision{})
	return d.Recovering, d.RecoveryLeft
}

// State is the machine's state (for tests and logs).
func (g *Guard) State() State {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state
}

// input is a step's input at the Guard's clock; g.mu is held.
func (g *Guard) input(ev Event, s Standing) Input {
	now := g.cfg.Now()
	in := Input{Event: ev, Now: now, Standing: s, Window: g.cfg.Window, Hold: g.cfg.RecoveryHold}
	for holder, at := range g.renewed {
		if now.Sub(at) < g.cfg.Window && s.Outside(holder) {
			in.RenewedOutside = true
		}
	}
	return in
}

// MemberJoined records a member seen joining as known.
func (g *Guard) MemberJoined(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.known[name] = true
}

// MemberLeft records a graceful leave of name: gone, not hidden behind
// a partition.
func (g *Guard) MemberLeft(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.known, name)
}

// HoldRestarting keeps m, which left restarting in place, elected for
// RestartHold (true); never with no hold, nor this speaker itself.
func (g *Guard) HoldRestarting(m l2plan.Member) bool {
	if g.cfg.RestartHold <= 0 || m.Name == g.cfg.Self {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held[m.Name] = held{member: m, until: g.cfg.Now().Add(g.cfg.RestartHold)}
	return true
}

// Standing records the live members as known and returns this
// speaker's standing; safe from any goroutine.
func (g *Guard) Standing(live []string) Standing {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := Standing{Self: g.cfg.Self, Joined: g.state.Joined}
	g.known[g.cfg.Self] = true
	liveNames := map[string]bool{}
	for _, m := range live {
		st.Live = append(st.Live, m)
		g.known[m] = true
		liveNames[m] = true
	}
	st.Known = slices.Sorted(maps.Keys(g.known))
	now := g.cfg.Now()
	for _, name := range slices.Sorted(maps.Keys(g.held)) {
		if !liveNames[name] && now.Before(g.held[name].until) {
			st.Held = append(st.Held, name)
		}
	}
	return st
}

// ForgetRemoved drops the known speakers whose Node was deleted: a node
// removed from the cluster hides behind no partition. No Nodes (none
// read yet) keeps what is known.
func (g *Guard) ForgetRemoved(nodes []string) {
	if len(nodes) == 0 {
		return
	}
	exists := map[string]bool{}
	for _, n := range nodes {
		exists[n] = true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for n := range g.known {
		if !exists[n] && n != g.cfg.Self {
			delete(g.known, n)
		}
	}
}

// Held returns the members held for their restart that are not live,
// sorted, as election candidates; holds that ended (expired) or whose
// member is back (back) are dropped.
func (g *Guard) Held(live map[string]bool) (members []l2plan.Member, back, expired []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.cfg.Now()
	for _, name := range slices.Sorted(maps.Keys(g.held)) {
		h := g.held[name]
		switch {
		case live[name]:
			delete(g.held, name)
			back = append(back, name)
		case !now.Before(h.until):
			delete(g.held, name)
			expired = append(expired, name)
		default:
			members = append(members, h.member)
		}
	}
	return members, back, expired
}
