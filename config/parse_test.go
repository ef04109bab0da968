package config

import (
	"strings"
	"testing"
)

// base is a small valid configuration every case is added to, so each case
// also proves that one bad object leaves the good ones in the model.
const base = `
apiVersion: herald.io/v1beta1
kind: IPAddressPool
metadata: {name: base, namespace: herald-system, creationTimestamp: "2026-01-01T00:00:00Z", labels: {tier: base}}
spec:
  addresses: [198.51.100.0/24, "2001:db8:1::/120"]
---
# Announces every pool, so that no case warns of an unannounced pool.
apiVersion: herald.io/v1beta1
kind: L2Advertisement
metadata: {name: everything, namespace: herald-system, creationTimestamp: "2026-01-01T00:00:00Z"}
spec: {}
---
apiVersion: herald.io/v1beta1
kind: BFDProfile
metadata: {name: bfd, namespace: herald-system}
spec: {receiveInterval: 100}
---
apiVersion: herald.io/v1beta1
kind: BGPPeer
metadata: {name: ebgp, namespace: herald-system, creationTimestamp: "2026-01-01T00:00:00Z"}
spec: {myASN: 64512, peerASN: 64500, peerAddress: 198.18.0.1, bfdProfile: bfd}
---
apiVersion: herald.io/v1beta1
kind: Community
metadata: {name: base, namespace: herald-system, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  communities: [{name: blue, value: "64512:1"}]
---
apiVersion: v1
kind: Secret
metadata: {name: md5, namespace: herald-system}
stringData: {password: s3cret}
`

func load(t *testing.T, docs ...string) (*Config, Problems) {
	t.Helper()
	l := Loader{}
	if err := l.Load("test.yaml", strings.NewReader(strings.Join(docs, "\n---\n"))); err != nil {
		t.Fatalf("load: %v", err)
	}
	l.Resources.Namespace = "herald-system"
	cfg, ps := Parse(l.Resources)
	all := append(append(Problems{}, l.Problems...), ps...)
	return cfg, all
}

func obj(kind, name, spec string) string {
	return "apiVersion: herald.io/v1beta1\nkind: " + kind + "\nmetadata: {name: " + name + ", namespace: herald-system}\nspec:\n" + spec
}

func pool(name, spec string) string { return obj(KindIPAddressPool, name, spec) }
func peer(name, spec string) string { return obj(KindBGPPeer, name, spec) }
func l2(name, spec string) string   { return obj(KindL2Advertisement, name, spec) }
func bgp(name, spec string) string  { return obj(KindBGPAdvertisement, name, spec) }
func bfd(name, spec string) string  { return obj(KindBFDProfile, name, spec) }
func comm(name, spec string) string { return obj(KindCommunity, name, spec) }

// peerOK is a BGPPeer spec with every required field.
const peerOK = "  myASN: 64512\n  peerASN: 64500\n  peerAddress: 198.18.0.9\n"

type badInputCase struct {
	name     string
	docs     []string
	kind     string
	object   string
	field    string
	msg      string
	severity Severity
}

