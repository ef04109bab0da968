package allocator

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"slices"

	"github.com/herald-lb/herald/internal/ipfamily"
)

// Key names a Service: namespace and name.
type Key struct {
	Namespace, Name string
}

func (k Key) String() string { return k.Namespace + "/" + k.Name }

// Compare orders keys by namespace, then name.
func (k Key) Compare(o Key) int {
	if c := cmp.Compare(k.Namespace, o.Namespace); c != 0 {
		return c
	}
	return cmp.Compare(k.Name, o.Name)
}

// Family is an IP family (internal/ipfamily).
type Family = ipfamily.Family

// The IP families, in the spelling of spec.ipFamilies.
const (
	IPv4 = ipfamily.IPv4
	IPv6 = ipfamily.IPv6
)

// FamilyOf returns the family of an address.
func FamilyOf(a netip.Addr) Family { return ipfamily.Of(a) }

// FamilyPolicy is spec.ipFamilyPolicy. The zero value is SingleStack, the
// Kubernetes default.
type FamilyPolicy uint8

// The family policies.
const (
	SingleStack FamilyPolicy = iota
	PreferDualStack
	RequireDualStack
)

func (p FamilyPolicy) String() string {
	switch p {
	case SingleStack:
		return "SingleStack"
	case PreferDualStack:
		return "PreferDualStack"
	case RequireDualStack:
		return "RequireDualStack"
	}
	return fmt.Sprintf("FamilyPolicy(%d)", uint8(p))
}

// Port is one (protocol, port) a Service exposes. Two Services sharing an
// IP must not have a Port in common.
type Port struct {
	Protocol string // TCP, UDP or SCTP, as in the Service
	Port     uint16
}

func (p Port) String() string { return fmt.Sprintf("%s/%d", p.Protocol, p.Port) }

func (p Port) compare(o Port) int {
	if c := cmp.Compare(p.Protocol, o.Protocol); c != 0 {
		return c
	}
	return cmp.Compare(p.Port, o.Port)
}

// Service is what the allocator needs to know of a LoadBalancer Service. The
// controller fills it from the Service, its namespace and its annotations.
type Service struct {
	Namespace, Name string
	// NamespaceLabels and Labels are matched against the pools'
	// serviceAllocation namespace and service selectors.
	NamespaceLabels map[string]string
	Labels          map[string]string

	// FamilyPolicy and Families are spec.ipFamilyPolicy and
	// spec.ipFamilies (ordered; the first is the primary family). No
	// Families means IPv4.
	FamilyPolicy FamilyPolicy
	Families     []Family

	// RequestedIPs come from herald.io/loadBalancerIPs or
	// spec.loadBalancerIP, parsed by the caller: at most one per family.
	RequestedIPs []netip.Addr
	// Pool is herald.io/address-pool; empty when not set.
	Pool string
	// SharingKey is herald.io/allow-shared-ip; empty means no sharing.
	SharingKey string
	// Ports are the Service's (protocol, port) pairs.
	Ports []Port
	// LocalTraffic is externalTrafficPolicy: Local. Backend identifies the
	// pods the Service selects (for example its selector in canonical
	// form); it matters only with LocalTraffic.
	LocalTraffic bool
	Backend      string
}

// Key returns the Service's key.
func (s *Service) Key() Key { return Key{s.Namespace, s.Name} }

// backendKey is what Services sharing an IP must have in common besides
// the sharing key: nothing for Cluster, the same pods for Local (each node
// announcing the IP must have local endpoints of all of them). A Local and
// a Cluster Service never share.
func (s *Service) backendKey() string {
	if s.LocalTraffic {
		return "local:" + s.Backend
	}
	return ""
}

// Assignment is what a Service holds.
type Assignment struct {
	Pool string
	// IPs are in the order of the Service's Families.
	IPs []netip.Addr
}

// Displaced is a Service that lost its IPs in a pool change.
type Displaced struct {
	Key  Key
	Pool string       // the pool the IPs came from
	IPs  []netip.Addr // the IPs it held, now released
	// Reason is ReasonIPNotInPool (the addresses left every pool, or are
	// now split over pools) or ReasonPoolNotAllowed (the pool's
	// serviceAllocation no longer admits the Service).
	Reason Reason
}

