package nft_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/herald-lb/herald/internal/ipfamily"
	"github.com/herald-lb/herald/proxy/nft"
	"github.com/herald-lb/herald/proxy/rules"
)

// TestBenchNFTApply measures the two ways to program a transaction: the
// proxy's netlink batch (nft.Kernel) and the same transaction written as
// `nft -f` input (nft.ChangesText), as kube-proxy's nftables mode hands
// it to the nft binary. For N Services x 10 endpoints it times the first
// sync (the table created whole) and a one-endpoint change, each in a
// scratch namespace of its own, and checks that both ways leave the same
// chains and elements. Run by make bench (root, nft installed).
func TestBenchNFTApply(t *testing.T) {
	if os.Getenv("HERALD_BENCH") == "" {
		t.Skip("a benchmark: HERALD_BENCH=1 (make bench)")
	}
	nftBin, err := exec.LookPath("nft")
	if err != nil {
		t.Skip("needs the nft binary (Debian's nftables)")
	}
	for _, n := range []int{1000, 10000} {
		svcs, eps := plainServices(n, 10)
		first := rules.RenderNFT(rules.IPv4, svcs, eps, node())
		id := svcs[n/2].ID()
		eps2 := map[rules.ServicePortName][]rules.Endpoint{}
		for k, v := range eps {
			eps2[k] = v
		}
		eps2[id] = eps2[id][1:]
		changed := map[rules.ServiceKey]bool{id.Key(): true}
		renderStart := time.Now()
		second := rules.RenderNFTWith(rules.IPv4, svcs, eps2, node(), rules.NFTOptions{Prev: &first, Changed: changed})
		touched := map[string]bool{}
		for _, c := range second.ServiceChains[id] {
			touched[c] = true
		}
		partial := nft.DiffWith(first.Table, second.Table, nft.Partial, func(c string) bool {
			return rules.IsNFTServiceChain(c) && !touched[c]
		})
		compute := time.Since(renderStart)
		full := nft.Diff(nil, first.Table, nft.Recreate)

		// netlink
		nsA := scratchNetNS(t)
		k := &nft.Kernel{NetNS: nsA}
		start := time.Now()
		if err := k.Apply(ipfamily.IPv4, first.Table, full); err != nil {
			t.Fatalf("netlink, first sync of %d: %v", n, err)
		}
		nlFull := time.Since(start)
		start = time.Now()
		if err := k.Apply(ipfamily.IPv4, second.Table, partial); err != nil {
			t.Fatalf("netlink, one endpoint: %v", err)
		}
		nlPartial := time.Since(start)
		sameState(t, "netlink", nsA, second.Table)

		// nft -f, in another namespace
		nsB := scratchNetNS(t)
		dir := t.TempDir()
		run := func(what, script string) time.Duration {
			t.Helper()
			path := filepath.Join(dir, what+".nft")
			if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(nftBin, "-f", path)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			start := time.Now()
			err := runInNetNS(nsB, cmd)
			d := time.Since(start)
			if err != nil {
				t.Fatalf("nft -f %s: %v\n%s", what, err, firstLines(out.String(), 20))
			}
			return d
		}
		cliFull := run("first", nft.ChangesText(first.Table, full))
		cliPartial := run("partial", nft.ChangesText(second.Table, partial))
		sameState(t, "nft -f", nsB, second.Table)

		added, deleted := partial.Elements()
		t.Logf("BENCH nft apply N=%d ClusterIP Services (100 NodePorts) x 10 endpoints: first sync (%d chains, %d rules): netlink %s, nft -f %s (%.1fx); "+
			"one endpoint (%d rules, +%d/-%d elements, render+diff %s): netlink %s, nft -f %s (%.1fx)",
			n, len(full.Rewrite), full.Rules(), nlFull.Round(time.Millisecond), cliFull.Round(time.Millisecond), float64(cliFull)/float64(nlFull),
			partial.Rules(), added, deleted, compute.Round(time.Microsecond), nlPartial.Round(time.Microsecond), cliPartial.Round(time.Microsecond), float64(cliPartial)/float64(nlPartial))
	}
	t.Logf("BENCH reproduce: HERALD_BENCH=1 go test -count=1 -run '^TestBenchNFTApply$' -v ./proxy/nft/   # root, nft %s", nftVersion(nftBin))
}

// plainServices is the proxy benchmark's mix (e2e's
// TestBenchProxyVsKubeProxy): ClusterIP Services, the first 100 with a
// NodePort, eps endpoints each, no affinity, no load balancer IP.
func plainServices(n, eps int) ([]rules.Service, map[rules.ServicePortName][]rules.Endpoint) {
	svcs, m := services(n, eps)
	for i := range svcs {
		svcs[i].SessionAffinity, svcs[i].LoadBalancerIngress = rules.AffinityNone, nil
		if i >= 100 {
			svcs[i].NodePort = 0
		}
	}
	return svcs, m
}

// runInNetNS runs cmd with `ip netns exec`-like semantics: nsenter on the
// namespace file the scratch namespace has under /proc/self/fd.
func runInNetNS(fd int, cmd *exec.Cmd) error {
	args := append([]string{"--net=/proc/" + fmt.Sprint(os.Getpid()) + "/fd/" + fmt.Sprint(fd), "--"}, cmd.Args...)
	c := exec.Command("nsenter", args...)
	c.Stdout, c.Stderr = cmd.Stdout, cmd.Stderr
	return c.Run()
}

func nftVersion(bin string) string {
	out, _ := exec.Command(bin, "--version").Output()
	return strings.TrimSpace(string(out))
}

func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[:min(n, len(lines))], "\n")
}
