package proxy

import (
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/herald-lb/herald/proxy/rules"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.conf")
	text := "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n" + body
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestConfigKubeadmDefault: kubeadm's file, passed as kubeadm's DaemonSet
// passes it (with --hostname-override), sets what it holds and leaves
// herald's defaults for its zero values.
func TestConfigKubeadmDefault(t *testing.T) {
	t.Setenv(EnvClusterCIDR, "")
	path := "kubeproxyconfig/testdata/kubeadm-v1.34-config.conf"
	o, err := ParseFlags([]string{"--config=" + path, "--hostname-override=node-a"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.ClusterCIDRs, []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}) || o.Kubeconfig != "/var/lib/kube-proxy/kubeconfig.conf" ||
		o.BindAddress != netip.MustParseAddr("0.0.0.0") || o.NodeName != "node-a" || o.ProxyMode != ModeIPTables ||
		o.SyncPeriod != 30*time.Second || o.MinSyncPeriod != time.Second || o.MasqueradeBit != 14 || o.QPS != 50 ||
		o.Conntrack.MaxPerCore != 32768 || o.Conntrack.TCPEstablishedTimeout != 24*time.Hour || o.HealthzBindAddress != "0.0.0.0:10256" {
		t.Errorf("%+v", o)
	}
	if len(o.ConfigWarnings) != 1 || !strings.HasPrefix(o.ConfigWarnings[0], "iptables.localhostNodePorts: ") {
		t.Errorf("warnings %q", o.ConfigWarnings)
	}
}

// TestConfigFlagsWin: a flag on the command line wins over the file's
// field, and says so.
func TestConfigFlagsWin(t *testing.T) {
	path := writeConfig(t, "mode: nftables\nnftables: {syncPeriod: 10s, minSyncPeriod: 3s}\nclusterCIDR: 198.18.0.0/16\nnodePortAddresses: [198.18.0.0/15]\niptables: {localhostNodePorts: false}\n")
	o, err := ParseFlags([]string{"--hostname-override=n", "--sync-period=20s", "--config", path, "--proxy-mode=iptables"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.SyncPeriod != 20*time.Second || o.MinSyncPeriod != 3*time.Second || o.ProxyMode != ModeIPTables || o.NodePortAddresses.String() != "198.18.0.0/15" {
		t.Errorf("%+v", o)
	}
	want := []string{"mode: --proxy-mode on the command line wins", "nftables.syncPeriod: --sync-period on the command line wins"}
	if !slices.Equal(o.ConfigNotes, want) {
		t.Errorf("notes %q", o.ConfigNotes)
	}
}

// TestConfigErrors: what the file cannot be is refused, naming the file
// and the field, even where the flag's own check finds it.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"mode: ipvs\n", "mode: herald programs iptables or nftables, not IPVS"},
		{"conntrack: {maxPercore: 1}\n", "conntrack.maxPercore: unknown field"},
		{"iptables: {syncPeriod: 30}\n", "iptables.syncPeriod: want a duration"},
		{"nodePortAddresses: [192.0.2.0/33]\n", "--nodeport-addresses (from FILE, nodePortAddresses): "},
		{"clusterCIDR: pods\n", "--cluster-cidr (from FILE, clusterCIDR): "},
		{"bindAddress: node-a\n", `--bind-address (from FILE, bindAddress): "node-a" is not an IP address`},
		{"detectLocalMode: Bridge\n", `FILE: detectLocalMode: "Bridge": "Bridge": use ClusterCIDR, NodeCIDR`},
		{"detectLocalMode: BridgeInterface\n", "--pod-bridge-interface: --detect-local-mode=BridgeInterface needs it"},
		{"detectLocalMode: InterfaceNamePrefix\ndetectLocal: {interfaceNamePrefix: \"veth*\"}\n", `--pod-interface-name-prefix (from FILE, detectLocal.interfaceNamePrefix): "veth*": '*' cannot be`},
		{"conntrack: {maxPerCore: -1}\n", "--conntrack-max-per-core (from FILE, conntrack.maxPerCore): must not be negative"},
		{"iptables: {minSyncPeriod: 1m, syncPeriod: 30s}\n", "--min-sync-period (from FILE, iptables.minSyncPeriod): 1m0s is longer than --sync-period"},
		{"iptables: {masqueradeBit: 32}\n", "--iptables-masquerade-bit (from FILE, iptables.masqueradeBit): 32 is out of range"},
	} {
		path := writeConfig(t, tc.body)
		_, err := ParseFlags([]string{"--config=" + path, "--hostname-override=n"}, io.Discard)
		want := strings.ReplaceAll(tc.want, "FILE", path)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", tc.body, err, want)
		}
	}
	if _, err := ParseFlags([]string{"--config=/nonexistent/config.conf"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--config: open /nonexistent/config.conf") {
		t.Errorf("missing file: %v", err)
	}
}

