package bgp

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/herald-lb/herald/config"
	bgpplan "github.com/herald-lb/herald/speaker/bgp/plan"
)

// Fake is a Router in memory for tests: it records every call and keeps
// what a real router would have been sent. Sessions it holds count as
// Established unless Down lists them.
type Fake struct {
	mu      sync.Mutex
	started bool
	Global  Global
	// Calls are "start", "stop", "add <name>", "delete <name>" and
	// "routes <name>", in order.
	Calls  []string
	peers  map[netip.Addr]*config.Peer
	routes map[netip.Addr][]bgpplan.Route
	// Fail, when set, makes the call with this description fail.
	Fail string
	// Down are sessions reported as Active instead of Established.
	Down map[netip.Addr]bool
	// updates counts SetRoutes calls per peer, reported as UPDATEs sent.
	updates map[netip.Addr]uint64
}

// NewFake returns an empty Fake.
func NewFake() *Fake {
	return &Fake{peers: map[netip.Addr]*config.Peer{}, routes: map[netip.Addr][]bgpplan.Route{}, Down: map[netip.Addr]bool{},
		updates: map[netip.Addr]uint64{}}
}

func (f *Fake) call(c string) error {
	f.Calls = append(f.Calls, c)
	if f.Fail == c {
		return fmt.Errorf("fake failure of %q", c)
	}
	return nil
}

// Start implements Router.
func (f *Fake) Start(_ context.Context, g Global) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.started {
		return fmt.Errorf("already started")
	}
	if err := f.call("start"); err != nil {
		return err
	}
	f.started, f.Global = true, g
	return nil
}

// Stop implements Router.
func (f *Fake) Stop(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("stop"); err != nil {
		return err
	}
	f.started = false
	f.peers = map[netip.Addr]*config.Peer{}
	f.routes = map[netip.Addr][]bgpplan.Route{}
	return nil
}

// AddPeer implements Router.
func (f *Fake) AddPeer(_ context.Context, p *config.Peer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.started {
		return fmt.Errorf("not started")
	}
	if _, dup := f.peers[p.Address]; dup {
		return fmt.Errorf("peer %s exists", p.Address)
	}
	if err := f.call("add " + p.Name); err != nil {
		return err
	}
	f.peers[p.Address] = p
	return nil
}

// DeletePeer implements Router.
func (f *Fake) DeletePeer(_ context.Context, p *config.Peer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.peers[p.Address]; !ok {
		return fmt.Errorf("no peer %s", p.Address)
	}
	if err := f.call("delete " + p.Name); err != nil {
		return err
	}
	delete(f.peers, p.Address)
	delete(f.routes, p.Address)
	return nil
}

// SetRoutes implements Router.
func (f *Fake) SetRoutes(_ context.Context, p *config.Peer, routes []bgpplan.Route) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.peers[p.Address]; !ok {
		return fmt.Errorf("no peer %s", p.Address)
	}
	if err := f.call("routes " + p.Name); err != nil {
		return err
	}
	f.routes[p.Address] = slices.Clone(routes)
	f.updates[p.Address]++
	return nil
}

// Peers implements Router.
func (f *Fake) Peers(context.Context) (map[netip.Addr]PeerState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[netip.Addr]PeerState{}
	for a := range f.peers {
		st := PeerState{Address: a, State: StateEstablished, Advertised: len(f.routes[a]), UpdatesSent: f.updates[a]}
		if f.Down[a] {
			st.State, st.Advertised = StateActive, 0
		}
		out[a] = st
	}
	return out, nil
}

// SetDown reports the session to addr as down (Active) or up.
func (f *Fake) SetDown(addr netip.Addr, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Down[addr] = down
}

// Routes returns what the peer at addr is sent.
func (f *Fake) Routes(addr netip.Addr) []bgpplan.Route {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.routes[addr])
}

// Started tells whether the fake runs.
func (f *Fake) Started() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.started
}

// TakeCalls returns the calls so far and forgets them.
func (f *Fake) TakeCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.Calls
	f.Calls = nil
	return c
}

var _ Router = (*Fake)(nil)
