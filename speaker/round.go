package speaker

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/herald-lb/herald/config"
	l2plan "github.com/herald-lb/herald/speaker/layer2/plan"
	"github.com/herald-lb/herald/speaker/members"
	"github.com/herald-lb/herald/speaker/partition"
	"github.com/herald-lb/herald/speaker/view"
)

// One round, in order: the snapshot and this node's interfaces; partition
// safety and the metadata it changes; the election's members; each
// protocol; the status of what they announce; the sweep of departed
// speakers' objects.

// Sync runs one round on the current inputs: partition safety first,
// then every protocol, then the status of what they announce.
func (s *Speaker) Sync() {
	start := time.Now()
	snap := s.d.Source.Snapshot()
	s.readDrain(snap.Nodes, start)
	s.listInterfaces(snap)
	r := s.round(snap, start)
	var anns []view.Announcement
	var summary *view.NodeSummary
	for _, p := range s.protocols {
		res := p.sync(r)
		anns = append(anns, res.anns...)
		if res.node != nil {
			summary = res.node
		}
	}
	s.d.Status.Set(anns)
	s.d.Status.SetNode(summary)
	s.sweep(r.present)
	s.d.Metrics.observeRound(r)
	s.loop.lastSync.Store(time.Now().UnixNano())
	if !s.loop.ready.Load() {
		s.loop.ready.Store(true)
		st := s.l2.state
		s.d.Log.Info("first sync done", "announcing", len(st.Announced()), "ips", len(st.IPs), "members", r.live, "took", time.Since(start).Round(time.Microsecond))
	}
}

// listInterfaces selects the interfaces this node announces on.
func (s *Speaker) listInterfaces(snap Snapshot) {
	links, err := s.d.Links.List()
	if err != nil {
		// Keep the last known interfaces: announcing on them is better
		// than dropping every IP over a failed netlink dump.
		s.d.Log.Error("listing interfaces; keeping the last known", "err", err)
		return
	}
	s.node.ifs = SelectInterfaces(links, snap.PodCIDRs, namedInterfaces(snap.Config))
}

// round steps partition safety and gathers what every protocol reads:
// the members with this node's fresh metadata, whether it holds back,
// and the addresses its proxy has not programmed yet.
func (s *Speaker) round(snap Snapshot, now time.Time) *round {
	meta, dropped := fitMeta(s.node.ifs.Meta())
	if len(dropped) > 0 {
		s.logs.once("meta-dropped", strings.Join(dropped, ","), func() {
			s.d.Log.Warn("too many interfaces for the memberlist metadata; these are not announced on", "interfaces", dropped)
		})
	}
	live := s.cluster.Members()
	s.partition.ForgetRemoved(nodeNames(snap.Nodes))
	standing, dec := s.partition.Sync(names(live))
	meta.Recovering = s.recovering(dec)
	// Truncated as the metadata carries it, so the election reads this
	// node's own count-out as the others do.
	meta.CountedOutAt = s.partition.CountedOutAt().Truncate(time.Millisecond)
	meta.Drained = s.drain.wanted
	s.publishIfChanged(meta)
	releasing, all := releasingMembers(live, s.d.Node)
	// Leaving recovery or a drain, this node gains addresses. When every
	// other member releases what it loses (speaker/layer2/release), this
	// node claims them at once and answers each when its holder says it
	// stopped; otherwise it claims them only once the others can know
	// (its metadata is published), so that they stop first. Into a drain
	// it keeps answering until the others can know, either way.
	recovering := meta.Recovering || (!all && s.node.publishedRecovering.Load())
	drained := s.node.publishedDrained.Load()
	if all {
		drained = drained && s.drain.wanted
	}
	r := &round{
		now: now, snap: snap, standing: standing, live: len(live),
		releasing:    releasing,
		holdBack:     dec.HoldBack,
		recovering:   recovering,
		drained:      drained,
		drainMarked:  s.drain.wanted,
		meta:         meta,
		unprogrammed: s.proxyWait.Unprogrammed(snap.Services, now),
		bgpDrain:     s.bgpDrainPhase(now),
	}
	r.members, r.present = s.members(live, r)
	// One speaker publishes the reasons every node computes alike: the
	// first live member by name, as for sweeping, unless isolated (the
	// others then have a reporter of their own).
	r.liveNames = map[string]bool{}
	for _, m := range live {
		r.liveNames[m.Name] = true
	}
	r.reporter = !r.holdBack && firstLive(r.liveNames) == s.d.Node
	if r.holdBack != s.l2.state.Isolated {
		if r.holdBack {
			s.d.Log.Warn("isolated: this speaker's memberlist view is a minority of the speakers it knows of, and the API shows speakers outside it alive; announcing only addresses no other node may announce (check that the memberlist port, TCP and UDP, is open between the nodes and that every speaker has the key)",
				"view", len(standing.Live), "known", len(standing.Known), "unreachable", unreachable(standing), "phase", dec.View.String())
		} else if s.loop.ready.Load() {
			s.d.Log.Info("no longer isolated", "phase", dec.View.String())
		}
	}
	return r
}

