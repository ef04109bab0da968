package kubeproxyconfig

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Severity says whether an untranslated field changes traffic.
type Severity int

const (
	// Warning: herald leaves the setting out and Services are served as
	// kube-proxy would serve them (a tuning, logging, another OS or mode).
	Warning Severity = iota
	// Error: ignoring the setting would serve traffic differently; the
	// file is refused.
	Error
)

func (s Severity) String() string {
	if s == Error {
		return "error"
	}
	return "warning"
}

// Finding names one field herald does not translate, and why.
type Finding struct {
	Field    string
	Severity Severity
	Message  string
}

func (f Finding) String() string { return f.Severity.String() + ": " + f.Field + ": " + f.Message }

// Flag is the `herald proxy` flag a field translates to.
type Flag struct {
	Name, Value string
	// Field is the file's field the flag comes from.
	Field string
}

// Arg spells the flag for a command line.
func (f Flag) Arg() string { return "--" + f.Name + "=" + f.Value }

// Translation is the file in herald's terms.
type Translation struct {
	// Flags are in the file's field order.
	Flags    []Flag
	Findings []Finding
}

// Errors counts the findings that refuse the file.
func (t Translation) Errors() int {
	n := 0
	for _, f := range t.Findings {
		if f.Severity == Error {
			n++
		}
	}
	return n
}

// The ports kube-proxy appends to an address without one.
const (
	healthzPort = "10256"
	metricsPort = "10249"
)

// Translate maps every field onto `herald proxy` flags or a finding. A
// field left at its zero value (kube-proxy's default) yields no flag when
// herald's default is the same.
func (c *Config) Translate() Translation {
	t := &translation{}
	t.mode(c)
	t.top(c)
	t.clientAndLogging(c)
	t.nodePorts(c)
	t.conntrack(&c.Conntrack)
	t.otherOS(c)
	return t.Translation
}

type translation struct{ Translation }

func (t *translation) flag(field, name, value string) {
	t.Flags = append(t.Flags, Flag{Name: name, Value: value, Field: field})
}

func (t *translation) warn(field, format string, args ...any) {
	t.Findings = append(t.Findings, Finding{Field: field, Severity: Warning, Message: fmt.Sprintf(format, args...)})
}

func (t *translation) refuse(field, format string, args ...any) {
	t.Findings = append(t.Findings, Finding{Field: field, Severity: Error, Message: fmt.Sprintf(format, args...)})
}

func (t *translation) duration(field, name string, d time.Duration) {
	if d != 0 {
		t.flag(field, name, d.String())
	}
}