// TestConfigInTheSpeaker: the speaker's proxy takes the file too, but
// not the fields for the speaker's own flags (its connection).
func TestConfigInTheSpeaker(t *testing.T) {
	path := writeConfig(t, "clientConnection: {kubeconfig: /k, qps: 3}\nclusterCIDR: 198.18.0.0/16\niptables: {localhostNodePorts: false}\n")
	fs := pflag.NewFlagSet("speaker", pflag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "")
	o := DefaultOptions()
	finish := BindFlags(fs, &o)
	if err := fs.Parse([]string{"--config=" + path}); err != nil {
		t.Fatal(err)
	}
	if err := finish(); err != nil {
		t.Fatal(err)
	}
	if *kubeconfig != "" || len(o.ClusterCIDRs) != 1 {
		t.Errorf("kubeconfig %q, cluster CIDRs %v", *kubeconfig, o.ClusterCIDRs)
	}
	want := []string{"clientConnection.kubeconfig: left out: this command runs the proxy with its own --kubeconfig", "clientConnection.qps: left out: this command runs the proxy with its own --kube-api-qps"}
	if !slices.Equal(o.ConfigWarnings, want) {
		t.Errorf("warnings %q", o.ConfigWarnings)
	}
}

// TestDetectLocalFlags: kube-proxy's local-traffic modes as the syncer
// gets them.
func TestDetectLocalFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want rules.Interface
		err  string
	}{
		{[]string{"--detect-local-mode=BridgeInterface", "--pod-bridge-interface=cni0"}, rules.Interface{Name: "cni0"}, ""},
		{[]string{"--detect-local-mode=InterfaceNamePrefix", "--pod-interface-name-prefix=veth"}, rules.Interface{Name: "veth", Prefix: true}, ""},
		{[]string{"--detect-local-mode=NodeCIDR", "--pod-bridge-interface=cni0"}, rules.Interface{}, ""},
		{[]string{"--detect-local-mode=InterfaceNamePrefix"}, rules.Interface{}, "--pod-interface-name-prefix: --detect-local-mode=InterfaceNamePrefix needs it"},
		{[]string{"--detect-local-mode=bridge"}, rules.Interface{}, `invalid argument "bridge" for "--detect-local-mode" flag`},
		{[]string{"--pod-bridge-interface=br 0"}, rules.Interface{}, `--pod-bridge-interface: "br 0": ' ' cannot be`},
		{[]string{"--bind-address=::"}, rules.Interface{}, ""},
		{[]string{"--bind-address=node"}, rules.Interface{}, `--bind-address: "node" is not an IP address`},
	} {
		o, err := ParseFlags(append(tc.args, "--hostname-override=n"), io.Discard)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: got %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || o.podInterface() != tc.want {
			t.Errorf("%q: %+v %v", tc.args, o.podInterface(), err)
		}
	}
}

func TestWithPrimary(t *testing.T) {
	a := netip.MustParseAddr
	node := []netip.Addr{a("192.0.2.1"), a("2001:db8::1")}
	if got := withPrimary(node, a("192.0.2.9")); !slices.Equal(got, []netip.Addr{a("192.0.2.9"), a("2001:db8::1")}) {
		t.Errorf("%v", got)
	}
	if got := withPrimary(node, a("0.0.0.0")); !slices.Equal(got, node) {
		t.Errorf("unspecified: %v", got)
	}
	if got := withAddr(node, a("2001:db8::9")); len(got) != 3 || len(node) != 2 {
		t.Errorf("%v", got)
	}
}

// TestNodeConfigLocalModes: what the renderer is told for each
// local-traffic mode and --bind-address.
func TestNodeConfigLocalModes(t *testing.T) {
	a, p := netip.MustParseAddr, netip.MustParsePrefix
	node := NodeInfo{IPs: []netip.Addr{a("192.0.2.1")}, PrimaryIPs: []netip.Addr{a("192.0.2.1")}, PodCIDRs: []netip.Prefix{p("198.18.1.0/24")}}
	cluster := []netip.Prefix{p("198.18.0.0/16")}
	for _, tc := range []struct {
		cfg   Config
		cidrs []netip.Prefix
		iface rules.Interface
	}{
		{Config{ClusterCIDRs: cluster}, cluster, rules.Interface{}},
		{Config{}, node.PodCIDRs, rules.Interface{}},
		{Config{ClusterCIDRs: cluster, NodeCIDR: true}, node.PodCIDRs, rules.Interface{}},
		{Config{ClusterCIDRs: cluster, PodInterface: rules.Interface{Name: "cni0"}}, nil, rules.Interface{Name: "cni0"}},
		// Whatever else is wrong (a bit the syncer leaves to the default).
		{Config{ClusterCIDRs: cluster, PodInterface: rules.Interface{Name: "cni0"}, MasqueradeBit: 40}, nil, rules.Interface{Name: "cni0"}},
	} {
		tc.cfg.NodeName = testNode
		s := NewSyncer(tc.cfg, NewTracker(testNode, nil), nil, nil, nil, nil, nil, nil)
		nc := s.nodeConfig(node)
		if !slices.Equal(nc.ClusterCIDRs, tc.cidrs) || nc.PodInterface != tc.iface {
			t.Errorf("%+v: CIDRs %v, interface %+v", tc.cfg, nc.ClusterCIDRs, nc.PodInterface)
		}
	}
	s := NewSyncer(Config{NodeName: testNode, BindAddress: a("192.0.2.7")}, NewTracker(testNode, nil), nil, nil, nil, nil, nil, nil)
	if nc := s.nodeConfig(node); !slices.Equal(nc.IPs, []netip.Addr{a("192.0.2.1"), a("192.0.2.7")}) {
		t.Errorf("bind address among the node's IPs: %v", nc.IPs)
	}
}
