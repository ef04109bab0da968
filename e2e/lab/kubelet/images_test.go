package kubelet

import "testing"

func TestImageKind(t *testing.T) {
	for image, want := range map[string]ImageKind{
		"ghcr.io/herald-lb/herald:dev":            HeraldImage,
		"ghcr.io/herald-lb/herald:v0.2.0":         HeraldImage,
		"ghcr.io/herald-lb/herald@sha256:0123abc": HeraldImage,
		"herald:dev":                         HeraldImage,
		"registry.k8s.io/echoserver:1.4":     EchoServerImage,
		"ghcr.io/herald-lb/herald":           "",
		"ghcr.io/herald-lb/herald:":          "",
		"ghcr.io/herald-lb/heraldx:dev":      "",
		"ghcr.io/herald-lb/herald/other:dev": "",
		"herald:v2":                          "",
	} {
		got, ok := imageKind(image)
		if got != want || ok != (want != "") {
			t.Errorf("%s: %q %v, want %q", image, got, ok, want)
		}
	}
}
