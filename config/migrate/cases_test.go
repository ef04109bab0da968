package migrate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The cases below are MetalLB inputs as MetalLB itself writes them (its
// ConfigMap converter's output, its documentation's YAML, its install
// manifest), each with a golden output and report in testdata.

// wantLines fails for each line missing from text.
func wantLines(t *testing.T, what, text string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(text, l) {
			t.Errorf("%s lacks %q:\n%s", what, l, text)
		}
	}
}

// readTestdata is a testdata file's text.
func readTestdata(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestConverterOutput(t *testing.T) {
	res, out := translateFile(t, "converter.yaml")
	// Every peer, pool, advertisement, community and profile comes over,
	// and herald validate finds no error in them.
	if len(res.Peers) != 3 || len(res.Pools) != 2 || len(res.BGPAdvertisements) != 1 || len(res.L2Advertisements) != 1 ||
		len(res.BFDProfiles) != 2 || len(res.Communities) != 1 {
		t.Errorf("translated %d peers, %d pools, %d+%d advertisements, %d BFD profiles, %d communities; want 3, 2, 1+1, 2, 1",
			len(res.Peers), len(res.Pools), len(res.BGPAdvertisements), len(res.L2Advertisements), len(res.BFDProfiles), len(res.Communities))
	}
	mustValidate(t, out)
	if n := res.Problems.Errors(); n != 0 {
		t.Errorf("%d objects left out:\n%s", n, problems(res.Problems))
	}
	// passwordSecret: {} is no Secret: gone, the clear-text password
	// stays, and nothing asks to copy a Secret without a name.
	if strings.Contains(out, "passwordSecret") {
		t.Errorf("an empty passwordSecret was written:\n%s", out)
	}
	wantLines(t, "output", out, "password: secret-one")
	if strings.Contains(problems(res.Problems), "Secret herald-system/:") {
		t.Errorf("the report asks to copy a Secret with no name:\n%s", problems(res.Problems))
	}
	// BFD: what herald does anyway is noted; echo, passive mode and a
	// minimum TTL change behaviour and are reported.
	wantLines(t, "report", problems(res.Problems),
		"BFDProfile metallb-system/bfdprofile2: spec.echoMode: true left out, and echoInterval 80 with it: herald's BFD has no echo function",
		"BFDProfile metallb-system/bfdprofile2: spec.passiveMode: true left out",
		"BFDProfile metallb-system/bfdprofile2: spec.minimumTtl: 150 left out",
		// The keepalive message names the peer's own hold time.
		"BGPPeer metallb-system/peer2: spec.keepaliveTime: 0s left out: MetalLB writes 0s for an unset keepaliveTime; herald's default applies (a third of holdTime 1m30s)",
	)
	wantLines(t, "notes", notesText(res.Notes),
		"BFDProfile metallb-system/bfdprofile1: spec.echoInterval: 62 left out: without echoMode it has no effect in MetalLB either",
		"BFDProfile metallb-system/bfdprofile1: spec.minimumTtl: 254 left out",
	)
	for _, gone := range []string{"echoInterval", "echoMode", "passiveMode", "minimumTtl", "status"} {
		if strings.Contains(out, gone) {
			t.Errorf("output still has %s", gone)
		}
	}
	// echoMode alone: the warning names no echoInterval.
	tr := New(Options{})
	if err := tr.Load("echo.yaml", strings.NewReader("apiVersion: metallb.io/v1beta1\nkind: BFDProfile\nmetadata: {name: echo}\nspec: {echoMode: true}\n")); err != nil {
		t.Fatal(err)
	}
	got := problems(tr.Result().Problems)
	wantLines(t, "report", got, "BFDProfile echo: spec.echoMode: true left out: herald's BFD has no echo function")
	if strings.Contains(got, "echoInterval") {
		t.Errorf("the report names an echoInterval the profile does not have:\n%s", got)
	}
}

func TestOnlyMetalLBsNamespace(t *testing.T) {
	res, out := translateFile(t, "namespaces.yaml")
	// The pool and the catch-all advertisement in default never were
	// MetalLB's: skipped, and named.
	skipped := ""
	for _, s := range res.Skipped {
		skipped += s.Source + ": " + s.Reason + "\n"
	}
	wantLines(t, "skipped", skipped,
		"namespaces.yaml:3: IPAddressPool default/lan is in namespace default: MetalLB reads its configuration from metallb-system only",
		"namespaces.yaml:4: L2Advertisement default/everything is in namespace default")
	if strings.Contains(out, "198.51.100.0/24") || strings.Contains(out, "everything") {
		t.Errorf("an object of namespace default was translated:\n%s", out)
	}
	if res.Elsewhere != 2 {
		t.Errorf("Elsewhere = %d, want 2", res.Elsewhere)
	}
	// The same pool twice is written once; a name given twice with
	// different specs is an error, and neither is written.
	wantLines(t, "notes", notesText(res.Notes), "IPAddressPool metallb-system/lan: given again at namespaces.yaml:5, the same as at namespaces.yaml:1: written once")
	wantLines(t, "report", problems(res.Problems),
		"IPAddressPool metallb-system/routed: metadata.name: IPAddressPool routed is defined twice, differently: at namespaces.yaml:6 and at namespaces.yaml:7; neither is written")
	if len(res.Pools) != 1 || res.Pools[0].Name != "lan" {
		t.Errorf("pools %v, want lan alone", res.Pools)
	}
	// A namespace-less object is MetalLB's.
	if len(res.BGPAdvertisements) != 1 {
		t.Errorf("the BGPAdvertisement without a namespace was not translated")
	}

	// --metallb-namespace chooses which namespace is MetalLB's.
	tr := New(Options{MetalLBNamespace: "default"})
	if err := tr.Load("namespaces.yaml", strings.NewReader(readTestdata(t, "namespaces.yaml"))); err != nil {
		t.Fatal(err)
	}
	other := tr.Result()
	if len(other.Pools) != 2 || other.Pools[0].Spec.Addresses[0] != "198.51.100.0/24" || other.Pools[1].Spec.Addresses[0] != "203.0.113.0/28" ||
		len(other.L2Advertisements) != 1 || other.L2Advertisements[0].Name != "everything" || other.Elsewhere != 4 || len(other.Problems) != 0 {
		t.Errorf("--metallb-namespace default: pools %v, L2 advertisements %v, %d elsewhere, problems %v; want default's pool and advertisement and the namespace-less pool",
			other.Pools, other.L2Advertisements, other.Elsewhere, other.Problems)
	}
}

func TestRawLegacyFile(t *testing.T) {
	res, out := translateFile(t, "raw-legacy.yaml")
	// MetalLB 0.12's bare config file translates as its ConfigMap does.
	if len(res.Pools) != 2 || len(res.Peers) != 1 || len(res.L2Advertisements) != 1 || len(res.BGPAdvertisements) != 1 ||
		len(res.BFDProfiles) != 1 || len(res.Communities) != 1 {
		t.Errorf("translated %d pools, %d peers, %d+%d advertisements, %d BFD profiles, %d communities", len(res.Pools), len(res.Peers),
			len(res.L2Advertisements), len(res.BGPAdvertisements), len(res.BFDProfiles), len(res.Communities))
	}
	if res.Found == 0 || len(res.Problems) != 0 {
		t.Errorf("found %d, problems:\n%s", res.Found, problems(res.Problems))
	}
	mustValidate(t, out, "BGPAdvertisement herald-system/routed: spec.localPref: is only sent to iBGP peers")
	wantLines(t, "output", out, "password: s3cret", "bfdProfile: fast", "holdTime: 2m0s", "- 198.51.100.0/24", "- tenant")

	// A bare file that is no MetalLB configuration is skipped and named.
	tr := New(Options{})
	if err := tr.Load("notes.yaml", strings.NewReader("title: my notes\nitems: [a, b]\n")); err != nil {
		t.Fatal(err)
	}
	r := tr.Result()
	if r.Found != 0 || len(r.Skipped) != 1 || !strings.Contains(r.Skipped[0].Reason, "nor MetalLB's legacy configuration") {
		t.Errorf("found %d, skipped %+v", r.Found, r.Skipped)
	}
	// One that is, but with a mistake, is reported by field, in words.
	tr = New(Options{})
	if err := tr.Load("config", strings.NewReader("peers:\n- my-asn: sixty\n  peer-asn: 1\n  peer-address: 192.0.2.1\n")); err != nil {
		t.Fatal(err)
	}
	got := problems(tr.Result().Problems)
	wantLines(t, "report", got, "MetalLB configuration file config:1: cannot be read as MetalLB's legacy configuration: peers.my-asn is a string, not a whole number from 0 to 4294967295")
	if strings.Contains(got, "Go struct") || strings.Contains(got, "uint32") {
		t.Errorf("Go's type names in the report: %s", got)
	}
}

func TestHostBitsMasked(t *testing.T) {
	res, out := translateFile(t, "host-bits.yaml")
	mustValidate(t, out)
	wantLines(t, "output", out, "- 198.51.100.0/24", "- 2001:db8:0:1::/64", "- 203.0.113.0/28", "- 192.0.2.10-192.0.2.20")
	wantLines(t, "notes", notesText(res.Notes),
		"IPAddressPool metallb-system/docs-style: spec.addresses[0]: 198.51.100.10/24 has host bits set; MetalLB uses the network 198.51.100.0/24",
		"spec.addresses[1]: 2001:db8:0:1::5/64 has host bits set; MetalLB uses the network 2001:db8:0:1::/64")
	if len(res.Problems) != 0 || len(res.Notes) != 2 {
		t.Errorf("problems:\n%snotes:\n%s", problems(res.Problems), notesText(res.Notes))
	}
}

func TestOwnershipLabelsLeftBehind(t *testing.T) {
	res, out := translateFile(t, "labels.yaml")
	mustValidate(t, out)
	for _, gone := range []string{"managed-by", "helm.sh/chart", "argocd.argoproj.io", "fluxcd.io", "metallb-config"} {
		if strings.Contains(out, gone) {
			t.Errorf("output still has %s:\n%s", gone, out)
		}
	}
	// zone selects pools: kept. app.kubernetes.io/instance also selects
	// pool routed (BGPAdvertisement routed): kept there, with a warning,
	// since without it the advertisement would announce nothing; lan's
	// value is not selected, so it goes.
	wantLines(t, "output", out, "zone: lan", "app.kubernetes.io/instance: routed-pools")
	wantLines(t, "report", problems(res.Problems),
		"IPAddressPool metallb-system/routed: metadata.labels: app.kubernetes.io/instance kept, though it marks the object as owned by the tool that deployed MetalLB's configuration: BGPAdvertisement routed selects the pool by it")
	wantLines(t, "notes", notesText(res.Notes),
		"IPAddressPool metallb-system/lan: metadata.labels: app.kubernetes.io/instance, app.kubernetes.io/managed-by, argocd.argoproj.io/instance, helm.sh/chart, kustomize.toolkit.fluxcd.io/name, kustomize.toolkit.fluxcd.io/namespace left behind",
		"L2Advertisement metallb-system/lan: metadata.labels: app.kubernetes.io/managed-by left behind: it marks")
}

func TestUntranslatedMetalLBConfiguration(t *testing.T) {
	res, _ := translateFile(t, "frr.yaml")
	got := problems(res.Problems)
	wantLines(t, "report", got,
		"FRRConfiguration metallb-system/extra-neighbour: not translated: raw BGP configuration for frr-k8s",
		"ConfigMap metallb-system/bgpextras: not translated: raw FRR configuration",
		"ConfigMap metallb-system/metallb-excludel2: data.excludel2.yaml: not translated, and it excludes ^eth2$ beyond what MetalLB installs")
	if len(res.Skipped) != 0 {
		t.Errorf("MetalLB configuration skipped as if it were not: %+v", res.Skipped)
	}
	if len(res.Pools) != 1 || len(res.L2Advertisements) != 1 {
		t.Errorf("the pool and its advertisement next to them were not translated")
	}
}

func TestNothingRecognised(t *testing.T) {
	for _, tc := range []struct{ name, file, doc, why string }{
		{"empty file", "", "", "no MetalLB configuration found in input"},
		{"comments only", "", "# MetalLB\n---\n", "no MetalLB configuration found in input"},
		{"install manifest", "install-manifest.yaml", "", "no MetalLB configuration found in install-manifest.yaml"},
		{"old annotation group", "old-group.yaml", "", "apiVersion: metallb.universe.tf/v1beta1 is not an API group MetalLB serves"},
		{"another namespace", "", "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: p, namespace: metal}\nspec: {addresses: [192.0.2.0/30]}\n",
			"1 MetalLB object is in another namespace than MetalLB's (give --metallb-namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var res Result
			name := "input"
			if tc.file != "" {
				res, _ = translateFile(t, tc.file)
				name = tc.file
			} else {
				tr := New(Options{})
				if err := tr.Load(name, strings.NewReader(tc.doc)); err != nil {
					t.Fatal(err)
				}
				res = tr.Result()
			}
			if res.Objects() != 0 {
				t.Errorf("%d objects translated", res.Objects())
			}
			var report strings.Builder
			if err := Report(&report, res, name); err != nil {
				t.Fatal(err)
			}
			wantLines(t, "report", report.String(), tc.why, "nothing written")
		})
	}
}
