//go:build e2eupstream

package upstream

import (
	"flag"
	"os"
	"testing"

	"k8s.io/kubernetes/test/e2e"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	e2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"
	testfixtures "k8s.io/kubernetes/test/fixtures"

	// Frozen feature and label constants, as upstream's suite has them.
	_ "k8s.io/kubernetes/test/e2e/feature"

	// The tests: sig-network's.
	_ "k8s.io/kubernetes/test/e2e/network"

	// The framework's optional parts, wired in as upstream's suite does.
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/utils/format"
)

func TestMain(m *testing.M) {
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	if flag.NArg() > 0 {
		os.Stderr.WriteString("e2e.test: unexpected arguments\n")
		os.Exit(2)
	}
	testfiles.AddFileSource(e2etestingmanifests.GetE2ETestingManifestsFS())
	testfiles.AddFileSource(testfixtures.GetTestFixturesFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

// TestE2E runs the selected specs through upstream's runner (ginkgo with
// the framework's configuration, JUnit into --report-dir).
func TestE2E(t *testing.T) {
	e2e.RunE2ETests(t)
}
