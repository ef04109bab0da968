package crd

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// TestDefinitionsPassAPIServerValidation runs every generated CRD through the
// API server's create-time validation: structural schema, formats, defaults,
// and compilation and cost estimation of each CEL rule. A CRD failing here
// would be refused by kubectl apply.
func TestDefinitionsPassAPIServerValidation(t *testing.T) {
	files, err := Files()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no CRD manifests embedded from bases/")
	}
	for name, data := range files {
		t.Run(name, func(t *testing.T) {
			crd, err := ParseDefinition(data)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if crd.Spec.Group != "herald.io" {
				t.Errorf("group %q, want herald.io", crd.Spec.Group)
			}
			if want := crd.Spec.Group + "_" + crd.Spec.Names.Plural + ".yaml"; name != want {
				t.Errorf("file name %q, want %q", name, want)
			}
			errs, err := ValidateDefinition(context.Background(), crd)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range errs {
				t.Errorf("%s", e)
			}
		})
	}
}

// TestEveryKindHasADefinition guards against a type losing its root marker
// and silently dropping out of the install manifests.
func TestEveryKindHasADefinition(t *testing.T) {
	crds, err := Definitions()
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, crd := range crds {
		kinds = append(kinds, crd.Spec.Names.Kind)
		if crd.Spec.Scope != apiextensionsv1.NamespaceScoped {
			t.Errorf("%s is %s, want Namespaced", crd.Name, crd.Spec.Scope)
		}
	}
	slices.Sort(kinds)
	want := []string{"BFDProfile", "BGPAdvertisement", "BGPPeer", "Community", "IPAddressPool", "L2Advertisement", "NodeAnnouncement", "ServiceAnnouncement"}
	if !slices.Equal(kinds, want) {
		t.Errorf("kinds %v, want %v", kinds, want)
	}

	// The embedded set must be the directory's: a manifest added by hand
	// would otherwise escape these tests.
	entries, err := filepath.Glob(filepath.Join("bases", "*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(crds) {
		t.Errorf("bases/ holds %d files, %d are CRD manifests: %v", len(entries), len(crds), entries)
	}
}
