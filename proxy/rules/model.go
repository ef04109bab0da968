package rules

import (
	"net/netip"
	"strings"

	"github.com/herald-lb/herald/internal/ipfamily"
)

// Family selects which address family a render covers; iptables and
// ip6tables are programmed separately, exactly like kube-proxy's two
// proxiers (internal/ipfamily).
type Family = ipfamily.Family

// The families.
const (
	IPv4 = ipfamily.IPv4
	IPv6 = ipfamily.IPv6
)

// Protocol is the transport protocol of a service port.
type Protocol string

const (
	TCP  Protocol = "TCP"
	UDP  Protocol = "UDP"
	SCTP Protocol = "SCTP"
)

// lower is the spelling iptables wants for -p and -m.
func (p Protocol) lower() string {
	switch p {
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	case SCTP:
		return "sctp"
	}
	return ""
}

// TrafficPolicy is externalTrafficPolicy / internalTrafficPolicy; the zero
// value is Cluster, the API default.
type TrafficPolicy int

const (
	PolicyCluster TrafficPolicy = iota
	PolicyLocal
)

// Affinity is spec.sessionAffinity; the zero value is None.
type Affinity int

const (
	AffinityNone Affinity = iota
	AffinityClientIP
)

// DefaultAffinityTimeout is the API default for
// sessionAffinityConfig.clientIP.timeoutSeconds (3 hours).
const DefaultAffinityTimeout = 10800

// maxAffinityTimeout is the API's upper bound (one day).
const maxAffinityTimeout = 86400

// IPMode is status.loadBalancer.ingress[].ipMode; the zero value is VIP.
type IPMode int

const (
	// IPModeVIP means the LB delivers packets with the ingress IP as the
	// destination, so the node must DNAT them.
	IPModeVIP IPMode = iota
	// IPModeProxy means the LB proxies to the node itself; the ingress IP
	// never arrives at the node and gets no rules.
	IPModeProxy
)

// Forwarding is how traffic to a Service port's load-balancer addresses
// reaches an endpoint on another node; the zero value is kube-proxy's.
type Forwarding int

const (
	// ForwardingSNAT: the receiving node DNATs to any endpoint and, under
	// externalTrafficPolicy Cluster, SNATs to its own address, so the
	// reply comes back through it.
	ForwardingSNAT Forwarding = iota
	// ForwardingDSR (annotation herald.io/forwarding: dsr): every node
	// picks a flow's endpoint by the same consistent hash; the receiving
	// node tunnels the packet, unchanged, to the endpoint's node, which
	// DNATs it and answers the client directly. The client's address is
	// kept, and a node that takes over the address mid-connection sends
	// the flow to the same endpoint. nftables mode only (docs/dsr.md).
	ForwardingDSR
)

// Ingress is one load-balancer ingress IP.
type Ingress struct {
	IP   netip.Addr
	Mode IPMode
}

// ServiceKey names a Service (all of its ports). Partial renders are keyed by
// it because a Service or EndpointSlice change touches all its ports.
type ServiceKey struct {
	Namespace, Name string
}

func (k ServiceKey) String() string { return k.Namespace + "/" + k.Name }

// ServicePortName names one port of a Service, like kube-proxy's
// ServicePortName; its String form is what the rule comments show.
type ServicePortName struct {
	Namespace, Name, Port string
}

func (n ServicePortName) String() string {
	if n.Port == "" {
		return n.Namespace + "/" + n.Name
	}
	return n.Namespace + "/" + n.Name + ":" + n.Port
}

// Key returns the Service this port belongs to.
func (n ServicePortName) Key() ServiceKey { return ServiceKey{n.Namespace, n.Name} }

// Service is one port of a Service, already reduced from the API object by
// the caller. Headless Services and ones owned by another proxy
// (service.kubernetes.io/service-proxy-name) are to be left out by the caller;
// a Service without a cluster IP of the rendered family gets no rules.
type Service struct {
	Namespace, Name string
	PortName        string
	Protocol        Protocol
	Port            int

	// ClusterIPs holds at most one address per family.
	ClusterIPs []netip.Addr
	// NodePort is 0 when the Service has none.
	NodePort                 int
	ExternalIPs              []netip.Addr
	LoadBalancerIngress      []Ingress
	LoadBalancerSourceRanges []netip.Prefix
	// SourceRangesInvalid is set by the caller when spec.loadBalancerSourceRanges
	// had entries it could not parse; the Service is then still restricted
	// (to the valid ranges, possibly none) rather than opened up.
	SourceRangesInvalid bool

	ExternalTrafficPolicy TrafficPolicy
	InternalTrafficPolicy TrafficPolicy
	HealthCheckNodePort   int

	SessionAffinity Affinity
	// AffinityTimeout is in seconds; 0 means DefaultAffinityTimeout.
	AffinityTimeout int

	// Forwarding applies to LoadBalancerIngress addresses only.
	Forwarding Forwarding
}

// ID returns the Service port's name.
func (s *Service) ID() ServicePortName {
	return ServicePortName{s.Namespace, s.Name, s.PortName}
}

