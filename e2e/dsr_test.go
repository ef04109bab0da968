package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/netns"
)

// Direct server return (#35, docs/dsr.md) in the lab: a LoadBalancer
// Service whose echo pods run on node3 only, announced over layer 2 by
// node1 or node2. The client holds dsrConns long-lived keep-alive
// connections through the address and asks on each every dsrEvery; the
// announcing node is then lost hard (its speaker SIGKILLed and its link
// down), the other takes the address over.
const (
	dsrConns   = 200
	dsrEvery   = 250 * time.Millisecond
	dsrName    = "dsr"
	dsrEndNode = "node3"
	// dsrTarget is the issue's: at least 99 % of the connections keep
	// exchanging data after the failover, none reset.
	dsrTarget = 0.99
)

// TestDSRFailover: with herald.io/forwarding: dsr the pods see the
// client's own address under externalTrafficPolicy Cluster, and the
// connections (at least 99 %, none reset) survive, in turn: a rolling
// restart of herald's speakers (its own upgrade), an endpoint added on
// another node and removed again (the table changes under pinned flows),
// and the hard loss of the announcing node. TestBenchDSRFailover runs
// the same trials without the annotation beside them: SNAT forwarding
// shows a node's address and loses the connections to the failover,
// which is today's behaviour of every bare-metal load balancer.
func TestDSRFailover(t *testing.T) { runDSRL2(t, []string{"dsr"}) }

// TestBenchDSRFailover is TestDSRFailover with SNAT's trials beside
// DSR's (make bench).
func TestBenchDSRFailover(t *testing.T) {
	harness.Bench(t)
	runDSRL2(t, []string{"snat", "dsr"})
}

func runDSRL2(t *testing.T, modes []string) {
	h := harness.Start(t)
	s := l2{h}
	s.readySpeakers(2 * time.Minute)
	ip, ip6 := dsrSetupL2(t, s)

	var results []dsrResult
	for _, mode := range modes {
		h.Kubectl("annotate", "--overwrite", "service", dsrName, "herald.io/forwarding="+mode)
		results = append(results, dsrRestartTrial(t, s, ip, mode), dsrEndpointTrial(t, s, ip, mode), dsrIPv6Check(t, s, ip6, mode), dsrTrial(t, s, ip, mode))
	}
	dsrBlockedTunnel(t, s, ip)
	reportDSR(t, fmt.Sprintf("DSR over L2 (%d keep-alive connections to pods on %s, announced by another node, a request each every %s, through: herald's rolling restart, an endpoint added and removed, the announcer's hard loss)", dsrConns, dsrEndNode, dsrEvery),
		"go test -count=1 -timeout 20m -run '^"+t.Name()+"$' -v .", results)
}

