package router

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/herald-lb/herald/e2e/lab/proc"
)

// sample uses every option the renderers know.
func sample() RouterBGP {
	return RouterBGP{
		ASN:      64512,
		RouterID: netip.MustParseAddr("198.51.100.1"),
		Neighbors: []Neighbor{
			{Address: netip.MustParseAddr("198.51.100.2"), ASN: 64513, Port: 1179, Password: "s3cret", BFD: true, BFDProfile: "fast"},
			{Address: netip.MustParseAddr("2001:db8:0:1::2"), ASN: 64513, Multihop: 2, Passive: true},
			{Name: "NODES", Range: netip.MustParsePrefix("198.51.100.0/24"), BFD: true},
		},
		Announce: []netip.Prefix{
			netip.MustParsePrefix("203.0.113.129/32"),
			netip.MustParsePrefix("2001:db8:0:3::/64"),
		},
		MaximumPaths:    4,
		HoldTime:        30 * time.Second,
		GracefulRestart: true,
		BFDProfiles: []BFDProfile{
			{Name: "fast", ReceiveInterval: 100 * time.Millisecond, TransmitInterval: 150 * time.Millisecond, DetectMultiplier: 5, Passive: true},
		},
		ListenPort: 1179,
	}
}

// wantLines checks that every line appears, trimmed, in text.
func wantLines(t *testing.T, text string, lines ...string) {
	t.Helper()
	have := map[string]bool{}
	for _, l := range strings.Split(text, "\n") {
		have[strings.TrimSpace(l)] = true
	}
	for _, l := range lines {
		if !have[l] {
			t.Errorf("missing line %q in:\n%s", l, text)
		}
	}
}

func TestFRRBGPConfig(t *testing.T) {
	conf := FRRBGPConfig(sample())
	wantLines(t, conf,
		"bgp route-map delay-timer 0",
		"router bgp 64512",
		"bgp router-id 198.51.100.1",
		"no bgp ebgp-requires-policy",
		"bgp bestpath as-path multipath-relax",
		"bgp graceful-restart",
		"timers bgp 3 30",
		"neighbor 198.51.100.2 remote-as 64513",
		"neighbor 198.51.100.2 port 1179",
		"neighbor 198.51.100.2 timers connect 2",
		"neighbor 198.51.100.2 password s3cret",
		"neighbor 198.51.100.2 bfd",
		"neighbor 198.51.100.2 bfd profile fast",
		"neighbor 2001:db8:0:1::2 ebgp-multihop 2",
		"neighbor 2001:db8:0:1::2 passive",
		"neighbor NODES peer-group",
		"neighbor NODES remote-as external",
		"bgp listen range 198.51.100.0/24 peer-group NODES",
		"neighbor NODES bfd",
		"address-family ipv4 unicast",
		"address-family ipv6 unicast",
		"network 203.0.113.129/32",
		"network 2001:db8:0:3::/64",
		"maximum-paths 4",
		"maximum-paths ibgp 4",
		"neighbor NODES activate",
		"neighbor 2001:db8:0:1::2 route-map HLAB-EXPORT out",
		"ip prefix-list HLAB-ANNOUNCE4 seq 5 permit 203.0.113.129/32",
		"ipv6 prefix-list HLAB-ANNOUNCE6 seq 5 permit 2001:db8:0:3::/64",
		"route-map HLAB-EXPORT deny 100",
		"bfd",
		"profile fast",
		"receive-interval 100",
		"transmit-interval 150",
		"detect-multiplier 5",
		"passive-mode",
	)
	// Every neighbor is activated in both families.
	if n := strings.Count(conf, " activate\n"); n != 6 {
		t.Errorf("%d activate lines, want 6:\n%s", n, conf)
	}
	// A range is never connected to: no port or passive for it.
	if strings.Contains(conf, "NODES passive") || strings.Contains(conf, "NODES port") {
		t.Errorf("range peer group has connection options:\n%s", conf)
	}
	checkFRRSyntax(t, conf)
}

func TestFRRBGPConfigMinimal(t *testing.T) {
	conf := FRRBGPConfig(RouterBGP{ASN: 64512, Neighbors: []Neighbor{{Range: netip.MustParsePrefix("198.51.100.0/24"), ASN: 64500}}})
	wantLines(t, conf,
		"neighbor RANGE1 peer-group",
		"neighbor RANGE1 remote-as 64500",
		"bgp listen range 198.51.100.0/24 peer-group RANGE1",
		"maximum-paths 1",
		"timers bgp 3 9",
		"route-map HLAB-EXPORT deny 100",
	)
	for _, absent := range []string{"router-id", "prefix-list", "permit", "\nbfd"} {
		if strings.Contains(conf, absent) {
			t.Errorf("unexpected %q in:\n%s", absent, conf)
		}
	}
	checkFRRSyntax(t, conf)
}

