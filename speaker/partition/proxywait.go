package partition

import (
	"log/slog"
	"net/netip"
	"time"

	"github.com/herald-lb/herald/speaker/view"
)

// Answered before the node's proxy has its rules, an address's first
// packets would be routed onwards un-NATed, and their conntrack entry
// would catch a later connection from the same client port; so a new
// address waits for the proxy in this process, within a bound.

// MaxProxyWait bounds how long an address waits for this node's proxy:
// a proxy that never lists it (a filter it applies that the speaker does
// not know of) must not keep it dark for good.
const MaxProxyWait = 5 * time.Second

// labelServiceProxyName marks a Service another proxy programs; herald's
// proxy leaves it out, so its addresses are not waited for.
const labelServiceProxyName = "service.kubernetes.io/service-proxy-name"

// ProxyGate tells whether this node's proxy has the rules for a
// LoadBalancer VIP (proxy.Proxy.Programmed).
type ProxyGate interface {
	Programmed(ip netip.Addr) (handled, ok bool)
}

// ProxyWait remembers when each address still waiting for the proxy was
// first seen waiting. Owned by the speaker's loop; a nil *ProxyWait (no
// proxy in this process) waits for nothing.
type ProxyWait struct {
	gate    ProxyGate
	max     time.Duration
	trigger func()
	log     *slog.Logger
	first   map[netip.Addr]time.Time
	warned  map[netip.Addr]bool
}

// NewProxyWait waits for gate at most max (0: MaxProxyWait), calling
// trigger when a wait runs out; nil when gate is nil.
func NewProxyWait(gate ProxyGate, max time.Duration, trigger func(), log *slog.Logger) *ProxyWait {
	if gate == nil {
		return nil
	}
	if max <= 0 {
		max = MaxProxyWait
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &ProxyWait{gate: gate, max: max, trigger: trigger, log: log, first: map[netip.Addr]time.Time{}, warned: map[netip.Addr]bool{}}
}

// Unprogrammed is the addresses of svcs this node's proxy has no rules
// for yet, each for at most the bound from when it was first seen so.
func (p *ProxyWait) Unprogrammed(svcs []view.Service, now time.Time) map[netip.Addr]bool {
	if p == nil {
		return nil
	}
	out := map[netip.Addr]bool{}
	for _, svc := range svcs {
		if _, other := svc.Labels[labelServiceProxyName]; other {
			continue
		}
		for _, a := range svc.IPs {
			handled, ok := p.gate.Programmed(a)
			if !handled || ok || out[a] {
				continue
			}
			first, seen := p.first[a]
			if !seen {
				first = now
				p.first[a] = now
				// Sync again when the wait runs out, should the proxy
				// never say.
				time.AfterFunc(p.max, p.trigger)
			}
			if now.Sub(first) < p.max {
				out[a] = true
			} else if !p.warned[a] {
				p.warned[a] = true
				p.log.Warn("announcing an address this node's proxy has not programmed after waiting", "ip", a, "waited", p.max)
			}
		}
	}
	for a := range p.first {
		if handled, ok := p.gate.Programmed(a); !handled || ok {
			delete(p.first, a)
			delete(p.warned, a)
		}
	}
	return out
}