// dsrSetupL2 runs the speakers' proxies in the nftables mode with --dsr
// and makes the Service: two echo pods on dsrEndNode, its addresses (one
// per family) announced over layer 2 by the other nodes only. It returns
// the addresses.
func dsrSetupL2(t *testing.T, s l2) (ip4, ip6 string) {
	h := s.T
	s.speakerArgs([]string{"--proxy-mode=nftables", "--dsr"})
	t.Cleanup(func() {
		_, _ = h.K.Run(h.Ctx, "delete", "service", dsrName, "--ignore-not-found")
		_, _ = h.K.Run(h.Ctx, "delete", "deployment", dsrName, "--ignore-not-found")
		_, _ = h.K.Run(h.Ctx, "-n", heraldNS, "delete", "l2advertisement,ipaddresspool", dsrName, "--ignore-not-found")
	})
	h.Apply(l2Objects(dsrName, "198.51.100.240-198.51.100.249", "2001:db8:0:1::240-2001:db8:0:1::249", dsrEndNode))
	h.Kubectl("scale", "deployment", dsrName, "--replicas=2")
	h.Kubectl("-n", heraldNS, "patch", "l2advertisement", dsrName, "--type=merge", "-p",
		`{"spec":{"nodeSelectors":[{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"NotIn","values":["`+dsrEndNode+`"]}]}]}}`)
	h.ReadyPods("app="+dsrName, 2, 2*time.Minute)
	h.Apply(fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: default}
spec:
  type: LoadBalancer
  ipFamilyPolicy: PreferDualStack
  selector: {app: %[1]s}
  ports: [{port: 80, targetPort: 8080, protocol: TCP}]
`, dsrName))
	h.Poll(time.Minute, "an address of each family", func() (bool, string) {
		ips := ctl{h}.ips("default", dsrName)
		for _, a := range strings.Split(ips, ",") {
			if strings.Contains(a, ":") {
				ip6 = a
			} else if a != "" {
				ip4 = a
			}
		}
		return ip4 != "" && ip6 != "", ips
	})
	return ip4, ip6
}

// reportDSR prints the trials' table and its command, and fails the DSR
// trials (mode dsr, or dsr/...) that miss the target or in which the pods
// did not see the client's own address.
func reportDSR(t *testing.T, title, cmd string, results []dsrResult) {
	var b strings.Builder
	fmt.Fprintf(&b, "BENCH %s:\n", title)
	fmt.Fprintf(&b, "  %-14s %-9s %-6s %-10s %-7s %-12s %s\n", "mode", "survived", "reset", "other err", "silent", "longest wait", "pods saw")
	for _, r := range results {
		fmt.Fprintf(&b, "  %-14s %-9s %-6d %-10d %-7d %-12s %s\n", r.mode, fmt.Sprintf("%d/%d", r.survived, r.conns), r.reset, r.other, r.silent, r.outage.Round(time.Millisecond), r.seen)
	}
	if strings.HasPrefix(t.Name(), "TestBench") {
		cmd = "HERALD_BENCH=1 " + cmd
	}
	b.WriteString("BENCH reproduce: cd e2e && " + cmd + "\n")
	t.Log("\n" + b.String())
	for _, r := range results {
		if r.mode != "dsr" && !strings.HasPrefix(r.mode, "dsr/") {
			continue
		}
		if float64(r.survived) < dsrTarget*float64(r.conns) || r.reset > 0 {
			t.Errorf("%s: %d of %d connections survived, %d reset; the target is %.0f %% and none reset", r.mode, r.survived, r.conns, r.reset, 100*dsrTarget)
		}
		if r.seen != "the client" {
			t.Errorf("%s: the pods saw %s, want the client's own address", r.mode, r.seen)
		}
	}
}

type dsrResult struct {
	mode            string
	conns, survived int
	reset, other    int
	// silent: no error, yet no answer in the end (a request still
	// waiting, retransmitting).
	silent int
	outage time.Duration
	seen   string
}

// dsrAnnouncer waits for one announcer of ip that ARP agrees with (for
// an IPv6 address, one announcer).
func dsrAnnouncer(s l2, ip string) string {
	h := s.T
	s.speakersInCluster(3 * time.Minute)
	nodeOf := s.macOwners()
	var w string
	h.Poll(2*time.Minute, "one announcer answering ARP", func() (bool, string) {
		who, anns := s.announcersOf("default", dsrName, ip)
		if len(who) != 1 {
			return false, fmt.Sprint(anns)
		}
		w = who[0]
		if strings.Contains(ip, ":") {
			return true, w // arping is IPv4's; the speaker tests check NDP
		}
		macs, _ := s.arping(ip, 1, 1)
		return len(macs) == 1 && nodeOf[macs[0]] == w, fmt.Sprint(w, macs)
	})
	// The rules of the annotation reach every node within a sync.
	time.Sleep(3 * time.Second)
	return w
}

// dsrRestartTrial restarts every speaker (a rolling update of the
// DaemonSet, as an upgrade) under the connections.
func dsrRestartTrial(t *testing.T, s l2, ip, mode string) dsrResult {
	w := dsrAnnouncer(s, ip)
	load := openDSRLoad(t, s.Layout.Client, ip, mode)
	defer load.close()
	res := load.through(func() {
		s.Kubectl("-n", heraldNS, "rollout", "restart", "daemonset/"+speakerDS)
		s.Kubectl("-n", heraldNS, "rollout", "status", "--timeout=3m", "daemonset/"+speakerDS)
	}, 8*time.Second, 5*time.Second, 3*time.Second)
	res.mode = mode + "/restart"
	t.Logf("%s: the speakers restarted (%s announced %s): %d of %d connections answered afterwards; first errors: %s",
		res.mode, w, ip, res.survived, res.conns, firstErrors(load.conns, 3))
	return res
}

// dsrEndpointTrial adds an endpoint on the announcer's node, then removes
// it, under the connections.
func dsrEndpointTrial(t *testing.T, s l2, ip, mode string) dsrResult {
	w := dsrAnnouncer(s, ip)
	load := openDSRLoad(t, s.Layout.Client, ip, mode)
	defer load.close()
	extra := dsrName + "-extra"
	t.Cleanup(func() { _, _ = s.K.Run(s.Ctx, "delete", "pod", extra, "--ignore-not-found", "--wait=false") })
	res := load.through(func() {
		s.Apply(echoPodYAML(extra, dsrName, w))
		s.ReadyPods("app="+dsrName, 3, 2*time.Minute)
		time.Sleep(3 * time.Second)
		s.Kubectl("delete", "pod", extra)
		s.ReadyPods("app="+dsrName, 2, 2*time.Minute)
	}, 8*time.Second, 6*time.Second, 3*time.Second)
	res.mode = mode + "/endpoints"
	t.Logf("%s: an endpoint added on %s and removed: %d of %d connections answered afterwards; first errors: %s",
		res.mode, w, res.survived, res.conns, firstErrors(load.conns, 3))
	return res
}

// dsrIPv6Check opens connections to the Service's IPv6 address (the
// tunnel carries IPv6 inside the nodes' IPv4 VXLAN), checks what the pods
// see, and sends a body larger than the path's MTU.
func dsrIPv6Check(t *testing.T, s l2, ip6, mode string) dsrResult {
	w6 := dsrAnnouncer(s, ip6)
	load := openDSRLoad(t, s.Layout.Client, ip6, mode)
	defer load.close()
	if err := bigBodyThrough(s.Layout.Client, ip6); err != nil {
		t.Errorf("%s: IPv6: a request larger than the path's MTU: %v", mode, err)
	}
	res := load.through(func() {}, 5*time.Second, 3*time.Second, time.Second)
	res.mode = mode + "/ipv6"
	t.Logf("%s: %s announces %s: the pods saw %s; %d of %d connections answered", res.mode, w6, ip6, load.seen, res.survived, res.conns)
	return res
}

// dsrBlockedTunnel blocks the tunnel's UDP port on the endpoints' node
// (a firewall): the other nodes' probes go unanswered, they leave its
// endpoints, here every one, out of the table, so the Service gets SNAT
// forwarding; herald status says so, and new connections work, through
// SNAT; unblocked, DSR comes back.
func dsrBlockedTunnel(t *testing.T, s l2, ip string) {
	h := s.T
	dsrAnnouncer(s, ip)
	const table = "hle-block-dsr"
	rule := fmt.Sprintf("table inet %s { chain in { type filter hook input priority -400; policy accept; udp dport 8475 drop; }; }", table)
	if _, err := h.Exec(dsrEndNode, "nft", rule); err != nil {
		t.Fatal(err)
	}
	blocked := true
	unblock := func() {
		if blocked {
			if _, err := h.Exec(dsrEndNode, "nft", "delete", "table", "inet", table); err != nil {
				t.Error(err)
			}
			blocked = false
		}
	}
	t.Cleanup(unblock)
	start := time.Now()
	var st string
	h.Poll(90*time.Second, "herald status to show SNAT forwarding for "+dsrName+" with the tunnel to "+dsrEndNode+" blocked", func() (bool, string) {
		st, _ = s.heraldStatus("default/" + dsrName)
		return strings.Contains(st, "forwarding stays SNAT") && strings.Contains(st, "on "+dsrEndNode), st
	})
	fellBack := time.Since(start)
	t.Logf("tunnel to %s blocked: SNAT %s later; herald status default/%s:\n%s", dsrEndNode, fellBack.Round(time.Second), dsrName, st)
	// New connections work meanwhile, SNATed (a node's address).
	var seen string
	h.Poll(30*time.Second, "new connections answered through SNAT", func() (bool, string) {
		addrs, client, err := askFresh(t, h.Layout.Client, ip, 20)
		if err != nil {
			return false, err.Error()
		}
		seen = fmt.Sprint(addrs)
		return addrs[client] == 0, seen
	})
	unblock()
	start = time.Now()
	h.Poll(90*time.Second, "DSR again once the tunnel passes", func() (bool, string) {
		addrs, client, err := askFresh(t, h.Layout.Client, ip, 5)
		if err != nil {
			return false, err.Error()
		}
		return addrs[client] == 5, fmt.Sprint(addrs)
	})
	t.Logf("blocked tunnel: 20 of 20 new connections answered through SNAT (the pods saw %s); DSR back %s after the tunnel passed again", seen, time.Since(start).Round(time.Second))
}

// askFresh opens n connections from ns to ip, asks once on each and
// closes them: the client addresses the pods saw, counted, and the
// client's own address.
func askFresh(t *testing.T, ns, ip string, n int) (map[string]int, string, error) {
	conns, err := dialDSR(ns, ip, n)
	if err != nil {
		return nil, "", err
	}
	l := &dsrLoad{t: t, conns: conns}
	defer l.close()
	addrs := map[string]int{}
	for _, c := range conns {
		a, err := c.ask(3 * time.Second)
		if err != nil {
			return nil, "", err
		}
		addrs[a]++
	}
	return addrs, conns[0].c.LocalAddr().(*net.TCPAddr).IP.String(), nil
}

// dsrTrial opens the connections, checks what the pods see, fails the
// announcer hard, and counts the connections that answer afterwards.
func dsrTrial(t *testing.T, s l2, ip, mode string) dsrResult {
	h := s.T
	w := dsrAnnouncer(s, ip)
	load := openDSRLoad(t, h.Layout.Client, ip, mode)
	defer load.close()
	if err := bigBodyThrough(h.Layout.Client, ip); err != nil {
		t.Errorf("%s: a request larger than the path's MTU: %v", mode, err)
	}
	var restore func()
	res := load.through(func() { restore = s.loseHard(t, w) }, 8*time.Second, 12*time.Second, 5*time.Second)
	restore()
	res.mode = mode + "/failover"
	t.Logf("%s: %s announced %s and was lost: %d of %d connections answered 5 s after and later; first errors: %s",
		mode, w, ip, res.survived, res.conns, firstErrors(load.conns, 3))
	return res
}

// loseHard loses node as a pulled cable would, with its speaker killed at
// once (SIGKILL); the returned func brings the link and its routes back.
func (s l2) loseHard(t *testing.T, node string) (restore func()) {
	v4, v6 := s.routes(node)
	_ = syscallKill(s.speakerPID(s.speakers()[node]))
	if _, err := s.Exec(node, "ip", "link", "set", "eth0", "down"); err != nil {
		t.Error(err)
	}
	return func() {
		if err := s.restoreLink(node, v4, v6); err != nil {
			t.Fatal(err)
		}
	}
}

// dsrLoad is the long-lived connections of one trial.
type dsrLoad struct {
	t     *testing.T
	mode  string
	conns []*dsrConn
	seen  string
}

// openDSRLoad opens dsrConns connections from the namespace ns to ip
// and asks once on each: seen says whether the pods saw the client's own
// address.
func openDSRLoad(t *testing.T, ns, ip, mode string) *dsrLoad {
	conns, err := dialDSR(ns, ip, dsrConns)
	if err != nil {
		t.Fatalf("%s: %v", mode, err)
	}
	t.Cleanup(func() {
		for _, c := range conns {
			c.c.Close()
		}
	})
	clientIP := conns[0].c.LocalAddr().(*net.TCPAddr).IP.String()
	seen := map[string]int{}
	for _, c := range conns {
		addr, err := c.ask(5 * time.Second)
		if err != nil {
			t.Fatalf("%s: before the event: %v", mode, err)
		}
		seen[addr]++
	}
	l := &dsrLoad{t: t, mode: mode, conns: conns}
	if len(seen) == 1 && seen[clientIP] == len(conns) {
		l.seen = "the client"
	} else {
		l.seen = fmt.Sprintf("%v (client %s)", seen, clientIP)
	}
	return l
}

// through asks on every connection every dsrEvery (each request may take
// reqTimeout, retransmissions included) while event runs, from 2 s in,
// and for settle after it returned; a connection survived when it had no
// error and was answered later than after past the event's return.
func (l *dsrLoad) through(event func(), reqTimeout, settle, after time.Duration) dsrResult {
	if after+2*dsrEvery > settle {
		l.t.Fatalf("through: answers are counted from %s after the event, but the load stops %s after it", after, settle)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i, c := range l.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * dsrEvery / time.Duration(len(l.conns)))
			c.run(stop, reqTimeout)
		}()
	}
	time.Sleep(2 * time.Second)
	event()
	at := time.Now() // the event done (a rollout, a pod ready) or begun (a kill)
	time.Sleep(settle)
	close(stop)
	wg.Wait()
	res := dsrResult{mode: l.mode, conns: len(l.conns), seen: l.seen}
	for _, c := range l.conns {
		switch {
		case c.err == nil && c.lastOK.After(at.Add(after)):
			res.survived++
		case c.err != nil && errors.Is(c.err, syscall.ECONNRESET):
			res.reset++
		case c.err != nil:
			res.other++
		default:
			res.silent++
		}
		if g := c.maxGap; g > res.outage {
			res.outage = g
		}
	}
	return res
}

// dsrConn is one keep-alive connection to the echo server.
type dsrConn struct {
	c      net.Conn
	r      *bufio.Reader
	err    error
	lastOK time.Time
	maxGap time.Duration
}

// dialDSR opens n connections from the client's namespace.
func dialDSR(ns, ip string, n int) ([]*dsrConn, error) {
	var out []*dsrConn
	err := netns.Do(ns, func() error {
		d := net.Dialer{Timeout: 5 * time.Second}
		for range n {
			c, err := d.Dial("tcp", net.JoinHostPort(ip, "80"))
			if err != nil {
				return err
			}
			out = append(out, &dsrConn{c: c, r: bufio.NewReader(c)})
		}
		return nil
	})
	if err != nil {
		for _, c := range out {
			c.c.Close()
		}
		return nil, fmt.Errorf("dialing %s from %s: %w", ip, ns, err)
	}
	return out, nil
}

// ask sends one request and returns the client address the page shows.
func (c *dsrConn) ask(timeout time.Duration) (string, error) {
	addr, _, err := c.post(timeout, "")
	return addr, err
}

// post sends a request with body (a GET without one) and returns the
// client address the page shows and the page.
func (c *dsrConn) post(timeout time.Duration, body string) (string, string, error) {
	_ = c.c.SetDeadline(time.Now().Add(timeout))
	req := "GET /dsr HTTP/1.1\r\nHost: dsr\r\n\r\n"
	if body != "" {
		req = fmt.Sprintf("POST /dsr HTTP/1.1\r\nHost: dsr\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
	if _, err := c.c.Write([]byte(req)); err != nil {
		return "", "", err
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return "", "", err
	}
	page, err := readAllLimited(resp)
	if err != nil {
		return "", page, err
	}
	for _, l := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(l, "client_address="); ok {
			return strings.TrimSpace(v), page, nil
		}
	}
	return "", page, fmt.Errorf("no client_address in the answer")
}

// bigBodyThrough sends a body of several full-sized segments on a
// connection of its own: through the tunnel the client's 1500-byte
// packets do not fit, and path MTU discovery must shrink them.
func bigBodyThrough(ns, ip string) error {
	conns, err := dialDSR(ns, ip, 1)
	if err != nil {
		return err
	}
	defer conns[0].c.Close()
	body := strings.Repeat("0123456789abcdef", 600) // 9,600 bytes
	_, page, err := conns[0].post(15*time.Second, body)
	if err != nil {
		return err
	}
	if !strings.Contains(page, body) {
		return fmt.Errorf("the echo of a %d-byte body came back without it (%d bytes)", len(body), len(page))
	}
	return nil
}

func (l *dsrLoad) close() {
	for _, c := range l.conns {
		c.c.Close()
	}
}

func readAllLimited(resp *http.Response) (string, error) {
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for b.Len() < 1<<20 {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			if errors.Is(err, io.EOF) {
				return b.String(), nil
			}
			return b.String(), err
		}
	}
	return b.String(), nil
}

// run asks every dsrEvery until stop or the first error; a request may
// take timeout (retransmissions through the failover).
func (c *dsrConn) run(stop <-chan struct{}, timeout time.Duration) {
	tick := time.NewTicker(dsrEvery)
	defer tick.Stop()
	c.lastOK = time.Now()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if _, err := c.ask(timeout); err != nil {
			c.err = err
			return
		}
		now := time.Now()
		if g := now.Sub(c.lastOK); g > c.maxGap {
			c.maxGap = g
		}
		c.lastOK = now
	}
}

func firstErrors(conns []*dsrConn, n int) string {
	var out []string
	for _, c := range conns {
		if c.err != nil && len(out) < n {
			out = append(out, c.err.Error())
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}
