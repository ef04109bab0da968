// Package upstream builds the e2e.test binary `make conformance` runs:
// Kubernetes' own e2e framework and its sig-network tests, from the
// pinned k8s.io/kubernetes module, with nothing of herald's in them. The
// framework, its flags, reporting and suite setup are upstream's
// (test/e2e.RunE2ETests); of the test sources only sig-network's are
// imported on purpose (the framework's own imports bring a few more).
//
// The suite sits behind the build tag e2eupstream, so `go test ./...` of
// the lab module neither builds nor runs it; k8sbin.EnsureE2ETest builds
// it with the tag, cached like the control plane.
package upstream
