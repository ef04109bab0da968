package partition

import (
	"testing"
	"time"
)

// TestStep covers every transition of the machine: each region, each
// event, each guard on an arrow.
func TestStep(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const w, hold = 3 * time.Second, 30 * time.Second
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	all := []string{"node1", "node2", "node3", "node4", "node5"}
	// Views of node1 among five known speakers.
	whole := Standing{Self: "node1", Live: all, Known: all, Joined: true}
	minority := Standing{Self: "node1", Live: []string{"node1", "node2"}, Known: all, Joined: true}
	alone := Standing{Self: "node1", Known: all, Joined: true}
	starting := Standing{Self: "node1"} // alone, nobody known, not joined
	sync := func(now time.Time, s Standing, renewed bool) Input {
		return Input{Event: Sync, Now: now, Standing: s, RenewedOutside: renewed, Window: w, Hold: hold}
	}
	joined := State{View: Majority, Joined: true}

	for _, tc := range []struct {
		name string
		from State
		in   Input
		to   State
		want Decision
	}{
		// The view region.
		{"majority stays", joined, sync(t0, whole, false),
			joined, Decision{View: Majority}},
		{"majority → waiting: the view became a minority; holding back from now on, not counted out yet", joined, sync(t0, minority, true),
			State{View: Waiting, Joined: true, MinoritySince: t0, HoldingBackSince: t0},
			Decision{View: Waiting, HoldBack: true}},
		{"waiting, held back just under MinIsolation: a blip so far, not counted out",
			State{View: Waiting, Joined: true, MinoritySince: t0, HoldingBackSince: t0}, sync(at(MinIsolation-time.Millisecond), minority, false),
			State{View: Waiting, Joined: true, MinoritySince: t0, HoldingBackSince: t0},
			Decision{View: Waiting, HoldBack: true}},
		{"waiting stays within the window, even without renewals; held back for MinIsolation: counted out",
			State{View: Waiting, Joined: true, MinoritySince: t0, HoldingBackSince: t0}, sync(at(w-time.Millisecond), minority, false),
			State{View: Waiting, Joined: true, MinoritySince: t0, HoldingBackSince: t0, CountedOut: at(w - time.Millisecond)},
			Decision{View: Waiting, HoldBack: true, CountedOut: true, Recovering: true, RecoveryLeft: hold}},
		{"waiting → isolated: the window passed and a speaker outside renews",
			State{View: Waiting, Joined: true, MinoritySince: t0, HoldingBackSince: t0}, sync(at(w), minority, true),
			State{View: Isolated, Joined: true, MinoritySince: t0, HoldingBackSince: t0, CountedOut: at(w)},
			Decision{View: Isolated, HoldBack: true, CountedOut: true, Recovering: true, RecoveryLeft: hold}},
		{"waiting → survivor: the window passed without a renewal from outside; the sync ending the hold-back counts",
			State{View: Waiting, Joined: true, MinoritySince: t0, HoldingBackSince: t0}, sync(at(w), alone, false),
			State{View: Survivor, Joined: true, MinoritySince: t0, CountedOut: at(w)},
			Decision{View: Survivor, CountedOut: true, Recovering: true, RecoveryLeft: hold}},
		{"isolated stays while the others renew",
			State{View: Isolated, Joined: true, MinoritySince: t0, HoldingBackSince: t0}, sync(at(time.Minute), minority, true),
			State{View: Isolated, Joined: true, MinoritySince: t0, HoldingBackSince: t0, CountedOut: at(time.Minute)},
			Decision{View: Isolated, HoldBack: true, CountedOut: true, Recovering: true, RecoveryLeft: hold}},
		{"isolated → survivor: the renewals from outside stopped",
			State{View: Isolated, Joined: true, MinoritySince: t0, HoldingBackSince: t0, CountedOut: at(time.Minute)}, sync(at(time.Minute+time.Second), minority, false),
			State{View: Survivor, Joined: true, MinoritySince: t0, CountedOut: at(time.Minute + time.Second)},
			Decision{View: Survivor, CountedOut: true, Recovering: true, RecoveryLeft: hold}},
		{"survivor stays, counted out no more",
			State{View: Survivor, Joined: true, MinoritySince: t0, CountedOut: at(w)}, sync(at(w+10*time.Second), alone, false),
			State{View: Survivor, Joined: true, MinoritySince: t0, CountedOut: at(w)},
			Decision{View: Survivor, Recovering: true, RecoveryLeft: hold - 10*time.Second}},
		{"survivor → isolated: a speaker outside renews again; holding back from now on",
			State{View: Survivor, Joined: true, MinoritySince: t0}, sync(at(time.Minute), alone, true),
			State{View: Isolated, Joined: true, MinoritySince: t0, HoldingBackSince: at(time.Minute)},
			Decision{View: Isolated, HoldBack: true}},
		{"waiting → majority: healed after a hold-back shorter than MinIsolation: a blip, not counted out",
			State{View: Waiting, Joined: true, MinoritySince: t0, HoldingBackSince: t0}, sync(at(MinIsolation-time.Millisecond), whole, true),
			State{View: Majority, Joined: true},
			Decision{View: Majority}},
		{"waiting → majority: healed within the window after MinIsolation; the hold starts now",
			State{View: Waiting, Joined: true, MinoritySince: t0, HoldingBackSince: t0}, sync(at(MinIsolation), whole, true),
			State{View: Majority, Joined: true, CountedOut: at(MinIsolation)},
			Decision{View: Majority, CountedOut: true, Recovering: true, RecoveryLeft: hold}},
		{"isolated → majority: healed; the hold starts now",
			State{View: Isolated, Joined: true, MinoritySince: t0, HoldingBackSince: t0, CountedOut: at(time.Minute)}, sync(at(2*time.Minute), whole, false),
			State{View: Majority, Joined: true, CountedOut: at(2 * time.Minute)},
			Decision{View: Majority, CountedOut: true, Recovering: true, RecoveryLeft: hold}},
		{"survivor → majority: the others came back; not counted out",
			State{View: Survivor, Joined: true, MinoritySince: t0}, sync(at(time.Minute), whole, false),
			State{View: Majority, Joined: true},
			Decision{View: Majority}},
		{"isolation off (window 0): a minority takes over at once",
			joined, Input{Event: Sync, Now: t0, Standing: minority, RenewedOutside: false, Hold: hold},
			State{View: Survivor, Joined: true, MinoritySince: t0},
			Decision{View: Survivor}},

		// Joining: alone at the start is no isolation that counts.
		{"starting alone waits for the window, counted out by nobody",
			State{}, sync(t0, starting, false),
			State{View: Waiting, MinoritySince: t0, HoldingBackSince: t0},
			Decision{View: Waiting, HoldBack: true}},
		{"starting: the first sync seeing a member joins, the hold-back ending counts nothing",
			State{View: Waiting, MinoritySince: t0, HoldingBackSince: t0}, sync(at(time.Minute), Standing{Self: "node1", Live: all}, false),
			State{View: Majority, Joined: true},
			Decision{View: Majority}},
		{"alone after joining, with nobody else known: the whole cluster left gracefully",
			joined, sync(t0, Standing{Self: "node1", Joined: true}, false),
			joined, Decision{View: Majority}},

		// The recovery region.
		{"recovering until the hold is over",
			State{View: Majority, Joined: true, CountedOut: t0}, sync(at(hold-time.Second), whole, false),
			State{View: Majority, Joined: true, CountedOut: t0},
			Decision{View: Majority, Recovering: true, RecoveryLeft: time.Second}},
		{"recovering → healthy: the hold is over",
			State{View: Majority, Joined: true, CountedOut: t0}, sync(at(hold), whole, false),
			State{View: Majority, Joined: true, CountedOut: t0},
			Decision{View: Majority}},
		{"recovery off (hold 0): isolated, never recovering",
			State{View: Waiting, Joined: true, MinoritySince: t0, HoldingBackSince: t0}, Input{Event: Sync, Now: at(MinIsolation), Standing: minority, RenewedOutside: true, Window: w},
			State{View: Waiting, Joined: true, MinoritySince: t0, HoldingBackSince: t0},
			Decision{View: Waiting, HoldBack: true, CountedOut: true}},

		// Refuted deaths.
		{"refuted after joining: counted out",
			joined, Input{Event: Refuted, Now: t0, Standing: Standing{Self: "node1"}, From: "node2", Hold: hold},
			State{View: Majority, Joined: true, CountedOut: t0},
			Decision{View: Majority, CountedOut: true, Recovering: true, RecoveryLeft: hold}},
		{"refuted its own leave: the previous process's",
			joined, Input{Event: Refuted, Now: t0, Standing: Standing{Self: "node1"}, From: "node1", Hold: hold},
			joined, Decision{View: Majority, Ignored: true}},
		{"refuted during the start-up join: the previous process's",
			State{}, Input{Event: Refuted, Now: t0, Standing: Standing{Self: "node1"}, From: "node2", Hold: hold},
			State{}, Decision{View: Majority, Ignored: true}},

		// Polls move only the minority clock.
		{"poll of a fresh minority starts the clock, the view stays",
			joined, Input{Event: Poll, Now: t0, Standing: minority, Window: w, Hold: hold},
			State{View: Majority, Joined: true, MinoritySince: t0},
			Decision{View: Waiting, HoldBack: true}},
		{"poll of a majority stops the minority clock, not the syncs' hold-back",
			State{View: Isolated, Joined: true, MinoritySince: t0, HoldingBackSince: t0}, Input{Event: Poll, Now: at(time.Minute), Standing: whole, Window: w, Hold: hold},
			State{View: Isolated, Joined: true, HoldingBackSince: t0},
			Decision{View: Majority}},
		{"the sync after that poll still counts the isolation out",
			State{View: Isolated, Joined: true, HoldingBackSince: t0}, sync(at(time.Minute), whole, false),
			State{View: Majority, Joined: true, CountedOut: at(time.Minute)},
			Decision{View: Majority, CountedOut: true, Recovering: true, RecoveryLeft: hold}},
		{"poll past the window with a renewal from outside",
			State{View: Waiting, Joined: true, MinoritySince: t0}, Input{Event: Poll, Now: at(w), Standing: minority, RenewedOutside: true, Window: w, Hold: hold},
			State{View: Waiting, Joined: true, MinoritySince: t0},
			Decision{View: Isolated, HoldBack: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			to, got := Step(tc.from, tc.in)
			if to != tc.to {
				t.Errorf("state %+v, want %+v", to, tc.to)
			}
			if got != tc.want {
				t.Errorf("decision %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestStepIsPure: the same inputs always give the same outputs, and the
// state passed in is not changed.
func TestStepIsPure(t *testing.T) {
	s := State{View: Waiting, Joined: true, MinoritySince: time.Unix(1, 0)}
	in := Input{Event: Sync, Now: time.Unix(10, 0), Standing: Alone("node1"), Window: time.Second, Hold: time.Minute}
	a, da := Step(s, in)
	b, db := Step(s, in)
	if a != b || da != db || s.View != Waiting {
		t.Errorf("Step is not pure: %+v %+v / %+v %+v", a, da, b, db)
	}
}
