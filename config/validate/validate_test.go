package validate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateSamples(t *testing.T) {
	for _, tc := range []struct {
		file, golden string
		problems     bool
	}{
		{"../samples/valid.yaml", "testdata/validate-valid.golden", false},
		{"../samples/invalid.yaml", "testdata/validate-invalid.golden", true},
	} {
		var out strings.Builder
		n, err := Files(&out, "herald-system", []string{tc.file})
		if err != nil {
			t.Fatal(err)
		}
		if (n > 0) != tc.problems {
			t.Errorf("%s: %d problems", tc.file, n)
		}
		if os.Getenv("UPDATE_GOLDEN") != "" {
			if err := os.WriteFile(tc.golden, []byte(out.String()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(tc.golden)
		if err != nil {
			t.Fatalf("%v (UPDATE_GOLDEN=1 writes it)", err)
		}
		if out.String() != string(want) {
			t.Errorf("herald validate -f %s printed:\n%s\nwant (%s):\n%s", tc.file, out.String(), tc.golden, want)
		}
	}
}

// TestValidateRefusesWhatKubectlRefuses: objects the parser alone would read
// as valid (an explicit empty or zero value looks like "unset" to Go) are
// still refused, because validate runs the CRD schema first.
func TestValidateRefusesWhatKubectlRefuses(t *testing.T) {
	peer := "apiVersion: herald.io/v1beta1\nkind: BGPPeer\nmetadata: {name: p, namespace: herald-system}\nspec:\n"
	cases := map[string]struct{ yaml, want string }{
		"empty sourceAddress": {peer + "  myASN: 64512\n  peerASN: 64500\n  peerAddress: 198.18.0.9\n  sourceAddress: \"\"", "BGPPeer herald-system/p: spec.sourceAddress: must be an IPv4 or IPv6 address"},
		"zero peerASN":        {peer + "  myASN: 64512\n  peerASN: 0\n  dynamicASN: internal\n  peerAddress: 198.18.0.9", "spec.peerASN"},
		"leading zeros":       {"apiVersion: herald.io/v1beta1\nkind: BGPAdvertisement\nmetadata: {name: a, namespace: herald-system}\nspec:\n  communities: [\"000001:1\"]", "BGPAdvertisement herald-system/a: spec.communities[0]"},
		"List from kubectl get": {"apiVersion: v1\nkind: List\nitems:\n- apiVersion: herald.io/v1beta1\n  kind: IPAddressPool\n  metadata: {name: l, namespace: herald-system}\n  spec: {addresses: [192.0.2.7/24]}",
			"IPAddressPool herald-system/l: spec.addresses[0]: \"192.0.2.7/24\" has bits set past its /24 prefix"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "in.yaml")
			if err := os.WriteFile(f, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			n, err := Files(&out, "herald-system", []string{f})
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 || !strings.Contains(out.String(), tc.want) {
				t.Errorf("want a problem containing %q, got %d:\n%s", tc.want, n, out.String())
			}
		})
	}
}

// An object read back from a cluster with a refused edit: validate names
// the problem and says which generation herald keeps using.
func TestValidateShowsVersionInForce(t *testing.T) {
	yaml := `apiVersion: herald.io/v1beta1
kind: IPAddressPool
metadata: {name: lan, namespace: herald-system, generation: 3}
spec: {addresses: ["198.51.100.20-198.51.100.10"]}
status:
  inForce:
    generation: 2
    spec: {addresses: ["198.51.100.0/28"]}
---
apiVersion: herald.io/v1beta1
kind: L2Advertisement
metadata: {name: lan, namespace: herald-system}
spec: {ipAddressPools: [lan]}
`
	f := filepath.Join(t.TempDir(), "in.yaml")
	if err := os.WriteFile(f, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	n, err := Files(&out, "herald-system", []string{f})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"IPAddressPool herald-system/lan: spec.addresses[0]: \"198.51.100.20-198.51.100.10\" starts after it ends",
		"IPAddressPool herald-system/lan: in force: generation 2, refused: generation 3",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if n != 1 {
		t.Errorf("%d problems, want 1", n)
	}
}

// A pool no advertisement selects is MetalLB users' most asked question:
// validate warns about it.
func TestValidateWarnsOfUnannouncedPool(t *testing.T) {
	yaml := `apiVersion: herald.io/v1beta1
kind: IPAddressPool
metadata: {name: lan, namespace: herald-system}
spec: {addresses: ["198.51.100.0/28"]}
---
apiVersion: herald.io/v1beta1
kind: IPAddressPool
metadata: {name: routed, namespace: herald-system, labels: {via: bgp}}
spec: {addresses: ["203.0.113.0/28"]}
---
apiVersion: herald.io/v1beta1
kind: BGPPeer
metadata: {name: tor, namespace: herald-system}
spec: {myASN: 64512, peerASN: 64512, peerAddress: 192.0.2.1}
---
apiVersion: herald.io/v1beta1
kind: BGPAdvertisement
metadata: {name: routed, namespace: herald-system}
spec:
  ipAddressPoolSelectors: [{matchLabels: {via: bgp}}]
`
	var out strings.Builder
	n, err := Stream(&out, "herald-system", "in", strings.NewReader(yaml))
	if err != nil {
		t.Fatal(err)
	}
	want := "IPAddressPool herald-system/lan: no L2Advertisement or BGPAdvertisement selects this pool: Services get IPs from it that no node announces; add an advertisement that names it in spec.ipAddressPools or selects its labels (warning)"
	if n != 1 || !strings.Contains(out.String(), want) {
		t.Errorf("%d problems, want exactly %q:\n%s", n, want, out.String())
	}
}
