package speaker

import (
	"time"

	bgpplan "github.com/herald-lb/herald/speaker/bgp/plan"
	"github.com/herald-lb/herald/speaker/view"
)

// DefaultBGPDrainWait is how long a drained node advertises its routes
// with GRACEFUL_SHUTDOWN before it withdraws them. The router next to
// the node moves traffic to the other nodes' paths within milliseconds
// of the UPDATE; the rest is for routers behind it (route reflectors, a
// second tier) to hear of the change and recompute, which takes
// seconds, not minutes, in the networks herald serves. Waiting longer
// costs only time: the node still forwards what reaches it meanwhile.
const DefaultBGPDrainWait = 10 * time.Second

// drainState is this node's drain as the loop follows it; owned by the
// loop except published, which the metadata publisher writes.
type drainState struct {
	// wanted: the Node's mark, or the last valid one when it has a value
	// herald does not read.
	wanted bool
	// since is when wanted last became true, for the BGP phases.
	since time.Time
	// timer syncs when the BGP graceful shutdown ends.
	timer *time.Timer
}

// readDrain follows this node's drain mark in the Nodes: a bad value is
// logged (naming the node and the annotation) and changes nothing, and
// so does a missing Node (not read yet, or deleted under a running
// speaker). Owned by the loop.
func (s *Speaker) readDrain(nodes []view.Node, now time.Time) {
	var own *view.Node
	for i := range nodes {
		if nodes[i].Name == s.d.Node {
			own = &nodes[i]
		}
	}
	if own == nil {
		return
	}
	if own.DrainErr != nil {
		s.logs.once("drain/mark", own.DrainErr.Error(), func() {
			s.d.Log.Error("drain mark not read; keeping this node's drain state as it was", "err", own.DrainErr, "drained", s.drain.wanted)
		})
		return
	}
	s.logs.forget("drain/mark")
	if own.Drained == s.drain.wanted {
		return
	}
	s.drain.wanted = own.Drained
	if own.Drained {
		s.drain.since = now
		s.d.Log.Warn("drained (herald drain): handing this node's layer-2 addresses over to the other nodes, and moving its BGP routes away (GRACEFUL_SHUTDOWN, then withdrawal)",
			"bgpWait", s.d.BGPDrainWait)
		return
	}
	s.drain.since = time.Time{}
	if s.drain.timer != nil {
		s.drain.timer.Stop()
	}
	s.d.Log.Info("drain undone (herald drain --undo): this node is a candidate again and advertises its routes normally")
}

// bgpDrainPhase is where the BGP side of the drain is at now, arming a
// sync for the end of the graceful shutdown. Owned by the loop.
func (s *Speaker) bgpDrainPhase(now time.Time) bgpplan.DrainPhase {
	if !s.drain.wanted {
		return bgpplan.NotDrained
	}
	left := s.drain.since.Add(s.d.BGPDrainWait).Sub(now)
	if left <= 0 {
		return bgpplan.DrainWithdrawn
	}
	if s.drain.timer == nil {
		s.drain.timer = time.AfterFunc(left, s.Trigger)
	} else {
		s.drain.timer.Reset(left)
	}
	return bgpplan.DrainShutdown
}
