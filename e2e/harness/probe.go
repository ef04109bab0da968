package harness

import (
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/herald-lb/herald/e2e/lab/netns"
	"github.com/herald-lb/herald/e2e/lab/prober"
)

// EchoGet sends one GET / to ip:80 from the namespace on a new
// connection and tells whether the echo server answered.
//
// The client closes the connection, not the server (HTTP/1.1, the body
// read to its Content-Length): TIME_WAIT then stays on the client, never
// in the echo pod. Under SNAT (MASQUERADE --random-fully, as kube-proxy
// does it) the node may hand a new connection a source port whose tuple
// the pod still holds in TIME_WAIT, and with per-connection TCP
// timestamp offsets the pod's PAWS check refuses about half of those
// SYNs. The client resets and resends its SYN within ~10 ms, but a
// second such refusal waits for the 1 s SYN retransmission, which is the
// probe's whole budget. That is the kernel's and any NAT's behaviour,
// not herald's, and it would fail a lone request in a few thousand
// (measured: 46 PAWS refusals in 24,000 HTTP/1.0 requests).
func EchoGet(ns, ip string, timeout time.Duration) (bool, error) {
	return EchoGetPort(ns, ip, 80, timeout)
}

// EchoGetPort is EchoGet to another port (a NodePort, say).
func EchoGetPort(ns, ip string, port int, timeout time.Duration) (bool, error) {
	var c net.Conn
	err := netns.Do(ns, func() (err error) {
		c, err = net.DialTimeout("tcp", net.JoinHostPort(ip, strconv.Itoa(port)), timeout)
		return err
	})
	if err != nil {
		return false, err
	}
	defer c.Close()
	return prober.Ask(c, ip, time.Now().Add(timeout))
}

// Probe is one address's requests, sent by the lab's prober process
// (StartProbeProcess, T.StartProbe): a GET / on a new connection every
// period (1 s timeout each) until stopped, with the failures kept.
type Probe struct {
	NS, IP string
	Port   int
	start  time.Time
	wg     sync.WaitGroup // the failures' neighbour reads

	mu     sync.Mutex
	sent   int
	failed []string
	failAt []time.Time     // when each failed request was sent
	okAt   []time.Duration // when each answered request was sent
	// stopProc ends the prober process; maxLate is the longest it sent
	// a request after its turn.
	stopProc func()
	maxLate  time.Duration
	// conns counts the connections a kept probe opened.
	conns int
}

// neighborReads bounds the neighbor reads of failed requests in flight,
// across every probe. Unbounded, a burst of failures (20 probes at 50
// requests a second each in the churn soak) forked hundreds of `ip` at
// once: the machine's load went past 20, the API server stopped
// answering, more requests failed, and the test process ran out of file
// descriptors. A lone failure, the case the read is for, always gets it.
var neighborReads = make(chan struct{}, 4)

// neighbor is the namespace's neighbor entry for ip, to tell a failed
// request that went to a node's MAC from one that found none: which MAC,
// and in which state, is the first question a rare lone failure raises.
func neighbor(ns, ip string) string {
	select {
	case neighborReads <- struct{}{}:
		defer func() { <-neighborReads }()
	default:
		return "not read: other failed requests' reads in flight"
	}
	mac, state := Neighbor(ns, ip)
	if mac == "" {
		return state
	}
	return mac + " " + state
}

// Since is the time since the probe started, as failures are stamped.
func (p *Probe) Since() time.Duration { return time.Since(p.start).Round(time.Millisecond) }

// Stop ends the probe once its requests in flight are done.
func (p *Probe) Stop() { p.stopProc() }

// Result counts the requests sent and failed.
func (p *Probe) Result() (sent, failed int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent, len(p.failed)
}

// FailedAt are the times the failed requests were sent.
func (p *Probe) FailedAt() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.failAt)
}

// MaxGap is the longest time between two answered requests (by send time).
func (p *Probe) MaxGap() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	at := slices.Clone(p.okAt)
	slices.Sort(at)
	var gap time.Duration
	for i := 1; i < len(at); i++ {
		gap = max(gap, at[i]-at[i-1])
	}
	return gap
}

// Failures lists the first ten failures.
func (p *Probe) Failures() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.failed) > 10 {
		return strings.Join(p.failed[:10], "; ") + fmt.Sprintf("; and %d more", len(p.failed)-10)
	}
	return strings.Join(p.failed, "; ")
}

var clientAddressRE = regexp.MustCompile(`client_address=(\S+)`)

// ClientAddress is the echo server's client_address in page, "" if
// absent.
func ClientAddress(page string) string {
	if m := clientAddressRE.FindStringSubmatch(page); m != nil {
		return m[1]
	}
	return ""
}
