package speaker

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/herald-lb/herald/speaker/handover"
	"github.com/herald-lb/herald/speaker/layer2"
	l2plan "github.com/herald-lb/herald/speaker/layer2/plan"
	"github.com/herald-lb/herald/speaker/layer2/release"
	"github.com/herald-lb/herald/speaker/partition"
)

// layer2Protocol answers ARP and NDP for the addresses this node wins
// in the layer-2 election: one responder per announceable interface,
// gratuitous announcements for what it gains, events and logs.
type layer2Protocol struct {
	*env
	takeovers  *partition.Takeovers
	responders *responderSet
	ann        layer2.Announcements
	// state is the last election result; owned by the loop.
	state l2plan.State
	// ifs are this node's interfaces, as the loop last listed them.
	ifs *Interfaces
	// rejoined is set when a member joined or died: every held address
	// is announced again at the next sync.
	rejoined *atomic.Bool
	// handover follows the addresses taken over from live members;
	// handed are the entries last put in the kernel (handedOnce: at
	// least once, which also clears a dead process's); handTimer
	// syncs again when one expires.
	handover   *handover.Tracker
	handed     []handover.Entry
	handedOnce bool
	handTimer  *time.Timer
	// releases are the addresses won from a live member that wait for
	// its word that it stopped answering; relTimer syncs when the
	// earliest wait runs out.
	releases *release.Waits
	relTimer *time.Timer
	// others are the addresses this node handed over and answers for
	// with the new holder's MAC until that one answers itself;
	// othersTimer syncs when the first ends.
	others      map[netip.Addr]answeredFor
	othersTimer *time.Timer
}

// answeredFor is an address answered for its new holder.
type answeredFor struct {
	node  string
	macs  map[string]net.HardwareAddr // per interface
	until time.Time
}

// AnswerForHolder is how long a node that handed an address over answers
// for it with the new holder's MAC: longer than the new holder's longest
// wait for the release (release.MaxWait), after which it answers itself
// in any case.
const AnswerForHolder = release.MaxWait + time.Second

func newLayer2Protocol(e *env, tk *partition.Takeovers, ifs *Interfaces, rejoined *atomic.Bool) *layer2Protocol {
	p := &layer2Protocol{env: e, takeovers: tk, ifs: ifs, rejoined: rejoined, handover: handover.NewTracker(), releases: release.New(e.d.Node, e.d.TakeoverClock), others: map[netip.Addr]answeredFor{}}
	p.responders = &responderSet{env: e, ann: &p.ann, live: map[string]*responderEntry{}, retired: map[string]layer2.Stats{}}
	// A release is answered the moment it arrives; the sync it triggers
	// does the rest (the gratuitous burst, the status, the handover).
	p.releases.Notify(func(from string, ips map[netip.Addr][]string) {
		p.ann.Add(ips)
		p.responders.syncGroups()
		for a, ifaces := range ips {
			p.d.Log.Info("answering an address its former holder released", "ip", a, "from", from, "interfaces", ifaces)
		}
	})
	return p
}

func (p *layer2Protocol) sync(r *round) result {
	p.responders.sync(*p.ifs)
	in := l2plan.Input{
		Config:       r.snap.Config,
		Services:     r.snap.Services,
		Nodes:        r.snap.Nodes,
		Local:        l2plan.Local{Name: p.d.Node, Interfaces: r.meta.Interfaces, DownInterfaces: r.meta.DownInterfaces},
		Options:      p.d.Options,
		Members:      r.members,
		Isolated:     r.holdBack,
		Unprogrammed: r.unprogrammed,
		Contested:    p.takeovers.Contested(p.winners(), r.standing.Known, r.liveNames),
		Reporter:     r.reporter,
		Previous:     &p.state,
	}
	last := p.lastWinners()
	in.Awaiting = p.releases.Awaited(last, r.releasing)
	st := l2plan.Compute(in)
	p.takeovers.Start(contested(st), func(a netip.Addr) string { prev, _ := p.state.Lookup(a); return prev.Winner })
	p.settleReleases(st, last, r.releasing)
	p.answerForHolders(r, st)
	ch := l2plan.Diff(p.state, st)
	p.answer(st)
	p.responders.syncGroups()
	p.logChanges(st, ch) // as the answers changed, before the releases go out
	// Once this node no longer answers for them, it says so to their new
	// winners, which wait for that.
	p.release(st, r.releasing)
	// After this node answers ARP and NDP for what it gained (so that no
	// request meets silence while the rules go in), before the
	// gratuitous announcements that move the clients already talking to
	// the former holder: their connections must find their way there.
	p.syncHandover(r, st, p.handoverBefore(in))
	if p.rejoined.Swap(false) {
		p.announceAll(st)
	} else {
		for _, g := range ch.Gained {
			for _, i := range g.Interfaces {
				p.responders.gratuitous(i, g.Addr)
			}
		}
	}
	p.events(ch)
	p.d.Metrics.observeL2(st, ch)
	p.state = st
	return result{anns: slices.Clone(st.Announcements)}
}

