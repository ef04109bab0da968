package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMigrateCommand(t *testing.T) {
	dir := t.TempDir()
	clean := filepath.Join(dir, "clean.yaml")
	if err := os.WriteFile(clean, []byte(`apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: lan, namespace: metallb-system}
spec: {addresses: [192.0.2.100-192.0.2.110]}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: lan, namespace: metallb-system}
spec: {ipAddressPools: [lan]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, report bytes.Buffer
	if code := migrateMain(context.Background(), migrateOptions{files: files{clean}, namespace: "herald-system"}, &out, &report); code != 0 {
		t.Fatalf("a configuration that translates whole: exit %d\n%s", code, report.String())
	}
	if !strings.Contains(out.String(), "kind: L2Advertisement") || !strings.Contains(report.String(), "2 objects checked: no problems") {
		t.Errorf("output:\n%s\nreport:\n%s", out.String(), report.String())
	}

	// One that does not translate whole exits 1, and says what and where.
	out.Reset()
	report.Reset()
	code := migrateMain(context.Background(), migrateOptions{files: files{"../../../config/migrate/testdata/metallb.yaml"}, namespace: "herald-system"}, &out, &report)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	for _, want := range []string{
		"BGPPeer metallb-system/tor1: spec.vrf: not translated",
		"8 herald objects written; above, 6 warnings (a setting left out or changed) and 1 error (an object or alias left out): read them before you apply the output",
		"herald validate on the output:\n  BGPAdvertisement herald-system/routed: spec.localPref",
	} {
		if !strings.Contains(report.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, report.String())
		}
	}
}

// TestMigrateNothingRecognised: an input without MetalLB configuration
// (an empty file, MetalLB's install manifest, objects of another
// namespace) exits 1 and writes nothing, so that nothing is applied and
// mistaken for a translation.
func TestMigrateNothingRecognised(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.yaml")
	elsewhere := filepath.Join(dir, "elsewhere.yaml")
	for path, text := range map[string]string{
		empty:     "",
		elsewhere: "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: lan, namespace: metallb}\nspec: {addresses: [192.0.2.0/30]}\n",
	} {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name     string
		o        migrateOptions
		want     string
		wantCode int
	}{
		{"empty file", migrateOptions{files: files{empty}}, "no MetalLB configuration found in " + empty + " (namespace metallb-system): nothing written", 1},
		{"install manifest", migrateOptions{files: files{"../../../config/migrate/testdata/install-manifest.yaml"}}, "no MetalLB configuration found", 1},
		{"another namespace", migrateOptions{files: files{elsewhere}}, "1 MetalLB object is in another namespace than MetalLB's (give --metallb-namespace", 1},
		{"that namespace named", migrateOptions{files: files{elsewhere}, metallbNamespace: "metallb"}, "1 herald object written; no warnings or errors", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.o.metallbNamespace == "" {
				tc.o.metallbNamespace = "metallb-system"
			}
			tc.o.namespace = "herald-system"
			var out, report bytes.Buffer
			code := migrateMain(context.Background(), tc.o, &out, &report)
			if code != tc.wantCode || !strings.Contains(report.String(), tc.want) {
				t.Errorf("exit %d, want %d; report lacks %q:\n%s", code, tc.wantCode, tc.want, report.String())
			}
			if strings.Contains(tc.want, "nothing written") && out.Len() != 0 {
				t.Errorf("wrote %q", out.String())
			}
		})
	}
}
