package speaker

import (
	"net/netip"
	"time"

	bgpplan "github.com/herald-lb/herald/speaker/bgp/plan"
	l2plan "github.com/herald-lb/herald/speaker/layer2/plan"
	"github.com/herald-lb/herald/speaker/members"
	"github.com/herald-lb/herald/speaker/partition"
	"github.com/herald-lb/herald/speaker/view"
)

// protocol is one way of making addresses reachable: layer 2 (ARP/NDP)
// or BGP. Every sync runs each one on the same round, in order, and
// each returns what it announces; neither knows of the other.
type protocol interface {
	sync(r *round) result
}

// result is what a protocol announces, for the status writer.
type result struct {
	// anns are ServiceAnnouncements.
	anns []view.Announcement
	// node is this node's NodeAnnouncement; nil: none from this protocol.
	node *view.NodeSummary
}

// round is one sync's inputs, shared by the protocols: the snapshot,
// where partition safety leaves this node, and the members it elects
// among. Built by Speaker.round; read-only for the protocols.
type round struct {
	now      time.Time
	snap     Snapshot
	standing partition.Standing
	// live counts the live members.
	live int
	// liveNames are the live members; present adds those held for a
	// restart in place; releasing are the live members other than this
	// node that say when they stop answering for an address
	// (members.Meta.Releases).
	liveNames, present, releasing map[string]bool
	// members are the layer-2 election's candidates.
	members []l2plan.Member
	// meta is this node's metadata as handed to memberlist.
	meta members.Meta
	// holdBack: announce only what no other node may (isolated).
	holdBack bool
	// recovering and drained are this node's flags as it counts them;
	// drainMarked is the Node's drain mark as read.
	recovering, drained, drainMarked bool
	// reporter: this node publishes the reasons every node computes.
	reporter bool
	// unprogrammed are the addresses waiting for this node's proxy.
	unprogrammed map[netip.Addr]bool
	// bgpDrain is where the BGP side of a drain is.
	bgpDrain bgpplan.DrainPhase
}

// env is what the protocols share with the loop: the collaborators, the
// once-per-change log (owned by the loop, as the protocols' syncs are)
// and the trigger of the next sync.
type env struct {
	d       *Deps
	logs    onceLog
	trigger func()
	// send sends a message to another member (members.Cluster.Send).
	send func(to string, msg []byte) error
}
