package e2e

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/labbin"
)

// TestL2MoveKeepsConnections moves a layer-2 address between two live
// nodes, the planned way (`herald drain`, then `--undo`, which gives it
// back), while the LAN client holds one connection to it open and sends
// a request over it every 50 ms, next to a probe that opens a new
// connection for each request every 20 ms.
//
// The address moving is the only thing that happens: both nodes stay
// up, the backend (on a third node, which never announces) stays, and
// the old announcer still has the connection's conntrack entry. The
// second move of every failover is such a move: the address goes back
// to the node that held it once that node is back (recovered, restarted,
// undrained). A request on a new connection almost never straddles the
// move; the kept connection always does, twice. TestFaultsControlPlaneAPIServerDown
// lost one request in about 10,000 at that point (issue #36).
//
// It asserts: the client's neighbour entry moved twice; the node the
// address moved to forwarded packets (its herald-handover table's
// counter, speaker/handover); each kept connection (one opened before the
// drain, one during it) serves every request over one connection; no
// request on new connections fails. Every TCP reset in the client's and
// nodes' namespaces is printed with the failures.
func TestL2MoveKeepsConnections(t *testing.T) {
	h := harness.Start(t)
	m := startL2MoveService(h, "move-kept", "198.51.100.236-198.51.100.237", "2001:db8:0:1::236-2001:db8:0:1::237")
	ip, winner := m.ip, m.winner
	resets, packets := m.captures()

	bin := h.Lab.Bins.Path(labbin.Prober)
	keep := func(what string) *harness.Probe {
		t.Helper()
		p, err := harness.StartKeptProbeProcess(bin, h.Layout.Client, []string{ip}, 80, 50*time.Millisecond)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		t.Cleanup(p[0].Stop)
		return p[0]
	}
	// before is opened through the announcer and outlives both moves;
	// during is opened through the next node while the announcer is
	// drained, and outlives the move back.
	before := keep("the connection opened before the drain")
	fresh, err := harness.StartProbeProcess(bin, h.Layout.Client, []string{ip}, 80, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fresh[0].Stop)
	stopMAC := harness.WatchMAC(h.Layout.Client, ip)
	time.Sleep(2 * time.Second)
	start := time.Now()
	m.drain(winner, false)
	next := m.oneAnswer(func(n string) bool { return n != winner }, "another node than "+winner+" answering for "+ip)
	movedAt := time.Since(start)
	during := keep("the connection opened during the drain")
	time.Sleep(3 * time.Second)
	if !m.forwarded(next, "MOVE", "while "+winner+" is drained") {
		t.Errorf("%s forwards nothing for %s to %s (its herald-handover table above)", next, ip, winner)
	}
	backStart := time.Now()
	m.drain(winner, true)
	m.oneAnswer(func(n string) bool { return n == winner }, winner+" answering for "+ip+" again")
	backAt := time.Since(backStart)
	time.Sleep(3 * time.Second)
	changes := stopMAC()
	for _, p := range []*harness.Probe{before, during, fresh[0]} {
		p.Stop()
	}

	t.Logf("MOVE %s: %s -> %s %s after herald drain, back %s after --undo; the client's neighbour entry: %s",
		ip, winner, next, movedAt.Round(time.Millisecond), backAt.Round(time.Millisecond), macChanges(changes, m.owner, start))
	if len(changes) != 3 || changes[0].MAC != m.macOf[winner] || changes[1].MAC != m.macOf[next] || changes[2].MAC != m.macOf[winner] {
		t.Errorf("the client's neighbour entry went %s, want %s, %s, then %s again", macChanges(changes, m.owner, start), winner, next, winner)
	}
	// Both moves are between live speakers: the loser stops, says so,
	// and the winner answers on that word (speaker/layer2/release).
	logs := map[string]string{}
	for _, n := range m.nodeNames() {
		logs[n] = m.speakerLogs(n)
	}
	hs := handoffs(l2Events(logs, []string{ip}), start)
	t.Logf("MOVE hand-offs of %s, as the speakers logged them: %s", ip, handoffList(hs, start))
	if len(hs) != 2 || !hs[0].released || !hs[1].released || hs[0].gap < 0 || hs[1].gap < 0 {
		t.Errorf("want two hand-offs of %s, each on the former holder's release, never two answering at once", ip)
	}
	var at []time.Time
	for _, k := range []struct {
		what string
		p    *harness.Probe
	}{{"opened before the drain, kept through both moves", before}, {"opened during the drain, kept through the move back", during}} {
		sent, failed := k.p.Result()
		t.Logf("MOVE kept connection %s: %d requests every 50 ms over %d connection(s), %d failed, longest late send %s",
			k.what, sent, k.p.Conns(), failed, k.p.MaxLate().Round(time.Millisecond))
		if failed > 0 {
			t.Errorf("the connection %s: %d of %d requests failed: %s", k.what, failed, sent, k.p.Failures())
			at = append(at, k.p.FailedAt()...)
		}
		if n := k.p.Conns(); n != 1 {
			t.Errorf("the connection %s was opened %d times, want once", k.what, n)
		}
		if sent < 50 {
			t.Errorf("the connection %s: only %d requests sent", k.what, sent)
		}
	}
	fsent, ffailed := fresh[0].Result()
	t.Logf("MOVE new connection per request: %d requests every 20 ms, %d failed, longest gap %s",
		fsent, ffailed, fresh[0].MaxGap().Round(time.Millisecond))
	if ffailed > 0 {
		t.Errorf("new connections: %d of %d requests failed: %s", ffailed, fsent, fresh[0].Failures())
		at = append(at, fresh[0].FailedAt()...)
	}
	if fsent < 300 {
		t.Errorf("only %d requests on new connections sent: the probe did not run", fsent)
	}
	if len(at) > 0 {
		t.Logf("TCP resets (tcpdump -e in the client's and every node's namespace):\n  %s", strings.Join(resets.Near(at), "\n  "))
		t.Logf("the client's packets to and from %s within 300 ms of a failure:\n  %s", ip, strings.Join(packets.Around(at, 300*time.Millisecond, 400), "\n  "))
	}
}