// mode reads mode and the section of the mode's own settings; the other
// modes' sections are ignored, as kube-proxy ignores them.
func (t *translation) mode(c *Config) {
	nft := c.Mode == "nftables"
	switch c.Mode {
	case "":
	case "iptables", "nftables":
		t.flag("mode", "proxy-mode", c.Mode)
	case "ipvs":
		t.refuse("mode", "herald programs iptables or nftables, not IPVS: set iptables (the same Service semantics) or nftables; the ipvs section is then ignored")
	case "kernelspace":
		t.refuse("mode", "kernelspace is kube-proxy's Windows mode; herald runs on Linux with iptables or nftables")
	default:
		t.refuse("mode", "%q is not a proxy mode: use iptables or nftables", c.Mode)
	}
	masqBit, masqAll, sync, minSync, sec := c.IPTables.MasqueradeBit, c.IPTables.MasqueradeAll, c.IPTables.SyncPeriod, c.IPTables.MinSyncPeriod, "iptables"
	if nft {
		masqBit, masqAll, sync, minSync, sec = c.NFTables.MasqueradeBit, c.NFTables.MasqueradeAll, c.NFTables.SyncPeriod, c.NFTables.MinSyncPeriod, "nftables"
	}
	if masqBit != nil {
		t.flag(sec+".masqueradeBit", "iptables-masquerade-bit", strconv.Itoa(int(*masqBit)))
	}
	if masqAll {
		t.flag(sec+".masqueradeAll", "masquerade-all", "true")
	}
	t.duration(sec+".syncPeriod", "sync-period", sync)
	t.duration(sec+".minSyncPeriod", "min-sync-period", minSync)
	ignored := func(field string, set bool, mode string) {
		if set {
			t.warn(field, "used only in %s mode; ignored, as kube-proxy ignores it in %s mode", mode, modeName(c.Mode))
		}
	}
	ipt, nf := c.IPTables, c.NFTables
	if nft {
		ignored("iptables.masqueradeBit", ipt.MasqueradeBit != nil, "iptables")
		ignored("iptables.masqueradeAll", ipt.MasqueradeAll, "iptables")
		ignored("iptables.localhostNodePorts", ipt.LocalhostNodePorts != nil, "iptables")
		ignored("iptables.syncPeriod", ipt.SyncPeriod != 0, "iptables")
		ignored("iptables.minSyncPeriod", ipt.MinSyncPeriod != 0, "iptables")
	} else {
		ignored("nftables.masqueradeBit", nf.MasqueradeBit != nil, "nftables")
		ignored("nftables.masqueradeAll", nf.MasqueradeAll, "nftables")
		ignored("nftables.syncPeriod", nf.SyncPeriod != 0, "nftables")
		ignored("nftables.minSyncPeriod", nf.MinSyncPeriod != 0, "nftables")
		if ipt.LocalhostNodePorts == nil || *ipt.LocalhostNodePorts {
			t.warn("iptables.localhostNodePorts", "kube-proxy's default (null or true) also accepts NodePort connections to 127.0.0.1; herald serves NodePorts on no loopback address (it does not set route_localnet), so those connections fail: set it to false once nothing uses them")
		}
	}
	v := c.IPVS
	ignored("ipvs.syncPeriod", v.SyncPeriod != 0, "ipvs")
	ignored("ipvs.minSyncPeriod", v.MinSyncPeriod != 0, "ipvs")
	ignored("ipvs.scheduler", v.Scheduler != "", "ipvs")
	ignored("ipvs.excludeCIDRs", len(v.ExcludeCIDRs) > 0, "ipvs")
	ignored("ipvs.strictARP", v.StrictARP, "ipvs")
	ignored("ipvs.tcpTimeout", v.TCPTimeout != 0, "ipvs")
	ignored("ipvs.tcpFinTimeout", v.TCPFinTimeout != 0, "ipvs")
	ignored("ipvs.udpTimeout", v.UDPTimeout != 0, "ipvs")
}

func modeName(m string) string {
	if m == "" {
		return "iptables (the default)"
	}
	return m
}

