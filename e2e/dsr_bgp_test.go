package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// TestDSRBGP: a BGP Service with externalTrafficPolicy Cluster, its
// echo pods on the last node only, routed by FRR over all 3 nodes (ECMP
// hashing on ports, so the remote client's connections spread over the
// nodes). dsrConns keep-alive connections from the remote client behind
// the router; then one node leaves the ECMP set, gracefully (herald
// drain: GRACEFUL_SHUTDOWN, then the withdrawal) and, in a second trial,
// hard (another node's speaker SIGKILLed and its link down: the router
// holds its path until the 9 s hold time ends). The router moves the
// flows of the node gone to the others. With herald.io/forwarding: dsr
// at least 99 % of the connections survive and none is reset, and the
// pods see the remote client's own address; the same trials without the
// annotation run in TestBenchDSRBGP (make bench).
func TestDSRBGP(t *testing.T) { runDSRBGP(t, []string{"dsr"}) }

// TestBenchDSRBGP is TestDSRBGP with SNAT's trials beside DSR's.
func TestBenchDSRBGP(t *testing.T) {
	harness.Bench(t)
	runDSRBGP(t, []string{"snat", "dsr"})
}

func runDSRBGP(t *testing.T, modes []string) {
	h := harness.Start(t)
	b := newBGPLab(h)
	const name = "dsr-bgp"
	b.readySpeakers(2 * time.Minute)
	nodes := b.nodeNames()
	if len(nodes) < 3 {
		t.Fatalf("the lab has %d nodes; the test needs 3", len(nodes))
	}
	endNode, graceful, hard := nodes[2], nodes[0], nodes[1]
	l2{h}.speakerArgs([]string{"--proxy-mode=nftables", "--dsr"})
	ecmpByPorts(h)
	drained := false
	b.cleanupBGPService(name, graceful, &drained)
	h.Apply(bgpPoolYAML(name, "203.0.113.208/29") + bgpAdvertisementYAML(name, name) + bgpPeerYAML(name, generalPeerSelector) +
		echoDeploymentYAML(name, endNode, 2) + lbServiceYAML(name, name, name, "Cluster", ""))
	h.ReadyPods("app="+name, 2, 2*time.Minute)
	ip := ctl{h}.waitAnyIP("default", name)

	var results []dsrResult
	for _, mode := range modes {
		h.Kubectl("annotate", "--overwrite", "service", name, "herald.io/forwarding="+mode)
		for _, kind := range []string{"graceful", "hard"} {
			r := dsrBGPTrial(t, b, ip, mode, kind, map[string]string{"graceful": graceful, "hard": hard}[kind], nodes, &drained)
			r.mode = mode + "/" + kind
			results = append(results, r)
		}
	}
	reportDSR(t, fmt.Sprintf("DSR over BGP ECMP (3 nodes, one leaves, %d keep-alive connections from the remote client %s to pods on %s, a request each every %s)", dsrConns, topology.RemoteV4IP, endNode, dsrEvery),
		"go test -count=1 -timeout 30m -run '^"+t.Name()+"$' -v .", results)
}

// dsrBGPTrial: every node in the ECMP set, the connections open, then
// victim leaves (kind graceful or hard) and comes back.
func dsrBGPTrial(t *testing.T, b bgpLab, ip, mode, kind, victim string, nodes []string, drained *bool) dsrResult {
	h := b.T
	b.speakersInCluster(3 * time.Minute)
	b.waitSessions(2*time.Minute, nodes...)
	b.waitFRRNextHops(ip, nodes, time.Minute)
	// The rules of the annotation reach every node within a sync.
	time.Sleep(3 * time.Second)
	load := openDSRLoad(t, h.Layout.Remote, ip, mode)
	defer load.close()
	others := slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return n == victim })
	var res dsrResult
	switch kind {
	case "graceful":
		res = load.through(func() {
			l2{h}.heraldDrain(victim, false)
			*drained = true
		}, 10*time.Second, 20*time.Second, 15*time.Second)
		b.waitFRRNextHops(ip, others, 10*time.Second)
		l2{h}.heraldDrain(victim, true)
		*drained = false
	case "hard":
		// The router holds the path for the 9 s hold time, and TCP's
		// retransmissions back off meanwhile: a request may take 30 s.
		var restore func()
		res = load.through(func() { restore = b.loseHard(t, victim) }, 30*time.Second, 35*time.Second, 25*time.Second)
		restore()
	}
	t.Logf("%s/%s: %s left the ECMP set of %s: %d of %d connections answered afterwards; first errors: %s",
		mode, kind, victim, ip, res.survived, res.conns, firstErrors(load.conns, 3))
	return res
}
