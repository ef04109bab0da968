package gobgp

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"

	bgpplan "github.com/herald-lb/herald/speaker/bgp/plan"
)

// How the routes reach each peer with their own attributes.
//
// GoBGP's global RIB holds every prefix once, as a locally originated path
// without communities. GoBGP applies per-neighbor policies to route-server
// clients only; every other peer goes through the global export policy.
// So that policy holds one policy per peer, each made of statements that
// match the peer (a neighbor set of its address) and a prefix set of the
// prefixes sharing one attribute set, and that add those attributes and
// accept. Anything else is rejected (the default action).
//
// GoBGP binds statements to the defined sets, and assignments to the
// policies, present when they are added, so a peer's policy is never
// edited in place: a new generation is added under new names, swapped
// into the assignment at once, and the old one deleted.

const (
	// importPolicy keeps the routes peers send us out of the global RIB:
	// only our own paths may ever be exported, and a router's table must
	// not compete with them for best path.
	importPolicy = "herald-import"
	// policyPrefix starts the names of every policy object herald adds.
	policyPrefix = "herald-"
)

// exportPolicy is one generation of a peer's export policy, as added to
// GoBGP.
type exportPolicy struct {
	name string
	// sets are the defined sets the statements refer to.
	sets []*api.DefinedSet
	// prefixes are those the policy lets through to the peer.
	prefixes map[netip.Prefix]bool
	// policy is the definition handed to GoBGP.
	policy *api.Policy
}

// buildExport builds the export policy named name letting routes through
// to the peer at peer, with their attributes.
func buildExport(name string, peer netip.Addr, routes map[netip.Prefix]bgpplan.Route) *exportPolicy {
	peerSet := name + "-peer"
	e := &exportPolicy{
		name:     name,
		sets:     []*api.DefinedSet{{DefinedType: api.DefinedType_DEFINED_TYPE_NEIGHBOR, Name: peerSet, List: []string{netip.PrefixFrom(peer, peer.BitLen()).String()}}},
		prefixes: map[netip.Prefix]bool{},
		policy:   &api.Policy{Name: name},
	}
	for i, g := range groupRoutes(routes) {
		setName := fmt.Sprintf("%s-p%d", name, i)
		set := &api.DefinedSet{DefinedType: api.DefinedType_DEFINED_TYPE_PREFIX, Name: setName}
		for _, p := range g.prefixes {
			// Exact length: an aggregate never lets a longer prefix through.
			set.Prefixes = append(set.Prefixes, &api.Prefix{IpPrefix: p.String(), MaskLengthMin: uint32(p.Bits()), MaskLengthMax: uint32(p.Bits())})
			e.prefixes[p] = true
		}
		e.sets = append(e.sets, set)
		e.policy.Statements = append(e.policy.Statements, &api.Statement{
			Name: fmt.Sprintf("%s-s%d", name, i),
			Conditions: &api.Conditions{
				PrefixSet:   &api.MatchSet{Type: api.MatchSet_TYPE_ANY, Name: setName},
				NeighborSet: &api.MatchSet{Type: api.MatchSet_TYPE_ANY, Name: peerSet},
				RouteType:   api.Conditions_ROUTE_TYPE_LOCAL,
			},
			Actions: actions(g.attrs),
		})
	}
	return e
}

// actions adds a route's attributes to the path sent and accepts it.
func actions(r bgpplan.Route) *api.Actions {
	a := &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_ACCEPT}
	if len(r.Communities) > 0 {
		c := &api.CommunityAction{Type: api.CommunityAction_TYPE_ADD}
		for _, v := range r.Communities {
			// GoBGP reads a plain number as the 32-bit community.
			c.Communities = append(c.Communities, strconv.FormatUint(uint64(v), 10))
		}
		a.Community = c
	}
	if len(r.LargeCommunities) > 0 {
		c := &api.CommunityAction{Type: api.CommunityAction_TYPE_ADD}
		for _, v := range r.LargeCommunities {
			c.Communities = append(c.Communities, fmt.Sprintf("%d:%d:%d", v[0], v[1], v[2]))
		}
		a.LargeCommunity = c
	}
	if r.LocalPref > 0 {
		a.LocalPref = &api.LocalPrefAction{Value: r.LocalPref}
	}
	return a
}

// group is the prefixes sharing one attribute set.
type group struct {
	key      string
	attrs    bgpplan.Route // Prefix unused
	prefixes []netip.Prefix
}

