package gobgp

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v4/api"

	"github.com/herald-lb/herald/config"
	bgpplan "github.com/herald-lb/herald/speaker/bgp/plan"
)

func TestAPIPeer(t *testing.T) {
	p := &config.Peer{
		Name: "core", MyASN: 64500, PeerASN: 64501,
		Address: netip.MustParseAddr("198.51.100.1"), SourceAddress: netip.MustParseAddr("198.51.100.10"), Port: 1179,
		HoldTime: 30 * time.Second, KeepaliveTime: 10 * time.Second, ConnectTime: 5 * time.Second,
		Password: "not-a-real-secret", EBGPMultiHop: true, GracefulRestart: true,
		BFD: &config.BFDProfile{Name: "fast", ReceiveInterval: 100, TransmitInterval: 200, DetectMultiplier: 5},
	}
	ap, err := apiPeer(p)
	if err != nil {
		t.Fatal(err)
	}
	c := ap.Conf
	if c.NeighborAddress != "198.51.100.1" || c.PeerAsn != 64501 || c.LocalAsn != 64500 || c.AuthPassword != "not-a-real-secret" || c.Description != "core" {
		t.Errorf("conf %v", c)
	}
	if tc := ap.Timers.Config; tc.HoldTime != 30 || tc.KeepaliveInterval != 10 || tc.ConnectRetry != 5 {
		t.Errorf("timers %v", tc)
	}
	if tr := ap.Transport; tr.LocalAddress != "198.51.100.10" || tr.RemotePort != 1179 || tr.PassiveMode {
		t.Errorf("transport %v", tr)
	}
	if m := ap.EbgpMultihop; !m.GetEnabled() || m.GetMultihopTtl() != 255 {
		t.Errorf("multihop %v", m)
	}
	if gr := ap.GracefulRestart; !gr.GetEnabled() || gr.GetRestartTime() != 120 {
		t.Errorf("graceful restart %v", gr)
	}
	if len(ap.AfiSafis) != 1 {
		t.Fatalf("families %v", ap.AfiSafis)
	}
	af := ap.AfiSafis[0]
	if f := af.Config.Family; f.Afi != api.Family_AFI_IP || f.Safi != api.Family_SAFI_UNICAST || !af.Config.Enabled || !af.MpGracefulRestart.GetConfig().GetEnabled() {
		t.Errorf("family %v", af)
	}
	// GoBGP counts BFD intervals in microseconds.
	if b := ap.Bfd; !b.GetEnabled() || b.DesiredMinimumTxInterval != 200000 || b.RequiredMinimumReceive != 100000 || b.DetectionMultiplier != 5 {
		t.Errorf("bfd %v", b)
	}

	v6 := &config.Peer{Name: "v6", MyASN: 64500, PeerASN: 64500, Address: netip.MustParseAddr("2001:db8::1"), Port: 179, HoldTime: 90 * time.Second}
	ap, err = apiPeer(v6)
	if err != nil {
		t.Fatal(err)
	}
	if f := ap.AfiSafis[0].Config.Family; f.Afi != api.Family_AFI_IP6 || len(ap.AfiSafis) != 1 {
		t.Errorf("IPv6 peer families %v", ap.AfiSafis)
	}
	if ap.Transport.LocalAddress != "" || ap.EbgpMultihop != nil || ap.GracefulRestart != nil || ap.Bfd != nil || ap.Conf.AuthPassword != "" {
		t.Errorf("options set that the peer does not ask for: %v", ap)
	}
}

func TestAPIPeerUnsupported(t *testing.T) {
	base := config.Peer{Name: "edge", MyASN: 64500, PeerASN: 64501, Address: netip.MustParseAddr("198.51.100.1"), HoldTime: 90 * time.Second}
	dyn := base
	dyn.PeerASN, dyn.DynamicASN = 0, "sideways"
	noHold := base
	noHold.HoldTime = 0
	for _, c := range []struct {
		p     config.Peer
		field string
	}{{dyn, "spec.dynamicASN"}, {noHold, "spec.holdTime"}} {
		_, err := apiPeer(&c.p)
		if err == nil || !strings.Contains(err.Error(), "BGPPeer edge") || !strings.Contains(err.Error(), c.field) {
			t.Errorf("error %v, want one naming BGPPeer edge and %s", err, c.field)
		}
	}
}

