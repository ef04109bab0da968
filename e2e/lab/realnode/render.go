// Package realnode runs a lab node as users run theirs: the real kubelet
// (built from the pinned k8s.io/kubernetes module) with its own containerd
// (v2, built from its Go module), Debian's runc behind a wrapper that
// clamps negative OOM scores, and Debian's CNI plugins (bridge with
// host-local IPAM, loopback, portmap) for the node's pod CIDRs in both
// families. Each node has its own directories, sockets and cgroup
// subtree, and its processes run inside the node's network namespace
// (entered alone: the host's mounts, /sys/fs/cgroup among them, stay
// visible, which runc needs).
//
// The renderers here are pure functions of a node's Config; node.go
// starts and stops the processes and sweep.go removes what they leave.
package realnode

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
)

// Config is one real node.
type Config struct {
	// Lab is the lab's prefix; Name the Kubernetes node name; Netns its
	// network namespace.
	Lab, Name, Netns string
	// IPv4 and IPv6 are the node's addresses on the LAN.
	IPv4, IPv6 netip.Addr
	// PodCIDR(v6) and PodGateway(v6) are its pod network, on the bridge
	// the topology made (Bridge).
	PodCIDR, PodCIDRv6       netip.Prefix
	PodGateway, PodGatewayV6 netip.Addr
	Bridge                   string
	// Dir holds everything the node writes: runtime root and state,
	// sockets, kubelet's root, pod logs, CNI configuration and IPAM data.
	Dir string
	// CgroupParent is the node's cgroup, the same path in every cgroup
	// v1 hierarchy: /herald-lab/<prefix>-<node>. The runtime and kubelet
	// run in <parent>/runtime, the pods under <parent>/pods.
	CgroupParent string
	// Runc is the wrapper containerd runs as runc (cmd/lab-runc);
	// CNIBinDir holds the CNI plugins.
	Runc, CNIBinDir string
	// SandboxImage is the pause image.
	SandboxImage string
	// ClusterDNS and ClusterDomain configure the pods' resolv.conf
	// (empty: no cluster DNS).
	ClusterDNS    []string
	ClusterDomain string
}

// Paths of a node's files under Dir.
func (c Config) ContainerdConfig() string { return filepath.Join(c.Dir, "containerd", "config.toml") }
func (c Config) ContainerdRoot() string   { return filepath.Join(c.Dir, "containerd", "root") }
func (c Config) ContainerdState() string  { return filepath.Join(c.Dir, "containerd", "state") }
func (c Config) Socket() string           { return filepath.Join(c.Dir, "containerd", "containerd.sock") }
func (c Config) CNIConfDir() string       { return filepath.Join(c.Dir, "cni", "net.d") }
func (c Config) IPAMDir() string          { return filepath.Join(c.Dir, "cni", "ipam") }
func (c Config) KubeletRoot() string      { return filepath.Join(c.Dir, "kubelet") }
func (c Config) KubeletConfig() string    { return filepath.Join(c.Dir, "kubelet-config.yaml") }
func (c Config) Kubeconfig() string       { return filepath.Join(c.Dir, "kubeconfig") }
func (c Config) PodLogs() string          { return filepath.Join(c.Dir, "pod-logs") }
func (c Config) ServingCert() string      { return filepath.Join(c.Dir, "kubelet.crt") }
func (c Config) ServingKey() string       { return filepath.Join(c.Dir, "kubelet.key") }
func (c Config) ClientCA() string         { return filepath.Join(c.Dir, "client-ca.crt") }
func (c Config) ResolvConf() string       { return filepath.Join(c.Dir, "resolv.conf") }

// ShimSocketDir holds the runc shims' sockets, which containerd otherwise
// puts in the machine's /run/containerd/s (and a killed shim leaves
// there). containerd allows at most 42 characters.
func (c Config) ShimSocketDir() string { return "/run/herald-lab/s/" + c.Lab + "-" + c.Name }

// NetworkName is the node's CNI network, unique on the machine.
func (c Config) NetworkName() string { return "herald-lab-" + c.Lab + "-" + c.Name }

// RuntimeCgroup is where containerd (and so its shims) and kubelet run.
func (c Config) RuntimeCgroup() string { return c.CgroupParent + "/runtime" }

// PodsCgroup is kubelet's cgroupRoot: kubepods and its QoS classes below.
func (c Config) PodsCgroup() string { return c.CgroupParent + "/pods" }

