package members

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestDefaults(t *testing.T) {
	c := Config{NodeName: "n"}.withDefaults()
	if c.BindPort != DefaultPort || c.LeaveTimeout != time.Second || c.RejoinInterval != 5*time.Second {
		t.Errorf("defaults: %+v", c)
	}
	if c.Timers != DefaultTimers() {
		t.Errorf("timers %+v, want %+v", c.Timers, DefaultTimers())
	}
	// Set fields are kept.
	c = Config{NodeName: "n", BindPort: 8000, Timers: Timers{ProbeInterval: time.Second}}.withDefaults()
	if c.BindPort != 8000 || c.Timers.ProbeInterval != time.Second || c.Timers.ProbeTimeout != 50*time.Millisecond {
		t.Errorf("overrides lost: %+v", c)
	}
	if err := (Config{NodeName: "n"}).withDefaults().validate(); err != nil {
		t.Errorf("defaults invalid: %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no name", Config{}, "node name"},
		{"port", Config{NodeName: "n", BindPort: 70000}, "bind port"},
		{"negative port", Config{NodeName: "n", BindPort: -1}, "bind port"},
		{"advertise unspecified", Config{NodeName: "n", AdvertiseAddr: netip.MustParseAddr("0.0.0.0")}, "advertise"},
		{"negative timer", Config{NodeName: "n", Timers: Timers{GossipInterval: -time.Second}}, "GossipInterval"},
		{"negative count", Config{NodeName: "n", Timers: Timers{IndirectChecks: -1}}, "IndirectChecks"},
		{"timeout past interval", Config{NodeName: "n", Timers: Timers{ProbeTimeout: time.Second}}, "ProbeTimeout"},
		{"negative leave", Config{NodeName: "n", LeaveTimeout: -1}, "LeaveTimeout"},
	}
	for _, c := range cases {
		err := c.cfg.withDefaults().validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error about %s", c.name, err, c.want)
		}
		// New refuses it before listening and before touching the secret.
		if _, err := New(c.cfg); err == nil {
			t.Errorf("%s: New accepted it", c.name)
		}
	}
	if _, err := New(Config{NodeName: "n", Secret: Secret("short")}); err == nil || !strings.Contains(err.Error(), "at least") {
		t.Errorf("short secret: %v", err)
	}
	if _, err := New(Config{NodeName: "n", Secret: Secret(strings.Repeat("k", 32)), Meta: Meta{Interfaces: []string{"a/b"}}}); err == nil {
		t.Error("bad metadata accepted")
	}
}

func TestDetectionEstimate(t *testing.T) {
	d := DefaultTimers()
	for _, c := range []struct {
		n    int
		want time.Duration
	}{
		{1, 550 * time.Millisecond},
		{3, 550 * time.Millisecond},
		{10, 550 * time.Millisecond},
		{100, 850 * time.Millisecond},
	} {
		if got := d.DetectionEstimate(c.n); got != c.want {
			t.Errorf("DetectionEstimate(%d) = %v, want %v", c.n, got, c.want)
		}
	}
	if got := (Timers{ProbeInterval: time.Second, ProbeTimeout: 500 * time.Millisecond, SuspicionMult: 4}).DetectionEstimate(3); got != 6*time.Second+50*time.Millisecond {
		t.Errorf("custom timers: %v", got)
	}
}

func TestParsePeers(t *testing.T) {
	got, errs := parsePeers([]string{
		"192.0.2.1", "192.0.2.2:8000", " 192.0.2.1 ", "[2001:db8::1]:7000", "2001:db8::2", "[2001:db8::3]",
		"::ffff:192.0.2.9", "fe80::1%eth0",
		"node1.example", "", "0.0.0.0", "192.0.2.5:0", "192.0.2.6:99999",
	}, 7946)
	want := []netip.AddrPort{
		netip.MustParseAddrPort("192.0.2.1:7946"),
		netip.MustParseAddrPort("192.0.2.2:8000"),
		netip.MustParseAddrPort("[2001:db8::1]:7000"),
		netip.MustParseAddrPort("[2001:db8::2]:7946"),
		netip.MustParseAddrPort("[2001:db8::3]:7946"),
		netip.MustParseAddrPort("192.0.2.9:7946"),
		netip.MustParseAddrPort("[fe80::1%eth0]:7946"),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("peers %v, want %v", got, want)
	}
	if len(errs) != 5 {
		t.Errorf("errors %v, want 5", errs)
	}
}
