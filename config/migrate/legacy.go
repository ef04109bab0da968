package migrate

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/herald-lb/herald/config"
)

// legacyConfig is the document under the "config" key of MetalLB's
// ConfigMap (MetalLB 0.12 and older).
type legacyConfig struct {
	Peers          []legacyPeer      `json:"peers"`
	BGPCommunities map[string]string `json:"bgp-communities"`
	Pools          []legacyPool      `json:"address-pools"`
	BFDProfiles    []legacyBFD       `json:"bfd-profiles"`
}

type legacyPeer struct {
	MyASN         uint32               `json:"my-asn"`
	PeerASN       uint32               `json:"peer-asn"`
	PeerAddress   string               `json:"peer-address"`
	SourceAddress string               `json:"source-address"`
	PeerPort      uint16               `json:"peer-port"`
	HoldTime      string               `json:"hold-time"`
	KeepaliveTime string               `json:"keepalive-time"`
	RouterID      string               `json:"router-id"`
	NodeSelectors []legacyNodeSelector `json:"node-selectors"`
	Password      string               `json:"password"`
	BFDProfile    string               `json:"bfd-profile"`
	EBGPMultiHop  bool                 `json:"ebgp-multihop"`
}

type legacyNodeSelector struct {
	MatchLabels      map[string]string `json:"match-labels"`
	MatchExpressions []struct {
		Key      string   `json:"key"`
		Operator string   `json:"operator"`
		Values   []string `json:"values"`
	} `json:"match-expressions"`
}

type legacyPool struct {
	Name           string         `json:"name"`
	Protocol       string         `json:"protocol"`
	Addresses      []string       `json:"addresses"`
	AutoAssign     *bool          `json:"auto-assign"`
	AvoidBuggyIPs  bool           `json:"avoid-buggy-ips"`
	Advertisements []legacyBGPAdv `json:"bgp-advertisements"`
}

type legacyBGPAdv struct {
	AggregationLength   *int32   `json:"aggregation-length"`
	AggregationLengthV6 *int32   `json:"aggregation-length-v6"`
	LocalPref           *uint32  `json:"localpref"`
	Communities         []string `json:"communities"`
}

type legacyBFD struct {
	Name             string  `json:"name"`
	ReceiveInterval  *uint32 `json:"receive-interval"`
	TransmitInterval *uint32 `json:"transmit-interval"`
	DetectMultiplier *uint32 `json:"detect-multiplier"`
	EchoInterval     *uint32 `json:"echo-interval"`
	EchoMode         *bool   `json:"echo-mode"`
	PassiveMode      *bool   `json:"passive-mode"`
	MinimumTTL       *uint32 `json:"minimum-ttl"`
}

// legacyKeys are the top-level keys of MetalLB's legacy configuration:
// a document with no apiVersion or kind and one of these is that
// configuration given as the bare file (the ConfigMap's "config" key).
var legacyKeys = []string{"peers", "address-pools", "bgp-communities", "bfd-profiles"}

// addConfigMap reads the ConfigMaps MetalLB takes configuration from:
// the legacy "config" key is translated; the ones herald has no
// counterpart for are reported.
func (t *Translator) addConfigMap(o *object, obj map[string]any) {
	data, _ := obj["data"].(map[string]any)
	switch o.name {
	case excludeL2ConfigMap:
		if t.inMetalLBNamespace(o) {
			o.excludeL2(data)
		}
		return
	case bgpExtrasConfigMap:
		if t.inMetalLBNamespace(o) {
			t.notTranslated(o, "raw FRR configuration MetalLB's FRR mode appends to its own; herald's speakers do not run FRR: carry over what it does with BGPPeer and BGPAdvertisement fields, or on the router")
		}
		return
	}
	raw, ok := data["config"]
	if !ok {
		t.skip(o.where, "ConfigMap %s has no \"config\" key: not MetalLB's legacy configuration", o.name)
		return
	}
	if !t.inMetalLBNamespace(o) {
		return
	}
	t.res.Found++
	text, ok := raw.(string)
	if !ok {
		o.errorf("data.config", "is %s: MetalLB reads it as a string holding YAML (config: |); not translated", describeValue(raw))
		return
	}
	t.addLegacy(o, "data.config", []byte(text), o.ns, o.where+" (legacy ConfigMap)")
}

