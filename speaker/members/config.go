package members

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"time"

	"github.com/hashicorp/memberlist"
)

// DefaultPort is the memberlist port (UDP and TCP), as peers expect.
const DefaultPort = 7946

// Config configures a Memberlist. Zero fields take the defaults noted.
type Config struct {
	// NodeName is the Kubernetes node name; it must be unique.
	NodeName string
	// BindAddr is the address to listen on; zero means all addresses.
	BindAddr netip.Addr
	// BindPort is the UDP and TCP port; 0 means DefaultPort.
	BindPort int
	// AdvertiseAddr is the address peers reach this node at (the node
	// IP). Zero lets memberlist pick a private address, which on a
	// multi-homed node may be the wrong one.
	AdvertiseAddr netip.Addr
	// Secret is the key material the gossip key is derived from.
	Secret Secret
	// Extra are further key materials whose keys are accepted for
	// decryption but not used to send: the steps of a key rotation.
	Extra []Secret
	// Meta is the metadata published at start.
	Meta Meta
	// Timers tune failure detection; zero fields take DefaultTimers'.
	Timers Timers
	// LeaveTimeout bounds the wait for the leave broadcast in Close
	// (default 1s): long enough for a few gossip rounds, short enough
	// not to hold up a pod's termination.
	LeaveTimeout time.Duration
	// RejoinInterval is how often known peers that are not members are
	// joined again, which heals partitions (default 5s).
	RejoinInterval time.Duration
	// UpdateTimeout bounds the wait for a metadata broadcast (default 1s).
	UpdateTimeout time.Duration
	// OnEvent receives membership events in order, from one goroutine;
	// it may block or call back into the Memberlist. Nil drops them.
	OnEvent func(Event)
	// Log receives memberlist's own log lines at their level; nil
	// discards them.
	Log *slog.Logger
	// OnDeclaredDead is called when this member refuted a message
	// declaring it dead, with the name of the member that sent it: the
	// cluster counted it out (it was paused or cut off long enough to
	// miss the suspicion), or, right after a start, the others still
	// remembered the previous process on this node as dead or left (from
	// is this node's own name for a graceful leave). It must not block.
	OnDeclaredDead func(from string)
	// OnMessage receives the messages other members sent with Send, from
	// memberlist's goroutines; it must not block. Nil drops them.
	OnMessage func([]byte)

	// wrapTransport, for benchmarks, wraps the UDP and TCP transport
	// memberlist sends through (to count the bytes a member sends).
	wrapTransport func(memberlist.Transport) memberlist.Transport
}

