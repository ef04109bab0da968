package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/herald-lb/herald/e2e/lab/labbin"
	"github.com/herald-lb/herald/e2e/lab/prober"
)

// StartProbeProcess probes each of ips on port from namespace ns, a
// request every every (1 s timeout each), from a process of its own:
// bin is the lab's prober (labbin.Prober), started in ns with `ip netns
// exec`. The test process forks short commands
// while it probes, and a vfork child that is slow to exec holds the
// forking thread: a second or more, seen in the churn soak, in which the
// test's own requests passed their deadlines although the network had
// answered each of them (docs/testing.md). The prober forks nothing, and
// it reports when it sent a request late (MaxLate), so a failure it
// counts is the network's. Stopping any of the returned probes stops
// them all, once the requests in flight are done.
func StartProbeProcess(bin, ns string, ips []string, port int, every time.Duration) ([]*Probe, error) {
	return startProbeProcess(bin, ns, ips, port, every)
}

// StartKeptProbeProcess is StartProbeProcess with each address's requests
// sent over one connection kept open (lab-prober -persistent), connecting
// anew only after a failure; Conns counts the connections opened. One
// connection that lasts the whole probe is what a client's established
// connection (a database session, a stream) sees while an address moves.
func StartKeptProbeProcess(bin, ns string, ips []string, port int, every time.Duration) ([]*Probe, error) {
	return startProbeProcess(bin, ns, ips, port, every, "-persistent")
}

func startProbeProcess(bin, ns string, ips []string, port int, every time.Duration, extra ...string) ([]*Probe, error) {
	if len(ips) == 0 {
		return nil, fmt.Errorf("probing from %s: no address", ns)
	}
	args := append([]string{"netns", "exec", ns, bin, "-port", strconv.Itoa(port), "-every", every.String(), "-timeout", "1s"}, extra...)
	cmd := exec.Command("ip", append(args, ips...)...)
	// No Pdeathsig: set from an unlocked goroutine it would kill the
	// prober when the forking thread ends. Its standard input ending
	// (this process gone, or Stop) ends it.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	// Read only after Wait, which waits for the copying.
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s in %s: %w", bin, ns, err)
	}
	byIP := map[string]*Probe{}
	var probes []*Probe
	for _, ip := range ips {
		p := &Probe{NS: ns, IP: ip, Port: port, start: start}
		byIP[ip] = p
		probes = append(probes, p)
	}
	// A line the harness cannot take is the prober's failure, counted on
	// the first probe, so that a broken prober can never pass as quiet.
	broken := func(what string) {
		p := probes[0]
		p.mu.Lock()
		defer p.mu.Unlock()
		p.failed = append(p.failed, "the prober process: "+what)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			l, err := prober.ParseLine(sc.Text())
			if err != nil {
				broken(err.Error())
				continue
			}
			p := byIP[l.Target]
			if p == nil {
				broken(fmt.Sprintf("a line for %s, which it was not asked to probe", l.Target))
				continue
			}
			p.record(l)
		}
		if err := sc.Err(); err != nil {
			broken("reading its output: " + err.Error())
		}
		// Never leave it blocked on a full pipe.
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = stdin.Close()
			select {
			case <-read:
			case <-time.After(10 * time.Second): // its requests' timeout is 1 s
				_ = cmd.Process.Kill()
				<-read
			}
			if err := cmd.Wait(); err != nil {
				broken(fmt.Sprintf("%v: %s", err, stderr.String()))
			}
			for _, p := range probes {
				p.wg.Wait() // the failures' neighbour reads
			}
		})
	}
	for _, p := range probes {
		p.stopProc = stop
	}
	return probes, nil
}

// record takes one line of the prober's output. A failure's neighbour
// entry is read beside, not here: the reads are slow (a fork of `ip`),
// and the prober must never wait on a full pipe for them.
func (p *Probe) record(l prober.Line) {
	at := l.At.Sub(p.start)
	p.mu.Lock()
	defer p.mu.Unlock()
	switch l.Kind {
	case prober.LineOK:
		p.sent++
		p.okAt = append(p.okAt, at)
	case prober.LineFail:
		p.sent++
		p.failAt = append(p.failAt, l.At)
		i := len(p.failed)
		p.failed = append(p.failed, fmt.Sprintf("%s: %s", at.Round(time.Millisecond), l.Message))
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			n := neighbor(p.NS, p.IP)
			p.mu.Lock()
			defer p.mu.Unlock()
			p.failed[i] += " (client's neighbor entry then: " + n + ")"
		}()
	case prober.LineLate:
		p.maxLate = max(p.maxLate, l.Late)
	case prober.LineConn:
		p.conns++
	}
}

// Conns is how many connections a kept probe (StartKeptProbeProcess)
// opened: 1 when its first connection served every request.
func (p *Probe) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conns
}

// MaxLate is the longest a process-fed probe (StartProbeProcess) sent a
// request after its turn: how long the prober itself was held up.
func (p *Probe) MaxLate() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.maxLate
}

// StartProbe probes ip:80 from ns every 20 ms from the lab's prober
// process (StartProbeProcess): the tests' probes never run in the test
// process, whose forks of short commands can hold it up for a second
// and fail requests the network answered. It fails the test if the
// prober cannot start.
func (h *T) StartProbe(ns, ip string) *Probe { return h.StartProbePort(ns, ip, 80) }

// StartProbePort is StartProbe to another port (a NodePort, say).
func (h *T) StartProbePort(ns, ip string, port int) *Probe {
	h.T.Helper()
	ps, err := StartProbeProcess(h.Lab.Bins.Path(labbin.Prober), ns, []string{ip}, port, 20*time.Millisecond)
	if err != nil {
		h.T.Fatalf("probing %s:%d from %s: %v", ip, port, ns, err)
	}
	h.T.Cleanup(ps[0].Stop) // a failed test leaves no prober running
	return ps[0]
}