// addLegacyFile reads a document without apiVersion or kind: MetalLB's
// legacy configuration as a bare file, or something else to skip.
func (t *Translator) addLegacyFile(where, source string, doc []byte, obj map[string]any) {
	for _, k := range legacyKeys {
		if _, ok := obj[k]; ok {
			t.res.Found++
			o := &object{t: t, kind: "MetalLB configuration file", name: where, where: where}
			t.addLegacy(o, "", doc, t.opts.MetalLBNamespace, where+" (legacy configuration)")
			return
		}
	}
	t.skip(where, "neither a Kubernetes object (it has no apiVersion or kind) nor MetalLB's legacy configuration (none of %s)", strings.Join(legacyKeys, ", "))
}

// addLegacy translates MetalLB's legacy configuration, read from the
// object o (its field prefix in o): each address pool
// becomes an IPAddressPool of the same name (made a valid object name)
// with an L2Advertisement or one BGPAdvertisement per bgp-advertisement
// named after it; peers become BGPPeers peer1, peer2, … in their order;
// bgp-communities one Community "communities"; bfd-profiles BFDProfiles.
// The objects, in namespace ns, then go through the same translation as
// MetalLB's custom resources, so they are reported the same way.
func (t *Translator) addLegacy(o *object, prefix string, text []byte, ns, src string) {
	report := func(sev config.Severity, field, format string, args ...any) {
		o.problem(sev, strings.TrimPrefix(prefix+field, "."), format, args...)
	}
	var lc legacyConfig
	if err := yaml.UnmarshalStrict(text, &lc); err != nil {
		report(config.Error, "", "cannot be read as MetalLB's legacy configuration: %s; not translated", legacyError(err))
		return
	}
	emit := func(kind, objName string, spec map[string]any) {
		t.Add(src, map[string]any{
			"apiVersion": Group + "/v1beta1",
			"kind":       kind,
			"metadata":   map[string]any{"name": objName, "namespace": ns},
			"spec":       spec,
		})
	}
	for i, p := range lc.Pools {
		field := fmt.Sprintf(".address-pools[%d]", i)
		pool := objectName(p.Name)
		if pool == "" {
			report(config.Error, field+".name", "%q cannot be made an object name", p.Name)
			continue
		}
		if pool != p.Name {
			report(config.Warning, field+".name", "%q is not a valid object name; the pool is called %q: Services that name it in an address-pool annotation must use the new name", p.Name, pool)
		}
		spec := map[string]any{"addresses": p.Addresses, "avoidBuggyIPs": p.AvoidBuggyIPs}
		if p.AutoAssign != nil {
			spec["autoAssign"] = *p.AutoAssign
		}
		emit(config.KindIPAddressPool, pool, spec)
		switch p.Protocol {
		case "layer2":
			if len(p.Advertisements) > 0 {
				report(config.Warning, field+".bgp-advertisements", "left out: the pool's protocol is layer2")
			}
			emit(config.KindL2Advertisement, pool, map[string]any{"ipAddressPools": []string{pool}})
		case "bgp":
			advs := p.Advertisements
			if len(advs) == 0 {
				advs = []legacyBGPAdv{{}}
			}
			for j, a := range advs {
				advName := pool
				if len(advs) > 1 {
					advName = fmt.Sprintf("%s-%d", pool, j+1)
				}
				spec := map[string]any{"ipAddressPools": []string{pool}}
				if a.AggregationLength != nil {
					spec["aggregationLength"] = *a.AggregationLength
				}
				if a.AggregationLengthV6 != nil {
					spec["aggregationLengthV6"] = *a.AggregationLengthV6
				}
				if a.LocalPref != nil {
					spec["localPref"] = *a.LocalPref
				}
				if len(a.Communities) > 0 {
					spec["communities"] = a.Communities
				}
				emit(config.KindBGPAdvertisement, advName, spec)
			}
		default:
			report(config.Error, field+".protocol", "%q is neither layer2 nor bgp (MetalLB refuses such a configuration): the pool is translated without an advertisement", p.Protocol)
		}
	}
	for i, p := range lc.Peers {
		spec := map[string]any{"myASN": p.MyASN, "peerASN": p.PeerASN, "peerAddress": p.PeerAddress}
		set := func(k, v string) {
			if v != "" {
				spec[k] = v
			}
		}
		set("sourceAddress", p.SourceAddress)
		set("holdTime", p.HoldTime)
		set("keepaliveTime", p.KeepaliveTime)
		set("routerID", p.RouterID)
		set("password", p.Password)
		set("bfdProfile", objectName(p.BFDProfile))
		if p.PeerPort != 0 {
			spec["peerPort"] = p.PeerPort
		}
		if p.EBGPMultiHop {
			spec["ebgpMultiHop"] = true
		}
		var sels []any
		for _, s := range p.NodeSelectors {
			sel := map[string]any{}
			if len(s.MatchLabels) > 0 {
				sel["matchLabels"] = s.MatchLabels
			}
			if len(s.MatchExpressions) > 0 {
				sel["matchExpressions"] = s.MatchExpressions
			}
			sels = append(sels, sel)
		}
		if len(sels) > 0 {
			spec["nodeSelectors"] = sels
		}
		emit(config.KindBGPPeer, fmt.Sprintf("peer%d", i+1), spec)
	}
	if len(lc.BGPCommunities) > 0 {
		var aliases []any
		for _, k := range sortedKeys(lc.BGPCommunities) {
			aliases = append(aliases, map[string]any{"name": k, "value": lc.BGPCommunities[k]})
		}
		emit(config.KindCommunity, "communities", map[string]any{"communities": aliases})
	}
	for i, b := range lc.BFDProfiles {
		bfd := objectName(b.Name)
		if bfd == "" {
			report(config.Error, fmt.Sprintf(".bfd-profiles[%d].name", i), "%q cannot be made an object name", b.Name)
			continue
		}
		spec := map[string]any{}
		setU := func(k string, v *uint32) {
			if v != nil {
				spec[k] = *v
			}
		}
		setB := func(k string, v *bool) {
			if v != nil {
				spec[k] = *v
			}
		}
		setU("receiveInterval", b.ReceiveInterval)
		setU("transmitInterval", b.TransmitInterval)
		setU("detectMultiplier", b.DetectMultiplier)
		setU("echoInterval", b.EchoInterval)
		setB("echoMode", b.EchoMode)
		setB("passiveMode", b.PassiveMode)
		setU("minimumTtl", b.MinimumTTL)
		emit(config.KindBFDProfile, bfd, spec)
	}
}