// winners are the last election's winners, for the takeovers.
func (p *layer2Protocol) winners() []partition.Winner {
	out := make([]partition.Winner, 0, len(p.state.IPs))
	for _, ip := range p.state.IPs {
		out = append(out, partition.Winner{Addr: ip.Addr, Node: ip.Winner})
	}
	return out
}

// answer makes the responders answer for what st announces, and for the
// addresses released since the election that computed st: answered
// already on arrival (Notify), they stay answered until the next
// election, which knows of their release.
func (p *layer2Protocol) answer(st l2plan.State) {
	p.releases.Do(func(released map[netip.Addr][]string) {
		ann := st.Announced()
		for a, ifaces := range released {
			if _, ok := ann[a]; !ok {
				ann[a] = ifaces
			}
		}
		others := make(map[netip.Addr]map[string]net.HardwareAddr, len(p.others))
		for a, o := range p.others {
			others[a] = o.macs
		}
		p.ann.SetBoth(ann, others)
	})
}

// answerForHolders follows the addresses this node handed over to a live
// member that releases: from the moment it stops answering for one until
// the new holder surely answers itself, it answers requests for it with
// the new holder's MAC, which it finds in its neighbour table (that
// node's InternalIPs on the interface). A request meets silence neither
// while the release travels nor while the new holder takes it in, and
// every answer names the new holder. Without a neighbour entry it just
// stops, as before.
func (p *layer2Protocol) answerForHolders(r *round, st l2plan.State) {
	now := time.Now()
	for a, o := range p.others {
		ip, _ := st.Lookup(a)
		if ip.Winner != o.node || ip.Announced() || !r.releasing[o.node] || !now.Before(o.until) {
			delete(p.others, a)
		}
	}
	if p.d.Neighbors != nil {
		addrs := make(map[string][]netip.Addr, len(r.snap.Nodes))
		for _, n := range r.snap.Nodes {
			addrs[n.Name] = n.Addresses
		}
		tables := map[string]map[netip.Addr]net.HardwareAddr{} // one dump per interface
		for _, old := range p.state.IPs {
			ip, ok := st.Lookup(old.Addr)
			if !old.Announced() || !ok || ip.Announced() || ip.Winner == p.d.Node || !r.releasing[ip.Winner] {
				continue
			}
			macs := map[string]net.HardwareAddr{}
			for _, i := range old.Interfaces {
				table, read := tables[i]
				if !read {
					var err error
					if table, err = p.d.Neighbors.Confirmed(i); err != nil {
						p.d.Log.Warn("reading the neighbour table for the new holder's MAC", "interface", i, "err", err)
					}
					tables[i] = table
				}
				for _, a := range addrs[ip.Winner] {
					if mac, ok := table[a.Unmap()]; ok {
						macs[i] = mac
						break
					}
				}
			}
			if len(macs) == 0 {
				continue
			}
			p.others[old.Addr] = answeredFor{node: ip.Winner, macs: macs, until: now.Add(AnswerForHolder)}
			p.d.Log.Info("answering for the new holder of an address with its MAC until it answers itself", "ip", old.Addr, "node", ip.Winner, "macs", fmt.Sprint(macs), "for", AnswerForHolder)
		}
	}
	if p.othersTimer != nil {
		p.othersTimer.Stop()
		p.othersTimer = nil
	}
	var next time.Time
	for _, o := range p.others {
		if next.IsZero() || o.until.Before(next) {
			next = o.until
		}
	}
	if !next.IsZero() {
		p.othersTimer = time.AfterFunc(time.Until(next)+10*time.Millisecond, p.trigger)
	}
}

