package migrate

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/config/validate"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// translateFile translates a testdata file into herald-system.
func translateFile(t *testing.T, name string) (Result, string) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := New(Options{Namespace: "herald-system"})
	if err := tr.Load(name, f); err != nil {
		t.Fatal(err)
	}
	res := tr.Result()
	var out bytes.Buffer
	if err := Render(&out, res); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join("testdata", strings.TrimSuffix(name, ".yaml"))
	if res.Found > 0 && res.Objects() > 0 {
		checkGolden(t, base+".golden.yaml", out.String())
	}
	var report bytes.Buffer
	if err := Report(&report, res, name); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, base+".report.txt", report.String())
	return res, out.String()
}

// checkGolden compares got with the golden file, which go test -update
// rewrites.
func checkGolden(t *testing.T, golden, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -update rewrites it):\n%s", golden, got)
	}
}

// problems renders the problems one per line, as herald migrate prints
// them.
func problems(ps config.Problems) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// notesText renders the notes one per line.
func notesText(ns []Note) string {
	var b strings.Builder
	for _, n := range ns {
		b.WriteString(n.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// mustValidate runs herald validate over the output: it must find what
// is listed and nothing else.
func mustValidate(t *testing.T, out string, want ...string) {
	t.Helper()
	var report bytes.Buffer
	n, err := validate.Stream(&report, "herald-system", "output", strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if !strings.Contains(report.String(), w) {
			t.Errorf("herald validate's report lacks %q:\n%s", w, report.String())
		}
	}
	if n != len(want) {
		t.Errorf("herald validate finds %d problems in the output, want %d:\n%s", n, len(want), report.String())
	}
}

func TestTranslateCustomResources(t *testing.T) {
	res, out := translateFile(t, "metallb.yaml")
	// herald's parser sees what MetalLB's native mode does not check.
	mustValidate(t, out, "BGPAdvertisement herald-system/routed: spec.localPref: is only sent to iBGP peers, and every peer this advertisement reaches (tor1) is eBGP, so it has no effect (warning)")
	if got := res.Objects(); got != 8 {
		t.Errorf("%d objects, want 8 (2 pools, 2 advertisements, 1 community, 1 BFD profile, 2 peers)", got)
	}
	report := problems(res.Problems)
	for _, want := range []string{
		// FRR-only settings herald does not have, named by object and field.
		"BGPPeer metallb-system/tor1: spec.vrf: not translated: herald's speakers peer from the node's default VRF only",
		"BGPPeer metallb-system/tor1: spec.dualStackAddressFamily: not translated:",
		// v1beta2's explicit zero durations.
		"BGPPeer metallb-system/tor1: spec.holdTime: 0s left out",
		"BGPPeer metallb-system/tor1: spec.keepaliveTime: 0s left out",
		// The password's Secret lives in MetalLB's namespace.
		"BGPPeer metallb-system/tor1: spec.passwordSecret: herald reads the password from key \"password\" of Secret herald-system/tor1-password: copy Secret metallb-system/tor1-password there",
		// An unnumbered peer cannot be expressed.
		"BGPPeer metallb-system/unnumbered: spec.interface: an unnumbered peer",
		"L2Advertisement metallb-system/lan: spec.preferredNodeSelectors: not translated:",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q; it is:\n%s", want, report)
		}
	}
	if n := len(res.Problems); n != 7 {
		t.Errorf("%d problems, want the 7 above:\n%s", n, report)
	}
	// What herald has is kept: BFD, graceful restart, selectors, labels.
	for _, want := range []string{"bfdProfile: fast", "enableGracefulRestart: true", "zone: lan", "namespace: herald-system",
		"key: password", "kubernetes.io/hostname", "priority: 10", "autoAssign: false"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, gone := range []string{"metallb", "last-applied", "resourceVersion", "assignedIPv4", "uid:", "ServiceL2Status"} {
		if strings.Contains(out, gone) {
			t.Errorf("output still has %q", gone)
		}
	}
	if len(res.Skipped) != 2 {
		t.Errorf("skipped %+v, want the ServiceL2Status and the Service", res.Skipped)
	}
}

func TestTranslateLegacyConfigMap(t *testing.T) {
	res, out := translateFile(t, "legacy.yaml")
	mustValidate(t, out, "BGPAdvertisement herald-system/routed-1: spec.localPref: is only sent to iBGP peers")
	report := problems(res.Problems)
	for _, want := range []string{
		`ConfigMap metallb-system/config: data.config.address-pools[0].name: "Default_Pool" is not a valid object name; the pool is called "default-pool"`,
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if len(res.Problems) != 1 {
		t.Errorf("problems, want the one above:\n%s", report)
	}
	// MetalLB let an alias take a well-known name; herald knows it, so
	// the alias is noted, not reported.
	notes := notesText(res.Notes)
	for _, want := range []string{
		`Community metallb-system/communities: spec.communities[0]: alias "no-advertise" left out: herald knows no-advertise as 65535:65282 already`,
		`Community metallb-system/communities: not written: it defined only aliases herald knows`,
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	// The layer2 pool gets an L2Advertisement; the bgp pool one
	// BGPAdvertisement per entry; the peer's BFD profile follows its
	// profile's new name.
	for _, want := range []string{"name: default-pool", "name: routed-1", "name: routed-2", "bfdProfile: fast-bfd", "name: fast-bfd",
		"name: peer1", "rack: a", "- no-advertise"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if len(res.L2Advertisements) != 1 || len(res.BGPAdvertisements) != 2 {
		t.Errorf("%d L2 and %d BGP advertisements, want 1 and 2", len(res.L2Advertisements), len(res.BGPAdvertisements))
	}
}

func TestBadInput(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"wrong type", "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: p}\nspec: {addresses: 5}\n",
			"IPAddressPool p: spec.addresses: is a number, not a list of strings; the IPAddressPool is not translated"},
		{"wrong type, in words", "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: p}\nspec: {addresses: [192.0.2.0/30], autoAssign: \"yes\"}\n",
			"IPAddressPool p: spec.autoAssign: is a string, not true or false; the IPAddressPool is not translated"},
		{"spec not an object", "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: p}\nspec: [1]\n",
			"IPAddressPool p: spec: is a list, not an object"},
		{"empty password Secret name", "apiVersion: metallb.io/v1beta2\nkind: BGPPeer\nmetadata: {name: p}\nspec: {myASN: 1, peerASN: 2, peerAddress: 192.0.2.1, passwordSecret: {namespace: metallb-system}}\n",
			"BGPPeer p: spec.passwordSecret.name: missing: the reference names no Secret"},
		{"legacy config not a string", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config}\ndata:\n  config: {peers: []}\n",
			"ConfigMap config: data.config: is an object: MetalLB reads it as a string holding YAML (config: |)"},
		{"legacy mapping as a key", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config}\ndata:\n  config: |\n    ? {a: b}\n    : c\n",
			"ConfigMap config: data.config: cannot be read as MetalLB's legacy configuration: a mapping key is itself a mapping or a list"},
		{"only impossible references", "apiVersion: metallb.io/v1beta1\nkind: BGPAdvertisement\nmetadata: {name: a}\nspec: {ipAddressPools: [PoolA], peers: [PeerA]}\n",
			"BGPAdvertisement a: spec.ipAddressPools: names no object that can exist, so this advertisement announced nothing in MetalLB; not translated"},
		{"one impossible reference", "apiVersion: metallb.io/v1beta1\nkind: L2Advertisement\nmetadata: {name: a}\nspec: {ipAddressPools: [lan, Lan_2]}\n",
			`L2Advertisement a: spec.ipAddressPools[1]: "Lan_2" left out: it is not a valid object name`},
		{"unknown field", "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: p}\nspec: {addresses: [192.0.2.0/30], colour: red}\n",
			"IPAddressPool p: spec.colour: not translated: herald's IPAddressPool has no such field (warning)"},
		{"unknown version", "apiVersion: metallb.io/v2\nkind: IPAddressPool\nmetadata: {name: p}\n",
			"IPAddressPool p: apiVersion: metallb.io/v2 is not a MetalLB version"},
		{"no name", "apiVersion: metallb.io/v1beta1\nkind: Community\nmetadata: {}\n", "Community : metadata.name: missing"},
		{"old AddressPool", "apiVersion: metallb.io/v1beta1\nkind: AddressPool\nmetadata: {name: a}\n", "AddressPool a: AddressPool (MetalLB before 0.14)"},
		{"unknown kind", "apiVersion: metallb.io/v1beta1\nkind: Frobnicator\nmetadata: {name: f}\n", `Frobnicator f: kind: MetalLB has no configuration kind "Frobnicator"`},
		{"legacy bad", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config}\ndata: {config: 'address-pools: [{name: x, protocol: vxlan, addresses: [192.0.2.0/30]}]'}\n",
			`ConfigMap config: data.config.address-pools[0].protocol: "vxlan" is neither layer2 nor bgp`},
		{"legacy unreadable", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config}\ndata: {config: 'peers: 7'}\n",
			"ConfigMap config: data.config: cannot be read as MetalLB's legacy configuration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := New(Options{})
			if err := tr.Load("test", strings.NewReader(tc.doc)); err != nil {
				t.Fatal(err)
			}
			got := problems(tr.Result().Problems)
			if !strings.Contains(got, tc.want) {
				t.Errorf("problems %q, want one containing %q", got, tc.want)
			}
			// Go's names for types stay out of what users read.
			for _, leak := range []string{"interface {}", "Go struct", "map[", "[]string", "uint32", "int32", "json:"} {
				if strings.Contains(got, leak) {
					t.Errorf("problems %q show %q", got, leak)
				}
			}
		})
	}
	if err := New(Options{}).Load("broken", strings.NewReader("a: [\n")); err == nil {
		t.Error("unreadable YAML: no error")
	}
}
