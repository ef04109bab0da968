package kubelet

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/herald-lb/herald/e2e/lab/kubeconfig"
	"github.com/herald-lb/herald/e2e/lab/pki"
	"github.com/herald-lb/herald/e2e/lab/proc"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// NodeUser is the user name of a node's client certificate; the group
// system:nodes goes with it. Together they are what the API server's Node
// authorizer recognises.
func NodeUser(nodeName string) string { return "system:node:" + nodeName }

// WriteNodeKubeconfig signs a client certificate for the node with the
// cluster CA and writes a kubeconfig with it.
func WriteNodeKubeconfig(path, nodeName, server string, ca *pki.CA) error {
	pair, err := ca.Issue(pki.CertSpec{CommonName: NodeUser(nodeName), Organizations: []string{"system:nodes"}, Client: true})
	if err != nil {
		return err
	}
	return kubeconfig.Write(path, kubeconfig.Config{
		Server:        server,
		CAPEM:         ca.CertPEM,
		ClientCertPEM: pair.CertPEM,
		ClientKeyPEM:  pair.KeyPEM,
		UserName:      NodeUser(nodeName),
	})
}

// ForNode fills the node's part of a Config from the lab's topology.
func ForNode(l topology.Layout, n topology.Node) Config {
	return Config{
		NodeName:     n.Name,
		NodeNetns:    n.Netns,
		NodeIP:       n.IPv4,
		PodCIDR:      n.PodCIDR,
		PodGateway:   n.PodGateway,
		NodeIPv6:     n.IPv6,
		PodCIDRv6:    n.PodCIDRv6,
		PodGatewayV6: n.PodGatewayV6,
		PodBridge:    DefaultPodBridge,
		NodeZone:     n.Zone,
		NetnsPrefix:  l.Prefix,
	}
}

// Args renders the Config as lab-kubelet flags (see BindFlags).
func (c Config) Args() []string {
	args := []string{
		"--node-name=" + c.NodeName,
		"--node-netns=" + c.NodeNetns,
		"--node-ip=" + c.NodeIP.String(),
		"--pod-cidr=" + c.PodCIDR.String(),
		"--pod-gateway=" + c.PodGateway.String(),
		"--netns-prefix=" + c.NetnsPrefix,
		"--kubeconfig=" + c.Kubeconfig,
		"--state-dir=" + c.StateDir,
		"--echoserver=" + c.Programs.EchoServer,
		"--herald=" + c.Programs.Herald,
		"--kube-proxy=" + c.Programs.KubeProxy,
		"--kubelet-version=" + c.KubeletVersion,
	}
	if c.NodeZone != "" {
		args = append(args, "--node-zone="+c.NodeZone)
	}
	if c.dualStack() {
		args = append(args, "--node-ipv6="+c.NodeIPv6.String(), "--pod-cidr-v6="+c.PodCIDRv6.String(), "--pod-gateway-v6="+c.PodGatewayV6.String())
	}
	if c.PodBridge != "" {
		args = append(args, "--pod-bridge="+c.PodBridge)
	}
	if c.APIFromHost {
		args = append(args, "--api-from-host")
	}
	if c.HeartbeatInterval > 0 {
		args = append(args, "--heartbeat-interval="+c.HeartbeatInterval.String())
	}
	if c.MaxPods > 0 {
		args = append(args, "--max-pods="+strconv.Itoa(c.MaxPods))
	}
	if c.ImageMode {
		args = append(args, "--image-mode", "--image-dir="+c.ImageDir)
	}
	if c.TLSCertFile != "" {
		args = append(args, "--tls-cert-file="+c.TLSCertFile, "--tls-private-key-file="+c.TLSKeyFile, "--client-ca-file="+c.ClientCAFile)
	}
	if c.Port > 0 {
		args = append(args, "--port="+strconv.Itoa(c.Port))
	}
	if len(c.DNS.Servers) > 0 {
		args = append(args, "--cluster-dns="+strings.Join(c.DNS.Servers, ","), "--cluster-domain="+c.DNS.Domain)
	}
	return args
}