// Reason classifies an allocation failure, for events and metrics.
type Reason uint8

// The failure reasons.
const (
	// ReasonInvalidRequest: the request contradicts itself (two requested
	// IPs of one family, an IP of a family the Service does not have,
	// RequireDualStack without two families, requested IPs in two pools).
	ReasonInvalidRequest Reason = iota + 1
	// ReasonIPNotInPool: a requested (or adopted) IP is in no pool, or not
	// in the requested pool.
	ReasonIPNotInPool
	// ReasonIPInUse: a requested IP is held by a Service it may not share
	// with (no or another sharing key).
	ReasonIPInUse
	// ReasonSharingConflict: same sharing key, but the ports overlap or the
	// Services differ in traffic policy or pods (Local).
	ReasonSharingConflict
	// ReasonPoolNotFound: the requested pool does not exist.
	ReasonPoolNotFound
	// ReasonPoolNotAllowed: the pool's serviceAllocation does not admit the
	// Service.
	ReasonPoolNotAllowed
	// ReasonPoolExhausted: the pools that could serve have no free address
	// of a needed family.
	ReasonPoolExhausted
	// ReasonNoPoolMatches: no pool may assign to the Service automatically.
	ReasonNoPoolMatches
	// ReasonFamilyUnavailable: no usable pool has the family (or, for
	// RequireDualStack, both families).
	ReasonFamilyUnavailable
)

var reasonNames = map[Reason]string{
	ReasonInvalidRequest:    "InvalidRequest",
	ReasonIPNotInPool:       "IPNotInPool",
	ReasonIPInUse:           "IPInUse",
	ReasonSharingConflict:   "SharingConflict",
	ReasonPoolNotFound:      "PoolNotFound",
	ReasonPoolNotAllowed:    "PoolNotAllowed",
	ReasonPoolExhausted:     "PoolExhausted",
	ReasonNoPoolMatches:     "NoPoolMatches",
	ReasonFamilyUnavailable: "FamilyUnavailable",
}

// String returns the reason in CamelCase, fit for a metric label.
func (r Reason) String() string {
	if n, ok := reasonNames[r]; ok {
		return n
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Error is an allocation failure.
type Error struct {
	Reason Reason
	// Other is the Service in the way (IPInUse, SharingConflict), if any.
	Other Key
	// Pool and IP are the pool and address concerned, when there is one.
	Pool string
	IP   netip.Addr
	// Message is a sentence for the user, naming what is in the way.
	Message string
}

func (e *Error) Error() string { return e.Message }

// ReasonOf returns the Reason of an *Error in err's chain, or 0.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return 0
}

func errorf(r Reason, format string, args ...any) *Error {
	return &Error{Reason: r, Message: fmt.Sprintf(format, args...)}
}

// PoolStats counts a pool's addresses.
type PoolStats struct {
	Pool       string
	IPv4, IPv6 FamilyStats
}

// FamilyStats counts the addresses of one family in a pool. Total is a
// big.Int because an IPv6 pool can hold 2^64 addresses or more; InUse is
// bounded by the number of Services and fits a uint64.
type FamilyStats struct {
	// Total is the number of addresses the pool can hand out (without
	// those avoidBuggyIPs skips).
	Total *big.Int
	// InUse counts addresses held by at least one Service.
	InUse uint64
}

// Available returns Total - InUse.
func (f FamilyStats) Available() *big.Int {
	return new(big.Int).Sub(f.Total, new(big.Int).SetUint64(f.InUse))
}

// TotalInt64 returns Total, saturated at math.MaxInt64 as the pool status
// reports it.
func (f FamilyStats) TotalInt64() int64 { return saturate(f.Total) }

// AvailableInt64 returns Available, saturated at math.MaxInt64.
func (f FamilyStats) AvailableInt64() int64 { return saturate(f.Available()) }

func saturate(v *big.Int) int64 {
	if v.IsInt64() {
		return v.Int64()
	}
	if v.Sign() < 0 {
		return 0
	}
	return math.MaxInt64
}

// normPorts returns the ports sorted, without duplicates.
func normPorts(ps []Port) []Port {
	out := slices.Clone(ps)
	slices.SortFunc(out, Port.compare)
	return slices.Compact(out)
}
