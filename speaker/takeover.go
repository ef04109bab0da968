package speaker

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/herald-lb/herald/speaker/layer2"
	l2plan "github.com/herald-lb/herald/speaker/layer2/plan"
)

// A takeover check closes the window in which two nodes answer for one
// address. memberlist declares a member dead when it cannot reach it,
// which is also what happens when memberlist's port is cut between two
// groups of nodes while the LAN works. The larger group then takes the
// smaller one's addresses as soon as it declares the first of its
// members dead, while that member keeps answering until it has declared
// enough of the others dead to find itself a minority: a second or so of
// clients flipping between two MACs. So a node that wins an address from
// a member declared dead (not one that left) asks the LAN first, as the
// clients do, whether anyone still answers for it, and answers only once
// nobody does. A node that really died answers nothing, so this costs a
// real failover one check (TakeoverCheckWait); a partitioned one is
// waited for until it stops, up to MaxTakeoverHold.

// TakeoverCheck asks the LAN whether another node answers for an address.
type TakeoverCheck interface {
	// Answering returns the MAC of a node other than this one heard
	// answering for addr on iface, nil when none was within the check's
	// wait.
	Answering(ctx context.Context, iface string, addr netip.Addr) (net.HardwareAddr, error)
}

// DefaultTakeoverCheckWait is how long a takeover check listens for an
// answer: on a LAN an ARP or NDP answer takes well under a millisecond,
// and herald's responder answers in userspace within a few; the wait is
// what every failover from a dead node costs.
const DefaultTakeoverCheckWait = 100 * time.Millisecond

// MaxTakeoverHold bounds how long an address waits for a former winner
// that still answers. A member cut off from memberlist finds itself a
// minority within its lone suspicion time (memberlist's 1.8 s at 10
// members, 5.4 s at 1,000 with herald's timers) and then stops; an
// answer that lasts longer is not one that will stop by itself (a
// minority that cannot read the heartbeat Lease, or a device answering
// for every address), and the address is answered here regardless.
const MaxTakeoverHold = 10 * time.Second

// takeoverRecheck is the pause between two checks while the former
// winner still answers.
const takeoverRecheck = 100 * time.Millisecond

// Takeover outcomes, for herald_speaker_takeovers_total.
const (
	takeoverClear     = "clear"     // nobody answered at the first check
	takeoverWaited    = "waited"    // the former winner answered, then stopped
	takeoverForced    = "forced"    // it still answered after MaxTakeoverHold
	takeoverUnchecked = "unchecked" // the check failed; answered at once
)

// takeover is an address this node won from a member declared dead, while
// it checks that the member no longer answers for it.
type takeover struct {
	from    string
	since   time.Time
	ifaces  []string // where to check; replaced, never modified
	ctx     context.Context
	cancel  context.CancelFunc
	clear   bool
	mac     string // the last MAC heard answering
	answers int
}

// contested returns the addresses the election must not answer yet if
// this node wins them: those under check, and those whose winner in the
// last election is a member declared dead (known, not live), which this
// sync may hand to this node. known is sorted (heartbeat.Standing.Known).
func (s *Speaker) contested(known []string, live map[string]bool, now time.Time) map[netip.Addr]bool {
	if s.d.Takeover == nil {
		return nil
	}
	out := map[netip.Addr]bool{}
	s.tkMu.Lock()
	defer s.tkMu.Unlock()
	for a, tk := range s.takeovers {
		if tk.clear {
			continue
		}
		if waited := now.Sub(tk.since); waited >= MaxTakeoverHold {
			tk.clear = true
			tk.cancel()
			s.d.Metrics.takeovers.WithLabelValues(takeoverForced).Inc()
			s.d.Log.Warn("answering for an address whose former winner, declared dead, still answers for it on the LAN after the longest wait; two nodes may answer for it until that one stops",
				"ip", a, "from", tk.from, "mac", tk.mac, "waited", waited.Round(time.Millisecond))
			continue
		}
		out[a] = true
	}
	for _, ip := range s.state.IPs {
		w := ip.Winner
		if w == "" || w == s.d.Node || live[w] {
			continue
		}
		if _, dead := slices.BinarySearch(known, w); !dead {
			continue // it left gracefully, or its Node was deleted
		}
		if _, ok := s.takeovers[ip.Addr]; !ok {
			out[ip.Addr] = true
		}
	}
	return out
}