// groupRoutes groups routes by attribute set (and family: a GoBGP prefix
// set holds one), in a stable order.
func groupRoutes(routes map[netip.Prefix]bgpplan.Route) []group {
	byKey := map[string]*group{}
	for _, r := range routes {
		r = normalize(r)
		k := attrKey(r)
		g := byKey[k]
		if g == nil {
			g = &group{key: k, attrs: r}
			byKey[k] = g
		}
		g.prefixes = append(g.prefixes, r.Prefix)
	}
	out := make([]group, 0, len(byKey))
	for _, k := range slices.Sorted(maps.Keys(byKey)) {
		g := byKey[k]
		slices.SortFunc(g.prefixes, comparePrefixes)
		out = append(out, *g)
	}
	return out
}

// normalize sorts and deduplicates the communities, so that equal sets
// compare equal.
func normalize(r bgpplan.Route) bgpplan.Route {
	r.Communities = slices.Compact(slices.Sorted(slices.Values(r.Communities)))
	large := slices.Clone(r.LargeCommunities)
	slices.SortFunc(large, func(x, y [3]uint32) int {
		return cmp.Or(cmp.Compare(x[0], y[0]), cmp.Compare(x[1], y[1]), cmp.Compare(x[2], y[2]))
	})
	r.LargeCommunities = slices.Compact(large)
	return r
}

func attrKey(r bgpplan.Route) string {
	var b strings.Builder
	if r.Prefix.Addr().Is4() {
		b.WriteString("4")
	} else {
		b.WriteString("6")
	}
	fmt.Fprintf(&b, "|%d|%t|", r.LocalPref, r.LocalPrefZero)
	for _, c := range r.Communities {
		fmt.Fprintf(&b, "%d,", c)
	}
	b.WriteString("|")
	for _, c := range r.LargeCommunities {
		fmt.Fprintf(&b, "%d:%d:%d,", c[0], c[1], c[2])
	}
	return b.String()
}

func comparePrefixes(a, b netip.Prefix) int {
	return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
}

// routeMap checks the routes of a peer and indexes them by prefix.
func routeMap(peer netip.Addr, routes []bgpplan.Route) (map[netip.Prefix]bgpplan.Route, error) {
	m := make(map[netip.Prefix]bgpplan.Route, len(routes))
	for _, r := range routes {
		p := r.Prefix.Masked()
		switch {
		case !p.IsValid() || p.Addr().Is4In6():
			return nil, fmt.Errorf("invalid prefix %s", r.Prefix)
		case p.Addr().Is4() != peer.Is4():
			return nil, fmt.Errorf("prefix %s is not of the family of the session's address %s", p, peer)
		}
		if _, dup := m[p]; dup {
			return nil, fmt.Errorf("prefix %s given twice", p)
		}
		r.Prefix = p
		m[p] = r
	}
	return m, nil
}

// sameRoutes tells whether two route sets send the same to the peer.
func sameRoutes(a, b map[netip.Prefix]bgpplan.Route) bool {
	return maps.EqualFunc(a, b, sameRoute)
}

func sameRoute(a, b bgpplan.Route) bool {
	return normalize(a).SameAttributes(normalize(b))
}

// policyName names a generation of a peer's export policy: readable, and
// unique thanks to the generation number.
func policyName(peer string, gen uint64) string {
	var b strings.Builder
	b.WriteString(policyPrefix)
	for _, c := range peer {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	fmt.Fprintf(&b, "-%d", gen)
	return b.String()
}

// localPath is a prefix as the speaker originates it: origin IGP and an
// unspecified next hop, which GoBGP replaces with the session's local
// address for each peer (eBGP and iBGP alike).
func localPath(p netip.Prefix, withdraw, lowPref bool) (*apiutil.Path, error) {
	nlri, err := bgp.NewIPAddrPrefix(p)
	if err != nil {
		return nil, err
	}
	family := bgp.RF_IPv4_UC
	attrs := []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP)}
	if lowPref {
		// On the path, not in a peer's export policy: GoBGP's policy
		// cannot set LOCAL_PREF 0 (it takes 0 for "no action"). GoBGP
		// strips LOCAL_PREF towards eBGP peers.
		attrs = append(attrs, bgp.NewPathAttributeLocalPref(0))
	}
	if p.Addr().Is4() {
		nh, err := bgp.NewPathAttributeNextHop(netip.IPv4Unspecified())
		if err != nil {
			return nil, err
		}
		attrs = append(attrs, nh)
	} else {
		family = bgp.RF_IPv6_UC
		mp, err := bgp.NewPathAttributeMpReachNLRI(family, []bgp.PathNLRI{{NLRI: nlri}}, netip.IPv6Unspecified())
		if err != nil {
			return nil, err
		}
		attrs = append(attrs, mp)
	}
	return &apiutil.Path{Family: family, Nlri: nlri, Attrs: attrs, Age: time.Now().Unix(), Withdrawal: withdraw}, nil
}
