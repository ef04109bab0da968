package tunnel

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Probes: every proxy answers on its device's probe address (ProbeAddr,
// inside the tunnel), and asks every peer's. A peer that does not answer
// ProbeRounds rounds in a row is down. Down tells two kinds apart: a
// peer that never answered (its node runs no herald proxy with --dsr, or
// the tunnel's UDP port is blocked between the two nodes: no flow may be
// tunneled there), and one that answered before (its node failed or is
// cut off: its endpoints are lost anyway). A peer is up until probes
// fail (a proxy that starts sends flows where the others do), and up
// again at its first answer.
const (
	// ProbePortOffset: the probes' UDP port is the tunnel's plus this;
	// it is only used inside the tunnel.
	ProbePortOffset = 1
	// ProbeRounds failed in a row make a peer down.
	ProbeRounds = 3
	// probeTries per peer and round, each waiting probeWait.
	probeTries = 3
	probeWait  = 300 * time.Millisecond
)

var (
	probeAsk    = []byte("herald-dsr?")
	probeAnswer = []byte("herald-dsr!")
)

// Prober probes the peers and answers theirs. SetPeers and Down are safe
// for concurrent use with Run.
type Prober struct {
	device string
	port   int
	log    *slog.Logger
	// exchange sends one probe to a peer and waits for its answer; the
	// UDP one by default, a fake in tests.
	exchange func(ctx context.Context, self, peer netip.Addr) error
	// OnChange is called when a peer goes down or comes up.
	OnChange func()

	mu     sync.Mutex
	self   netip.Addr
	peers  map[string]netip.Addr
	failed map[string]int
	down   map[string]bool
	// answered: the peer answered at least once.
	answered map[string]bool
}

// NewProber probes over device, on the tunnel's port + ProbePortOffset.
func NewProber(device string, tunnelPort int, log *slog.Logger) *Prober {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Prober{device: device, port: tunnelPort + ProbePortOffset, log: log, failed: map[string]int{}, down: map[string]bool{}, answered: map[string]bool{}}
	p.exchange = p.udpExchange
	return p
}

// SetPeers gives this node's probe address and the peers' (by name);
// peers gone are forgotten.
func (p *Prober) SetPeers(self netip.Addr, peers map[string]netip.Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.self, p.peers = self, maps.Clone(peers)
	for n := range p.failed {
		if _, ok := peers[n]; !ok {
			delete(p.failed, n)
			delete(p.down, n)
			delete(p.answered, n)
		}
	}
}

// Down are the peers that do not answer, each with whether it answered
// before.
func (p *Prober) Down() map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]bool, len(p.down))
	for n := range p.down {
		out[n] = p.answered[n]
	}
	return out
}

// Run answers the peers' probes and probes them every interval until
// ctx ends.
func (p *Prober) Run(ctx context.Context, interval time.Duration) {
	var resp *responder
	defer func() { resp.close() }()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		p.mu.Lock()
		self := p.self
		p.mu.Unlock()
		if self.IsValid() {
			resp = resp.ensure(p.device, self, p.port, p.log)
		}
		p.Round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Round probes every peer once (in parallel) and records the outcome.
func (p *Prober) Round(ctx context.Context) {
	p.mu.Lock()
	self, peers := p.self, maps.Clone(p.peers)
	p.mu.Unlock()
	if !self.IsValid() || len(peers) == 0 {
		return
	}
	type result struct {
		name string
		err  error
	}
	results := make(chan result, len(peers))
	for name, addr := range peers {
		go func() {
			var err error
			for range probeTries {
				if err = p.exchange(ctx, self, addr); err == nil {
					break
				}
			}
			results <- result{name, err}
		}()
	}
	changed := false
	for range peers {
		r := <-results
		p.mu.Lock()
		if _, known := p.peers[r.name]; known {
			if r.err == nil {
				p.failed[r.name] = 0
				p.answered[r.name] = true
				if p.down[r.name] {
					delete(p.down, r.name)
					changed = true
					p.log.Info("DSR tunnel: peer answers again", "peer", r.name)
				}
			} else if p.failed[r.name]++; p.failed[r.name] >= ProbeRounds && !p.down[r.name] {
				p.down[r.name] = true
				changed = true
				p.log.Warn("DSR tunnel: peer does not answer; its endpoints get SNAT forwarding", "peer", r.name, "rounds", p.failed[r.name], "err", r.err)
			}
		}
		p.mu.Unlock()
	}
	if changed && p.OnChange != nil {
		p.OnChange()
	}
}

// udpExchange sends one probe from self to peer over the device and
// waits probeWait for the answer.
func (p *Prober) udpExchange(ctx context.Context, self, peer netip.Addr) error {
	c, err := net.DialUDP("udp6", &net.UDPAddr{IP: self.AsSlice(), Zone: p.device},
		&net.UDPAddr{IP: peer.AsSlice(), Port: p.port, Zone: p.device})
	if err != nil {
		return err
	}
	defer c.Close()
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce)
	if _, err := c.Write(append(bytes.Clone(probeAsk), nonce...)); err != nil {
		return err
	}
	deadline := time.Now().Add(probeWait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.SetReadDeadline(deadline)
	buf := make([]byte, 64)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		if bytes.Equal(buf[:n], append(bytes.Clone(probeAnswer), nonce...)) {
			return nil
		}
	}
}

// responder answers probes on the device's probe address.
type responder struct {
	conn  *net.UDPConn
	index int
	addr  netip.Addr
	done  chan struct{}
}

// ensure returns a responder listening on the device as it is now:
// r itself, or a new one when the device was made anew (a new index)
// or the address changed; nil when it cannot listen yet.
func (r *responder) ensure(device string, self netip.Addr, port int, log *slog.Logger) *responder {
	ifc, err := net.InterfaceByName(device)
	if err != nil {
		r.close()
		return nil
	}
	if r != nil && r.index == ifc.Index && r.addr == self {
		return r
	}
	r.close()
	c, err := net.ListenUDP("udp6", &net.UDPAddr{IP: self.AsSlice(), Port: port, Zone: device})
	if err != nil {
		log.Warn("DSR tunnel: cannot answer the peers' probes yet", "err", fmt.Errorf("listening on [%s%%%s]:%d: %w", self, device, port, err))
		return nil
	}
	nr := &responder{conn: c, index: ifc.Index, addr: self, done: make(chan struct{})}
	go nr.serve()
	return nr
}

func (r *responder) serve() {
	defer close(r.done)
	buf := make([]byte, 64)
	for {
		n, from, err := r.conn.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if n == len(probeAsk)+8 && bytes.Equal(buf[:len(probeAsk)], probeAsk) {
			_, _ = r.conn.WriteToUDP(append(bytes.Clone(probeAnswer), buf[len(probeAsk):n]...), from)
		}
	}
}

func (r *responder) close() {
	if r == nil {
		return
	}
	r.conn.Close()
	<-r.done
}