// badInputCases are TestParseBadInput's: documents, and the one problem
// each must raise, on which object and field.
var badInputCases = []badInputCase{
	// IPAddressPool
	{"empty addresses", []string{pool("p", "  addresses: []")}, KindIPAddressPool, "p", "spec.addresses", "must list at least one CIDR or range", Error},
	{"single address", []string{pool("p", "  addresses: [192.0.2.5]")}, KindIPAddressPool, "p", "spec.addresses[0]", `"192.0.2.5" is a single address: write it as a CIDR (192.0.2.5/32)`, Error},
	{"garbage", []string{pool("p", "  addresses: [banana]")}, KindIPAddressPool, "p", "spec.addresses[0]", `"banana" is not a CIDR such as 192.0.2.0/24`, Error},
	{"host bits", []string{pool("p", "  addresses: [192.0.2.5/24]")}, KindIPAddressPool, "p", "spec.addresses[0]", "has bits set past its /24 prefix: use its network address, 192.0.2.0/24", Error},
	{"prefix too long", []string{pool("p", "  addresses: [192.0.2.0/33]")}, KindIPAddressPool, "p", "spec.addresses[0]", "is not a CIDR", Error},
	{"reversed v4 range", []string{pool("p", "  addresses: [192.0.2.20-192.0.2.10]")}, KindIPAddressPool, "p", "spec.addresses[0]", "starts after it ends: write it as 192.0.2.10-192.0.2.20", Error},
	{"reversed v6 range", []string{pool("p", "  addresses: [\"2001:db8::1:0-2001:db8::ffff\"]")}, KindIPAddressPool, "p", "spec.addresses[0]", "starts after it ends", Error},
	{"mixed family range", []string{pool("p", "  addresses: [\"192.0.2.1-2001:db8::1\"]")}, KindIPAddressPool, "p", "spec.addresses[0]", "mixes IPv4 and IPv6", Error},
	{"three-part range", []string{pool("p", "  addresses: [192.0.2.1-192.0.2.2-192.0.2.3]")}, KindIPAddressPool, "p", "spec.addresses[0]", "write two addresses joined by one '-'", Error},
	{"leading zero octet", []string{pool("p", "  addresses: [192.0.2.010-192.0.2.20]")}, KindIPAddressPool, "p", "spec.addresses[0]", `"192.0.2.010" is not an IP address`, Error},
	{"ipv4-mapped", []string{pool("p", "  addresses: [\"::ffff:192.0.2.1-::ffff:192.0.2.9\"]")}, KindIPAddressPool, "p", "spec.addresses[0]", "IPv4-mapped IPv6 address ::ffff:192.0.2.1 is not allowed: write 192.0.2.1", Error},
	{"zone", []string{pool("p", "  addresses: [\"fe80::1%eth0-fe80::2\"]")}, KindIPAddressPool, "p", "spec.addresses[0]", "may not carry a zone (%eth0)", Error},
	{"overlap inside pool", []string{pool("p", "  addresses: [192.0.2.0/25, 192.0.2.100-192.0.2.200]")}, KindIPAddressPool, "p", "spec.addresses[1]", "overlaps spec.addresses[0] (192.0.2.0/25) of the same pool", Error},
	{"overlaps older pool", []string{pool("p", "  addresses: [198.51.100.128/25]")}, KindIPAddressPool, "p", "spec.addresses[0]", "overlaps IPAddressPool base (spec.addresses[0] 198.51.100.0/24)", Error},
	{"overlaps older pool v6", []string{pool("p", "  addresses: [\"2001:db8:1::80-2001:db8:2::\"]")}, KindIPAddressPool, "p", "spec.addresses[0]", "overlaps IPAddressPool base (spec.addresses[1] 2001:db8:1::/120)", Error},
	{"bad namespace", []string{pool("p", "  addresses: [192.0.2.0/24]\n  serviceAllocation: {namespaces: [Team_A]}")}, KindIPAddressPool, "p", "spec.serviceAllocation.namespaces[0]", `"Team_A" is not a namespace name`, Error},
	{"negative priority", []string{pool("p", "  addresses: [192.0.2.0/24]\n  serviceAllocation: {priority: -1}")}, KindIPAddressPool, "p", "spec.serviceAllocation.priority", "-1 is negative", Error},
	{"empty serviceAllocation", []string{pool("p", "  addresses: [192.0.2.0/24]\n  serviceAllocation: {}")}, KindIPAddressPool, "p", "spec.serviceAllocation", "must set at least one of priority", Error},
	{"bad selector", []string{pool("p", "  addresses: [192.0.2.0/24]\n  serviceAllocation:\n    serviceSelectors: [{matchExpressions: [{key: a, operator: Near, values: [b]}]}]")}, KindIPAddressPool, "p", "spec.serviceAllocation.serviceSelectors[0]", `invalid label selector: "Near" is not a valid label selector operator`, Error},
	{"misspelt field", []string{pool("p", "  adresses: [192.0.2.0/24]")}, KindIPAddressPool, "p", "", `unknown field "adresses"`, Error},
	{"wrong type", []string{pool("p", "  addresses: [192.0.2.0/24]\n  autoAssign: maybe")}, KindIPAddressPool, "p", "spec.autoAssign", "cannot unmarshal string into a field of type bool", Error},
	{"other namespace", []string{"apiVersion: herald.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: p, namespace: default}\nspec: {addresses: [192.0.2.0/24]}"}, KindIPAddressPool, "p", "metadata.namespace", `herald reads configuration only from namespace "herald-system"; this object is ignored`, Warning},
	{"duplicate name", []string{pool("base", "  addresses: [192.0.2.0/24]")}, KindIPAddressPool, "base", "metadata.name", "another IPAddressPool has the same name; the first one is used", Error},
	{"missing name", []string{"apiVersion: herald.io/v1beta1\nkind: IPAddressPool\nmetadata: {namespace: herald-system}\nspec: {addresses: [192.0.2.0/24]}"}, KindIPAddressPool, "", "metadata.name", "must be set", Error},
	{"unserved version", []string{"apiVersion: herald.io/v1\nkind: IPAddressPool\nmetadata: {name: p}\nspec: {addresses: [192.0.2.0/24]}"}, KindIPAddressPool, "p", "apiVersion", "herald.io/v1 is not served; use herald.io/v1beta1", Error},
	{"unknown kind", []string{"apiVersion: herald.io/v1beta1\nkind: AddressPool\nmetadata: {name: p}\nspec: {}"}, "AddressPool", "p", "kind", `herald.io has no kind "AddressPool"`, Error},

	// Community
	{"alias of alias", []string{comm("c", "  communities: [{name: red, value: blue}]")}, KindCommunity, "c", "spec.communities[0].value", "not another alias", Error},
	{"alias out of range", []string{comm("c", "  communities: [{name: red, value: \"65536:1\"}]")}, KindCommunity, "c", "spec.communities[0].value", "the ASN part 65536 is out of range (0-65535)", Error},
	{"alias defined twice", []string{comm("c", "  communities: [{name: red, value: \"1:1\"}, {name: red, value: \"1:2\"}]")}, KindCommunity, "c", "spec.communities[1].name", `alias "red" is defined twice in this object`, Error},
	{"alias redefined", []string{comm("c", "  communities: [{name: blue, value: \"1:2\"}]")}, KindCommunity, "c", "spec.communities[0].name", `alias "blue" is already defined as 64512:1 by Community base`, Error},
	{"alias shadows well-known", []string{comm("c", "  communities: [{name: no-export, value: \"1:2\"}]")}, KindCommunity, "c", "spec.communities[0].name", "is the name of a well-known community", Error},
	{"bad alias name", []string{comm("c", "  communities: [{name: -x, value: \"1:2\"}]")}, KindCommunity, "c", "spec.communities[0].name", `"-x" is not a valid alias name`, Error},

	// BFDProfile
	{"bfd multiplier", []string{bfd("b", "  detectMultiplier: 1")}, KindBFDProfile, "b", "spec.detectMultiplier", "1 is out of range: must be between 2 and 255", Error},
	{"bfd interval", []string{bfd("b", "  receiveInterval: 5")}, KindBFDProfile, "b", "spec.receiveInterval", "5 is out of range: must be between 10 and 60000", Error},
	{"bfd echo interval", []string{bfd("b", "  echoInterval: 50")}, KindBFDProfile, "b", "spec.echoInterval", "has no effect: herald's BFD has no echo function", Warning},
	{"bfd echo mode", []string{bfd("b", "  echoMode: true")}, KindBFDProfile, "b", "spec.echoMode", "true has no effect: herald's BFD has no echo function", Warning},
	{"bfd passive mode", []string{bfd("b", "  passiveMode: true")}, KindBFDProfile, "b", "spec.passiveMode", "true has no effect: herald's speakers always start the BFD session", Warning},
	{"bfd minimum ttl", []string{bfd("b", "  minimumTtl: 200")}, KindBFDProfile, "b", "spec.minimumTtl", "has no effect: herald's BFD sessions are single-hop", Warning},
	{"bfd ttl", []string{bfd("b", "  minimumTtl: 255")}, KindBFDProfile, "b", "spec.minimumTtl", "must be between 1 and 254", Error},

	// BGPPeer
	{"myASN zero", []string{peer("x", "  peerASN: 64500\n  peerAddress: 198.18.0.9")}, KindBGPPeer, "x", "spec.myASN", "must be set to an AS number between 1 and 4294967295", Error},
	{"both ASN kinds", []string{peer("x", peerOK+"  dynamicASN: external")}, KindBGPPeer, "x", "spec.dynamicASN", "peerASN and dynamicASN are mutually exclusive", Error},
	{"no peer ASN", []string{peer("x", "  myASN: 64512\n  peerAddress: 198.18.0.9")}, KindBGPPeer, "x", "spec.peerASN", "one of peerASN and dynamicASN must be set", Error},
	{"bad dynamicASN", []string{peer("x", "  myASN: 64512\n  dynamicASN: sideways\n  peerAddress: 198.18.0.9")}, KindBGPPeer, "x", "spec.dynamicASN", `"sideways" is not supported`, Error},
	{"hostname peer", []string{peer("x", "  myASN: 64512\n  peerASN: 1\n  peerAddress: router.example")}, KindBGPPeer, "x", "spec.peerAddress", `"router.example" is not an IPv4 or IPv6 address`, Error},
	{"source family", []string{peer("x", peerOK+"  sourceAddress: \"2001:db8::1\"")}, KindBGPPeer, "x", "spec.sourceAddress", "2001:db8::1 is not of the same IP family as peerAddress 198.18.0.9", Error},
	{"port range", []string{peer("x", peerOK+"  peerPort: 70000")}, KindBGPPeer, "x", "spec.peerPort", "70000 is out of range: must be between 1 and 65535", Error},
	{"fractional hold", []string{peer("x", peerOK+"  holdTime: 3500ms")}, KindBGPPeer, "x", "spec.holdTime", "3.5s is not a whole number of seconds", Error},
	{"huge hold", []string{peer("x", peerOK+"  holdTime: 100000s")}, KindBGPPeer, "x", "spec.holdTime", "use between 3s and 65535s", Error},
	{"fractional keepalive", []string{peer("x", peerOK+"  keepaliveTime: 1500ms")}, KindBGPPeer, "x", "spec.keepaliveTime", "1.5s is not a whole number of seconds", Error},
	{"short hold", []string{peer("x", peerOK+"  holdTime: 2s")}, KindBGPPeer, "x", "spec.holdTime", "2s is not allowed: use between 3s and 65535s", Error},
	{"no hold", []string{peer("x", peerOK+"  holdTime: 0s")}, KindBGPPeer, "x", "spec.holdTime", "0s (no keepalives) is not supported by herald's BGP speaker (GoBGP)", Error},
	{"keepalive over hold", []string{peer("x", peerOK+"  holdTime: 9s\n  keepaliveTime: 10s")}, KindBGPPeer, "x", "spec.keepaliveTime", "10s is longer than holdTime 9s", Error},
	{"keepalive over default hold", []string{peer("x", peerOK+"  keepaliveTime: 2m")}, KindBGPPeer, "x", "spec.keepaliveTime", "2m0s is longer than holdTime 1m30s", Error},
	{"connect time", []string{peer("x", peerOK+"  connectTime: 500ms")}, KindBGPPeer, "x", "spec.connectTime", "500ms is out of range: must be between 1s and 65535s", Error},
	{"v6 router id", []string{peer("x", peerOK+"  routerID: \"2001:db8::1\"")}, KindBGPPeer, "x", "spec.routerID", "2001:db8::1 is not an IPv4 address", Error},
	{"multihop on ibgp", []string{peer("x", "  myASN: 64512\n  peerASN: 64512\n  peerAddress: 198.18.0.9\n  ebgpMultiHop: true")}, KindBGPPeer, "x", "spec.ebgpMultiHop", "applies to eBGP sessions only; this peer is in the same AS as myASN (64512)", Error},
	{"multihop on dynamic internal", []string{peer("x", "  myASN: 64512\n  dynamicASN: internal\n  peerAddress: 198.18.0.9\n  ebgpMultiHop: true")}, KindBGPPeer, "x", "spec.ebgpMultiHop", "applies to eBGP sessions only", Error},
	{"both passwords", []string{peer("x", peerOK+"  password: a\n  passwordSecret: {name: md5}")}, KindBGPPeer, "x", "spec.passwordSecret", "password and passwordSecret are mutually exclusive", Error},
	{"missing secret", []string{peer("x", peerOK+"  passwordSecret: {name: nope}")}, KindBGPPeer, "x", "spec.passwordSecret.name", "Secret nope does not exist in this namespace", Error},
	{"missing secret key", []string{peer("x", peerOK+"  passwordSecret: {name: md5, key: pw}")}, KindBGPPeer, "x", "spec.passwordSecret.key", `Secret md5 has no key "pw"`, Error},
	{"long password", []string{peer("x", peerOK+"  password: "+strings.Repeat("p", 81))}, KindBGPPeer, "x", "spec.password", "is 81 bytes long; TCP MD5 keys are at most 80", Error},
	{"missing bfd", []string{peer("x", peerOK+"  bfdProfile: slow")}, KindBGPPeer, "x", "spec.bfdProfile", "BFDProfile slow does not exist", Error},
	{"broken bfd", []string{bfd("b", "  detectMultiplier: 1"), peer("x", peerOK+"  bfdProfile: b")}, KindBGPPeer, "x", "spec.bfdProfile", "BFDProfile b has problems and is not in use", Error},
	{"conflicting peer", []string{peer("x", "  myASN: 64513\n  peerASN: 64500\n  peerAddress: 198.18.0.1")}, KindBGPPeer, "x", "spec.peerAddress", "BGPPeer ebgp already peers with 198.18.0.1 from the same nodes", Error},
	{"conflicting peer same selector", []string{
		peer("a", "  myASN: 64512\n  peerASN: 64500\n  peerAddress: 198.18.0.9\n  nodeSelectors: [{matchLabels: {rack: r1}}]"),
		peer("b", "  myASN: 64512\n  peerASN: 64501\n  peerAddress: 198.18.0.9\n  nodeSelectors: [{matchLabels: {rack: r2}}, {matchLabels: {rack: r1}}]")},
		KindBGPPeer, "b", "spec.peerAddress", "BGPPeer a already peers with 198.18.0.9", Error},
	{"bad node selector", []string{peer("x", peerOK+"  nodeSelectors: [{matchExpressions: [{key: a, operator: In}]}]")}, KindBGPPeer, "x", "spec.nodeSelectors[0]", "invalid label selector", Error},

	// L2Advertisement
	{"l2 missing pool", []string{l2("a", "  ipAddressPools: [nope]")}, KindL2Advertisement, "a", "spec.ipAddressPools[0]", "IPAddressPool nope does not exist, so this advertisement announces nothing", Error},
	{"l2 some pools missing", []string{l2("a", "  ipAddressPools: [base, nope]")}, KindL2Advertisement, "a", "spec.ipAddressPools[1]", "IPAddressPool nope does not exist", Warning},
	{"l2 broken pool", []string{pool("p", "  addresses: [192.0.2.5/24]"), l2("a", "  ipAddressPools: [p]")}, KindL2Advertisement, "a", "spec.ipAddressPools[0]", "IPAddressPool p has problems and is not in use, so this advertisement announces nothing", Error},
	{"l2 selector matches nothing", []string{l2("a", "  ipAddressPoolSelectors: [{matchLabels: {tier: gold}}]")}, KindL2Advertisement, "a", "spec.ipAddressPoolSelectors[0]", `selector "tier=gold" matches no valid IPAddressPool`, Error},
	{"l2 interface slash", []string{l2("a", "  interfaces: [eth0/1]")}, KindL2Advertisement, "a", "spec.interfaces[0]", "may not contain '/', ':' or whitespace", Error},
	{"l2 interface too long", []string{l2("a", "  interfaces: [averyveryverylongname]")}, KindL2Advertisement, "a", "spec.interfaces[0]", "longer than 15 bytes", Error},

	// BGPAdvertisement
	{"aggregation v4", []string{bgp("a", "  aggregationLength: 33")}, KindBGPAdvertisement, "a", "spec.aggregationLength", "33 is out of range for IPv4: must be between 0 and 32", Error},
	{"aggregation v6", []string{bgp("a", "  aggregationLengthV6: 129")}, KindBGPAdvertisement, "a", "spec.aggregationLengthV6", "129 is out of range for IPv6", Error},
	{"aggregation wider than pool", []string{bgp("a", "  ipAddressPools: [base]\n  aggregationLength: 16")}, KindBGPAdvertisement, "a", "spec.aggregationLength", "/16 is shorter than 198.51.100.0/24 in IPAddressPool base: the aggregate route would cover addresses outside the pool", Error},
	{"aggregation v6 wider than range", []string{bgp("a", "  ipAddressPools: [base]\n  aggregationLengthV6: 64")}, KindBGPAdvertisement, "a", "spec.aggregationLengthV6", "/64 is shorter than 2001:db8:1::/120", Error},
	{"unknown alias", []string{bgp("a", "  communities: [green]")}, KindBGPAdvertisement, "a", "spec.communities[0]", `no Community object defines the alias "green", and it is not a well-known community`, Error},
	{"malformed community", []string{bgp("a", "  communities: [\"1:2:3\"]")}, KindBGPAdvertisement, "a", "spec.communities[0]", `"1:2:3" is not a community`, Error},
	{"community out of range", []string{bgp("a", "  communities: [\"65536:1\"]")}, KindBGPAdvertisement, "a", "spec.communities[0]", "the ASN part 65536 is out of range (0-65535)", Error},
	{"large community out of range", []string{bgp("a", "  communities: [\"large:4294967296:1:1\"]")}, KindBGPAdvertisement, "a", "spec.communities[0]", "part 1 4294967296 is out of range (0-4294967295)", Error},
	{"large community short", []string{bgp("a", "  communities: [\"large:1:2\"]")}, KindBGPAdvertisement, "a", "spec.communities[0]", "is not a large community", Error},
	{"alias from broken community", []string{comm("c", "  communities: [{name: red, value: \"1:1\"}, {name: bad, value: \"1:99999\"}]"), bgp("a", "  communities: [red]")}, KindBGPAdvertisement, "a", "spec.communities[0]", `alias "red" is defined in Community c, which has problems`, Error},
	{"localPref to eBGP only", []string{bgp("a", "  localPref: 100")}, KindBGPAdvertisement, "a", "spec.localPref", "is only sent to iBGP peers, and every peer this advertisement reaches (ebgp) is eBGP, so it has no effect", Warning},
	{"missing peer", []string{bgp("a", "  peers: [nope]")}, KindBGPAdvertisement, "a", "spec.peers[0]", "BGPPeer nope does not exist, so this advertisement reaches no peer", Error},
	{"some peers missing", []string{bgp("a", "  peers: [ebgp, nope]")}, KindBGPAdvertisement, "a", "spec.peers[1]", "BGPPeer nope does not exist", Warning},
}

