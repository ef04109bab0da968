package e2e

import (
	"os"
	"testing"

	"github.com/herald-lb/herald/e2e/harness"
)

// TestMain shares one 3-node lab among the package's tests; it comes up
// with the first test that asks for it and goes down after the last,
// with a check that the machine is left as it was.
func TestMain(m *testing.M) {
	os.Exit(harness.Main(m, harness.Options{Prefix: "hle", Nodes: 3}))
}