// BindFlags defines the lab-kubelet flags on fs, filling c.
func BindFlags(fs *flag.FlagSet, c *Config) {
	fs.StringVar(&c.NodeName, "node-name", "", "the Node's name")
	fs.StringVar(&c.NodeNetns, "node-netns", "", "the node's network namespace")
	fs.StringVar(&c.NodeZone, "node-zone", "", "the Node's topology.kubernetes.io/zone label (empty: none)")
	fs.Func("node-ip", "the node's LAN address (InternalIP)", func(s string) (err error) {
		c.NodeIP, err = netip.ParseAddr(s)
		return err
	})
	fs.Func("pod-cidr", "the node's pod CIDR", func(s string) (err error) {
		c.PodCIDR, err = netip.ParsePrefix(s)
		return err
	})
	fs.Func("pod-gateway", "the pods' gateway: the node's address on the pod bridge", func(s string) (err error) {
		c.PodGateway, err = netip.ParseAddr(s)
		return err
	})
	fs.Func("node-ipv6", "the node's IPv6 LAN address (second InternalIP; makes the node dual-stack)", func(s string) (err error) {
		c.NodeIPv6, err = netip.ParseAddr(s)
		return err
	})
	fs.Func("pod-cidr-v6", "the node's IPv6 pod CIDR", func(s string) (err error) {
		c.PodCIDRv6, err = netip.ParsePrefix(s)
		return err
	})
	fs.Func("pod-gateway-v6", "the pods' IPv6 gateway on the pod bridge", func(s string) (err error) {
		c.PodGatewayV6, err = netip.ParseAddr(s)
		return err
	})
	fs.StringVar(&c.PodBridge, "pod-bridge", DefaultPodBridge, "the pod bridge in the node's namespace")
	fs.StringVar(&c.NetnsPrefix, "netns-prefix", "", "the lab's prefix; pod namespaces are <prefix>-pod-<namespace>-<name>")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig with the node's credentials")
	fs.StringVar(&c.StateDir, "state-dir", "", "state directory")
	fs.StringVar(&c.Programs.EchoServer, "echoserver", "", "the echoserver binary (for echoserver:1.4 images)")
	fs.StringVar(&c.Programs.Herald, "herald", "", "the herald binary (for "+HeraldImageName+")")
	fs.StringVar(&c.Programs.KubeProxy, "kube-proxy", "", "the kube-proxy binary (for "+KubeProxyRepository+" at --kubelet-version)")
	fs.StringVar(&c.KubeletVersion, "kubelet-version", "", "version reported in the Node's nodeInfo")
	fs.BoolVar(&c.APIFromHost, "api-from-host", false, "reach the API server from the kubelet's own namespace, not the node's")
	fs.DurationVar(&c.HeartbeatInterval, "heartbeat-interval", DefaultHeartbeatInterval, "Lease and node status renewal interval")
	fs.IntVar(&c.MaxPods, "max-pods", DefaultMaxPods, "pods capacity")
	fs.BoolVar(&c.ImageMode, "image-mode", false, "run images (all but the echo server's) from podman's local storage under runc instead of the host's binaries")
	fs.StringVar(&c.TLSCertFile, "tls-cert-file", "", "the kubelet API's serving certificate (none: no kubelet API)")
	fs.StringVar(&c.TLSKeyFile, "tls-private-key-file", "", "the serving certificate's key")
	fs.StringVar(&c.ClientCAFile, "client-ca-file", "", "CA that signs the certificates of the kubelet API's clients (the API server's)")
	fs.IntVar(&c.Port, "port", DefaultPort, "the kubelet API's port")
	fs.Func("cluster-dns", "the cluster DNS Service's IPs, comma-separated: image-mode pods with dnsPolicy ClusterFirst resolve through them (none: the node's resolv.conf)", func(s string) error {
		c.DNS.Servers = nil
		for _, a := range strings.Split(s, ",") {
			if a = strings.TrimSpace(a); a == "" {
				continue
			}
			if _, err := netip.ParseAddr(a); err != nil {
				return fmt.Errorf("--cluster-dns: %q is not an IP address", a)
			}
			c.DNS.Servers = append(c.DNS.Servers, a)
		}
		return nil
	})
	fs.StringVar(&c.DNS.Domain, "cluster-domain", "cluster.local", "the cluster's DNS domain (with --cluster-dns)")
	fs.StringVar(&c.ImageDir, "image-dir", "", "image mode's cache of unpacked images, shared by the lab's kubelets (default STATE-DIR/images)")
}

// StartOptions start a lab kubelet as a child process.
type StartOptions struct {
	// Binary is the lab-kubelet program (labbin).
	Binary string
	// LogPath receives the kubelet's output. Default
	// <StateDir>/lab-kubelet.log.
	LogPath string
	// KillWithParent has the kernel kill the kubelet (and so its
	// containers) when the starting process dies.
	KillWithParent bool
}

// Start starts a lab kubelet process for cfg. cfg.Kubeconfig must exist
// (WriteNodeKubeconfig).
func Start(cfg Config, opts StartOptions) (*proc.Process, error) {
	if opts.Binary == "" {
		return nil, errors.New("kubelet: no lab-kubelet binary")
	}
	c := cfg
	if err := c.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, err
	}
	if opts.LogPath == "" {
		opts.LogPath = filepath.Join(cfg.StateDir, "lab-kubelet.log")
	}
	p, err := proc.Start(proc.Spec{
		Name:           "lab-kubelet-" + cfg.NodeName,
		Path:           opts.Binary,
		Args:           cfg.Args(),
		LogPath:        opts.LogPath,
		KillWithParent: opts.KillWithParent,
	})
	if err != nil {
		return nil, fmt.Errorf("kubelet: %w", err)
	}
	return p, nil
}
