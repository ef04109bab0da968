package config

import (
	"net/netip"
	"sort"
	"time"
)

// Kinds of the herald.io objects the parser reads.
const (
	KindIPAddressPool    = "IPAddressPool"
	KindL2Advertisement  = "L2Advertisement"
	KindBGPAdvertisement = "BGPAdvertisement"
	KindBGPPeer          = "BGPPeer"
	KindCommunity        = "Community"
	KindBFDProfile       = "BFDProfile"
)

// Defaults applied when an object leaves a field unset; they match the CRD
// defaults and what MetalLB users expect.
const (
	DefaultPeerPort      = 179
	DefaultHoldTime      = 90 * time.Second
	DefaultAggregationV4 = 32
	DefaultAggregationV6 = 128
	DefaultBFDInterval   = 300 // milliseconds
	DefaultBFDMultiplier = 3
)

// Config is the validated configuration: only objects without errors.
type Config struct {
	Pools             map[string]*Pool
	L2Advertisements  []*L2Advertisement
	BGPAdvertisements []*BGPAdvertisement
	Peers             map[string]*Peer
	BFDProfiles       map[string]*BFDProfile
	// Communities are the aliases defined by valid Community objects.
	Communities map[string]Community
	// Objects says, for every object read, which version of it is in
	// force; keyed by ObjectKey(kind, name).
	Objects map[string]ObjectState
}

// PoolNames returns the pool names in sorted order.
func (c *Config) PoolNames() []string {
	names := make([]string, 0, len(c.Pools))
	for n := range c.Pools {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// PoolFor returns the pool holding the address, or nil.
func (c *Config) PoolFor(a netip.Addr) *Pool {
	for _, p := range c.Pools {
		if p.Contains(a) {
			return p
		}
	}
	return nil
}

// Pool is a validated IPAddressPool.
type Pool struct {
	Name   string
	Labels map[string]string
	// Ranges are the address entries in the order written.
	Ranges        []Range
	AutoAssign    bool
	AvoidBuggyIPs bool
	// Allocation is nil when the pool serves any Service.
	Allocation *Allocation
	// Advertised tells whether an L2Advertisement or BGPAdvertisement in
	// force selects the pool.
	Advertised bool
}

// Contains reports whether the pool holds the address.
func (p *Pool) Contains(a netip.Addr) bool {
	for _, r := range p.Ranges {
		if r.Contains(a) {
			return true
		}
	}
	return false
}

// Allocation restricts which Services a pool serves.
type Allocation struct {
	// Priority is meaningful only when HasPriority; lower goes first.
	Priority           int
	HasPriority        bool
	Namespaces         []string
	NamespaceSelectors Selectors
	ServiceSelectors   Selectors
}

// L2Advertisement is a validated L2Advertisement.
type L2Advertisement struct {
	Name string
	// Pools are the names of the valid pools it announces, sorted.
	Pools            []string
	NodeSelectors    Selectors
	Interfaces       []string
	ServiceSelectors Selectors
}

// BGPAdvertisement is a validated BGPAdvertisement.
type BGPAdvertisement struct {
	Name                string
	Pools               []string
	AggregationLength   int
	AggregationLengthV6 int
	// LocalPref is nil when unset.
	LocalPref   *uint32
	Communities []Community
	// Peers are the names of valid peers it announces to; empty means all.
	Peers            []string
	NodeSelectors    Selectors
	ServiceSelectors Selectors
}

// Advertisement is what L2 and BGP advertisements share for choosing
// the addresses they announce: their pools and Service selectors.
type Advertisement interface {
	comparable
	Scope() (pools []string, services Selectors)
}

// Scope implements Advertisement.
func (a *L2Advertisement) Scope() ([]string, Selectors) { return a.Pools, a.ServiceSelectors }

// Scope implements Advertisement.
func (a *BGPAdvertisement) Scope() ([]string, Selectors) { return a.Pools, a.ServiceSelectors }

// Peer is a validated BGPPeer.
type Peer struct {
	Name  string
	MyASN uint32
	// PeerASN is 0 when DynamicASN is set.
	PeerASN       uint32
	DynamicASN    string
	Address       netip.Addr
	SourceAddress netip.Addr // invalid (zero) when unset
	Port          uint16
	HoldTime      time.Duration
	KeepaliveTime time.Duration
	ConnectTime   time.Duration // 0: the speaker's default (5s)
	RouterID      netip.Addr    // invalid (zero) when unset
	NodeSelectors Selectors
	// Password is the TCP MD5 key, resolved from passwordSecret if needed.
	Password Secret
	// PasswordSecret names the Secret the password comes from ("" when
	// it is written inline).
	PasswordSecret  string
	EBGPMultiHop    bool
	GracefulRestart bool
	// BFD is nil when the session is not tracked by BFD.
	BFD *BFDProfile
}

// External reports whether the session is eBGP.
func (p *Peer) External() bool {
	if p.DynamicASN != "" {
		return p.DynamicASN == "external"
	}
	return p.PeerASN != p.MyASN
}

// Secret holds a value that must never reach logs.
type Secret string

// String hides the value so %v and %s never print it.
func (Secret) String() string { return "<redacted>" }

// GoString hides the value from %#v too.
func (Secret) GoString() string { return "<redacted>" }

// Reveal returns the value for the one place that needs it.
func (s Secret) Reveal() string { return string(s) }

// BFDProfile is a validated BFDProfile with defaults filled in.
type BFDProfile struct {
	Name             string
	ReceiveInterval  uint32
	TransmitInterval uint32
	DetectMultiplier uint32
}