// Endpoint is one backend of a Service port, with the EndpointSlice
// conditions as the API defines them (nil ready/serving count as true,
// nil terminating as false; the caller resolves that).
type Endpoint struct {
	IP          netip.Addr
	Port        int
	Ready       bool
	Serving     bool
	Terminating bool
	// NodeName is the node the endpoint runs on; it is local when it equals
	// NodeConfig.Name.
	NodeName string
	// ZoneHints and NodeHints are the EndpointSlice's hints.forZones and
	// hints.forNodes names: the zones, and the nodes, whose proxies are
	// to prefer this endpoint (written by the EndpointSlice controller
	// for trafficDistribution and topology-aware routing). They narrow
	// the cluster-wide endpoints only; see topologyOf for when.
	ZoneHints, NodeHints []string
}

// DefaultMasqueradeMark is kube-proxy's default (--iptables-masquerade-bit=14).
const DefaultMasqueradeMark uint32 = 0x4000

// NodeConfig is what the proxy knows about the node it runs on.
type NodeConfig struct {
	// Name is the Node's name; endpoints whose NodeName equals it are local.
	Name string
	// Zone is the Node's topology.kubernetes.io/zone label, "" when it
	// has none; endpoints hinted for it are preferred.
	Zone string
	// IPs are the node's own addresses (any family). They are used for the
	// loadBalancerSourceRanges exception that lets the node reach its own
	// LB IPs.
	IPs []netip.Addr
	// ClusterCIDRs are the pod CIDRs of the whole cluster, at most one per
	// family (kube-proxy's --cluster-cidr). Without one for the rendered
	// family there is no "from a pod" detection: ClusterIP traffic is never
	// masqueraded (unless MasqueradeAll) and pods get no short-circuit under
	// externalTrafficPolicy Local, as with kube-proxy.
	ClusterCIDRs []netip.Prefix
	// PodInterface, when its Name is set, tells pod traffic by the
	// interface it arrives on instead of by ClusterCIDRs (kube-proxy's
	// --detect-local-mode BridgeInterface, or InterfaceNamePrefix with
	// Prefix), in both families.
	PodInterface Interface
	// MasqueradeAll masquerades every packet sent to a cluster IP.
	MasqueradeAll bool
	// MasqueradeMark is the single fwmark bit meaning "SNAT this";
	// 0 means DefaultMasqueradeMark.
	MasqueradeMark uint32
	// NoRandomFully drops --random-fully from MASQUERADE, for iptables
	// builds or kernels without it.
	NoRandomFully bool
	// ConntrackLiberal reflects nf_conntrack_tcp_be_liberal=1; when set, no
	// DROP rule for conntrack-INVALID forwarded packets is installed.
	ConntrackLiberal bool
	// NodePortAddresses restricts NodePorts (--nodeport-addresses, already
	// matched against the node's interface addresses by the caller). A
	// family with an entry accepts NodePort connections, and answers
	// NodePorts without endpoints, only on those addresses; an entry
	// without addresses, on none. A family without an entry accepts them
	// on every local address but loopback. Loopback addresses in it are
	// left out (reported): herald never serves NodePorts on loopback.
	NodePortAddresses map[Family][]netip.Addr
	// DSR is what ForwardingDSR needs on this node; without a Seed the
	// Services asking for it keep ForwardingSNAT (reported).
	DSR DSRConfig
}

// DSRConfig is a node's share of direct server return (ForwardingDSR).
type DSRConfig struct {
	// Seed is the jhash seed of the consistent backend choice. It must be
	// the same on every node of the cluster, and not 0 (the kernel would
	// draw a random one).
	Seed uint32
	// Tunnel is the interface the packets other nodes tunnel to this one
	// arrive on: they are DNATed to a local endpoint, never sent on.
	Tunnel string
	// MarkMask holds the bits of the packet mark that route a packet into
	// the tunnel to a peer (policy routing, proxy/tunnel); the proxy
	// clears them after routing. It must not overlap the masquerade bit.
	MarkMask uint32
	// Peers gives, per family, the mark that routes to each other node
	// whose endpoints this node can tunnel to, by node name. A Service
	// with an endpoint on a node missing here keeps ForwardingSNAT.
	Peers map[Family]map[string]uint32
	// Lost are peers that stopped answering over the tunnel (a failed or
	// cut-off node): their endpoints are left out of the table, the
	// others keep DSR.
	Lost map[string]bool
}

// Interface names a network interface, or with Prefix every interface
// whose name begins so.
type Interface struct {
	Name   string
	Prefix bool
}

// Problem is one piece of input that Render could not use. Render never
// fails as a whole: it leaves out what is broken and says so here.
type Problem struct {
	// Service is the Service port concerned; zero for node-level problems.
	Service ServicePortName
	// Field names the offending input, e.g. "externalIPs[1]".
	Field   string
	Message string
	// Skipped is true when the whole Service port was left out.
	Skipped bool
}

func (p Problem) Error() string {
	var b strings.Builder
	if p.Service != (ServicePortName{}) {
		b.WriteString("service ")
		b.WriteString(p.Service.String())
		b.WriteString(": ")
	} else {
		b.WriteString("node config: ")
	}
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	if p.Skipped {
		b.WriteString(" (service port not programmed)")
	}
	return b.String()
}