// top reads the node's identity, addresses and local-traffic detection.
func (t *translation) top(c *Config) {
	if c.HostnameOverride != "" {
		t.flag("hostnameOverride", "hostname-override", c.HostnameOverride)
	}
	bindV6 := false
	if c.BindAddress != "" {
		t.flag("bindAddress", "bind-address", c.BindAddress)
		a, err := netip.ParseAddr(c.BindAddress)
		bindV6 = err == nil && a.Is6() && !a.Is4In6()
	}
	// kube-proxy's defaults follow bindAddress's family, and a bare IP
	// gets the default port.
	for _, a := range []struct {
		field, name, value, v6Default, port string
	}{
		{"healthzBindAddress", "healthz-bind-address", c.HealthzBindAddress, "[::]", healthzPort},
		{"metricsBindAddress", "metrics-bind-address", c.MetricsBindAddress, "[::1]", metricsPort},
	} {
		switch {
		case a.value != "":
			t.flag(a.field, a.name, withPort(a.value, a.port))
		case bindV6:
			t.flag(a.field, a.name, a.v6Default+":"+a.port)
		}
	}
	if c.EnableProfiling {
		t.warn("enableProfiling", "herald serves no /debug/pprof; ignored")
	}
	if c.ShowHiddenMetricsForVersion != "" {
		t.warn("showHiddenMetricsForVersion", "herald's metrics have their own names and none is hidden; ignored")
	}
	if c.DetectLocalMode != "" {
		t.flag("detectLocalMode", "detect-local-mode", c.DetectLocalMode)
	}
	if c.DetectLocal.BridgeInterface != "" {
		t.flag("detectLocal.bridgeInterface", "pod-bridge-interface", c.DetectLocal.BridgeInterface)
	}
	if c.DetectLocal.InterfaceNamePrefix != "" {
		t.flag("detectLocal.interfaceNamePrefix", "pod-interface-name-prefix", c.DetectLocal.InterfaceNamePrefix)
	}
	if c.ClusterCIDR != "" {
		t.flag("clusterCIDR", "cluster-cidr", c.ClusterCIDR)
	}
	if c.OOMScoreAdj != nil {
		t.warn("oomScoreAdj", "herald does not set its own OOM score; its pod's resources decide it")
	}
	if c.ConfigSyncPeriod != 0 {
		t.warn("configSyncPeriod", "herald's informers do not relist periodically (their watches keep them current); ignored")
	}
	if c.PortRange != "" {
		t.warn("portRange", "unused since kube-proxy's userspace mode went; ignored")
	}
	for _, g := range slices.Sorted(maps.Keys(c.FeatureGates)) {
		on, ok := builtInGates[g]
		switch {
		case !ok:
			t.warn("featureGates."+g, "herald has no feature gates; ignored")
		case c.FeatureGates[g] != on:
			t.refuse("featureGates."+g, "herald always behaves as kube-proxy with this gate %t; set to %t, traffic would differ", on, c.FeatureGates[g])
		default:
			t.warn("featureGates."+g, "herald always behaves as kube-proxy with this gate %t; nothing to set", on)
		}
	}
}

// builtInGates are kube-proxy's feature gates that change which endpoint
// a packet reaches, with the value herald's behaviour matches: a file
// that turns one the other way asks for different traffic.
var builtInGates = map[string]bool{
	// Node hints (trafficDistribution: PreferSameNode) are honoured.
	"PreferSameTrafficDistribution": true,
}

// withPort appends port to a bare IP, as kube-proxy does.
func withPort(addr, port string) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	if a, err := netip.ParseAddr(addr); err == nil {
		return net.JoinHostPort(a.String(), port)
	}
	return addr // not an address: the flag's check names it
}

func (t *translation) clientAndLogging(c *Config) {
	cc := c.ClientConnection
	if cc.Kubeconfig != "" {
		t.flag("clientConnection.kubeconfig", "kubeconfig", cc.Kubeconfig)
	}
	if cc.QPS != 0 {
		t.flag("clientConnection.qps", "kube-api-qps", strconv.FormatFloat(float64(cc.QPS), 'g', -1, 32))
	}
	if cc.Burst != 0 {
		t.flag("clientConnection.burst", "kube-api-burst", strconv.Itoa(int(cc.Burst)))
	}
	if cc.ContentType != "" {
		t.warn("clientConnection.contentType", "herald's client chooses its own content type; ignored")
	}
	if cc.AcceptContentTypes != "" {
		t.warn("clientConnection.acceptContentTypes", "herald's client chooses its own content types; ignored")
	}
	l := c.Logging
	switch l.Format {
	case "", "text":
	case "json":
		t.flag("logging.format", "log-format", "json")
	default:
		t.warn("logging.format", "%q: herald logs text or json; ignored (text)", l.Format)
	}
	if l.Verbosity != 0 {
		t.flag("logging.verbosity", "v", strconv.FormatUint(uint64(l.Verbosity), 10))
	}
	if l.FlushFrequency != 0 {
		t.warn("logging.flushFrequency", "herald writes each log line at once; ignored")
	}
	if len(l.VModule) > 0 {
		t.warn("logging.vmodule", "herald has no per-file verbosity; ignored")
	}
	for _, o := range []struct {
		name string
		opts LogFormatOptions
	}{{"text", l.Options.Text}, {"json", l.Options.JSON}} {
		if o.opts.SplitStream {
			t.warn("logging.options."+o.name+".splitStream", "herald writes every log line to standard error; ignored")
		}
		if !o.opts.InfoBufferSize.isZero() {
			t.warn("logging.options."+o.name+".infoBufferSize", "herald does not buffer its logs; ignored")
		}
	}
}

