package crd

import (
	"context"
	"os"
	"testing"
)

// TestValidSamplesPass proves that every herald.io object of the sample
// configuration is accepted by the generated schemas, defaults included.
func TestValidSamplesPass(t *testing.T) {
	data, err := os.ReadFile("../samples/valid.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := ReadObjects(data)
	if err != nil {
		t.Fatal(err)
	}
	v := newValidator(t)
	checked := 0
	for _, obj := range objs {
		if !v.Handles(obj) {
			continue // the Secret and other kinds the API server validates itself
		}
		checked++
		meta, _ := obj["metadata"].(map[string]any)
		t.Run(obj["kind"].(string)+"/"+meta["name"].(string), func(t *testing.T) {
			if errs := v.Validate(context.Background(), obj); len(errs) > 0 {
				t.Errorf("refused:%s", render(errs))
			}
		})
	}
	if checked == 0 {
		t.Fatal("no herald.io objects in valid.yaml")
	}
}
