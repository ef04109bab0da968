package realnode

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
)

func testConfig() Config {
	return Config{
		Lab: "hlab", Name: "node1", Netns: "hlab-node1",
		IPv4: netip.MustParseAddr("198.51.100.11"), IPv6: netip.MustParseAddr("2001:db8:0:1::11"),
		PodCIDR: netip.MustParsePrefix("198.18.1.0/24"), PodGateway: netip.MustParseAddr("198.18.1.1"),
		PodCIDRv6: netip.MustParsePrefix("2001:db8:1:1::/64"), PodGatewayV6: netip.MustParseAddr("2001:db8:1:1::1"),
		Bridge: "cbr0", Dir: "/tmp/herald-lab/hlab/nodes/node1", CgroupParent: "/herald-lab/hlab-node1",
		Runc: "/e2e/_cache/lab/bin/lab-runc", CNIBinDir: "/usr/lib/cni", SandboxImage: "registry.k8s.io/pause:3.10.1",
	}
}

func TestContainerdTOML(t *testing.T) {
	got := ContainerdTOML(testConfig())
	for _, want := range []string{
		`root = "/tmp/herald-lab/hlab/nodes/node1/containerd/root"`,
		`state = "/tmp/herald-lab/hlab/nodes/node1/containerd/state"`,
		`address = "/tmp/herald-lab/hlab/nodes/node1/containerd/containerd.sock"`,
		`sandbox = "registry.k8s.io/pause:3.10.1"`,
		`BinaryName = "/e2e/_cache/lab/bin/lab-runc"`,
		`Root = "/tmp/herald-lab/hlab/nodes/node1/containerd/runc"`,
		`SystemdCgroup = false`,
		`netns_mounts_under_state_dir = true`,
		`conf_dir = "/tmp/herald-lab/hlab/nodes/node1/cni/net.d"`,
		`socket_dir = "/run/herald-lab/s/hlab-node1"`,
		`socket_path = "/run/herald-lab/s/hlab-node1/nri.sock"`,
		`plugin_path = "/tmp/herald-lab/hlab/nodes/node1/containerd/nri/plugins"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("containerd config lacks %q:\n%s", want, got)
		}
	}
	// Nothing machine-wide: every path is the node's.
	for _, line := range strings.Split(got, "\n") {
		if strings.Contains(line, `"/`) && !strings.Contains(line, "/tmp/herald-lab/hlab/nodes/node1") &&
			!strings.Contains(line, "/usr/lib/cni") && !strings.Contains(line, "/e2e/_cache") && !strings.Contains(line, "/run/herald-lab/s/hlab-node1") {
			t.Errorf("a path outside the node's directory: %s", line)
		}
	}
}

func TestShimSocketDirFits(t *testing.T) {
	// containerd refuses a socket_dir over 42 characters: the longest
	// lab prefix (5) and node name (node10) must fit.
	c := testConfig()
	c.Lab, c.Name = "abcde", "node10"
	if n := len(c.ShimSocketDir()); n > 42 {
		t.Errorf("%s: %d characters, containerd allows 42", c.ShimSocketDir(), n)
	}
}

func TestCNIConfList(t *testing.T) {
	data, err := CNIConfList(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Name    string `json:"name"`
		Plugins []struct {
			Type   string `json:"type"`
			Bridge string `json:"bridge"`
			IPMasq bool   `json:"ipMasq"`
			IPAM   struct {
				DataDir string `json:"dataDir"`
				Ranges  [][]struct {
					Subnet, Gateway string
				} `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(data, &conf); err != nil {
		t.Fatal(err)
	}
	if len(conf.Plugins) != 2 || conf.Plugins[0].Type != "bridge" || conf.Plugins[1].Type != "portmap" {
		t.Fatalf("plugins: %s", data)
	}
	b := conf.Plugins[0]
	if b.Bridge != "cbr0" || b.IPMasq || b.IPAM.DataDir != "/tmp/herald-lab/hlab/nodes/node1/cni/ipam" || len(b.IPAM.Ranges) != 2 ||
		b.IPAM.Ranges[0][0].Subnet != "198.18.1.0/24" || b.IPAM.Ranges[1][0].Gateway != "2001:db8:1:1::1" {
		t.Errorf("bridge: %s", data)
	}
	if conf.Name != "herald-lab-hlab-node1" {
		t.Errorf("network name %q: it names the CNI cache files, which must be the node's", conf.Name)
	}
}

func TestKubeletConfiguration(t *testing.T) {
	data, err := KubeletConfiguration(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	var conf map[string]any
	if err := json.Unmarshal(data, &conf); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{
		"cgroupDriver": "cgroupfs", "cgroupRoot": "/herald-lab/hlab-node1/pods", "failCgroupV1": false,
		"podLogsDir":               "/tmp/herald-lab/hlab/nodes/node1/pod-logs",
		"containerRuntimeEndpoint": "unix:///tmp/herald-lab/hlab/nodes/node1/containerd/containerd.sock",
		"protectKernelDefaults":    true,
	} {
		if conf[k] != want {
			t.Errorf("%s = %v, want %v", k, conf[k], want)
		}
	}
	args := strings.Join(KubeletArgs(testConfig()), " ")
	for _, want := range []string{"--root-dir=/tmp/herald-lab/hlab/nodes/node1/kubelet", "--node-ip=198.51.100.11,2001:db8:0:1::11", "--hostname-override=node1"} {
		if !strings.Contains(args, want) {
			t.Errorf("kubelet args lack %s: %s", want, args)
		}
	}
}

func TestClampOOMScore(t *testing.T) {
	for _, tc := range []struct {
		in      string
		was     int
		changed bool
		want    string
	}{
		{`{"ociVersion":"1.0.2","process":{"args":["/pause"],"oomScoreAdj":-997}}`, -997, true, `"oomScoreAdj":0`},
		{`{"process":{"oomScoreAdj":1000}}`, 1000, false, `"oomScoreAdj":1000`},
		{`{"process":{"args":["x"]}}`, 0, false, `"args":["x"]`},
		{`{"root":{"path":"rootfs"}}`, 0, false, `"root"`},
	} {
		out, was, changed, err := ClampOOMScore([]byte(tc.in))
		if err != nil || was != tc.was || changed != tc.changed || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s: %s was %d changed %v err %v", tc.in, out, was, changed, err)
		}
	}
	// The rest of the spec is kept.
	out, _, _, _ := ClampOOMScore([]byte(`{"process":{"args":["/pause"],"oomScoreAdj":-998,"user":{"uid":0}},"hostname":"x"}`))
	if !strings.Contains(string(out), `"args":["/pause"]`) || !strings.Contains(string(out), `"hostname":"x"`) || !strings.Contains(string(out), `"uid":0`) {
		t.Errorf("spec not kept: %s", out)
	}
	if _, _, _, err := ClampOOMScore([]byte(`{"process":{"oomScoreAdj":"low"}}`)); err == nil {
		t.Error("a malformed oomScoreAdj: no error")
	}
}

func TestBundleToClamp(t *testing.T) {
	for args, want := range map[string]string{
		"--root /run/x --log /x/log.json --log-format json create --bundle /b --pid-file /b/init.pid id": "/b",
		"--root /r run -b /c id":              "/c",
		"create --bundle=/d id":               "/d",
		"--root /r start id":                  "",
		"--root /r exec --process /p.json id": "",
		"--root /r delete --force id":         "",
		"create id":                           ".",
	} {
		if got := BundleToClamp(strings.Fields(args)); got != want {
			t.Errorf("%s: %q, want %q", args, got, want)
		}
	}
}
