package partition

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"
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
// real failover one check (DefaultTakeoverCheckWait); a partitioned one
// is waited for until it stops, up to MaxTakeoverHold.

// Check asks the LAN whether another node answers for an address.
type Check interface {
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

// Outcome is how a takeover ended, for herald_speaker_takeovers_total.
type Outcome string

const (
	Clear     Outcome = "clear"     // nobody answered at the first check
	Waited    Outcome = "waited"    // the former winner answered, then stopped
	Forced    Outcome = "forced"    // it still answered after MaxTakeoverHold
	Unchecked Outcome = "unchecked" // the check failed; answered at once
)

// judge is one check's verdict: the outcome when the address may be
// answered now, "" while the former winner still answers. answers counts
// the checks before this one that heard it.
func judge(mac net.HardwareAddr, err error, answers int) Outcome {
	switch {
	case err != nil:
		return Unchecked
	case mac == nil && answers == 0:
		return Clear
	case mac == nil:
		return Waited
	}
	return ""
}

// Winner is an address's winner in the last election.
type Winner struct {
	Addr netip.Addr
	Node string
}

// Contested is an address the election holds back while its takeover
// is checked, and the interfaces to check on.
type Contested struct {
	Addr       netip.Addr
	Interfaces []string
}

// TakeoverConfig sets Takeovers up.
type TakeoverConfig struct {
	Self  string
	Check Check
	Log   *slog.Logger
	// Trigger asks for a sync (a check ended, or may have to be forced).
	Trigger func()
	// Ended counts a takeover's outcome.
	Ended func(Outcome)
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Takeovers are the addresses this node won from a member declared dead
// that are not answered yet. The loop calls Contested and Start; the
// checks run in goroutines of their own. A nil *Takeovers (no Check)
// contests nothing.
type Takeovers struct {
	c      TakeoverConfig
	ctx    context.Context
	cancel context.CancelFunc

	mu sync.Mutex
	m  map[netip.Addr]*takeover
}

// takeover is one address under check.
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

// NewTakeovers returns the takeovers of c.Self; nil when c.Check is nil
// (answer at once).
func NewTakeovers(c TakeoverConfig) *Takeovers {
	if c.Check == nil {
		return nil
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	t := &Takeovers{c: c, m: map[netip.Addr]*takeover{}}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	return t
}

// Contested returns the addresses the election must not answer yet if
// this node wins them: those under check, and those whose winner in the
// last election is a member declared dead (known, not live), which this
// sync may hand to this node. known is sorted (Standing.Known). A check
// that outlasted MaxTakeoverHold is forced here.
func (t *Takeovers) Contested(last []Winner, known []string, live map[string]bool) map[netip.Addr]bool {
	if t == nil {
		return nil
	}
	now := t.c.Now()
	out := map[netip.Addr]bool{}
	t.mu.Lock()
	defer t.mu.Unlock()
	for a, tk := range t.m {
		if tk.clear {
			continue
		}
		if waited := now.Sub(tk.since); waited >= MaxTakeoverHold {
			tk.clear = true
			tk.cancel()
			t.c.Ended(Forced)
			t.c.Log.Warn("answering for an address whose former winner, declared dead, still answers for it on the LAN after the longest wait; two nodes may answer for it until that one stops",
				"ip", a, "from", tk.from, "mac", tk.mac, "waited", waited.Round(time.Millisecond))
			continue
		}
		out[a] = true
	}
	for _, w := range last {
		if w.Node == "" || w.Node == t.c.Self || live[w.Node] {
			continue
		}
		if _, dead := slices.BinarySearch(known, w.Node); !dead {
			continue // it left gracefully, or its Node was deleted
		}
		if _, ok := t.m[w.Addr]; !ok {
			out[w.Addr] = true
		}
	}
	return out
}

// Start starts a check for every address the election holds back as
// contested that has none yet (from is the last election's winner), and
// drops the takeovers of addresses no longer held back (answered, or not
// won here any more).
func (t *Takeovers) Start(held []Contested, from func(netip.Addr) string) {
	if t == nil {
		return
	}
	now := t.c.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	keep := map[netip.Addr]bool{}
	for _, h := range held {
		keep[h.Addr] = true
		if tk, ok := t.m[h.Addr]; ok {
			tk.ifaces = h.Interfaces
			continue
		}
		ctx, cancel := context.WithCancel(t.ctx)
		tk := &takeover{from: from(h.Addr), since: now, ifaces: h.Interfaces, ctx: ctx, cancel: cancel}
		t.m[h.Addr] = tk
		t.c.Log.Info("won an address from a node declared dead; checking that it no longer answers for it before answering",
			"ip", h.Addr, "from", tk.from, "interfaces", h.Interfaces)
		time.AfterFunc(MaxTakeoverHold, t.c.Trigger)
		go t.check(h.Addr, tk)
	}
	for a, tk := range t.m {
		if !keep[a] {
			tk.cancel()
			delete(t.m, a)
		}
	}
}

// Len is how many takeovers are kept (checking or cleared, not dropped
// yet).
func (t *Takeovers) Len() int {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// Stop cancels every check (the speaker stops).
func (t *Takeovers) Stop() {
	if t == nil {
		return
	}
	t.cancel()
	t.mu.Lock()
	defer t.mu.Unlock()
	for a, tk := range t.m {
		tk.cancel()
		delete(t.m, a)
	}
}

// check checks until nobody else answers for a, the takeover is dropped,
// or the check fails; then the next sync answers for a.
func (t *Takeovers) check(a netip.Addr, tk *takeover) {
	for {
		t.mu.Lock()
		ifaces := tk.ifaces
		t.mu.Unlock()
		mac, err := t.answering(tk.ctx, ifaces, a)
		if tk.ctx.Err() != nil {
			return
		}
		t.mu.Lock()
		if t.m[a] != tk || tk.clear {
			t.mu.Unlock()
			return
		}
		waited := t.c.Now().Sub(tk.since).Round(time.Millisecond)
		switch out := judge(mac, err, tk.answers); out {
		case "":
			if tk.answers == 0 {
				t.c.Log.Warn("the former winner of an address, declared dead by memberlist, still answers for it on the LAN (memberlist cut off between nodes?); waiting for it to stop before answering",
					"ip", a, "from", tk.from, "mac", mac.String())
			}
			tk.answers++
			tk.mac = mac.String()
		default:
			tk.clear = true
			t.c.Ended(out)
			switch out {
			case Unchecked:
				t.c.Log.Warn("cannot check whether the former winner of an address still answers for it; answering", "ip", a, "from", tk.from, "err", err)
			case Waited:
				t.c.Log.Info("the former winner of an address stopped answering for it; answering", "ip", a, "from", tk.from, "waited", waited)
			}
		}
		clear := tk.clear
		t.mu.Unlock()
		if clear {
			t.c.Trigger()
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
func (t *Takeovers) answering(ctx context.Context, ifaces []string, a netip.Addr) (net.HardwareAddr, error) {
	type result struct {
		mac net.HardwareAddr
		err error
	}
	res := make(chan result, len(ifaces))
	for _, i := range ifaces {
		go func() {
			mac, err := t.c.Check.Answering(ctx, i, a)
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