// lastWinners are the last election's winners by address; none before
// this speaker's first election: a speaker that just started answers
// what it wins at once, as the holders it would wait for may be the
// previous process on this node or members keeping its addresses for a
// restart in place, which answer nothing.
func (p *layer2Protocol) lastWinners() map[netip.Addr]string {
	if p.state.Node == "" {
		return nil
	}
	out := make(map[netip.Addr]string, len(p.state.IPs))
	for _, ip := range p.state.IPs {
		out[ip.Addr] = ip.Winner
	}
	return out
}

// settleReleases starts and ends the waits for former holders' releases
// after an election, logs and counts the ended ones, and arms a sync for
// when the earliest wait runs out.
func (p *layer2Protocol) settleReleases(st l2plan.State, last map[netip.Addr]string, releasing map[string]bool) {
	held := map[netip.Addr][]string{}
	answered := map[netip.Addr]bool{}
	for _, ip := range st.IPs {
		switch {
		case ip.Reason == l2plan.ReasonAwaiting:
			held[ip.Addr] = ip.Checking
		case ip.Announced():
			answered[ip.Addr] = true
		}
	}
	ended, next := p.releases.Settle(release.Round{Held: held, Answered: answered, Releasing: releasing,
		Last: func(a netip.Addr) string { return last[a] },
	})
	for _, e := range ended {
		p.d.Metrics.handoffs.WithLabelValues(string(e.Outcome)).Inc()
		switch {
		case e.Outcome == release.Released && e.Waited == 0:
			// Released before this node decided: answered now, by this
			// election, with no wait (and no answer on arrival to log).
			p.d.Log.Info("answering an address its former holder released", "ip", e.Addr, "from", e.From, "interfaces", st.Announced()[e.Addr])
		case e.Outcome == release.Released:
			p.d.Log.Debug("waited for the former holder's release", "ip", e.Addr, "from", e.From, "waited", e.Waited.Round(time.Microsecond))
		case e.Outcome == release.Gone:
			p.d.Log.Info("the former holder of an address left while this node waited for it to stop answering; answering", "ip", e.Addr, "from", e.From, "waited", e.Waited.Round(time.Microsecond))
		default:
			p.d.Log.Warn("the former holder of an address did not say it stopped answering for it within the longest wait; answering (two nodes may answer until it learns of the change)", "ip", e.Addr, "from", e.From, "waited", e.Waited.Round(time.Millisecond))
		}
	}
	if p.relTimer != nil {
		p.relTimer.Stop()
		p.relTimer = nil
	}
	if !next.IsZero() {
		p.relTimer = time.AfterFunc(time.Until(next)+10*time.Millisecond, p.trigger)
	}
}

// release tells the new winners of the addresses this node won in the
// last election and no longer answers for, when they are live members
// that wait for it, that it does not. That includes addresses it won
// without answering yet (waiting itself, or for its proxy): the new
// winner waits for this node, its last winner, and silence would cost
// it the longest wait. The messages go from goroutines of their own: the
// loop does not wait on the network. A failed send is logged; the
// winner then answers after its longest wait.
func (p *layer2Protocol) release(st l2plan.State, releasing map[string]bool) {
	to := map[string][]netip.Addr{}
	for _, old := range p.state.IPs {
		if old.Winner != p.d.Node {
			continue
		}
		ip, ok := st.Lookup(old.Addr)
		if !ok || ip.Announced() || ip.Winner == p.d.Node || !releasing[ip.Winner] {
			continue
		}
		to[ip.Winner] = append(to[ip.Winner], old.Addr)
	}
	for node, addrs := range to {
		msg := release.Encode(release.Message{From: p.d.Node, To: node, Addrs: addrs})
		go func() {
			if err := p.send(node, msg); err != nil {
				p.d.Log.Warn("telling the new winner of addresses that this node stopped answering for them; it answers after its longest wait", "node", node, "ips", addrs, "err", err)
				return
			}
			p.d.Log.Info("told the new winner that this node stopped answering", "node", node, "ips", addrs)
		}()
	}
}

