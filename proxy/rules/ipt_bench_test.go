package rules_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/herald-lb/herald/proxy/rules"
)

// TestBenchIPTRestore measures a full sync's iptables-restore, in one
// input and in NATChunks, with iptables-nft and iptables-legacy, in a
// scratch network namespace: N ClusterIP Services x 10 endpoints, the
// first 100 with NodePorts. It prints BENCH lines and asserts no times.
// The one-input nft restore at 10,000 Services takes minutes, so it runs
// only with HERALD_BENCH_IPT_ONESHOT=1. HERALD_BENCH_CHUNKS (e.g.
// "2000,5000,11000") compares chunk sizes; HERALD_BENCH_SIZES overrides
// N ("1000,10000"), HERALD_BENCH_TOOLS the restore tools.
func TestBenchIPTRestore(t *testing.T) {
	if os.Getenv("HERALD_BENCH") == "" {
		t.Skip("set HERALD_BENCH=1 (root) to run")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	sizes := envInts(t, "HERALD_BENCH_SIZES", []int{1000, 10000})
	chunkSizes := envInts(t, "HERALD_BENCH_CHUNKS", []int{rules.DefaultChunkChains})
	oneShotNFT10k := os.Getenv("HERALD_BENCH_IPT_ONESHOT") != ""
	tools := []string{"iptables-nft-restore", "iptables-legacy-restore"}
	if v := os.Getenv("HERALD_BENCH_TOOLS"); v != "" {
		tools = strings.Split(v, ",")
	}
	t.Logf("reproduce: HERALD_BENCH=1 go test -count=1 -run '^TestBenchIPTRestore$' -v -timeout 60m ./proxy/rules/")
	for _, n := range sizes {
		svcs, eps := iptBenchState(n, 10)
		node := lab4.node()
		t0 := time.Now()
		one := rules.RenderWith(rules.IPv4, svcs, eps, node, rules.Options{ChunkChains: -1})
		tOne := time.Since(t0)
		fmt.Printf("BENCH iptables-render services=%d endpoints=10 one-input render=%v bytes=%d natChains=%d natRules=%d\n",
			n, tOne.Round(time.Millisecond), len(one.Bytes()), one.Stats.NATChains, one.Stats.NATRules)
		for _, tool := range tools {
			if _, err := exec.LookPath(tool); err != nil {
				t.Logf("%s: not installed, skipped", tool)
				continue
			}
			if tool == "iptables-nft-restore" && n >= 10000 && !oneShotNFT10k {
				fmt.Printf("BENCH iptables-restore tool=%s services=%d one-input: skipped (minutes; HERALD_BENCH_IPT_ONESHOT=1 runs it)\n", tool, n)
			} else {
				ns := iptScratchNS(t)
				d := iptRestore(t, ns, tool, one.Bytes())
				fmt.Printf("BENCH iptables-restore tool=%s services=%d one-input restore=%v\n", tool, n, d.Round(time.Millisecond))
			}
			for _, cs := range chunkSizes {
				t0 := time.Now()
				rs := rules.RenderWith(rules.IPv4, svcs, eps, node, rules.Options{ChunkChains: cs})
				tRender := time.Since(t0)
				ns := iptScratchNS(t)
				first, per := iptRestoreAll(t, ns, tool, rs.Inputs())
				// A periodic full resync writes the same chunks over a full table.
				again, _ := iptRestoreAll(t, ns, tool, rs.Inputs())
				fmt.Printf("BENCH iptables-restore tool=%s services=%d chunkChains=%d chunks=%d render=%v first-sync=%v resync=%v slowest-chunk=%v\n",
					tool, n, cs, len(rs.Inputs()), tRender.Round(time.Millisecond), first.Round(time.Millisecond), again.Round(time.Millisecond), slowest(per).Round(time.Millisecond))
				if got := iptRuleCount(t, ns, strings.Replace(tool, "-restore", "-save", 1)); got != one.Stats.NATRules {
					t.Errorf("%s chunked: %d nat rules in the kernel, want %d", tool, got, one.Stats.NATRules)
				}
			}
		}
	}
}

// iptBenchState is n ClusterIP Services with m endpoints each; the first
// 100 have NodePorts.
func iptBenchState(n, m int) ([]rules.Service, map[rules.ServicePortName][]rules.Endpoint) {
	svcs, eps := benchState(n, m)
	for i := range svcs {
		s := &svcs[i]
		s.NodePort, s.HealthCheckNodePort, s.LoadBalancerIngress = 0, 0, nil
		s.ExternalTrafficPolicy = rules.PolicyCluster
		if i < 100 {
			s.NodePort = 30000 + i
		}
	}
	return svcs, eps
}

func envInts(t *testing.T, name string, def []int) []int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, n)
	}
	return out
}

var iptNSCount int

// iptScratchNS makes a network namespace, deleted when the test ends.
func iptScratchNS(t *testing.T) string {
	t.Helper()
	iptNSCount++
	name := fmt.Sprintf("hlipt-%d-%d", os.Getpid()%100000, iptNSCount)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v\n%s", name, err, out)
		}
	})
	return name
}

// iptRestore runs `tool --noflush` in ns with data as its input, as the
// proxy's runner does, and returns how long it took.
func iptRestore(t *testing.T, ns, tool string, data []byte) time.Duration {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", ns, tool, "-w", "5", "--noflush", "--counters")
	cmd.Stdin = bytes.NewReader(data)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		t.Fatalf("%s in %s: %v\n%s", tool, ns, err, out.String())
	}
	return d
}

func iptRestoreAll(t *testing.T, ns, tool string, inputs [][]byte) (total time.Duration, per []time.Duration) {
	for _, in := range inputs {
		d := iptRestore(t, ns, tool, in)
		total += d
		per = append(per, d)
	}
	return total, per
}

func slowest(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// iptRuleCount counts the "-A" lines of the nat table in ns.
func iptRuleCount(t *testing.T, ns, save string) int {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, save, "-t", "nat").Output()
	if err != nil {
		t.Fatalf("%s: %v", save, err)
	}
	return bytes.Count(out, []byte("\n-A "))
}