// Timers tune failure detection (SWIM with Lifeguard, as memberlist
// implements it).
//
// A hard-dead node is declared dead after
//
//	first probe + failed probe + suspicion ≈ ~ProbeInterval + ProbeInterval
//	                                         + SuspicionMult·max(1, log10 N)·ProbeInterval
//
// and the others hear of it within a gossip round or two. Every member
// probes one other member per ProbeInterval, round-robin over a shuffled
// list, so with N-1 live probers the dead node is usually probed within
// one interval (in the worst case one member's round takes (N-1)
// intervals, but another member usually gets there first). A probe fails
// when neither the direct ping (ProbeTimeout) nor the indirect and TCP
// pings are answered by the end of the interval.
//
// The suspicion time above is its minimum, reached when other members
// confirm the suspicion: memberlist expects k = SuspicionMult-2
// confirmations (none when fewer than k+2 members), and a suspicion with
// fewer lasts up to SuspicionMaxTimeoutMult times as long, shrinking as
// confirmations arrive (Lifeguard's dynamic suspicion). A dead node is
// suspected by every survivor that probes it, so the confirmations come
// within an interval or two; a member that alone could not reach the
// suspect — itself starved of CPU, or cut off — waits long enough for the
// suspect to refute. The default multiplier 3 (k = 1) buys exactly that
// at the cost of one probe interval over multiplier 2, which expects no
// confirmation and declared a speaker dead on a single starved prober's
// word (measured: TestBenchL2UnderCPUStress).
//
// With the defaults (100 ms interval, 50 ms timeout, multiplier 3 with
// at most 6× for an unconfirmed suspicion, 50 ms gossip) and N ≤ 10:
// ≈ 100 + 100 + 300 + 50 ms ≈ 550 ms, below a second even with a slow
// first probe, while a lone suspicion lasts 1.8 s; at N = 100 the
// suspicion doubles (log10 100 = 2) to ≈ 850 ms. DetectionEstimate
// computes it.
//
// The cost is one ping and one ack per member per 100 ms, negligible on a
// LAN. A member answering slower than ProbeTimeout plus the rest of the
// interval (a paused process) is suspected, and it has the suspicion
// time to refute; memberlist's awareness also stretches a member's own
// timeouts when it notices it is the slow one.
type Timers struct {
	// ProbeInterval is the time between probes of a random member
	// (default 100ms).
	ProbeInterval time.Duration
	// ProbeTimeout is the wait for a direct ack before indirect probes
	// (default 50ms; well above a LAN's RTT).
	ProbeTimeout time.Duration
	// IndirectChecks is how many members ping a suspect for us
	// (default 3), so one lost packet does not make a node suspect.
	IndirectChecks int
	// SuspicionMult scales the suspicion time and sets the confirmations
	// memberlist expects, SuspicionMult-2 (default 3: one).
	SuspicionMult int
	// SuspicionMaxTimeoutMult is how many times the suspicion time a
	// suspicion lasts without confirmations (default 6; unused with
	// SuspicionMult 2 or below, which expects none).
	SuspicionMaxTimeoutMult int
	// GossipInterval is the time between gossip rounds (default 50ms),
	// how fast a death or a metadata update spreads.
	GossipInterval time.Duration
	// GossipNodes is how many members each round reaches (default 3).
	GossipNodes int
	// RetransmitMult scales how often a message is re-gossiped (default 4).
	RetransmitMult int
	// PushPullInterval is the time between full state exchanges over TCP
	// (default 10s), which repair what gossip missed.
	PushPullInterval time.Duration
	// GossipToTheDeadTime is how long a dead member still gets gossip so
	// it can refute (default 10s).
	GossipToTheDeadTime time.Duration
	// TCPTimeout bounds stream connections: joins, state exchanges and
	// TCP pings (default 1s, ample on a LAN, and it keeps a join to a
	// dead peer short).
	TCPTimeout time.Duration
	// DeadNodeReclaimTime is after how long a dead member's name may come
	// back from another address (default 10s), for a node whose IP
	// changed.
	DeadNodeReclaimTime time.Duration
}

// DefaultTimers are tuned for a LAN: a hard-dead node is detected in about
// 0.55 s, a lone starved prober's suspicion lasts 1.8 s (see Timers).
func DefaultTimers() Timers {
	return Timers{
		ProbeInterval:           100 * time.Millisecond,
		ProbeTimeout:            50 * time.Millisecond,
		IndirectChecks:          3,
		SuspicionMult:           3,
		SuspicionMaxTimeoutMult: 6,
		GossipInterval:          50 * time.Millisecond,
		GossipNodes:             3,
		RetransmitMult:          4,
		PushPullInterval:        10 * time.Second,
		GossipToTheDeadTime:     10 * time.Second,
		TCPTimeout:              time.Second,
		DeadNodeReclaimTime:     10 * time.Second,
	}
}