// TestL2FalseDeathKeepsConnections freezes the speaker of the node that
// announces a layer-2 address (SIGSTOP, as a speaker starved of CPU
// misses memberlist's probes) until another node answers for it, then
// lets it run again. The node's kernel never stopped, so its conntrack
// still holds the connections it carried; the node that took the address
// over must send their packets there (speaker/handover) once the member
// is alive again, not reset them.
//
// The churn soak's runs without CPU protection showed this move resetting
// connections opened through the starved node: the RST came from the new
// holder, and a request sent in that window fails with `connection reset
// by peer` (issue #36).
//
// After the thaw the frozen speaker either learns it was declared dead,
// refutes it and keeps off its addresses for the recovery hold (30 s), or
// refutes only the suspicion before the death reaches it and takes the
// address straight back (the suspicions queued on its socket during the
// freeze come first). Only the first leaves the address with the other
// node for long, so the test freezes again until that happens; it did in
// 6 of 14 freezes, so at most 10 times. One connection, opened through the announcer just before
// each freeze, carries a request every 10 s: one before, none while the
// speaker is frozen (about 2 s), then through the new holder during the
// hold, the last through the announcer again. It asserts: every request
// on it answered over that one connection; the new holder's forwarding
// counted packets for the address; the client's neighbour entry went to
// the new holder and back, once each.
func TestL2FalseDeathKeepsConnections(t *testing.T) {
	h := harness.Start(t)
	m := startL2MoveService(h, "false-death", "198.51.100.238-198.51.100.238", "2001:db8:0:1::238-2001:db8:0:1::238")
	ip, winner := m.ip, m.winner
	resets, packets := m.captures()

	const every = 10 * time.Second
	const attempts = 10
	var (
		p      *harness.Probe
		next   string
		opened time.Time
		stop   func() []harness.MACChange
	)
	for attempt := 1; ; attempt++ {
		kept, err := harness.StartKeptProbeProcess(h.Lab.Bins.Path(labbin.Prober), h.Layout.Client, []string{ip}, 80, every)
		if err != nil {
			t.Fatal(err)
		}
		p = kept[0]
		t.Cleanup(p.Stop)
		opened = time.Now()
		stop = harness.WatchMAC(h.Layout.Client, ip)
		time.Sleep(time.Second)
		froze := m.freezeUntilMoved(winner, ip, &next)
		t.Logf("FALSE DEATH attempt %d: %s's speaker frozen for %s, until %s answered for %s", attempt, winner, froze.Round(time.Millisecond), next, ip)
		if time.Since(opened) > every-time.Second {
			t.Fatalf("the takeover took %s: the kept connection's next request may have gone out while %s was frozen, which this test does not cover", time.Since(opened).Round(time.Millisecond), winner)
		}
		// Counted out: the address stays with next for the hold.
		if !m.answeredBy(winner, 5*time.Second) {
			break
		}
		p.Stop()
		sent, failed := p.Result()
		t.Logf("FALSE DEATH attempt %d: %s refuted only the suspicion and took %s straight back (client: %s); kept connection %d requests, %d failed",
			attempt, winner, ip, macChanges(stop(), m.owner, opened), sent, failed)
		if failed > 0 {
			t.Errorf("attempt %d: the kept connection's request before the freeze failed: %s", attempt, p.Failures())
		}
		if attempt == attempts {
			t.Fatalf("in %d freezes %s never stayed counted out: the case this test is for did not happen", attempts, winner)
		}
	}
	// The recovery hold: the requests 10 and 20 s in go through next,
	// which must forward them. Its counters are read just after each (a
	// rewrite of its table, on any change of its entries, starts them
	// again), until one has counted.
	forwarded := false
	for k := 1; k <= 2 && !forwarded; k++ {
		time.Sleep(time.Until(opened.Add(time.Duration(k)*every + 500*time.Millisecond)))
		forwarded = m.forwarded(next, "FALSE DEATH", fmt.Sprintf("%s after the connection opened, during the hold", time.Since(opened).Round(time.Second)))
	}
	if !forwarded {
		t.Errorf("%s forwarded nothing for %s to %s during the hold (its herald-handover table above)", next, ip, winner)
	}
	// Then the move back.
	back := time.Now()
	m.oneAnswer(func(n string) bool { return n == winner }, winner+" answering for "+ip+" again")
	backAfter := time.Since(back)
	time.Sleep(every)
	changes := stop()
	p.Stop()

	sent, failed := p.Result()
	t.Logf("FALSE DEATH %s: %s -> %s, back %s after the thaw; the client's neighbour entry: %s; kept connection: %d requests every %s over %d connection(s), %d failed",
		ip, winner, next, backAfter.Round(time.Millisecond), macChanges(changes, m.owner, opened), sent, every, p.Conns(), failed)
	// Exactly three: the frozen speaker, let go, must not answer the
	// requests that queued meanwhile before it learns it was counted out
	// (layer2.Wake); a run before that flashed the entry back to it for
	// 55 ms.
	if len(changes) != 3 || changes[0].MAC != m.macOf[winner] || changes[1].MAC != m.macOf[next] || changes[2].MAC != m.macOf[winner] {
		t.Errorf("the client's neighbour entry went %s, want %s, %s, then %s again", macChanges(changes, m.owner, opened), winner, next, winner)
	}
	if failed > 0 {
		t.Errorf("the kept connection: %d of %d requests failed: %s", failed, sent, p.Failures())
		at := p.FailedAt()
		t.Logf("TCP resets (tcpdump -e in the client's and every node's namespace):\n  %s", strings.Join(resets.Near(at), "\n  "))
		t.Logf("the client's packets to and from %s within 300 ms of a failure:\n  %s", ip, strings.Join(packets.Around(at, 300*time.Millisecond, 400), "\n  "))
	}
	if n := p.Conns(); n != 1 {
		t.Errorf("the kept connection was opened %d times, want once", n)
	}
	if sent < 4 {
		t.Errorf("only %d requests sent on the kept connection, want one before the freeze, some during the hold and one after", sent)
	}
}

