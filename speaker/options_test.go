package speaker

import (
	"errors"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/herald-lb/herald/speaker/partition"
	"github.com/spf13/pflag"
)

func TestParseFlags(t *testing.T) {
	t.Setenv("NODE_NAME", "Node1")
	t.Setenv("NODE_IP", "198.51.100.11")
	t.Setenv("POD_NAMESPACE", "")
	t.Setenv("HERALD_CLUSTER_CIDR", "198.18.0.0/16")
	o, err := ParseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.NodeName != "node1" || o.Namespace != "herald-system" || o.Port != 7946 || o.MetricsAddr != ":7473" ||
		o.AdvertiseAddr != netip.MustParseAddr("198.51.100.11") || o.BindAddr.IsValid() || !o.Proxy || o.SecretName != "herald-memberlist" ||
		o.TakeoverCheck != partition.DefaultTakeoverCheckWait {
		t.Errorf("defaults: %+v", o)
	}
	o, err = ParseFlags([]string{"--proxy=false", "--memberlist-port=7947", "--memberlist-probe-interval=200ms",
		"--memberlist-probe-timeout=80ms", "--memberlist-suspicion-max-mult=4", "--ignore-exclude-lb", "--log-level=debug", "--takeover-check=0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Proxy || o.Port != 7947 || o.Timers.ProbeInterval != 200*time.Millisecond || o.Timers.SuspicionMaxTimeoutMult != 4 || !o.IgnoreExcludeLB || o.LogLevel.String() != "DEBUG" || o.TakeoverCheck != 0 {
		t.Errorf("flags: %+v", o)
	}
	if _, err := ParseFlags([]string{"-h"}, io.Discard); !errors.Is(err, pflag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

func TestParseFlagsErrorsNameTheFlag(t *testing.T) {
	t.Setenv("NODE_NAME", "node1")
	t.Setenv("NODE_IP", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--memberlist-port=0"}, "--memberlist-port"},
		{[]string{"--memberlist-advertise-address=nope"}, "--memberlist-advertise-address"},
		{[]string{"--memberlist-advertise-address=0.0.0.0"}, "--memberlist-advertise-address"},
		{[]string{"--memberlist-bind-address=x"}, "--memberlist-bind-address"},
		{[]string{"--memberlist-probe-timeout=1s"}, "--memberlist-probe-timeout"},
		{[]string{"--memberlist-suspicion-mult=0"}, "--memberlist-suspicion-mult"},
		{[]string{"--memberlist-suspicion-max-mult=0"}, "--memberlist-suspicion-max-mult"},
		{[]string{"--takeover-check=3s"}, "--takeover-check"},
		{[]string{"--takeover-check=-1ms"}, "--takeover-check"},
		{[]string{"--log-level=loud"}, "--log-level"},
		{[]string{"--metrics-addr=nope"}, "--metrics-addr"},
		{[]string{"--node-name="}, "--node-name"},
		{[]string{"--node-name=Not_A_Node"}, "--node-name"},
		{[]string{"--namespace=Bad"}, "--namespace"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		_, err := ParseFlags(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want it to name %s", c.args, err, c.want)
		}
	}
	// The proxy's flags are the command line's business, not the speaker's.
	if _, err := ParseFlags([]string{"--sync-period=1s"}, io.Discard); err == nil {
		t.Error("the speaker alone accepted a proxy flag")
	}
}