func TestBIRDBGPConfig(t *testing.T) {
	conf := BIRDBGPConfig(sample())
	wantLines(t, conf,
		"router id 198.51.100.1;",
		"log stderr all;",
		"protocol device {}",
		"protocol kernel kernel4 {",
		"ipv4 { export where source = RTS_BGP; };",
		"ipv6 { export where source = RTS_BGP; };",
		"merge paths on limit 4;",
		"protocol static announce4 {",
		"route 203.0.113.129/32 blackhole;",
		"route 2001:db8:0:3::/64 blackhole;",
		"protocol bfd {}",
		"protocol bgp peer1 {",
		"local port 1179 as 64512;",
		"neighbor 198.51.100.2 port 1179 as 64513;",
		"hold time 30;",
		"keepalive time 3;",
		"connect retry time 2;",
		"error wait time 1, 5;",
		`password "s3cret";`,
		"graceful restart on;",
		"bfd { min rx interval 100 ms; min tx interval 150 ms; multiplier 5; passive on; };",
		"ipv4 { import all; export where source = RTS_STATIC; };",
		"protocol bgp peer2 {",
		"neighbor 2001:db8:0:1::2 as 64513;",
		"multihop 2;",
		"passive on;",
		"protocol bgp NODES {",
		"neighbor range 198.51.100.0/24 external;",
		"bfd on;",
	)
	checkBIRDSyntax(t, conf)
}

func TestBIRDBGPConfigMinimal(t *testing.T) {
	conf := BIRDBGPConfig(RouterBGP{ASN: 64513, RouterID: netip.MustParseAddr("198.51.100.2"), Neighbors: []Neighbor{{Address: netip.MustParseAddr("198.51.100.1"), ASN: 64512}}})
	wantLines(t, conf,
		"local as 64513;",
		"neighbor 198.51.100.1 as 64512;",
		"ipv4 { import all; export none; };",
		"ipv6 { import all; export none; };",
	)
	for _, absent := range []string{"merge paths", "protocol static", "protocol bfd", "bfd"} {
		if strings.Contains(conf, absent) {
			t.Errorf("unexpected %q in:\n%s", absent, conf)
		}
	}
	checkBIRDSyntax(t, conf)
}

// checkFRRSyntax has vtysh parse conf (dry run, no daemons needed) when
// FRR is installed.
func checkFRRSyntax(t *testing.T, conf string) {
	t.Helper()
	if _, err := exec.LookPath("vtysh"); err != nil {
		t.Log("vtysh not installed: syntax not checked")
		return
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "frr.conf")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "vtysh.conf"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("vtysh", "--config_dir", dir, "-C", "-f", file).CombinedOutput(); err != nil {
		t.Errorf("vtysh rejects the configuration: %v\n%s\n%s", err, out, conf)
	}
}

// checkBIRDSyntax has bird parse conf when BIRD is installed.
func checkBIRDSyntax(t *testing.T, conf string) {
	t.Helper()
	if _, err := exec.LookPath("bird"); err != nil {
		t.Log("bird not installed: syntax not checked")
		return
	}
	file := filepath.Join(t.TempDir(), "bird.conf")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("bird", "-p", "-c", file).CombinedOutput(); err != nil {
		t.Errorf("bird rejects the configuration: %v\n%s\n%s", err, out, conf)
	}
}

func TestFRRDaemonOf(t *testing.T) {
	r := proc.Record{Args: []string{"netns", "exec", "ns1", FRRDaemonDir + "/bgpd", "-N", "space", "-u", "root"}}
	if d, ps, ok := frrDaemonOf(r); !ok || d != "bgpd" || ps != "space" {
		t.Errorf("frrDaemonOf = %q %q %v", d, ps, ok)
	}
	for _, args := range [][]string{
		{"netns", "exec", "ns1", "/usr/sbin/bird", "-f", "-c", "x"},
		{"netns", "exec", "ns1", "/elsewhere/bgpd", "-N", "space"},
		{"netns", "exec", "ns1", FRRDaemonDir + "/bgpd", "-f", "x"},
	} {
		if _, _, ok := frrDaemonOf(proc.Record{Args: args}); ok {
			t.Errorf("frrDaemonOf(%q) claims an FRR daemon", args)
		}
	}
}