// ContainerdTOML is the node's containerd configuration (version 3, for
// containerd 2.x): its own root, state and sockets; the CRI plugin with
// runc through the wrapper in cgroupfs mode (cgroups are v1 here) with
// its own state root,
// network namespaces under the state directory rather than the host's
// /var/run/netns, and the node's CNI directories. NRI stays on, as on
// users' nodes, with the node's own socket and plugin directories: the
// default socket, /var/run/nri/nri.sock, is one per machine, and the
// second containerd to bind it exited (1 lab start in 8).
func ContainerdTOML(c Config) string {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	var b strings.Builder
	fmt.Fprintf(&b, `# herald lab: containerd of node %s
version = 3
root = %s
state = %s
oom_score = 0

[grpc]
  address = %s
[ttrpc]
  address = %s
[debug]
  address = ""
[metrics]
  address = ""

[plugins]
  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = %s
  [plugins.'io.containerd.nri.v1.nri']
    socket_path = %s
    plugin_path = %s
    plugin_config_path = %s
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = %s
  [plugins.'io.containerd.cri.v1.runtime']
    netns_mounts_under_state_dir = true
    enable_unprivileged_ports = true
    enable_unprivileged_icmp = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = %s
          Root = %s
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [%s]
      conf_dir = %s
`, c.Name, q(c.ContainerdRoot()), q(c.ContainerdState()), q(c.Socket()), q(c.Socket()+".ttrpc"),
		q(c.ShimSocketDir()), q(filepath.Join(c.ShimSocketDir(), "nri.sock")), q(filepath.Join(c.Dir, "containerd", "nri", "plugins")), q(filepath.Join(c.Dir, "containerd", "nri", "conf.d")),
		q(c.SandboxImage), q(c.Runc), q(filepath.Join(c.Dir, "containerd", "runc")), q(c.CNIBinDir), q(c.CNIConfDir()))
	return b.String()
}

// CNIConfList is the node's pod network: the bridge plugin on the
// topology's pod bridge (it takes the bridge as it is: the gateway
// addresses are there already) with host-local IPAM over both pod CIDRs,
// no masquerading (every lab member routes the pod CIDRs), and portmap
// for hostPort.
func CNIConfList(c Config) ([]byte, error) {
	type rng struct {
		Subnet  string `json:"subnet"`
		Gateway string `json:"gateway"`
	}
	ranges := [][]rng{{{c.PodCIDR.String(), c.PodGateway.String()}}}
	if c.PodCIDRv6.IsValid() {
		ranges = append(ranges, []rng{{c.PodCIDRv6.String(), c.PodGatewayV6.String()}})
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		// The name keys libcni's cache files (/var/lib/cni/results),
		// shared by every node on the machine.
		"name": c.NetworkName(),
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": c.Bridge, "isGateway": true, "ipMasq": false,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type": "host-local", "dataDir": c.IPAMDir(), "ranges": ranges,
					"routes": []any{map[string]any{"dst": "0.0.0.0/0"}, map[string]any{"dst": "::/0"}},
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]any{"portMappings": true}},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// KubeletConfiguration is the node's kubelet configuration: the
// settings a kubeadm node has, with every machine-wide path made the
// node's own (root, pod logs, cgroups), cgroup v1 allowed explicitly,
// and thresholds a shared test machine meets.
func KubeletConfiguration(c Config) ([]byte, error) {
	conf := map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1",
		"kind":       "KubeletConfiguration",
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]any{"clientCAFile": c.ClientCA()},
		},
		"authorization":            map[string]any{"mode": "Webhook"},
		"address":                  c.IPv4.String(),
		"healthzBindAddress":       "127.0.0.1",
		"healthzPort":              10248,
		"readOnlyPort":             0,
		"tlsCertFile":              c.ServingCert(),
		"tlsPrivateKeyFile":        c.ServingKey(),
		"cgroupDriver":             "cgroupfs",
		"cgroupRoot":               c.PodsCgroup(),
		"cgroupsPerQOS":            true,
		"failCgroupV1":             false,
		"failSwapOn":               false,
		"podLogsDir":               c.PodLogs(),
		"resolvConf":               c.ResolvConf(),
		"containerRuntimeEndpoint": "unix://" + c.Socket(),
		// The lab sets the kernel tunables kubelet wants before it
		// starts (and restores them on down): kubelet only checks.
		"protectKernelDefaults":  true,
		"makeIPTablesUtilChains": true,
		"serializeImagePulls":    false,
		"maxPods":                110,
		// The machine's disk and memory are shared with everything else
		// on it: only evict when truly short.
		"evictionHard": map[string]string{
			"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%",
		},
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"nodeStatusUpdateFrequency":   "4s",
		"nodeStatusReportFrequency":   "1m",
		"shutdownGracePeriod":         "0s",
		"registerNode":                true,
	}
	if len(c.ClusterDNS) > 0 {
		conf["clusterDNS"] = c.ClusterDNS
		conf["clusterDomain"] = c.ClusterDomain
	}
	return json.MarshalIndent(conf, "", "  ")
}

// KubeletArgs are the kubelet's flags beside its configuration file.
func KubeletArgs(c Config) []string {
	ips := c.IPv4.String()
	if c.IPv6.IsValid() {
		ips += "," + c.IPv6.String()
	}
	return []string{
		"--config=" + c.KubeletConfig(),
		"--kubeconfig=" + c.Kubeconfig(),
		"--root-dir=" + c.KubeletRoot(),
		"--cert-dir=" + filepath.Join(c.Dir, "pki"),
		"--hostname-override=" + c.Name,
		"--node-ip=" + ips,
		"--v=2",
	}
}

// ContainerdArgs are containerd's flags.
func ContainerdArgs(c Config) []string {
	return []string{"--config", c.ContainerdConfig()}
}