// startTakeovers starts a check for every address st holds back as
// contested that has none yet, and drops the takeovers of addresses no
// longer held back (answered, or not won here any more).
func (s *Speaker) startTakeovers(st l2plan.State, now time.Time) {
	if s.d.Takeover == nil {
		return
	}
	s.tkMu.Lock()
	defer s.tkMu.Unlock()
	held := map[netip.Addr]bool{}
	for _, ip := range st.IPs {
		if ip.Reason != l2plan.ReasonContested {
			continue
		}
		held[ip.Addr] = true
		if tk, ok := s.takeovers[ip.Addr]; ok {
			tk.ifaces = ip.Checking
			continue
		}
		prev, _ := s.state.Lookup(ip.Addr)
		ctx, cancel := context.WithCancel(s.ctx)
		tk := &takeover{from: prev.Winner, since: now, ifaces: ip.Checking, ctx: ctx, cancel: cancel}
		s.takeovers[ip.Addr] = tk
		s.d.Log.Info("won an address from a node declared dead; checking that it no longer answers for it before answering",
			"ip", ip.Addr, "from", tk.from, "interfaces", ip.Checking)
		time.AfterFunc(MaxTakeoverHold, s.Trigger)
		go s.checkTakeover(ip.Addr, tk)
	}
	for a, tk := range s.takeovers {
		if !held[a] {
			tk.cancel()
			delete(s.takeovers, a)
		}
	}
}

// checkTakeover checks until nobody else answers for a, the takeover is
// dropped, or the check fails; then the next sync answers for a.
func (s *Speaker) checkTakeover(a netip.Addr, tk *takeover) {
	for {
		s.tkMu.Lock()
		ifaces := tk.ifaces
		s.tkMu.Unlock()
		mac, err := s.answering(tk.ctx, ifaces, a)
		if tk.ctx.Err() != nil {
			return
		}
		s.tkMu.Lock()
		if s.takeovers[a] != tk || tk.clear {
			s.tkMu.Unlock()
			return
		}
		waited := time.Since(tk.since).Round(time.Millisecond)
		switch {
		case err != nil:
			tk.clear = true
			s.d.Metrics.takeovers.WithLabelValues(takeoverUnchecked).Inc()
			s.d.Log.Warn("cannot check whether the former winner of an address still answers for it; answering", "ip", a, "from", tk.from, "err", err)
		case mac == nil && tk.answers == 0:
			tk.clear = true
			s.d.Metrics.takeovers.WithLabelValues(takeoverClear).Inc()
		case mac == nil:
			tk.clear = true
			s.d.Metrics.takeovers.WithLabelValues(takeoverWaited).Inc()
			s.d.Log.Info("the former winner of an address stopped answering for it; answering", "ip", a, "from", tk.from, "waited", waited)
		default:
			if tk.answers == 0 {
				s.d.Log.Warn("the former winner of an address, declared dead by memberlist, still answers for it on the LAN (memberlist cut off between nodes?); waiting for it to stop before answering",
					"ip", a, "from", tk.from, "mac", mac.String())
			}
			tk.answers++
			tk.mac = mac.String()
		}
		clear := tk.clear
		s.tkMu.Unlock()
		if clear {
			s.Trigger()
			return
		}
		select {
		case <-tk.ctx.Done():
			return
		case <-time.After(takeoverRecheck):
		}
	}
}

// answering checks every interface at once and returns the first MAC
// heard, or the first error when none was.
func (s *Speaker) answering(ctx context.Context, ifaces []string, a netip.Addr) (net.HardwareAddr, error) {
	type result struct {
		mac net.HardwareAddr
		err error
	}
	res := make(chan result, len(ifaces))
	for _, i := range ifaces {
		go func() {
			mac, err := s.d.Takeover.Answering(ctx, i, a)
			if err != nil {
				err = fmt.Errorf("interface %s: %w", i, err)
			}
			res <- result{mac, err}
		}()
	}
	var firstErr error
	for range ifaces {
		r := <-res
		if r.mac != nil {
			return r.mac, nil
		}
		if firstErr == nil {
			firstErr = r.err
		}
	}
	return nil, firstErr
}

// stopTakeovers cancels every check (the speaker stops).
func (s *Speaker) stopTakeovers() {
	s.tkMu.Lock()
	defer s.tkMu.Unlock()
	for a, tk := range s.takeovers {
		tk.cancel()
		delete(s.takeovers, a)
	}
}

// packetTakeoverCheck is the real TakeoverCheck: a layer2.Probe on an
// AF_PACKET socket opened for the check.
type packetTakeoverCheck struct{ wait time.Duration }

// PacketTakeoverCheck returns the real TakeoverCheck, listening wait for
// an answer.
func PacketTakeoverCheck(wait time.Duration) TakeoverCheck { return packetTakeoverCheck{wait} }

func (p packetTakeoverCheck) Answering(ctx context.Context, iface string, addr netip.Addr) (net.HardwareAddr, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, err
	}
	c, err := layer2.ListenProbe(ifi, addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return layer2.Probe(ctx, c, ifi.HardwareAddr, addr, p.wait)
}

// withTakeoverCheck sets the real TakeoverCheck listening wait; 0 leaves
// the check off.
func (d Deps) withTakeoverCheck(wait time.Duration) Deps {
	if wait > 0 {
		d.Takeover = PacketTakeoverCheck(wait)
	}
	return d
}