// contested are the addresses st holds back while their takeover is
// checked.
func contested(st l2plan.State) []partition.Contested {
	var out []partition.Contested
	for _, ip := range st.IPs {
		if ip.Reason == l2plan.ReasonContested {
			out = append(out, partition.Contested{Addr: ip.Addr, Interfaces: ip.Checking})
		}
	}
	return out
}

// announceAll announces every held IP again, after a member joined: if
// it was a partition healing, the other side may have announced the
// same IPs, and clients must learn the winner's MAC again.
func (p *layer2Protocol) announceAll(st l2plan.State) {
	for ip, ifaces := range st.Announced() {
		for _, i := range ifaces {
			p.responders.gratuitous(i, ip)
		}
	}
}

// events records an event on each Service whose announcement by this
// node started, changed or stopped.
func (p *layer2Protocol) events(ch l2plan.Changes) {
	if p.d.Events == nil {
		return
	}
	for _, a := range append(slices.Clone(ch.Create), ch.Update...) {
		obj := p.d.Source.Service(a.Service)
		if obj == nil {
			continue
		}
		p.d.Events.Eventf(obj, corev1.EventTypeNormal, EventAnnouncing, "announcing %s from node %s on %s",
			ipList(a.IPs), a.Node, strings.Join(a.Interfaces, ", "))
	}
	for _, a := range ch.Delete {
		obj := p.d.Source.Service(a.Service)
		if obj == nil {
			continue // the Service is gone: nobody reads its events
		}
		p.d.Events.Eventf(obj, corev1.EventTypeNormal, EventStoppedAnnouncing, "stopped announcing %s from node %s",
			ipList(a.IPs), a.Node)
	}
}

// logChanges logs what moved and, once per change, why IPs are not
// announced, so `kubectl logs` explains a missing announcement.
func (p *layer2Protocol) logChanges(st l2plan.State, ch l2plan.Changes) {
	log := p.d.Log
	for _, m := range ch.Moved {
		ip, _ := st.Lookup(m.Addr)
		log.Info("winner changed", "ip", m.Addr, "from", orNone(m.From), "to", orNone(m.To), "services", refs(ip.Services))
	}
	for _, g := range ch.Gained {
		log.Info("announcing", "ip", g.Addr, "interfaces", g.Interfaces)
	}
	for _, l := range ch.Lost {
		log.Info("stopped announcing", "ip", l.Addr, "interfaces", l.Interfaces)
	}
	seen := map[string]bool{}
	for _, ip := range st.IPs {
		if ip.Reason == "" {
			continue
		}
		key := "ip/" + ip.Addr.String()
		seen[key] = true
		why := ip.Reason + " " + fmt.Sprint(ip.Excluded.Map())
		p.logs.once(key, why, func() {
			log.Info("not announced", "ip", ip.Addr, "services", refs(ip.Services), "reason", ip.Reason, "nodes", ip.Excluded.Map())
		})
	}
	for _, ig := range st.Ignored {
		key := "ignored/" + ig.Service.String() + "/" + ig.Addr.String()
		seen[key] = true
		p.logs.once(key, ig.Reason+ig.Detail, func() {
			log.Info("not announced", "service", ig.Service.String(), "ip", ig.Addr, "reason", ig.Reason, "detail", ig.Detail)
		})
	}
	p.logs.forgetUnseen(seen, "ip/", "ignored/")
}

type responderEntry struct {
	r    Responder
	link Link
}

// responderSet is the running responders, one per interface; the
// metrics collector reads their counters from its own goroutine.
type responderSet struct {
	*env
	ann *layer2.Announcements

	mu   sync.Mutex
	live map[string]*responderEntry
	// retired accumulates the counters of stopped responders.
	retired map[string]layer2.Stats
}

