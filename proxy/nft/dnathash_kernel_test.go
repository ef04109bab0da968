package nft_test

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/herald-lb/herald/internal/ipfamily"
	"github.com/herald-lb/herald/proxy/maglev"
	"github.com/herald-lb/herald/proxy/nft"
)

// TestKernelDNATHash programs DNATHash through herald's netlink encoding
// (root, a scratch namespace): a Maglev table's slots as an endpoints
// map, and one rule that DNATs new UDP flows to a virtual address through
// it. Every flow's conntrack entry must show the endpoint Go picks for it
// (maglev.FlowHash, Table.Lookup), in both families: the kernel, the
// encoding and the Go model agree on the consistent choice (#35).
func TestKernelDNATHash(t *testing.T) {
	in, nsFd := toolNetNS(t, "conntrack", "bash")
	// The endpoints and the virtual address on a veth pair's subnets, so
	// that the packets have a route; nothing leaves the namespace.
	in("ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1")
	in("ip", "link", "set", "v0", "up")
	in("ip", "link", "set", "v1", "up")
	in("ip", "addr", "add", "198.18.0.1/24", "dev", "v0")
	in("ip", "addr", "add", "2001:db8:18::1/64", "dev", "v0", "nodad")

	const seed, port = 0x5eed1234, 5000
	k := &nft.Kernel{NetNS: nsFd}
	for _, fam := range []struct {
		f        ipfamily.Family
		vip      string
		eps      []string
		dev, cmd string
	}{
		{ipfamily.IPv4, "198.18.0.100", []string{"198.18.0.11:8080", "198.18.0.12:8080", "198.18.0.13:8081"}, "ipv4", "198.18.0.100"},
		{ipfamily.IPv6, "2001:db8:18::100", []string{"[2001:db8:18::11]:8080", "[2001:db8:18::12]:8080", "[2001:db8:18::13]:8081"}, "ipv6", "2001:db8:18::100"},
	} {
		var eps []netip.AddrPort
		for _, e := range fam.eps {
			eps = append(eps, netip.MustParseAddrPort(e))
		}
		tb, err := maglev.New(eps)
		if err != nil {
			t.Fatal(err)
		}
		m := uint32(tb.Size())
		set := &nft.Set{Name: "eps", Key: nft.KeyType{nft.Slot}, Endpoints: true, Proto: nft.UDP}
		for slot := range m {
			set.Elements = append(set.Elements, nft.Element{Key: nft.Key{Slot: slot}, To: tb.Endpoints()[tb.Owner(int(slot))]})
		}
		vip := netip.MustParseAddr(fam.vip)
		table := &nft.Table{Family: fam.f, Sets: []*nft.Set{set}, Chains: []*nft.Chain{{
			Name: "out", Base: &nft.Base{Type: nft.TypeNAT, Hook: nft.HookOutput, Priority: nft.PriorityDstNAT},
			Rules: []nft.Rule{{Exprs: []nft.Expr{
				nft.MatchProto{Proto: nft.UDP},
				nft.MatchAddr{Field: nft.Daddr, Prefix: netip.PrefixFrom(vip, vip.BitLen())},
				nft.DNATHash{Mod: m, Seed: seed, Map: "eps"},
			}}},
		}}}
		table.Sort()
		// A zero seed would let each kernel draw its own: refused.
		zero := table.Chains[0].Rules[0].Exprs
		zero[2] = nft.DNATHash{Mod: m, Map: "eps"}
		if err := k.Apply(fam.f, table, nft.Diff(nil, table, nft.Recreate)); err == nil || !strings.Contains(err.Error(), "seed 0") {
			t.Fatalf("%s: a rule with seed 0 was applied (%v)", fam.dev, err)
		}
		zero[2] = nft.DNATHash{Mod: m, Seed: seed, Map: "eps"}
		if err := k.Apply(fam.f, table, nft.Diff(nil, table, nft.Recreate)); err != nil {
			t.Fatalf("%s: %v\n%s", fam.dev, err, table.Text())
		}
		in("bash", "-c", fmt.Sprintf(`for i in $(seq 150); do echo x 2>/dev/null >/dev/udp/%s/%d; done; true`, fam.cmd, port))

		out := in("conntrack", "-L", "-f", fam.dev, "-p", "udp", "--orig-dst", fam.vip)
		checked, wrong := 0, 0
		used := map[netip.AddrPort]int{}
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			src, dst, reply, ok := conntrackTuples(sc.Text())
			if !ok {
				t.Fatalf("unreadable conntrack line %q", sc.Text())
			}
			h, _ := maglev.FlowHash(src, dst, seed)
			want := tb.Lookup(h)
			checked++
			used[reply]++
			if reply != want {
				wrong++
				t.Errorf("%s %s -> %s went to %s, Go picks %s", fam.dev, src, dst, reply, want)
			}
		}
		t.Logf("%s: %d flows over %d slots, %d endpoints used %v, %d differ from Go's pick", fam.dev, checked, m, len(used), used, wrong)
		if checked < 100 || len(used) != len(eps) {
			t.Errorf("%s: %d flows reaching %d endpoints, want at least 100 reaching all %d:\n%s", fam.dev, checked, len(used), len(eps), out)
		}
	}
}

// conntrackTuples reads a conntrack -L line: the original direction's
// source and destination, and the reply's source (the DNAT target).
func conntrackTuples(line string) (src, dst, reply netip.AddrPort, ok bool) {
	var vals = map[string][]string{}
	for _, w := range strings.Fields(line) {
		if k, v, found := strings.Cut(w, "="); found {
			vals[k] = append(vals[k], v)
		}
	}
	if len(vals["src"]) < 2 || len(vals["dst"]) < 1 || len(vals["sport"]) < 2 || len(vals["dport"]) < 1 {
		return src, dst, reply, false
	}
	ap := func(a, p string) (netip.AddrPort, error) {
		addr, err := netip.ParseAddr(a)
		if err != nil {
			return netip.AddrPort{}, err
		}
		n, err := strconv.ParseUint(p, 10, 16)
		return netip.AddrPortFrom(addr, uint16(n)), err
	}
	var e1, e2, e3 error
	src, e1 = ap(vals["src"][0], vals["sport"][0])
	dst, e2 = ap(vals["dst"][0], vals["dport"][0])
	reply, e3 = ap(vals["src"][1], vals["sport"][1])
	return src, dst, reply, e1 == nil && e2 == nil && e3 == nil
}

// toolNetNS makes a network namespace for the test (root), gone when the
// test ends, after checking that the tools it will run there are
// installed. in runs a command inside it and returns its standard
// output; fd is the namespace's, for netlink.
func toolNetNS(t *testing.T, tools ...string) (in func(args ...string) string, fd int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	netnsCount++
	name := fmt.Sprintf("hlnft-%d-%d", os.Getpid()%100000, netnsCount)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", name, err, out)
	}
	f, err := os.Open("/run/netns/" + name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Close()
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v\n%s", name, err, out)
		}
	})
	in = func(args ...string) string {
		t.Helper()
		cmd := exec.Command("ip", append([]string{"netns", "exec", name}, args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
		}
		return string(out)
	}
	return in, int(f.Fd())
}