// releasingMembers are the live members other than self that release
// what they lose, and whether every one of them does.
func releasingMembers(live []members.Member, self string) (map[string]bool, bool) {
	out := map[string]bool{}
	all := true
	for _, m := range live {
		if m.Name == self {
			continue
		}
		if m.Meta.Releases {
			out[m.Name] = true
		} else {
			all = false
		}
	}
	return out, all
}

// publishIfChanged hands changed metadata to the publisher.
func (s *Speaker) publishIfChanged(meta members.Meta) {
	ifsChanged := !s.node.metaSet || !slices.Equal(meta.Interfaces, s.node.meta.Interfaces) || !slices.Equal(meta.DownInterfaces, s.node.meta.DownInterfaces)
	if ifsChanged {
		s.d.Log.Info("interfaces", "announceable", meta.Interfaces, "down", meta.DownInterfaces, "skipped", s.node.ifs.Skipped)
	}
	if ifsChanged || meta.Recovering != s.node.meta.Recovering || !meta.CountedOutAt.Equal(s.node.meta.CountedOutAt) || meta.Drained != s.node.meta.Drained || meta.Releases != s.node.meta.Releases {
		s.node.meta, s.node.metaSet = meta, true
		s.setMeta(meta)
	}
}

// members are the election's candidates: the live members (this node
// with its own fresher view) and those held for a restart in place;
// present are their names, whose status objects stay.
func (s *Speaker) members(live []members.Member, r *round) ([]l2plan.Member, map[string]bool) {
	var out []l2plan.Member
	present := map[string]bool{}
	own := l2plan.Member{Name: s.d.Node, Interfaces: r.meta.Interfaces, DownInterfaces: r.meta.DownInterfaces, Recovering: r.recovering, CountedOutAt: r.meta.CountedOutAt, Drained: r.drained, HoldsTogether: true}
	for _, m := range live {
		present[m.Name] = true
		if m.Name == s.d.Node {
			out = append(out, own)
			continue
		}
		// Releases marks the speakers of this version, whose election
		// also holds nodes counted out together.
		out = append(out, l2plan.Member{Name: m.Name, Interfaces: m.Meta.Interfaces, DownInterfaces: m.Meta.DownInterfaces, Recovering: m.Meta.Recovering, CountedOutAt: m.Meta.CountedOutAt, Drained: m.Meta.Drained, HoldsTogether: m.Meta.Releases})
	}
	if !present[s.d.Node] {
		out = append(out, own)
	}
	liveOnly := maps.Clone(present)
	for _, h := range s.heldMembers(liveOnly) {
		out = append(out, h)
		present[h.Name] = true
	}
	return out, present
}

// recovering logs a change of the recovery region and arms a sync for
// when recovery ends. Owned by the loop.
func (s *Speaker) recovering(d partition.Decision) bool {
	switch {
	case d.Recovering && !s.node.meta.Recovering:
		s.d.Log.Warn("recovering: the cluster counted this speaker out (memberlist declared it dead, or it was isolated); other nodes keep its addresses until it stays in for the hold", "for", d.RecoveryLeft.Round(time.Millisecond))
	case !d.Recovering && s.node.meta.Recovering:
		s.d.Log.Info("recovered: this speaker claims addresses again")
	}
	if d.Recovering {
		if s.node.recoveryTimer == nil {
			s.node.recoveryTimer = time.AfterFunc(d.RecoveryLeft+10*time.Millisecond, s.Trigger)
		} else {
			s.node.recoveryTimer.Reset(d.RecoveryLeft + 10*time.Millisecond)
		}
	}
	return d.Recovering
}

// unreachable are the known speakers outside the view.
func unreachable(st partition.Standing) []string {
	var out []string
	for _, n := range st.Known {
		if st.Outside(n) {
			out = append(out, n)
		}
	}
	return out
}

func names(ms []members.Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}

func nodeNames(nodes []view.Node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Name
	}
	return out
}

// namedInterfaces are the interfaces some L2Advertisement names.
func namedInterfaces(c *config.Config) map[string]bool {
	out := map[string]bool{}
	if c == nil {
		return out
	}
	for _, ad := range c.L2Advertisements {
		if ad == nil {
			continue
		}
		for _, i := range ad.Interfaces {
			out[i] = true
		}
	}
	return out
}

// sweep deletes the ServiceAnnouncements of nodes whose speaker is not in
// the cluster (it died without cleaning up), once per departure. Only
// the first live member by name does it, so N speakers do not race.
func (s *Speaker) sweep(live map[string]bool) {
	for n := range s.swept {
		if live[n] {
			delete(s.swept, n)
		}
	}
	if firstLive(live) != s.d.Node {
		return
	}
	for _, n := range s.d.Status.Nodes() {
		if n == s.d.Node || live[n] || s.swept[n] {
			continue
		}
		s.swept[n] = true
		s.d.Log.Info("removing the ServiceAnnouncements of a speaker that left", "node", n)
		s.d.Status.Sweep(n)
	}
}

// firstLive is the first live member by name, "" when there is none.
func firstLive(live map[string]bool) string {
	first := ""
	for n := range live {
		if first == "" || n < first {
			first = n
		}
	}
	return first
}
