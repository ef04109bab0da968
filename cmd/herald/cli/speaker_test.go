package cli

import (
	"io"
	"strings"
	"testing"
	"time"
)

// `herald speaker` reads the proxy's flags too and hands the proxy the
// speaker's node and connection settings.
func TestParseSpeaker(t *testing.T) {
	t.Setenv("NODE_NAME", "Node1")
	t.Setenv("NODE_IP", "198.51.100.11")
	t.Setenv("HERALD_CLUSTER_CIDR", "198.18.0.0/16")
	c, err := parseSpeaker([]string{"--min-sync-period=2s", "--kube-api-qps=7", "--nodeport-addresses=192.0.2.0/24"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	p := c.proxy
	if !c.speaker.Proxy || p.NodeName != "node1" || len(p.ClusterCIDRs) != 1 || p.HealthzBindAddress != "0.0.0.0:10256" ||
		p.MinSyncPeriod != 2*time.Second || p.QPS != 7 || c.speaker.Ready != nil || p.NodePortAddresses.String() != "192.0.2.0/24" {
		t.Errorf("speaker %+v\nproxy %+v", c.speaker, p)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--metrics-addr=0.0.0.0:10256"}, "--metrics-addr"},
		{[]string{"--cluster-cidr=nope"}, "--cluster-cidr"},
		{[]string{"--nodeport-addresses=192.0.2.0/24,nope"}, `--nodeport-addresses: "nope" is not a CIDR`},
		{[]string{"--sync-period=0s"}, "--sync-period"},
		{[]string{"--memberlist-port=0"}, "--memberlist-port"},
	} {
		if _, err := parseSpeaker(tc.args, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want it to name %s", tc.args, err, tc.want)
		}
	}
	// Without the proxy its flags are not checked.
	if _, err := parseSpeaker([]string{"--proxy=false", "--sync-period=0s"}, io.Discard); err != nil {
		t.Errorf("--proxy=false: %v", err)
	}
}
