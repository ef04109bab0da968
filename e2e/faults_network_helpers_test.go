package e2e

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// arpRound sends one ARP request for every ip from the client at once
// and returns, per address, the MACs that answered within a second, as
// the ARP sender address (what the client's kernel caches; arpAsk). Two
// MACs are two nodes answering the same request with their own MACs: a
// double answer, not a handover between two requests. A failure to ask
// at all fails the test.
func (s l2) arpRound(ips []string) map[string][]string {
	out, err := arpAsk(s.Layout.Client, "eth0", ips, time.Second)
	if err != nil {
		s.T.T.Fatal(err)
	}
	return out
}

// answerLog records, per address, who answered in each arping round, and
// sums up double answers and moves.
type answerLog struct {
	owner map[string]string // MAC -> node
	// rounds: start time of each round and its answers.
	at      []time.Time
	answers []map[string][]string
}

func (a *answerLog) add(at time.Time, r map[string][]string) {
	a.at = append(a.at, at)
	a.answers = append(a.answers, r)
}

// doubleStats is, over the rounds since from (inclusive) and before to,
// the addresses answered by two MACs or more in some round, and per
// address the time from its first to its last such round plus one round.
func (a *answerLog) doubleStats(from, to time.Time, round time.Duration) (ips []string, longest time.Duration, rounds int) {
	first, last := map[string]time.Time{}, map[string]time.Time{}
	for i, r := range a.answers {
		if a.at[i].Before(from) || !a.at[i].Before(to) {
			continue
		}
		for ip, macs := range r {
			if len(macs) < 2 {
				continue
			}
			rounds++
			if _, ok := first[ip]; !ok {
				first[ip] = a.at[i]
				ips = append(ips, ip)
			}
			last[ip] = a.at[i]
		}
	}
	for ip := range first {
		longest = max(longest, last[ip].Sub(first[ip])+round)
	}
	slices.Sort(ips)
	return ips, longest, rounds
}

// unanswered counts, over the rounds in [from, to), the address-rounds
// that got no answer at all.
func (a *answerLog) unanswered(from, to time.Time) int {
	n := 0
	for i, r := range a.answers {
		if a.at[i].Before(from) || !a.at[i].Before(to) {
			continue
		}
		for _, macs := range r {
			if len(macs) == 0 {
				n++
			}
		}
	}
	return n
}

// moves counts, over the rounds in [from, to), how often an address's
// single answering node differed from its previous single answer.
func (a *answerLog) moves(from, to time.Time) (n int, detail []string) {
	prev := map[string]string{}
	for i, r := range a.answers {
		if !a.at[i].Before(to) {
			break
		}
		for ip, macs := range r {
			if len(macs) != 1 {
				continue
			}
			node := a.owner[macs[0]]
			if p, ok := prev[ip]; ok && p != node && !a.at[i].Before(from) {
				n++
				detail = append(detail, fmt.Sprintf("%s %s->%s at +%s", ip, p, node, a.at[i].Sub(from).Round(100*time.Millisecond)))
			}
			prev[ip] = node
		}
	}
	slices.Sort(detail)
	return n, detail
}

// holders maps each address to the node of its single answer in the
// last round ("?" for none or several).
func (a *answerLog) holders() map[string]string {
	out := map[string]string{}
	if len(a.answers) == 0 {
		return out
	}
	for ip, macs := range a.answers[len(a.answers)-1] {
		if len(macs) == 1 {
			out[ip] = a.owner[macs[0]]
		} else {
			var ns []string
			for _, m := range macs {
				ns = append(ns, a.owner[m])
			}
			out[ip] = "?" + strings.Join(ns, "+")
		}
	}
	return out
}

// memberlistPartition drops memberlist's port (7946, TCP and UDP, both
// directions, IPv4 and IPv6) between every node of side and every node
// of other, with iptables in side's namespaces only.
type memberlistPartition struct {
	s           l2
	side, other []string
}

func (p memberlistPartition) rules() (v4, v6 [][]string) {
	for _, o := range p.other {
		n := p.s.Node(o)
		for _, proto := range []string{"tcp", "udp"} {
			v4 = append(v4, []string{"INPUT", "-p", proto, "-s", n.IPv4.String(), "--dport", "7946"},
				[]string{"OUTPUT", "-p", proto, "-d", n.IPv4.String(), "--dport", "7946"})
			if n.IPv6.IsValid() {
				v6 = append(v6, []string{"INPUT", "-p", proto, "-s", n.IPv6.String(), "--dport", "7946"},
					[]string{"OUTPUT", "-p", proto, "-d", n.IPv6.String(), "--dport", "7946"})
			}
		}
	}
	return v4, v6
}