func TestParseBadInput(t *testing.T) {
	cases := badInputCases
	seen := map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if seen[tc.name] {
				t.Fatalf("duplicate case name")
			}
			seen[tc.name] = true
			cfg, problems := load(t, append([]string{base}, tc.docs...)...)
			var found bool
			for _, p := range problems {
				if p.Kind == tc.kind && p.Name == tc.object && p.Field == tc.field && strings.Contains(p.Message, tc.msg) {
					found = true
					if p.Severity != tc.severity {
						t.Errorf("severity %v, want %v: %s", p.Severity, tc.severity, p)
					}
				} else if p.Kind != tc.kind || p.Name != tc.object {
					// Only the object under test (and objects the case
					// breaks on purpose) may have problems.
					if !(len(tc.docs) > 1 && p.Kind != tc.kind) {
						t.Errorf("unexpected problem on another object: %s", p)
					}
				}
			}
			if !found {
				t.Fatalf("no problem %s %s %s %q;\ngot:\n%s", tc.kind, tc.object, tc.field, tc.msg, problems.Error())
			}
			// Partial failure: the base objects are all still in use.
			if cfg.Pools["base"] == nil || cfg.Peers["ebgp"] == nil || cfg.BFDProfiles["bfd"] == nil || cfg.Communities["blue"] != (Community{Standard: 64512<<16 | 1}) {
				t.Errorf("a bad object disturbed the base configuration: pools %v peers %v", cfg.PoolNames(), cfg.Peers)
			}
			// An object with an error is not in the model; with warnings it is.
			inModel := modelHas(cfg, tc.kind, tc.object)
			if tc.severity == Error && inModel && tc.field != "metadata.name" {
				t.Errorf("%s %s has an error but is in the model", tc.kind, tc.object)
			}
			if tc.severity == Warning && !inModel && tc.field != "metadata.namespace" {
				t.Errorf("%s %s has only a warning but is missing from the model", tc.kind, tc.object)
			}
		})
	}
	if len(cases) < 30 {
		t.Fatalf("only %d cases", len(cases))
	}
}

