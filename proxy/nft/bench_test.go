package nft_test

import (
	"bytes"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
		full := nft.Diff(nil, first.Table, nft.Recreate)
		id := svcs[n/2].ID()
		changed := map[rules.ServiceKey]bool{id.Key(): true}
		// Two one-endpoint changes: the first endpoint moves to another
		// pod (map elements only), then one endpoint goes (the Service
		// chain's rule changes too, and the kernel validates the table).
		moved := maps.Clone(eps)
		moved[id] = slices.Clone(eps[id])
		moved[id][0].IP = netip.MustParseAddr("10.250.0.1")
		fewer := maps.Clone(moved)
		fewer[id] = moved[id][1:]
		type change struct {
			what    string
			rs      rules.NFTRuleset
			ch      nft.Changes
			compute time.Duration
		}
		var changes []change
		prev := first
		for _, c := range []struct {
			what string
			eps  map[rules.ServicePortName][]rules.Endpoint
		}{{"moved", moved}, {"removed", fewer}} {
			start := time.Now()
			rs := rules.RenderNFTWith(rules.IPv4, svcs, c.eps, node(), rules.NFTOptions{Prev: &prev, Changed: changed})
			if rs.Delta == nil {
				t.Fatalf("%s: the render did not patch the previous one", c.what)
			}
			changes = append(changes, change{c.what, rs, *rs.Delta, time.Since(start)})
			prev = rs
		}

		// netlink
		nsA := scratchNetNS(t)
		k := &nft.Kernel{NetNS: nsA}
		start := time.Now()
		if err := k.Apply(ipfamily.IPv4, first.Table, full); err != nil {
			t.Fatalf("netlink, first sync of %d: %v", n, err)
		}
		nlFull := time.Since(start)
		nl := make([]time.Duration, len(changes))
		for i, c := range changes {
			start = time.Now()
			if err := k.Apply(ipfamily.IPv4, c.rs.Table, c.ch); err != nil {
				t.Fatalf("netlink, %s endpoint: %v", c.what, err)
			}
			nl[i] = time.Since(start)
		}
		sameState(t, "netlink", nsA, prev.Table)
		k.Close()

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
		cli := make([]time.Duration, len(changes))
		for i, c := range changes {
			cli[i] = run(c.what, nft.ChangesText(c.rs.Table, c.ch))
		}
		sameState(t, "nft -f", nsB, prev.Table)

		t.Logf("BENCH nft apply N=%d ClusterIP Services (100 NodePorts) x 10 endpoints: first sync (%d chains, %d rules): netlink %s, nft -f %s (%.1fx)",
			n, len(full.Rewrite), full.Rules(), nlFull.Round(time.Millisecond), cliFull.Round(time.Millisecond), float64(cliFull)/float64(nlFull))
		for i, c := range changes {
			added, deleted := c.ch.Elements()
			t.Logf("BENCH nft apply N=%d one endpoint %s (%d rules, +%d/-%d elements): render+diff %s, netlink %s (total %s), nft -f %s",
				n, c.what, c.ch.Rules(), added, deleted, c.compute.Round(time.Microsecond), nl[i].Round(time.Microsecond),
				(c.compute + nl[i]).Round(time.Microsecond), cli[i].Round(time.Microsecond))
		}
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
