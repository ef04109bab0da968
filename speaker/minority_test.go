package speaker

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/herald-lb/herald/speaker/members"
	"github.com/herald-lb/herald/speaker/partition"
)

// partitionLab is the speaker of self in a cluster of nodes, with its
// partition Guard on a test clock: a heartbeat window of 3 s, and the
// rest of c (c.Self, c.Window and c.Now are set here).
func partitionLab(t *testing.T, self string, nodes []string, c partition.Config) (*lab, *partition.Guard, *time.Time) {
	now := time.Unix(1000, 0)
	c.Self, c.Window, c.Now = self, 3*time.Second, func() time.Time { return now }
	g := partition.New(c)
	l := newLabWith(t, self, nodes, func(d *Deps) { d.Partition = g })
	return l, g, &now
}

// TestMinorityHoldsBack: in a partition of four speakers into 2|2, the
// half without the lowest-named speaker announces nothing the others may
// announce while the Lease shows node1 renewing, and the half with it
// announces every address; so each address has exactly one answer.
func TestMinorityHoldsBack(t *testing.T) {
	nodes := []string{"node1", "node2", "node3", "node4"}
	var ips []string
	for i := range 16 {
		ips = append(ips, fmt.Sprintf("198.51.100.%d", 200+i))
	}
	announced := map[string]int{}
	for _, self := range nodes {
		l, tr, now := partitionLab(t, self, nodes, partition.Config{})
		l.service("web", false, ips...)
		l.sp.Sync()
		// The partition: each side sees the other die (no leave).
		side := map[string]bool{"node1": true, "node2": true}
		for _, n := range nodes {
			if side[n] != side[self] {
				l.cluster.Remove(n)
			}
		}
		// Both sides' lowest members renew.
		for range 5 {
			*now = now.Add(time.Second)
			tr.Observe("node1", *now)
			tr.Observe("node3", *now)
			l.sp.Sync()
		}
		got := l.sp.Announcements().On("eth0")
		announced[self] = len(got)
		if side[self] == l.sp.State().Isolated {
			t.Errorf("%s: isolated %v, want %v", self, l.sp.State().Isolated, !side[self])
		}
		if v := metricValue(t, l.sp.d.Metrics, "herald_speaker_isolated"); (v == 1) == side[self] {
			t.Errorf("%s: herald_speaker_isolated %v", self, v)
		}
	}
	t.Logf("addresses announced per node in the 2|2 partition: %v", announced)
	if announced["node3"]+announced["node4"] != 0 || announced["node1"]+announced["node2"] != len(ips) {
		t.Errorf("announced %v: want all %d on node1 and node2 together, none on node3 and node4", announced, len(ips))
	}
}

// TestMinorityFailover: when node1, node2 and node3 of five really fail,
// node4 and node5 are a minority; they take the addresses over once the
// Lease shows no renewal from outside for the window.
func TestMinorityFailover(t *testing.T) {
	nodes := []string{"node1", "node2", "node3", "node4", "node5"}
	l, tr, now := partitionLab(t, "node4", nodes, partition.Config{})
	l.service("web", false, "198.51.100.200", "198.51.100.201", "198.51.100.202", "198.51.100.203")
	l.sp.Sync()
	tr.Observe("node1", *now)
	for _, n := range []string{"node1", "node2", "node3"} {
		l.cluster.Remove(n)
	}
	l.sp.Sync()
	if !l.sp.State().Isolated {
		t.Fatal("2 of 5 right after the others vanished: hold back for the window")
	}
	var took time.Duration
	for l.sp.State().Isolated {
		*now = now.Add(100 * time.Millisecond)
		took += 100 * time.Millisecond
		l.sp.Sync()
		if took > time.Minute {
			t.Fatal("the survivors never took over")
		}
	}
	t.Logf("2 survivors of 5 not isolated %s after the failure", took)
	both := l.sp.Announcements().On("eth0")
	if len(both) == 0 {
		t.Error("node4 announces nothing after the failover; node5 and node4 share the addresses")
	}
}

// TestGracefulLeaveNotCounted: speakers that stop gracefully are
// forgotten, so the rest of a rolling update is never a minority; one
// that died is remembered.
func TestGracefulLeaveNotCounted(t *testing.T) {
	nodes := []string{"node1", "node2", "node3", "node4"}
	l, tr, now := partitionLab(t, "node4", nodes, partition.Config{})
	l.service("web", false, "198.51.100.200", "198.51.100.201")
	l.sp.Sync()
	tr.Observe("node1", *now)
	l.cluster.Leave("node1")
	l.cluster.Leave("node2")
	l.sp.Sync()
	if st := l.sp.Standing(); st.Minority() || l.sp.State().Isolated {
		t.Errorf("two of four left gracefully: %+v minority %v, isolated %v", st, st.Minority(), l.sp.State().Isolated)
	}
	// node2 comes back, then node1 and node2 die: 2 of 4 known, without
	// node1, which renewed: a minority, held back.
	l.cluster.Set(members.Member{Name: "node1", Meta: members.Meta{Interfaces: []string{"eth0"}}})
	l.cluster.Set(members.Member{Name: "node2", Meta: members.Meta{Interfaces: []string{"eth0"}}})
	l.sp.Sync()
	l.cluster.Remove("node1")
	l.cluster.Remove("node2")
	tr.Observe("node1", *now)
	l.sp.Sync()
	if st := l.sp.Standing(); !st.Minority() || !l.sp.State().Isolated {
		t.Errorf("node1 and node2 died: %+v minority %v, isolated %v", st, st.Minority(), l.sp.State().Isolated)
	}
	// A Node deleted from the API is forgotten.
	l.src.set(func(sn *Snapshot) { sn.Nodes = sn.Nodes[2:] })
	l.sp.Sync()
	if st := l.sp.Standing(); st.Minority() {
		t.Errorf("node1 and node2 deleted: still counted, %+v", st)
	}
}

func metricValue(t *testing.T, m *Metrics, name string) float64 {
	t.Helper()
	switch name {
	case "herald_speaker_isolated":
		return testutil.ToFloat64(m.isolated)
	case "herald_speaker_known_speakers":
		return testutil.ToFloat64(m.known)
	}
	t.Fatalf("no metric %s", name)
	return 0
}