// apply inserts (-I) or deletes (-D) the rules.
func (p memberlistPartition) apply(op string) error {
	v4, v6 := p.rules()
	var errs []string
	for _, node := range p.side {
		for bin, rs := range map[string][][]string{"iptables": v4, "ip6tables": v6} {
			for _, r := range rs {
				args := append(append([]string{bin, op}, r...), "-j", "DROP")
				if out, err := p.s.Exec(node, args...); err != nil {
					errs = append(errs, fmt.Sprintf("%s on %s: %v %s", strings.Join(args, " "), node, err, out))
				}
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// lbServicesYAML is count LoadBalancer Services name-0 ... of the pods
// app=name, with addresses from the pool name.
func lbServicesYAML(name string, count int, familyPolicy string) string {
	var yaml strings.Builder
	for i := range count {
		fmt.Fprintf(&yaml, `---
apiVersion: v1
kind: Service
metadata: {name: %s-%d, namespace: default, annotations: {herald.io/address-pool: %s}}
spec:
  type: LoadBalancer
  ipFamilyPolicy: %s
  selector: {app: %s}
  ports: [{port: 80, targetPort: 8080}]
`, name, i, name, familyPolicy, name)
	}
	return yaml.String()
}

// unansweredDetail names the address-rounds in [from, to) that got no
// answer: the address, the round's start after from, and the nodes that
// answered it alone in the nearest rounds before and after.
func (a *answerLog) unansweredDetail(from, to time.Time) []string {
	var out []string
	for i, r := range a.answers {
		if a.at[i].Before(from) || !a.at[i].Before(to) {
			continue
		}
		for _, ip := range slices.Sorted(maps.Keys(r)) {
			if len(r[ip]) > 0 {
				continue
			}
			out = append(out, fmt.Sprintf("%s at +%s (%s before, %s after)", ip, a.at[i].Sub(from).Round(10*time.Millisecond),
				a.single(ip, i, -1), a.single(ip, i, 1)))
		}
	}
	return out
}

// single is the node that alone answered ip in the nearest round from
// i in direction step, "none" when no round had one answer.
func (a *answerLog) single(ip string, i, step int) string {
	for j := i + step; j >= 0 && j < len(a.answers); j += step {
		if macs := a.answers[j][ip]; len(macs) == 1 {
			return a.owner[macs[0]]
		}
	}
	return "none"
}

// l2Event is a speaker starting or stopping to answer for an address,
// as its log says ("announcing", "answering an address its former holder
// released", "stopped announcing"), logged just after its responders
// took the change.
type l2Event struct {
	at     time.Time
	node   string
	ip     string
	gained bool
	// released: a start on the former holder's release.
	released bool
}

// l2Events reads the layer-2 announcement changes of the speaker logs
// (node -> log, text format) for the addresses ips, sorted by time.
func l2Events(logs map[string]string, ips []string) []l2Event {
	want := map[string]bool{}
	for _, ip := range ips {
		want[ip] = true
	}
	var out []l2Event
	for node, text := range logs {
		for _, line := range strings.Split(text, "\n") {
			released := strings.Contains(line, ` msg="answering an address its former holder released" `)
			gained := released || strings.Contains(line, " msg=announcing ")
			if !gained && !strings.Contains(line, ` msg="stopped announcing" `) {
				continue
			}
			ip := logField(line, "ip")
			ts, err := time.Parse(time.RFC3339Nano, logField(line, "time"))
			if err != nil || !want[ip] {
				continue
			}
			out = append(out, l2Event{at: ts, node: node, ip: ip, gained: gained, released: released})
		}
	}
	// Stable: a node's lines of one millisecond stay in their order.
	slices.SortStableFunc(out, func(x, y l2Event) int { return x.at.Compare(y.at) })
	return out
}

// logField is the value of key in a text-format log line ("" if absent).
func logField(line, key string) string {
	i := strings.Index(line, " "+key+"=")
	if i < 0 && strings.HasPrefix(line, key+"=") {
		i = -1
	} else if i < 0 {
		return ""
	}
	v := line[i+len(key)+2:]
	if j := strings.IndexByte(v, ' '); j >= 0 {
		v = v[:j]
	}
	return v
}

// handoff is an address moving from one speaker to another, as their
// logs tell: gap is from the stop to the start, negative when the start
// came first (both answered meanwhile).
type handoff struct {
	ip, from, to string
	at           time.Time
	gap          time.Duration
	// released: the new holder answered on the former one's release.
	released bool
}

func (h handoff) String(since time.Time) string {
	how := ""
	if h.released {
		how = ", on release"
	}
	return fmt.Sprintf("%s %s->%s at +%s: gap %s%s", h.ip, h.from, h.to, h.at.Sub(since).Round(time.Millisecond), h.gap.Round(time.Millisecond), how)
}

// handoffs pairs, per address, each stop on one node with the next
// start on another (and the other way round) from the time from on.
func handoffs(events []l2Event, from time.Time) []handoff {
	last := map[string]l2Event{}
	var out []handoff
	for _, e := range events {
		if e.at.Before(from) {
			continue
		}
		p, ok := last[e.ip]
		last[e.ip] = e
		if !ok || p.node == e.node || p.gained == e.gained {
			continue
		}
		h := handoff{ip: e.ip, from: p.node, to: e.node, at: p.at, gap: e.at.Sub(p.at), released: e.released}
		if p.gained { // the start came first: both answered meanwhile
			h = handoff{ip: e.ip, from: e.node, to: p.node, at: p.at, gap: -h.gap, released: p.released}
		}
		out = append(out, h)
	}
	return out
}

// handoffList prints hand-offs with their times after since.
func handoffList(hs []handoff, since time.Time) string {
	var out []string
	for _, h := range hs {
		out = append(out, h.String(since))
	}
	return "[" + strings.Join(out, "; ") + "]"
}
