package kubeproxyconfig

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func args(fl []Flag) []string {
	var out []string
	for _, f := range fl {
		out = append(out, f.Arg())
	}
	return out
}

func findings(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Severity.String()+" "+f.Field)
	}
	return out
}

// TestKubeadmDefault: kubeadm v1.34's file (every field at its zero value
// but the four kubeadm sets) gives three flags and one warning.
func TestKubeadmDefault(t *testing.T) {
	c, err := Parse("config.conf", read(t, "testdata/kubeadm-v1.34-config.conf"))
	if err != nil {
		t.Fatal(err)
	}
	cm, source, err := ParseFileOrConfigMap("cm.yaml", read(t, "testdata/kubeadm-v1.34-configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if source != "cm.yaml: ConfigMap kube-system/kube-proxy, key config.conf" {
		t.Errorf("source %q", source)
	}
	if !reflect.DeepEqual(c, cm) {
		t.Errorf("the ConfigMap's file differs from the bare one:\n%+v\n%+v", cm, c)
	}
	tr := c.Translate()
	want := []string{"--bind-address=0.0.0.0", "--cluster-cidr=10.244.0.0/16", "--kubeconfig=/var/lib/kube-proxy/kubeconfig.conf"}
	if got := args(tr.Flags); !reflect.DeepEqual(got, want) {
		t.Errorf("flags %q, want %q", got, want)
	}
	if got := findings(tr.Findings); !reflect.DeepEqual(got, []string{"warning iptables.localhostNodePorts"}) {
		t.Errorf("findings %q", got)
	}
	if tr.Errors() != 0 {
		t.Errorf("%d errors", tr.Errors())
	}
}

// TestStrict: each bad file is refused with the file's name and the
// field's path; every problem is reported, not only the first.
func TestStrict(t *testing.T) {
	head := "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"unknown top field", head + "clusterCidr: 10.0.0.0/8\n", []string{"f.yaml: clusterCidr: unknown field"}},
		{"unknown nested field", head + "conntrack:\n  maxPercore: 1\n", []string{"f.yaml: conntrack.maxPercore: unknown field"}},
		{"top-level syncPeriod is not v1alpha1's", head + "syncPeriod: 30s\n", []string{"f.yaml: syncPeriod: unknown field"}},
		{"string for an integer", head + "conntrack:\n  maxPerCore: lots\n", []string{`f.yaml: conntrack.maxPerCore: want a whole number (32 bits), got the string "lots"`}},
		{"fraction for an integer", head + "iptables:\n  masqueradeBit: 14.5\n", []string{"iptables.masqueradeBit: want a whole number (32 bits), got the number 14.5"}},
		{"integer beyond 32 bits", head + "conntrack:\n  min: 4294967296\n", []string{"conntrack.min: want a whole number (32 bits)"}},
		{"number for a duration", head + "iptables:\n  syncPeriod: 30\n", []string{"iptables.syncPeriod: want a duration such as 30s, got the number 30"}},
		{"bad duration", head + "conntrack:\n  udpTimeout: 30 seconds\n", []string{`conntrack.udpTimeout: "30 seconds" is not a duration`}},
		{"number for a string", head + "hostnameOverride: 12\n", []string{"hostnameOverride: want a string, got the number 12"}},
		{"string for a bool", head + "iptables:\n  masqueradeAll: \"yes\"\n", []string{`iptables.masqueradeAll: want true or false, got the string "yes"`}},
		{"list for a section", head + "ipvs: []\n", []string{"ipvs: want a mapping, got a list"}},
		{"string for a list", head + "nodePortAddresses: primary\n", []string{"nodePortAddresses: want a list"}},
		{"bad list item", head + "nodePortAddresses: [primary, 1]\n", []string{"nodePortAddresses[1]: want a string"}},
		{"negative verbosity", head + "logging:\n  verbosity: -1\n", []string{"logging.verbosity: want a whole number, not negative"}},
		{"bad quantity", head + "logging:\n  options:\n    json:\n      infoBufferSize: lots\n", []string{`logging.options.json.infoBufferSize: "lots" is not a quantity`}},
		{"bad feature gate", head + "featureGates:\n  Foo: maybe\n", []string{"featureGates.Foo: want true or false"}},
		{"duplicate key", head + "mode: iptables\nmode: nftables\n", []string{"f.yaml: not valid YAML", `"mode" already set`}},
		{"two problems", head + "mode: 1\nbogus: true\n", []string{"f.yaml: mode: want a string", "f.yaml: bogus: unknown field"}},
		{"wrong apiVersion", "apiVersion: kubeproxy.config.k8s.io/v1alpha2\nkind: KubeProxyConfiguration\n", []string{`f.yaml: apiVersion: "kubeproxy.config.k8s.io/v1alpha2": want kubeproxy.config.k8s.io/v1alpha1`}},
		{"no kind", "apiVersion: kubeproxy.config.k8s.io/v1alpha1\n", []string{`f.yaml: kind: "": want KubeProxyConfiguration`}},
		{"empty", "", []string{"f.yaml: want a KubeProxyConfiguration (a YAML mapping), got nothing (null)"}},
		{"a list", "- a\n", []string{"f.yaml: want a KubeProxyConfiguration (a YAML mapping), got a list"}},
		{"malformed", "mode: [\n", []string{"f.yaml: not valid YAML"}},
		{"tab indentation", head + "conntrack:\n\tmin: 1\n", []string{"f.yaml: not valid YAML"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tc.text))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestConfigMapWithoutTheKey(t *testing.T) {
	_, _, err := ParseFileOrConfigMap("cm.yaml", []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kube-proxy, namespace: kube-system}\ndata: {config: x}\n"))
	if err == nil || err.Error() != "cm.yaml: ConfigMap kube-system/kube-proxy: no data.config.conf holding a KubeProxyConfiguration" {
		t.Errorf("got %v", err)
	}
	_, _, err = ParseFileOrConfigMap("cm.yaml", []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kube-proxy}\ndata:\n  config.conf: |\n    kind: KubeProxyConfiguration\n    apiVersion: kubeproxy.config.k8s.io/v1alpha1\n    mode: ipvs\n    ipvs: {schedular: rr}\n"))
	if err == nil || !strings.Contains(err.Error(), "cm.yaml: ConfigMap kube-proxy, key config.conf: ipvs.schedular: unknown field") {
		t.Errorf("got %v", err)
	}
}

func TestTranslate(t *testing.T) {
	bare := "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
	head := bare + "iptables: {localhostNodePorts: false}\n"
	for _, tc := range []struct {
		name, text string
		flags      []string
		findings   []string
	}{
		{"nothing set", head, nil, nil},
		{"iptables mode, every honoured field", bare + `mode: iptables
hostnameOverride: node-a
bindAddress: 192.0.2.1
healthzBindAddress: 192.0.2.1
metricsBindAddress: 0.0.0.0:10249
clientConnection: {kubeconfig: /k.conf, qps: 7.5, burst: 20}
logging: {format: json, verbosity: 4, flushFrequency: 5s}
clusterCIDR: 10.244.0.0/16,fd00:10:244::/56
detectLocalMode: InterfaceNamePrefix
detectLocal: {interfaceNamePrefix: veth}
nodePortAddresses: [192.0.2.0/24, 2001:db8::/64]
iptables: {masqueradeBit: 15, masqueradeAll: true, syncPeriod: 10s, minSyncPeriod: 2s, localhostNodePorts: false}
conntrack: {maxPerCore: 0, min: 1000, tcpEstablishedTimeout: 2h, tcpCloseWaitTimeout: 0s, tcpBeLiberal: true, udpTimeout: 30s, udpStreamTimeout: 2m}
`, []string{
			"--proxy-mode=iptables", "--iptables-masquerade-bit=15", "--masquerade-all=true", "--sync-period=10s", "--min-sync-period=2s",
			"--hostname-override=node-a", "--bind-address=192.0.2.1", "--healthz-bind-address=192.0.2.1:10256", "--metrics-bind-address=0.0.0.0:10249",
			"--detect-local-mode=InterfaceNamePrefix", "--pod-interface-name-prefix=veth", "--cluster-cidr=10.244.0.0/16,fd00:10:244::/56",
			"--kubeconfig=/k.conf", "--kube-api-qps=7.5", "--kube-api-burst=20", "--log-format=json", "--v=4",
			"--nodeport-addresses=192.0.2.0/24,2001:db8::/64",
			"--conntrack-max-per-core=0", "--conntrack-min=1000", "--conntrack-tcp-timeout-established=2h0m0s", "--conntrack-tcp-timeout-close-wait=0s",
			"--conntrack-tcp-be-liberal=true", "--conntrack-udp-timeout=30s", "--conntrack-udp-timeout-stream=2m0s",
		}, []string{"warning logging.flushFrequency"}},
		{"nftables mode takes its own section", bare + `mode: nftables
nftables: {masqueradeBit: 3, masqueradeAll: true, syncPeriod: 1m, minSyncPeriod: 5s}
iptables: {masqueradeBit: 14, syncPeriod: 10s, localhostNodePorts: true}
`, []string{"--proxy-mode=nftables", "--iptables-masquerade-bit=3", "--masquerade-all=true", "--sync-period=1m0s", "--min-sync-period=5s", "--nodeport-addresses=primary"},
			[]string{"warning iptables.masqueradeBit", "warning iptables.localhostNodePorts", "warning iptables.syncPeriod"}},
		{"iptables mode ignores the nftables section", head + "nftables: {masqueradeAll: true}\n", nil, []string{"warning nftables.masqueradeAll"}},
		{"localhost NodePorts by default", bare, nil, []string{"warning iptables.localhostNodePorts"}},
		{"ipvs is refused, its section ignored", head + "mode: ipvs\nipvs: {scheduler: wrr, strictARP: true}\n", nil,
			[]string{"error mode", "warning ipvs.scheduler", "warning ipvs.strictARP"}},
		{"ipvs section in iptables mode", head + "ipvs: {strictARP: true}\n", nil, []string{"warning ipvs.strictARP"}},
		{"kernelspace", head + "mode: kernelspace\nwinkernel: {enableDSR: true}\nwindowsRunAsService: true\n", nil,
			[]string{"error mode", "warning winkernel.enableDSR", "warning windowsRunAsService"}},
		{"unknown mode", head + "mode: userspace\n", nil, []string{"error mode"}},
		{"IPv6 bindAddress moves the default addresses", head + "bindAddress: \"::\"\n",
			[]string{"--bind-address=::", "--healthz-bind-address=[::]:10256", "--metrics-bind-address=[::1]:10249"}, nil},
		{"bare IPv6 addresses get their port", head + "healthzBindAddress: \"::\"\nmetricsBindAddress: \"::1\"\n",
			[]string{"--healthz-bind-address=[::]:10256", "--metrics-bind-address=[::1]:10249"}, nil},
		{"primary", head + "nodePortAddresses: [primary]\n", []string{"--nodeport-addresses=primary"}, nil},
		{"all", bare + "mode: nftables\nnodePortAddresses: [all, 192.0.2.0/24]\n", []string{"--proxy-mode=nftables"}, nil},
		{"primary with CIDRs", head + "nodePortAddresses: [primary, 192.0.2.0/24]\n", nil, []string{"error nodePortAddresses"}},
		{"localhost", head + "nodePortAddresses: [192.0.2.0/24, localhost]\n", []string{"--nodeport-addresses=192.0.2.0/24"}, []string{"error nodePortAddresses[1]"}},
		{"harmless settings are warnings", head + `enableProfiling: true
showHiddenMetricsForVersion: "1.33"
oomScoreAdj: -999
configSyncPeriod: 15m
portRange: 30000-32767
featureGates: {B: true, A: false}
clientConnection: {contentType: application/json, acceptContentTypes: application/json}
logging: {vmodule: [{filePattern: proxier.go, verbosity: 5}], format: logfmt, options: {json: {splitStream: true, infoBufferSize: 64Ki}}}
`, nil, []string{"warning enableProfiling", "warning showHiddenMetricsForVersion", "warning oomScoreAdj", "warning configSyncPeriod", "warning portRange",
			"warning featureGates.A", "warning featureGates.B", "warning clientConnection.contentType", "warning clientConnection.acceptContentTypes",
			"warning logging.format", "warning logging.vmodule", "warning logging.options.json.splitStream", "warning logging.options.json.infoBufferSize"}},
		{"a gate that changes traffic turned the other way", head + "featureGates: {PreferSameTrafficDistribution: false}\n",
			nil, []string{"error featureGates.PreferSameTrafficDistribution"}},
		{"a gate that changes traffic at herald's value", head + "featureGates: {PreferSameTrafficDistribution: true}\n",
			nil, []string{"warning featureGates.PreferSameTrafficDistribution"}},
		{"bridge interface", head + "detectLocalMode: BridgeInterface\ndetectLocal: {bridgeInterface: cni0}\n",
			[]string{"--detect-local-mode=BridgeInterface", "--pod-bridge-interface=cni0"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("f.yaml", []byte(tc.text))
			if err != nil {
				t.Fatal(err)
			}
			tr := c.Translate()
			if got := args(tr.Flags); !reflect.DeepEqual(got, tc.flags) {
				t.Errorf("flags\n%q\nwant\n%q", got, tc.flags)
			}
			if got := findings(tr.Findings); !reflect.DeepEqual(got, tc.findings) {
				t.Errorf("findings\n%q\nwant\n%q", got, tc.findings)
			}
			for _, f := range tr.Findings {
				if f.Message == "" {
					t.Errorf("%s: no message", f.Field)
				}
			}
		})
	}
}
