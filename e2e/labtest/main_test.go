// Package labtest tests the lab itself, apart from herald's tests: the
// control plane, the lab kubelet (pods, probes, init containers, the
// kubelet API that kubectl exec and logs use), the router, and the
// images of Kubernetes' upstream e2e suite. A failure here is the lab's,
// not herald's.
package labtest

import (
	"os"
	"testing"

	"github.com/herald-lb/herald/e2e/harness"
)

// TestMain shares one 3-node lab among the package's tests, as the e2e
// package does with its own.
func TestMain(m *testing.M) {
	os.Exit(harness.Main(m, harness.Options{Prefix: "hllt", Nodes: 3}))
}