func modelHas(cfg *Config, kind, name string) bool {
	switch kind {
	case KindIPAddressPool:
		return cfg.Pools[name] != nil
	case KindBGPPeer:
		return cfg.Peers[name] != nil
	case KindBFDProfile:
		return cfg.BFDProfiles[name] != nil
	case KindL2Advertisement:
		for _, a := range cfg.L2Advertisements {
			if a.Name == name {
				return true
			}
		}
	case KindBGPAdvertisement:
		for _, a := range cfg.BGPAdvertisements {
			if a.Name == name {
				return true
			}
		}
	}
	return false
}

// TestValidAliasReplacesBrokenOne: an alias defined by a broken Community is
// still usable when a valid Community defines it too.
func TestValidAliasReplacesBrokenOne(t *testing.T) {
	ts := func(name, date, spec string) string {
		return "apiVersion: herald.io/v1beta1\nkind: Community\nmetadata: {name: " + name + ", namespace: herald-system, creationTimestamp: \"" + date + "\"}\nspec:\n" + spec
	}
	cfg, problems := load(t,
		ts("oldest", "2026-01-01T00:00:00Z", "  communities: [{name: x, value: \"3:3\"}]"),
		ts("mid", "2026-02-01T00:00:00Z", "  communities: [{name: x, value: \"2:2\"}, {name: lb, value: \"1:1\"}]"),
		ts("newest", "2026-03-01T00:00:00Z", "  communities: [{name: lb, value: \"1:1\"}]"),
		bgp("a", "  communities: [lb]"),
	)
	if len(cfg.BGPAdvertisements) != 1 || cfg.Communities["lb"] != (Community{Standard: 1<<16 | 1}) {
		t.Fatalf("alias lb should resolve through Community newest:\n%s", problems.Error())
	}
	if ps := problems.For(KindCommunity, "herald-system", "mid"); len(ps) != 1 {
		t.Errorf("want one problem on Community mid, got:\n%s", problems.Error())
	}
}

