package proxy

import (
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/herald-lb/herald/proxy/rules"
)

func TestParseFlagsDefaults(t *testing.T) {
	t.Setenv("NODE_NAME", "Node1")
	t.Setenv(EnvClusterCIDR, "198.18.0.0/16")
	o, err := ParseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.NodeName != "node1" || o.MinSyncPeriod != time.Second || o.SyncPeriod != 30*time.Second ||
		o.HealthzBindAddress != "0.0.0.0:10256" || o.MetricsBindAddress != "127.0.0.1:10249" || o.MasqueradeBit != 14 {
		t.Errorf("%+v", o)
	}
	if !slices.Equal(o.ClusterCIDRs, []netip.Prefix{netip.MustParsePrefix("198.18.0.0/16")}) {
		t.Errorf("cluster CIDRs from the environment: %v", o.ClusterCIDRs)
	}
	// The flag wins over the environment.
	o, err = ParseFlags([]string{"--cluster-cidr=10.244.0.0/16, fd00:244::/48", "--hostname-override=n2"}, io.Discard)
	if err != nil || len(o.ClusterCIDRs) != 2 || o.NodeName != "n2" {
		t.Errorf("%+v %v", o, err)
	}
	if _, err := ParseFlags([]string{"-h"}, io.Discard); !errors.Is(err, pflag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
	// kube-proxy's names and -v carry over.
	o, err = ParseFlags([]string{"--iptables-sync-period=45s", "--iptables-min-sync-period=2s", "-v=4"}, io.Discard)
	if err != nil || o.SyncPeriod != 45*time.Second || o.MinSyncPeriod != 2*time.Second || o.LogLevel() != slog.LevelDebug {
		t.Errorf("kube-proxy's flags: %+v %v", o, err)
	}
	if o, _ := ParseFlags([]string{"-v=2"}, io.Discard); o.LogLevel() != slog.LevelInfo {
		t.Errorf("-v=2: %v", o.LogLevel())
	}
}

func TestParseFlagsErrorsNameTheFlag(t *testing.T) {
	t.Setenv("NODE_NAME", "node1")
	t.Setenv(EnvClusterCIDR, "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster-cidr=198.18.0.0/33"}, "--cluster-cidr"},
		{[]string{"--cluster-cidr=10.0.0.0/8,10.1.0.0/16"}, "one CIDR per address family"},
		{[]string{"--min-sync-period=1m", "--sync-period=30s"}, "--min-sync-period"},
		{[]string{"--sync-period=0"}, "--sync-period"},
		{[]string{"--dsr"}, "--dsr: needs --proxy-mode=nftables"},
		{[]string{"--dsr", "--proxy-mode=nftables", "--dsr-port=70000"}, "--dsr-port"},
		{[]string{"--dsr", "--proxy-mode=nftables", "--dsr-mark-mask=0x4000"}, "--dsr-mark-mask: 0x4000 holds the masquerade bit 14"},
		{[]string{"--dsr", "--proxy-mode=nftables", "--dsr-mark-mask=0"}, "--dsr-mark-mask"},
		{[]string{"--iptables-masquerade-bit=32"}, "--iptables-masquerade-bit"},
		{[]string{"--healthz-bind-address=:99999"}, "--healthz-bind-address"},
		{[]string{"--metrics-bind-address=localhost:10249"}, "--metrics-bind-address"},
		{[]string{"--hostname-override=-x"}, "--hostname-override"},
		{[]string{"--nodeport-addresses=192.0.2.0/24,198.51.100.0/33"}, `--nodeport-addresses: "198.51.100.0/33" is not a CIDR`},
		{[]string{"--nodeport-addresses=192.0.2.1"}, `--nodeport-addresses: "192.0.2.1" is not a CIDR (for one address write 192.0.2.1/32)`},
		{[]string{"--nodeport-addresses=primary,192.0.2.0/24"}, `--nodeport-addresses: "primary" cannot be combined with CIDRs`},
		{[]string{"--nodeport-addresses=192.0.2.0/24,,2001:db8::/64"}, "--nodeport-addresses: empty entry"},
		{[]string{"--nodeport-addresses=::ffff:192.0.2.0/120"}, "--nodeport-addresses: \"::ffff:192.0.2.0/120\": write IPv4 prefixes as IPv4"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		_, err := ParseFlags(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want it to mention %s", c.args, err, c.want)
		}
	}
	// --cleanup needs nothing else to be right.
	t.Setenv("NODE_NAME", "")
	if _, err := ParseFlags([]string{"--cleanup", "--hostname-override="}, io.Discard); err != nil {
		t.Errorf("--cleanup: %v", err)
	}
}

func TestFamilies(t *testing.T) {
	v4 := netip.MustParseAddr("192.0.2.10")
	v6 := netip.MustParseAddr("2001:db8::10")
	for _, c := range []struct {
		node  NodeInfo
		cidrs []netip.Prefix
		want  []rules.Family
	}{
		{NodeInfo{}, nil, []rules.Family{rules.IPv4}},
		{NodeInfo{IPs: []netip.Addr{v4}}, nil, []rules.Family{rules.IPv4}},
		{NodeInfo{IPs: []netip.Addr{v6}}, nil, []rules.Family{rules.IPv6}},
		{NodeInfo{IPs: []netip.Addr{v4, v6}}, nil, []rules.Family{rules.IPv4, rules.IPv6}},
		{NodeInfo{IPs: []netip.Addr{v4}}, []netip.Prefix{netip.MustParsePrefix("fd00::/48")}, []rules.Family{rules.IPv4, rules.IPv6}},
		{NodeInfo{IPs: []netip.Addr{v6}, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}}, nil, []rules.Family{rules.IPv4, rules.IPv6}},
	} {
		if got := Families(c.node, c.cidrs); !slices.Equal(got, c.want) {
			t.Errorf("Families(%v, %v) = %v, want %v", c.node.IPs, c.cidrs, got, c.want)
		}
	}
}

func TestDSRFlags(t *testing.T) {
	t.Setenv("NODE_NAME", "node1")
	o, err := ParseFlags([]string{"--proxy-mode=nftables", "--dsr", "--dsr-seed=0x1234", "--dsr-mark-mask=0x0f000000"}, io.Discard)
	if err != nil || !o.DSR.Enabled || o.DSR.Seed != 0x1234 || o.DSR.MarkMask != 0x0f000000 || o.DSR.Port != 8475 {
		t.Errorf("%+v %v", o.DSR, err)
	}
	if a, b := DSRSeed("8a3f2c1e-uid"), DSRSeed("8a3f2c1e-uid"); a != b || a == 0 || a == DSRSeed("another") {
		t.Errorf("seeds %#x %#x", a, b)
	}
}
