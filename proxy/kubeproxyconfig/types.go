// Package kubeproxyconfig reads kube-proxy's configuration file, a
// KubeProxyConfiguration of kubeproxy.config.k8s.io/v1alpha1 as kube-proxy
// v1.34 defines it (kubeadm writes one into the kube-system/kube-proxy
// ConfigMap, key config.conf), and translates it into `herald proxy`
// flags, naming every field herald does not honour.
//
// The types are herald's own, not k8s.io/kube-proxy's: decoding walks the
// YAML against them so that every error names the field's path, an
// unknown field included, and a value of the wrong type is refused
// instead of converted (the upstream types, decoded with encoding/json,
// name neither the path of an unknown field nor that of a bad duration).
package kubeproxyconfig

import "time"

// The file's apiVersion and kind.
const (
	APIVersion = "kubeproxy.config.k8s.io/v1alpha1"
	Kind       = "KubeProxyConfiguration"
)

// ConfigMapKey is the key of kubeadm's kube-proxy ConfigMap holding the file.
const ConfigMapKey = "config.conf"

// Config is a KubeProxyConfiguration. A zero value (or null) means
// kube-proxy's default, as kube-proxy's defaulting reads it.
type Config struct {
	APIVersion                  string           `json:"apiVersion"`
	Kind                        string           `json:"kind"`
	FeatureGates                map[string]bool  `json:"featureGates"`
	ClientConnection            ClientConnection `json:"clientConnection"`
	Logging                     Logging          `json:"logging"`
	HostnameOverride            string           `json:"hostnameOverride"`
	BindAddress                 string           `json:"bindAddress"`
	HealthzBindAddress          string           `json:"healthzBindAddress"`
	MetricsBindAddress          string           `json:"metricsBindAddress"`
	BindAddressHardFail         bool             `json:"bindAddressHardFail"`
	EnableProfiling             bool             `json:"enableProfiling"`
	ShowHiddenMetricsForVersion string           `json:"showHiddenMetricsForVersion"`
	Mode                        string           `json:"mode"`
	IPTables                    IPTables         `json:"iptables"`
	IPVS                        IPVS             `json:"ipvs"`
	NFTables                    NFTables         `json:"nftables"`
	Winkernel                   Winkernel        `json:"winkernel"`
	DetectLocalMode             string           `json:"detectLocalMode"`
	DetectLocal                 DetectLocal      `json:"detectLocal"`
	ClusterCIDR                 string           `json:"clusterCIDR"`
	NodePortAddresses           []string         `json:"nodePortAddresses"`
	OOMScoreAdj                 *int32           `json:"oomScoreAdj"`
	Conntrack                   Conntrack        `json:"conntrack"`
	ConfigSyncPeriod            time.Duration    `json:"configSyncPeriod"`
	PortRange                   string           `json:"portRange"`
	WindowsRunAsService         bool             `json:"windowsRunAsService"`
}

// ClientConnection is component-base's ClientConnectionConfiguration.
type ClientConnection struct {
	Kubeconfig         string  `json:"kubeconfig"`
	AcceptContentTypes string  `json:"acceptContentTypes"`
	ContentType        string  `json:"contentType"`
	QPS                float32 `json:"qps"`
	Burst              int32   `json:"burst"`
}

// Logging is component-base's LoggingConfiguration.
type Logging struct {
	Format         string        `json:"format"`
	FlushFrequency nanosOrText   `json:"flushFrequency"`
	Verbosity      uint32        `json:"verbosity"`
	VModule        []VModuleItem `json:"vmodule"`
	Options        LogOptions    `json:"options"`
}

// VModuleItem is one per-file verbosity.
type VModuleItem struct {
	FilePattern string `json:"filePattern"`
	Verbosity   uint32 `json:"verbosity"`
}

// LogOptions are the per-format logging options.
type LogOptions struct {
	Text LogFormatOptions `json:"text"`
	JSON LogFormatOptions `json:"json"`
}

// LogFormatOptions are the output routing options of one format.
type LogFormatOptions struct {
	SplitStream    bool     `json:"splitStream"`
	InfoBufferSize quantity `json:"infoBufferSize"`
}

// IPTables is the iptables section.
type IPTables struct {
	MasqueradeBit      *int32        `json:"masqueradeBit"`
	MasqueradeAll      bool          `json:"masqueradeAll"`
	LocalhostNodePorts *bool         `json:"localhostNodePorts"`
	SyncPeriod         time.Duration `json:"syncPeriod"`
	MinSyncPeriod      time.Duration `json:"minSyncPeriod"`
}

// IPVS is the ipvs section.
type IPVS struct {
	SyncPeriod    time.Duration `json:"syncPeriod"`
	MinSyncPeriod time.Duration `json:"minSyncPeriod"`
	Scheduler     string        `json:"scheduler"`
	ExcludeCIDRs  []string      `json:"excludeCIDRs"`
	StrictARP     bool          `json:"strictARP"`
	TCPTimeout    time.Duration `json:"tcpTimeout"`
	TCPFinTimeout time.Duration `json:"tcpFinTimeout"`
	UDPTimeout    time.Duration `json:"udpTimeout"`
}

// NFTables is the nftables section.
type NFTables struct {
	MasqueradeBit *int32        `json:"masqueradeBit"`
	MasqueradeAll bool          `json:"masqueradeAll"`
	SyncPeriod    time.Duration `json:"syncPeriod"`
	MinSyncPeriod time.Duration `json:"minSyncPeriod"`
}

// Winkernel is the Windows section.
type Winkernel struct {
	NetworkName           string `json:"networkName"`
	SourceVip             string `json:"sourceVip"`
	EnableDSR             bool   `json:"enableDSR"`
	RootHnsEndpointName   string `json:"rootHnsEndpointName"`
	ForwardHealthCheckVip bool   `json:"forwardHealthCheckVip"`
}

// DetectLocal holds the settings of the interface-based detectLocalModes.
type DetectLocal struct {
	BridgeInterface     string `json:"bridgeInterface"`
	InterfaceNamePrefix string `json:"interfaceNamePrefix"`
}

// Conntrack is the conntrack section; nil means kube-proxy's default.
type Conntrack struct {
	MaxPerCore            *int32         `json:"maxPerCore"`
	Min                   *int32         `json:"min"`
	TCPEstablishedTimeout *time.Duration `json:"tcpEstablishedTimeout"`
	TCPCloseWaitTimeout   *time.Duration `json:"tcpCloseWaitTimeout"`
	TCPBeLiberal          bool           `json:"tcpBeLiberal"`
	UDPTimeout            time.Duration  `json:"udpTimeout"`
	UDPStreamTimeout      time.Duration  `json:"udpStreamTimeout"`
}

// nanosOrText is logging.flushFrequency: a number of nanoseconds or a
// duration string, as component-base accepts it.
type nanosOrText time.Duration

// quantity is a resource quantity ("0", "64Ki", or a number), kept as
// written once checked.
type quantity string