// freezeUntilMoved stops node's speaker (SIGSTOP) until another node
// answers alone for ip, which it stores in *next, then lets it run
// again; it returns how long the speaker was frozen.
func (m *l2MoveService) freezeUntilMoved(node, ip string, next *string) time.Duration {
	t := m.T.T
	t.Helper()
	pid := m.speakerPID(m.speakers()[node])
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %d: %v", pid, err)
	}
	frozen := time.Now()
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT %d: %v", pid, err)
			}
		}
	}
	defer thaw()
	*next = m.oneAnswer(func(n string) bool { return n != node }, "another node than "+node+" answering for "+ip)
	thaw()
	return time.Since(frozen)
}

// answeredBy reports whether node answers alone for the address within
// d (arping from the client).
func (m *l2MoveService) answeredBy(node string, d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); {
		if macs, _ := m.arping(m.ip, 1, 1); slices.Equal(macs, []string{m.macOf[node]}) {
			return true
		}
	}
	return false
}

// forwarded logs node's herald-handover table and reports whether its
// rule for the Service's IPv4 address sends to another node and has
// counted packets. The table may hold other addresses' rules too (an
// earlier test's moves, within --handover-keep).
func (m *l2MoveService) forwarded(node, tag, when string) bool {
	t := m.T.T
	t.Helper()
	table, _ := m.T.Exec(node, "nft", "list", "table", "ip", "herald-handover")
	t.Logf("%s %s's forwarding %s:\n%s", tag, node, when, table)
	var rule string
	for _, l := range strings.Split(table, "\n") {
		if strings.Contains(l, "daddr "+m.ip+" ") {
			rule = l
		}
	}
	return strings.Contains(rule, "dup to ") && strings.Contains(rule, "counter packets ") && !strings.Contains(rule, "counter packets 0 ")
}
