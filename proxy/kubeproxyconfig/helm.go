package kubeproxyconfig

import (
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// chartValues maps the flags herald's Helm chart (charts/herald) has a
// value of its own for to that value's path under proxy.
var chartValues = map[string][]string{
	"cluster-cidr":                      {"clusterCIDR"},
	"healthz-bind-address":              {"healthzBindAddress"},
	"metrics-bind-address":              {"metricsBindAddress"},
	"conntrack-max-per-core":            {"conntrack", "maxPerCore"},
	"conntrack-min":                     {"conntrack", "min"},
	"conntrack-tcp-timeout-established": {"conntrack", "tcpTimeoutEstablished"},
	"conntrack-tcp-timeout-close-wait":  {"conntrack", "tcpTimeoutCloseWait"},
	"conntrack-tcp-be-liberal":          {"conntrack", "tcpBeLiberal"},
	"conntrack-udp-timeout":             {"conntrack", "udpTimeout"},
	"conntrack-udp-timeout-stream":      {"conntrack", "udpTimeoutStream"},
}

// notCharted says why a flag is not carried into the chart's values.
var notCharted = map[string]string{
	"kubeconfig":        "the chart's pods reach the API server with their service account (in-cluster configuration)",
	"hostname-override": "the chart gives each pod its node's name (spec.nodeName)",
	"v":                 "the speakers (proxy.mode speaker, the default) take speaker.logLevel=debug for 4 or more; a standalone proxy takes --v in proxy.extraArgs",
	"log-format":        "the chart sets no log format; a standalone proxy takes --log-format in proxy.extraArgs",
}

// Helm is the translation as values of herald's Helm chart: the chart's
// own proxy values where it has one, the other flags in proxy.extraArgs.
// left names each flag the values leave out, and why (the chart does it
// its own way).
func (t Translation) Helm() (values []byte, left []Finding, err error) {
	proxy := map[string]any{}
	var extra []string
	for _, f := range t.Flags {
		if why, ok := notCharted[f.Name]; ok {
			left = append(left, Finding{Field: f.Field, Message: "--" + f.Name + " not in the values: " + why})
			continue
		}
		path, ok := chartValues[f.Name]
		if !ok {
			extra = append(extra, f.Arg())
			continue
		}
		m := proxy
		for _, k := range path[:len(path)-1] {
			if m[k] == nil {
				m[k] = map[string]any{}
			}
			m = m[k].(map[string]any)
		}
		m[path[len(path)-1]] = chartValue(f)
	}
	if len(extra) > 0 {
		proxy["extraArgs"] = extra
	}
	if len(proxy) == 0 {
		return []byte("{}\n"), left, nil
	}
	values, err = yaml.Marshal(map[string]any{"proxy": proxy})
	return values, left, err
}

// chartValue types a flag's value as the chart's schema wants it.
func chartValue(f Flag) any {
	if strings.HasPrefix(f.Name, "conntrack-") {
		if n, err := strconv.Atoi(f.Value); err == nil {
			return n
		}
		if b, err := strconv.ParseBool(f.Value); err == nil {
			return b
		}
	}
	return f.Value
}
