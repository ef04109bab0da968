package e2e

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/herald-lb/herald/e2e/harness"
)

// TestSpeakerIsolated blocks the memberlist port (7946, UDP and TCP, both
// ways, IPv4 and IPv6) on the node that announces the most addresses,
// with iptables in its namespace, as a firewall mistake would. The other
// speakers take its addresses over; it finds itself alone while the
// heartbeat Lease shows the others alive, so it announces nothing the
// others may announce: arping and ndisc6 from the client get exactly one
// MAC per VIP, never the blocked node's, and curl keeps working. Once
// the port is open again, the cluster is whole and still one MAC answers.
func TestSpeakerIsolated(t *testing.T) {
	h := harness.Start(t)
	s := l2{h}
	const name, count = "iso", 5
	s.readySpeakers(2 * time.Minute)
	owner := s.macOwners()
	nodes := s.nodeNames()
	if len(nodes) < 3 {
		t.Fatalf("the lab has %d nodes; the test needs 3", len(nodes))
	}
	s.cleanupL2Services(name, count)
	h.Apply(l2Objects(name, "198.51.100.215-198.51.100.219", "2001:db8:0:1::215-2001:db8:0:1::219", "node1"))
	h.Apply(lbServicesYAML(name, count, "PreferDualStack"))
	h.ReadyPods("app="+name, 1, 2*time.Minute)
	type vip struct{ svc, v4, v6 string }
	var vips []vip
	c := ctl{h}
	for i := range count {
		svc := fmt.Sprintf("%s-%d", name, i)
		var v vip
		h.Poll(time.Minute, svc+" to get an IPv4 and an IPv6 address", func() (bool, string) {
			ips := strings.Fields(strings.ReplaceAll(c.ips("default", svc), ",", " "))
			v = vip{svc: svc}
			for _, ip := range ips {
				if strings.Contains(ip, ":") {
					v.v6 = ip
				} else {
					v.v4 = ip
				}
			}
			return v.v4 != "" && v.v6 != "", fmt.Sprint(ips)
		})
		vips = append(vips, v)
	}
	held := map[string]int{}
	for _, v := range vips {
		held[s.announcer("default", v.svc, v.v4, time.Minute)]++
	}
	blocked := ""
	for n, k := range held {
		if blocked == "" || k > held[blocked] || (k == held[blocked] && n < blocked) {
			blocked = n
		}
	}
	t.Logf("announcers of the %d IPv4 VIPs: %v; blocking memberlist on %s", count, held, blocked)

	rules := [][]string{
		{"INPUT", "-p", "udp", "--dport", "7946"}, {"INPUT", "-p", "tcp", "--dport", "7946"},
		{"OUTPUT", "-p", "udp", "--dport", "7946"}, {"OUTPUT", "-p", "tcp", "--dport", "7946"},
	}
	firewall := func(op string) error {
		var errs []string
		for _, bin := range []string{"iptables", "ip6tables"} {
			for _, r := range rules {
				args := append([]string{bin, op}, r...)
				args = append(args, "-j", "DROP")
				if out, err := h.Exec(blocked, args...); err != nil {
					errs = append(errs, fmt.Sprintf("%s: %v %s", strings.Join(args, " "), err, out))
				}
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("%s", strings.Join(errs, "; "))
		}
		return nil
	}
	unblocked := false
	t.Cleanup(func() {
		if !unblocked {
			if err := firewall("-D"); err != nil {
				t.Errorf("removing the test's firewall rules on %s: %v", blocked, err)
			}
		}
	})
	start := time.Now()
	if err := firewall("-I"); err != nil {
		t.Fatal(err)
	}
	others := slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return n == blocked })
	h.Poll(time.Minute, blocked+" isolated and the others a cluster of "+fmt.Sprint(len(others)), func() (bool, string) {
		iso, err := s.speakerMetric(blocked, "herald_speaker_isolated")
		state := fmt.Sprintf("%s isolated=%v (%v)", blocked, iso, err)
		ok := err == nil && iso == 1
		for _, n := range others {
			m, err := s.speakerMetric(n, "herald_speaker_members")
			state += fmt.Sprintf("; %s members=%v (%v)", n, m, err)
			ok = ok && err == nil && int(m) == len(others)
		}
		return ok, state
	})
	t.Logf("%s isolated, the others a cluster of %d, %s after the port was blocked", blocked, len(others), time.Since(start).Round(time.Millisecond))

	blockedMAC := ""
	for mac, n := range owner {
		if n == blocked {
			blockedMAC = mac
		}
	}
	// Every VIP has moved to one of the others, and only that one answers.
	check := func(round string) {
		t.Helper()
		for _, v := range vips {
			var macs []string
			var out string
			h.Poll(30*time.Second, round+": one MAC for "+v.v4+", not "+blocked+"'s", func() (bool, string) {
				macs, out = s.arping(v.v4, 5, 3)
				return len(macs) == 1 && owner[macs[0]] != blocked, fmt.Sprintf("MACs %v (%s is %s): %s", macs, blocked, blockedMAC, out)
			})
			// Then, without retrying: 5 more requests, still one MAC.
			if macs, out = s.arping(v.v4, 5, 3); len(macs) != 1 || owner[macs[0]] == blocked {
				t.Errorf("%s: arping -c 5 %s got %v (the blocked node %s is %s): %s", round, v.v4, macs, blocked, blockedMAC, out)
			}
			if v6 := ndiscMACs(h, v.v6); len(v6) != 1 || owner[v6[0]] == blocked {
				t.Errorf("%s: ndisc6 %s got %v, want one MAC, not %s's", round, v.v6, v6, blocked)
			}
			if ok, err := benchGet(h.Layout.Client, v.v4, 2*time.Second); !ok {
				t.Errorf("%s: GET http://%s/ failed: %v", round, v.v4, err)
			}
		}
		if anns := s.announcements("default", vips[0].svc); slices.ContainsFunc(anns, func(a string) bool { return strings.HasPrefix(a, blocked+":") }) {
			t.Errorf("%s: %s still has a ServiceAnnouncement: %v", round, blocked, anns)
		}
	}
	check("port blocked")
	time.Sleep(5 * time.Second) // longer than the heartbeat window: nothing drifts back
	check("port blocked, 5 s later")

	if err := firewall("-D"); err != nil {
		t.Fatal(err)
	}
	unblocked = true
	h.Poll(time.Minute, "every speaker in one cluster again", func() (bool, string) {
		ok, state := true, ""
		for _, n := range nodes {
			m, err := s.speakerMetric(n, "herald_speaker_members")
			iso, _ := s.speakerMetric(n, "herald_speaker_isolated")
			state += fmt.Sprintf("%s members=%v isolated=%v (%v); ", n, m, iso, err)
			ok = ok && err == nil && int(m) == len(nodes) && iso == 0
		}
		return ok, state
	})
	for _, v := range vips {
		h.Poll(30*time.Second, "one MAC for "+v.v4+" after the port reopened", func() (bool, string) {
			macs, out := s.arping(v.v4, 5, 3)
			return len(macs) == 1, fmt.Sprintf("MACs %v: %s", macs, out)
		})
	}
}

var ndiscTarget = regexp.MustCompile(`(?i)Target link-layer address:\s*([0-9a-f]{2}(?::[0-9a-f]{2}){5})`)

// ndiscMACs sends neighbor solicitations for ip from the client and
// returns every distinct MAC that answered within the wait.
func ndiscMACs(h *harness.T, ip string) []string {
	out, _ := h.Exec("client", "ndisc6", "-m", "-n", "-r", "3", "-w", "1000", ip, "eth0")
	set := map[string]bool{}
	for _, m := range ndiscTarget.FindAllStringSubmatch(out, -1) {
		set[strings.ToLower(m[1])] = true
	}
	var macs []string
	for m := range set {
		macs = append(macs, m)
	}
	slices.Sort(macs)
	return macs
}