// nodePorts reads nodePortAddresses with kube-proxy's keywords; unset,
// the nftables mode serves the node's primary IPs only, as kube-proxy's.
func (t *translation) nodePorts(c *Config) {
	const field = "nodePortAddresses"
	if len(c.NodePortAddresses) == 0 {
		if c.Mode == "nftables" {
			t.flag(field, "nodeport-addresses", "primary")
		}
		return
	}
	var cidrs []string
	primary, all := false, false
	for i, a := range c.NodePortAddresses {
		switch a {
		case "primary":
			primary = true
		case "all":
			all = true
		case "localhost":
			t.refuse(fmt.Sprintf("%s[%d]", field, i), "herald serves NodePorts on no loopback address (it does not set route_localnet): remove localhost")
		default:
			cidrs = append(cidrs, a)
		}
	}
	switch {
	case all: // every address of both families: herald's default
	case primary && len(cidrs) > 0:
		t.refuse(field, "herald serves NodePorts on the primary IPs or on CIDRs, not on both: keep primary, or list the CIDRs with the primary IPs in them")
	case primary:
		t.flag(field, "nodeport-addresses", "primary")
	case len(cidrs) > 0:
		t.flag(field, "nodeport-addresses", strings.Join(cidrs, ","))
	}
}

func (t *translation) conntrack(ct *Conntrack) {
	if ct.MaxPerCore != nil {
		t.flag("conntrack.maxPerCore", "conntrack-max-per-core", strconv.Itoa(int(*ct.MaxPerCore)))
	}
	if ct.Min != nil {
		t.flag("conntrack.min", "conntrack-min", strconv.Itoa(int(*ct.Min)))
	}
	if ct.TCPEstablishedTimeout != nil {
		t.flag("conntrack.tcpEstablishedTimeout", "conntrack-tcp-timeout-established", ct.TCPEstablishedTimeout.String())
	}
	if ct.TCPCloseWaitTimeout != nil {
		t.flag("conntrack.tcpCloseWaitTimeout", "conntrack-tcp-timeout-close-wait", ct.TCPCloseWaitTimeout.String())
	}
	if ct.TCPBeLiberal {
		t.flag("conntrack.tcpBeLiberal", "conntrack-tcp-be-liberal", "true")
	}
	t.duration("conntrack.udpTimeout", "conntrack-udp-timeout", ct.UDPTimeout)
	t.duration("conntrack.udpStreamTimeout", "conntrack-udp-timeout-stream", ct.UDPStreamTimeout)
}

// otherOS names the Windows settings that are set.
func (t *translation) otherOS(c *Config) {
	w := c.Winkernel
	for _, f := range []struct {
		field string
		set   bool
	}{
		{"winkernel.networkName", w.NetworkName != ""},
		{"winkernel.sourceVip", w.SourceVip != ""},
		{"winkernel.enableDSR", w.EnableDSR},
		{"winkernel.rootHnsEndpointName", w.RootHnsEndpointName != ""},
		{"winkernel.forwardHealthCheckVip", w.ForwardHealthCheckVip},
		{"windowsRunAsService", c.WindowsRunAsService},
	} {
		if f.set {
			t.warn(f.field, "Windows only; ignored")
		}
	}
}

// isZero tells a zero quantity ("0", "0.0", "0Ki", "-0e3") from the rest.
func (q quantity) isZero() bool {
	mantissa := strings.TrimLeft(string(q), "+-")
	if i := strings.IndexFunc(mantissa, func(r rune) bool { return r != '.' && (r < '0' || r > '9') }); i >= 0 {
		mantissa = mantissa[:i]
	}
	return strings.Trim(mantissa, "0.") == ""
}
