package crd

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestSchemaAcceptsEdges keeps the rules from being stricter than the API
// promises: every object here sits on a boundary and must be accepted.
func TestSchemaAcceptsEdges(t *testing.T) {
	v := newValidator(t)
	for name, doc := range map[string]string{
		"four-byte ASNs":            object("BGPPeer", "myASN: 4294967295\npeerASN: 4200000000\npeerAddress: 198.18.0.1"),
		"dynamic internal":          object("BGPPeer", "myASN: 64512\ndynamicASN: internal\npeerAddress: 2001:db8::1\nsourceAddress: 2001:db8::2"),
		"multihop to dynamic eBGP":  object("BGPPeer", "myASN: 64512\ndynamicASN: external\npeerAddress: 198.18.0.1\nebgpMultiHop: true"),
		"multihop to eBGP":          object("BGPPeer", "myASN: 64512\npeerASN: 64500\npeerAddress: 198.18.0.1\nebgpMultiHop: true"),
		"no multihop on iBGP":       object("BGPPeer", "myASN: 64512\npeerASN: 64512\npeerAddress: 198.18.0.1\nebgpMultiHop: false"),
		"hold 0s, keepalive 0s":     object("BGPPeer", "myASN: 64512\npeerASN: 64500\npeerAddress: 198.18.0.1\nholdTime: 0s\nkeepaliveTime: 0s"),
		"hold 3s, keepalive 3s":     object("BGPPeer", "myASN: 64512\npeerASN: 64500\npeerAddress: 198.18.0.1\nholdTime: 3s\nkeepaliveTime: 3s"),
		"keepalive 90s, hold unset": object("BGPPeer", "myASN: 64512\npeerASN: 64500\npeerAddress: 198.18.0.1\nkeepaliveTime: 1m30s"),
		"connect time bounds":       object("BGPPeer", "myASN: 64512\npeerASN: 64500\npeerAddress: 198.18.0.1\nconnectTime: 1s"),
		"port bounds":               object("BGPPeer", "myASN: 1\npeerASN: 2\npeerAddress: 198.18.0.1\npeerPort: 65535\nrouterID: 192.0.2.1"),
		"password":                  object("BGPPeer", "myASN: 1\npeerASN: 2\npeerAddress: 198.18.0.1\npassword: not-a-real-secret"),
		"aggregation bounds":        object("BGPAdvertisement", "aggregationLength: 0\naggregationLengthV6: 0\nlocalPref: 4294967295"),
		"communities": object("BGPAdvertisement", `communities:
  - "0:0"
  - "65535:65535"
  - "large:4294967295:4294967295:4294967295"
  - "large:0:0:0"
  - no-export
  - graceful-shutdown
  - Site_1.routes`),
		"empty advertisements": object("L2Advertisement", "{}"),
		"interfaces":           object("L2Advertisement", "interfaces: [eth0, eth0.100, br-lan, enp0s31f6]"),
		"community aliases":    object("Community", "communities:\n  - {name: a, value: \"1:2\"}\n  - {name: b, value: \"large:1:2:3\"}"),
		"BFD bounds":           object("BFDProfile", "receiveInterval: 10\ntransmitInterval: 60000\ndetectMultiplier: 255\nechoMode: true\nechoInterval: 10\nminimumTtl: 254"),
		"allocation priority":  object("IPAddressPool", "addresses: [192.0.2.0/24]\nserviceAllocation: {priority: 0}"),
		"announcement status": `apiVersion: herald.io/v1beta1
kind: ServiceAnnouncement
metadata:
  name: web-node-1
  namespace: herald-system
status:
  service: {namespace: default, name: web}
  node: node-1
  protocol: bgp
  ips: [192.0.2.10, "2001:db8::10"]
  peers: [core-router]
`,
		"node announcement status": `apiVersion: herald.io/v1beta1
kind: NodeAnnouncement
metadata:
  name: node-1
  namespace: herald-system
status:
  node: node-1
  protocol: bgp
  advertisements:
    - {name: everywhere, ipv4Peers: [core-router, edge-router], ipv6Peers: [core-router]}
    - {name: v4-only, ipv4Peers: [edge-router]}
    - {name: no-session}
`,
	} {
		t.Run(name, func(t *testing.T) {
			if errs := validateYAML(t, v, doc); len(errs) > 0 {
				t.Errorf("refused:%s\n%s", render(errs), doc)
			}
		})
	}
}

// TestSchemaDefaults checks the defaults the API server fills in, which the
// parser and the docs rely on.
func TestSchemaDefaults(t *testing.T) {
	v := newValidator(t)
	for _, tc := range []struct {
		doc   string
		path  string
		value any
	}{
		{object("IPAddressPool", "addresses: [192.0.2.0/24]"), "spec.autoAssign", true},
		{object("BGPPeer", "myASN: 1\npeerASN: 2\npeerAddress: 198.18.0.1"), "spec.peerPort", int64(179)},
		{object("BGPPeer", "myASN: 1\npeerASN: 2\npeerAddress: 198.18.0.1\npasswordSecret: {name: md5}"), "spec.passwordSecret.key", "password"},
		{object("BGPAdvertisement", "{}"), "spec.aggregationLength", int64(32)},
		{object("BGPAdvertisement", "{}"), "spec.aggregationLengthV6", int64(128)},
	} {
		t.Run(tc.path, func(t *testing.T) {
			objs, err := ReadObjects([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if errs := v.Validate(context.Background(), objs[0]); len(errs) > 0 {
				t.Fatalf("refused:%s", render(errs))
			}
			got, found, err := unstructured.NestedFieldNoCopy(objs[0], strings.Split(tc.path, ".")...)
			if err != nil || !found || !reflect.DeepEqual(got, tc.value) {
				t.Errorf("%s = %#v (found %v, %v), want %#v", tc.path, got, found, err, tc.value)
			}
		})
	}
}

// TestUnknownFieldsAreErrors mirrors kubectl's strict field validation, so
// a misspelt field cannot pass a test here and be dropped by the server.
func TestUnknownFieldsAreErrors(t *testing.T) {
	v := newValidator(t)
	errs := validateYAML(t, v, object("L2Advertisement", "ipAddressPool: [lan]"))
	if len(errs) != 1 || errs[0].Field != "spec.ipAddressPool" {
		t.Errorf("want one error on spec.ipAddressPool, got:%s", render(errs))
	}
	errs = validateYAML(t, v, "apiVersion: herald.io/v1\nkind: IPAddressPool\nmetadata: {name: a, namespace: b}\n")
	if len(errs) != 1 || errs[0].Field != "kind" {
		t.Errorf("want one error on kind for an unknown version, got:%s", render(errs))
	}
}
