package e2e

import (
	"testing"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/walkthrough"
)

// TestSourceIPWalkthrough runs the "Using Source IP" tutorial in the lab,
// the acceptance story: no step may fail, and each step that herald cannot
// do yet must say which missing component it waits for.
func TestSourceIPWalkthrough(t *testing.T) {
	walkthroughIn(t, harness.Start(t), "iptables")
}

// TestSourceIPWalkthroughNFTables is the walkthrough with herald's proxy
// in the nftables mode (the speakers run it in-process with
// --proxy-mode=nftables for the test).
func TestSourceIPWalkthroughNFTables(t *testing.T) {
	h := harness.Start(t)
	l2{h}.speakerArgs([]string{"--proxy-mode=nftables"})
	walkthroughIn(t, h, "nftables")
}

func walkthroughIn(t *testing.T, lab *harness.T, mode string) {
	env := lab.Lab.WalkthroughEnv(lab.Layout, t.Output())
	env.Kubectl, env.ProxyMode = lab.K, mode
	results := walkthrough.Run(lab.Ctx, env)
	pass, fail, notYet := walkthrough.Summary(results)
	for _, r := range results {
		t.Logf("%-8s %-22s %s", r.Verdict, r.Step, r.Detail)
		if r.Verdict == walkthrough.Fail {
			t.Errorf("step %q failed: %s", r.Step, r.Detail)
		}
	}
	t.Logf("walkthrough (%s): %d passed, %d failed, %d not yet possible", mode, pass, fail, notYet)
	if pass < 2 {
		t.Errorf("the app and cleanup steps must pass at least")
	}
}