// TestStatusKindsAreSkipped: the objects the speakers write, as `kubectl
// get -o yaml` of the namespace would include them, are skipped with a
// reason, not reported as unknown kinds.
func TestStatusKindsAreSkipped(t *testing.T) {
	l := Loader{}
	doc := func(kind string) string {
		return "apiVersion: herald.io/v1beta1\nkind: " + kind + "\nmetadata: {name: node-1, namespace: herald-system}\nstatus: {node: node-1}"
	}
	if err := l.Load("test.yaml", strings.NewReader(doc("ServiceAnnouncement")+"\n---\n"+doc("NodeAnnouncement"))); err != nil {
		t.Fatalf("load: %v", err)
	}
	if len(l.Problems) != 0 {
		t.Errorf("problems: %v", l.Problems)
	}
	want := []Skipped{
		{"test.yaml:1", "ServiceAnnouncement is written by the speakers, not configuration"},
		{"test.yaml:2", "NodeAnnouncement is written by the speakers, not configuration"},
	}
	if len(l.Skipped) != len(want) {
		t.Fatalf("skipped %v, want %v", l.Skipped, want)
	}
	for i := range want {
		if l.Skipped[i] != want[i] {
			t.Errorf("skipped[%d] = %v, want %v", i, l.Skipped[i], want[i])
		}
	}
}