func TestAPIPeerASNAndTimers(t *testing.T) {
	base := config.Peer{Name: "edge", MyASN: 64500, PeerASN: 64501, Address: netip.MustParseAddr("198.51.100.1"), HoldTime: 90 * time.Second}
	internal, external := base, base
	internal.PeerASN, internal.DynamicASN = 0, "internal"
	external.PeerASN, external.DynamicASN = 0, "external"
	for _, c := range []struct {
		p    config.Peer
		want uint32
	}{{base, 64501}, {internal, 64500}, {external, 0}} {
		ap, err := apiPeer(&c.p)
		if err != nil {
			t.Fatal(err)
		}
		if ap.Conf.PeerAsn != c.want {
			t.Errorf("peerASN %d dynamicASN %q: GoBGP peer AS %d, want %d", c.p.PeerASN, c.p.DynamicASN, ap.Conf.PeerAsn, c.want)
		}
		// A session BFD reset comes back after seconds, not GoBGP's 30.
		if h := ap.Timers.Config.IdleHoldTimeAfterReset; h != idleHoldAfterReset {
			t.Errorf("idle hold after reset %d", h)
		}
		// No connectTime: a router that restarts is called again within
		// seconds, not after GoBGP's 120.
		if r := ap.Timers.Config.ConnectRetry; r != defaultConnectRetry {
			t.Errorf("connect retry without connectTime %d, want %d", r, defaultConnectRetry)
		}
	}
}

func TestBuildExport(t *testing.T) {
	routes, err := routeMap(netip.MustParseAddr("198.51.100.1"), []bgpplan.Route{
		{Prefix: netip.MustParsePrefix("203.0.113.1/32"), Communities: []uint32{64500<<16 | 100}, LocalPref: 150},
		{Prefix: netip.MustParsePrefix("203.0.113.0/24")},
		// Same attributes as the first, listed in another order.
		{Prefix: netip.MustParsePrefix("203.0.113.9/32"), Communities: []uint32{64500<<16 | 100, 64500<<16 | 100}, LocalPref: 150},
		{Prefix: netip.MustParsePrefix("203.0.113.7/32"), LargeCommunities: [][3]uint32{{64500, 2, 3}, {64500, 1, 2}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := buildExport("herald-x-1", netip.MustParseAddr("198.51.100.1"), routes)
	if len(e.prefixes) != 4 || len(e.policy.Statements) != 3 || len(e.sets) != 4 {
		t.Fatalf("export %v", e.policy)
	}
	if s := e.sets[0]; s.DefinedType != api.DefinedType_DEFINED_TYPE_NEIGHBOR || !slices.Equal(s.List, []string{"198.51.100.1/32"}) {
		t.Errorf("neighbor set %v", s)
	}
	found := 0
	for i, st := range e.policy.Statements {
		set := e.sets[i+1]
		c, a := st.Conditions, st.Actions
		if c.PrefixSet.Name != set.Name || c.NeighborSet.Name != e.sets[0].Name || c.RouteType != api.Conditions_ROUTE_TYPE_LOCAL || a.RouteAction != api.RouteAction_ROUTE_ACTION_ACCEPT {
			t.Errorf("statement %v", st)
		}
		var prefixes []string
		for _, p := range set.Prefixes {
			if p.MaskLengthMin != p.MaskLengthMax || netip.MustParsePrefix(p.IpPrefix).Bits() != int(p.MaskLengthMin) {
				t.Errorf("prefix %v does not match its exact length only", p)
			}
			prefixes = append(prefixes, p.IpPrefix)
		}
		switch {
		case slices.Equal(prefixes, []string{"203.0.113.1/32", "203.0.113.9/32"}):
			found++
			if !slices.Equal(a.Community.GetCommunities(), []string{strconv.FormatUint(64500<<16|100, 10)}) || a.LocalPref.GetValue() != 150 || a.LargeCommunity != nil {
				t.Errorf("actions %v", a)
			}
		case slices.Equal(prefixes, []string{"203.0.113.0/24"}):
			found++
			if a.Community != nil || a.LargeCommunity != nil || a.LocalPref != nil {
				t.Errorf("actions %v", a)
			}
		case slices.Equal(prefixes, []string{"203.0.113.7/32"}):
			found++
			if !slices.Equal(a.LargeCommunity.GetCommunities(), []string{"64500:1:2", "64500:2:3"}) || a.Community != nil || a.LocalPref != nil {
				t.Errorf("actions %v", a)
			}
		default:
			t.Errorf("unexpected group %v", prefixes)
		}
	}
	if found != 3 {
		t.Errorf("groups %v", e.policy.Statements)
	}
}

func TestRouteMapRejects(t *testing.T) {
	v4 := netip.MustParseAddr("198.51.100.1")
	for _, rs := range [][]bgpplan.Route{
		{{Prefix: netip.MustParsePrefix("2001:db8::1/128")}},
		{{Prefix: netip.MustParsePrefix("203.0.113.1/32")}, {Prefix: netip.MustParsePrefix("203.0.113.1/32")}},
		{{}},
	} {
		if _, err := routeMap(v4, rs); err == nil {
			t.Errorf("routes %v accepted", rs)
		}
	}
}

func TestPolicyName(t *testing.T) {
	if got := policyName("core-router.v4/x y", 7); got != "herald-core-router.v4_x_y-7" {
		t.Errorf("policy name %q", got)
	}
}