var notNameChars = regexp.MustCompile(`[^a-z0-9.-]+`)

// objectName makes a legacy name a valid object name (a DNS-1123
// subdomain) much as MetalLB's own converter does: lower case, "_" and
// other characters as "-", no leading or trailing "-" or ".", at most 63
// characters.
func objectName(s string) string {
	n := notNameChars.ReplaceAllString(strings.ToLower(s), "-")
	n = strings.TrimLeft(n, ".-")
	if len(n) > 63 {
		n = n[:63]
	}
	return strings.TrimRight(n, ".-")
}

// legacyError says what is wrong with a legacy configuration, without
// the YAML library's wrapping or Go's type names.
func legacyError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field, msg := decodeError(te)
		if field == "" {
			return "the configuration " + msg
		}
		return field + " " + msg
	}
	s := err.Error()
	for _, p := range []string{"error converting YAML to JSON: ", "error unmarshaling JSON: ", "while decoding JSON: ", "json: "} {
		s = strings.TrimPrefix(s, p)
	}
	if strings.HasPrefix(s, "unsupported map key") || strings.HasPrefix(s, "yaml: invalid map key") {
		return "a mapping key is itself a mapping or a list; keys must be names"
	}
	if f, ok := strings.CutPrefix(s, "unknown field "); ok {
		return "unknown key " + f
	}
	return s
}
