package e2e

import (
	"testing"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/walkthrough"
)

// TestSourceIPWalkthrough runs the "Using Source IP" tutorial in the lab,
// the acceptance story: herald is installed, so every one of its steps
// (the app, the proxy mode on every node, ClusterIP, NodePort and
// LoadBalancer under both policies, the cleanup) must pass; a step that
// waits for a missing component (NOT YET) fails the test too.
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
		if r.Verdict != walkthrough.Pass {
			t.Errorf("step %q: %s: %s", r.Step, r.Verdict, r.Detail)
		}
	}
	t.Logf("walkthrough (%s): %d passed, %d failed, %d not yet possible", mode, pass, fail, notYet)
	if pass != walkthroughSteps || len(results) != walkthroughSteps {
		t.Errorf("walkthrough (%s): %d of %d steps passed, want all %d", mode, pass, len(results), walkthroughSteps)
	}
}

// walkthroughSteps is the tutorial's steps as the lab runs them: the app,
// the proxy mode, ClusterIP, NodePort and LoadBalancer under Cluster and
// Local, and the cleanup.
const walkthroughSteps = 8