// sync runs one responder per announceable interface with carrier, and
// restarts one whose interface changed (a new index or MAC after the
// link was re-created) or whose socket failed.
func (rs *responderSet) sync(ifs Interfaces) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	want := map[string]Link{}
	for _, name := range ifs.Names {
		if !slices.Contains(ifs.Down, name) {
			want[name] = ifs.Links[name]
		}
	}
	for name, e := range rs.live {
		l, ok := want[name]
		dead := false
		select {
		case <-e.r.Done():
			dead = true
		default:
		}
		if !ok || dead || l.Index != e.link.Index || l.MAC.String() != e.link.MAC.String() {
			if dead {
				rs.d.Log.Warn("responder died; restarting", "interface", name)
			}
			rs.retire(name, e)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if _, ok := rs.live[name]; ok {
			continue
		}
		rs.start(want[name])
	}
}

// start starts the responder of l; rs.mu is held.
func (rs *responderSet) start(l Link) {
	name := l.Name
	r, err := rs.d.NewResponder(layer2.Interface{Name: l.Name, Index: l.Index, MAC: l.MAC}, rs.ann)
	if err != nil {
		rs.logs.once("responder/"+name, err.Error(), func() {
			rs.d.Log.Error("cannot answer ARP/NDP on an interface; retrying at the next sync", "interface", name, "err", err)
		})
		return
	}
	rs.logs.forget("responder/" + name)
	rs.live[name] = &responderEntry{r: r, link: l}
	// A responder whose socket fails for good stops; the sync that
	// follows starts a new one. (Stop also ends this goroutine, at
	// the cost of one needless sync.)
	go func() { <-r.Done(); rs.trigger() }()
	rs.d.Log.Info("answering ARP/NDP", "interface", name, "mac", l.MAC.String(), "index", l.Index)
	// A responder that starts late (the link came back, or was
	// re-created) announces what it holds: caches may still point
	// elsewhere.
	for _, ip := range rs.ann.On(name) {
		if err := r.Gratuitous(ip); err != nil {
			rs.d.Log.Warn("gratuitous announcement failed", "interface", name, "ip", ip, "err", err)
		}
	}
}

// retire stops a responder and keeps its counters; rs.mu is held.
func (rs *responderSet) retire(name string, e *responderEntry) {
	e.r.Stop()
	rs.retired[name] = addStats(rs.retired[name], e.r.Stats())
	delete(rs.live, name)
	rs.d.Log.Info("stopped answering ARP/NDP", "interface", name)
}

// stopAll stops every responder; after it nothing answers.
func (rs *responderSet) stopAll() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for name, e := range rs.live {
		rs.retire(name, e)
	}
}

func (rs *responderSet) syncGroups() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for name, e := range rs.live {
		if err := e.r.SyncGroups(rs.ann.Listening(name)); err != nil {
			rs.d.Log.Warn("joining solicited-node multicast groups", "interface", name, "err", err)
		}
	}
}

func (rs *responderSet) gratuitous(iface string, ip netip.Addr) {
	rs.mu.Lock()
	e := rs.live[iface]
	rs.mu.Unlock()
	if e == nil {
		return // its responder starts at the next sync and announces then
	}
	if err := e.r.Gratuitous(ip); err != nil {
		rs.d.Log.Warn("gratuitous announcement failed", "interface", iface, "ip", ip, "err", err)
	}
}

func addStats(a, b layer2.Stats) layer2.Stats {
	a.ARPRequests += b.ARPRequests
	a.NSRequests += b.NSRequests
	a.ARPReplies += b.ARPReplies
	a.NAReplies += b.NAReplies
	a.GratuitousARP += b.GratuitousARP
	a.UnsolicitedNA += b.UnsolicitedNA
	a.ReadErrors += b.ReadErrors
	a.WriteErrors += b.WriteErrors
	if len(b.Ignored) > 0 && a.Ignored == nil {
		a.Ignored = map[layer2.Reason]uint64{}
	}
	for k, v := range b.Ignored {
		a.Ignored[k] += v
	}
	return a
}