func (t Timers) withDefaults() Timers {
	d := DefaultTimers()
	dur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	num := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	dur(&t.ProbeInterval, d.ProbeInterval)
	dur(&t.ProbeTimeout, d.ProbeTimeout)
	num(&t.IndirectChecks, d.IndirectChecks)
	num(&t.SuspicionMult, d.SuspicionMult)
	num(&t.SuspicionMaxTimeoutMult, d.SuspicionMaxTimeoutMult)
	dur(&t.GossipInterval, d.GossipInterval)
	num(&t.GossipNodes, d.GossipNodes)
	num(&t.RetransmitMult, d.RetransmitMult)
	dur(&t.PushPullInterval, d.PushPullInterval)
	dur(&t.GossipToTheDeadTime, d.GossipToTheDeadTime)
	dur(&t.TCPTimeout, d.TCPTimeout)
	dur(&t.DeadNodeReclaimTime, d.DeadNodeReclaimTime)
	return t
}

func (t Timers) validate() error {
	var errs []error
	pos := func(name string, v time.Duration) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s %v is negative", name, v))
		}
	}
	pos("ProbeInterval", t.ProbeInterval)
	pos("ProbeTimeout", t.ProbeTimeout)
	pos("GossipInterval", t.GossipInterval)
	pos("PushPullInterval", t.PushPullInterval)
	pos("GossipToTheDeadTime", t.GossipToTheDeadTime)
	pos("TCPTimeout", t.TCPTimeout)
	pos("DeadNodeReclaimTime", t.DeadNodeReclaimTime)
	for name, v := range map[string]int{"IndirectChecks": t.IndirectChecks, "SuspicionMult": t.SuspicionMult,
		"SuspicionMaxTimeoutMult": t.SuspicionMaxTimeoutMult, "GossipNodes": t.GossipNodes, "RetransmitMult": t.RetransmitMult} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s %d is negative", name, v))
		}
	}
	if t.ProbeTimeout > t.ProbeInterval {
		// memberlist would still wait for the indirect probes until the
		// interval ends, so a longer timeout only delays detection.
		errs = append(errs, fmt.Errorf("ProbeTimeout %v is longer than ProbeInterval %v", t.ProbeTimeout, t.ProbeInterval))
	}
	return errors.Join(errs...)
}

// DetectionEstimate is the expected time for the survivors of an n-member
// cluster to see a hard-dead member dead when it is probed within the
// first interval: the sum explained at Timers. It is arithmetic, not a
// guarantee, and assumes the minimum suspicion time, which a dead member
// reaches once the survivors confirm each other's suspicion (with
// SuspicionMult above 2 and enough members memberlist starts it at
// SuspicionMaxTimeoutMult times that and shortens it as confirmations
// arrive).
func (t Timers) DetectionEstimate(n int) time.Duration {
	t = t.withDefaults()
	scale := math.Max(1, math.Log10(math.Max(1, float64(n))))
	suspicion := time.Duration(float64(t.SuspicionMult) * scale * float64(t.ProbeInterval))
	return 2*t.ProbeInterval + suspicion + t.GossipInterval
}

func (c Config) withDefaults() Config {
	if c.BindPort == 0 {
		c.BindPort = DefaultPort
	}
	if c.LeaveTimeout == 0 {
		c.LeaveTimeout = time.Second
	}
	if c.RejoinInterval == 0 {
		c.RejoinInterval = 5 * time.Second
	}
	if c.UpdateTimeout == 0 {
		c.UpdateTimeout = time.Second
	}
	c.Timers = c.Timers.withDefaults()
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("node name is empty"))
	}
	if c.BindPort < 1 || c.BindPort > 65535 {
		errs = append(errs, fmt.Errorf("bind port %d is not in 1-65535", c.BindPort))
	}
	if c.AdvertiseAddr.IsValid() && c.AdvertiseAddr.IsUnspecified() {
		errs = append(errs, fmt.Errorf("advertise address %s is unspecified", c.AdvertiseAddr))
	}
	if c.LeaveTimeout < 0 || c.RejoinInterval < 0 || c.UpdateTimeout < 0 {
		errs = append(errs, errors.New("negative LeaveTimeout, RejoinInterval or UpdateTimeout"))
	}
	if err := c.Timers.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
