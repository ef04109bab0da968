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
	code := migrateMain(context.Background(), migrateOptions{files: files{"../../config/migrate/testdata/metallb.yaml"}, namespace: "herald-system"}, &out, &report)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	for _, want := range []string{
		"BGPPeer metallb-system/tor1: spec.vrf: not translated",
		"8 herald objects written; 7 things not translated (1 MetalLB objects left out)",
		"herald validate on the output:\n  BGPAdvertisement herald-system/routed: spec.localPref",
	} {
		if !strings.Contains(report.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, report.String())
		}
	}
}