// handoverBefore tells, for a speaker that just started, who held each
// address before it: the winners without this node, as the others
// elected them while it was away (its process crashed and came back,
// say), computed once. Later rounds need it not: the tracker follows the
// winners itself.
func (p *layer2Protocol) handoverBefore(in l2plan.Input) func(netip.Addr) string {
	if p.d.Handover == nil || p.state.Node != "" {
		return nil
	}
	without := in
	without.Members = slices.DeleteFunc(slices.Clone(in.Members), func(m l2plan.Member) bool { return m.Name == p.d.Node })
	without.Previous, without.Contested, without.Reporter = nil, nil, false
	st := l2plan.Compute(without)
	return func(a netip.Addr) string { ip, _ := st.Lookup(a); return ip.Winner }
}

// syncHandover puts in the kernel the forwarding of the connections of
// the addresses this node took over from a live member (speaker/handover).
// A failure is logged, never holds an announcement back, and is tried
// again when the entries change.
func (p *layer2Protocol) syncHandover(r *round, st l2plan.State, before func(netip.Addr) string) {
	if p.d.Handover == nil {
		return
	}
	if !p.handedOnce {
		// What a predecessor restarting in place left goes on.
		left, err := p.d.Handover.List()
		if err != nil {
			p.d.Log.Warn("handover: reading the forwarding a previous speaker left", "err", err)
		}
		p.handover.Adopt(left)
		if p.d.HandoverKeep == 0 && len(left) == 0 {
			p.handedOnce = true // off, and nothing to clear: never touch the kernel
		}
	}
	if p.d.HandoverKeep == 0 && p.handedOnce && len(p.handed) == 0 {
		return
	}
	addrs := make(map[string][]netip.Addr, len(r.snap.Nodes))
	for _, n := range r.snap.Nodes {
		addrs[n.Name] = n.Addresses
	}
	winners := make(map[netip.Addr]string, len(st.IPs))
	for _, ip := range st.IPs {
		winners[ip.Addr] = ip.Winner
	}
	// An address awaiting its former holder's release gets its rule now,
	// so that it is in place the moment the release is answered.
	held := st.Announced()
	for _, ip := range st.IPs {
		if ip.Reason == l2plan.ReasonAwaiting {
			held[ip.Addr] = ip.Checking
		}
	}
	res := p.handover.Update(handover.Round{Now: time.Now(), Keep: p.d.HandoverKeep, Self: p.d.Node, Held: held,
		Winners: winners, Before: before, Live: r.present, Addresses: addrs})
	p.logs.once("handover-unreachable", strings.Join(res.Unreachable, ", "), func() {
		if len(res.Unreachable) > 0 {
			p.d.Log.Warn("handover: connections of addresses taken over from a live node are not forwarded to it: it has no address of the family", "addresses", res.Unreachable)
		}
	})
	if p.handTimer != nil {
		p.handTimer.Stop()
		p.handTimer = nil
	}
	if !res.Next.IsZero() {
		p.handTimer = time.AfterFunc(time.Until(res.Next)+10*time.Millisecond, p.trigger)
	}
	if p.handedOnce && slices.Equal(res.Entries, p.handed) {
		return
	}
	began := time.Now()
	err := p.d.Handover.Apply(res.Entries)
	took := time.Since(began)
	p.logs.once("handover-error", fmt.Sprint(err), func() {
		if err != nil {
			p.d.Log.Warn("handover: forwarding the connections of moved addresses to their former holders", "err", err)
		}
	})
	if p.handedOnce || len(res.Entries) > 0 {
		names := make([]string, len(res.Entries))
		for i, e := range res.Entries {
			names[i] = e.String()
		}
		p.d.Log.Info("handover: connections this node did not open go to the former holder", "entries", names, "took", took.Round(time.Microsecond))
	}
	p.handed, p.handedOnce = res.Entries, true
}

// StopHandover removes the forwarding when the speaker stops for good
// (the others take its addresses over); one restarting in place leaves
// it to its successor, which adopts it.
func (s *Speaker) StopHandover() {
	p := s.l2
	if p.handTimer != nil {
		p.handTimer.Stop()
	}
	if p.d.Handover != nil && len(p.handed) > 0 {
		if err := p.d.Handover.Apply(nil); err != nil {
			p.d.Log.Warn("handover: removing the forwarding", "err", err)
		}
	}
}
