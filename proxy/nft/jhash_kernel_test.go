package nft_test

import (
	"bufio"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/herald-lb/herald/proxy/maglev"
)

// TestKernelJHash checks maglev.FlowHash and maglev.Scale against the
// kernel (root, a scratch network namespace): an nftables rule marks each
// new UDP flow's conntrack entry with jhash over source address and port,
// destination address and port, mod 401, with a fixed seed; every mark
// must be the slot Go computes for that flow, in both families. This is
// what lets two nodes, and the tracer, agree with the data path on the
// consistent backend choice (#35).
func TestKernelJHash(t *testing.T) {
	const (
		mod  = 401
		seed = 0x2a2b2c2d
		port = 5000
	)
	in, _ := toolNetNS(t, "nft", "conntrack", "bash")
	in("ip", "link", "set", "lo", "up")
	in("nft", fmt.Sprintf(`table inet hljh {
	chain out {
		type filter hook output priority 0; policy accept;
		meta nfproto ipv4 udp dport %[1]d ct mark set jhash ip saddr . udp sport . ip daddr . udp dport mod %[2]d seed %#[3]x
		meta nfproto ipv6 udp dport %[1]d ct mark set jhash ip6 saddr . udp sport . ip6 daddr . udp dport mod %[2]d seed %#[3]x
	}
}
`, port, mod, seed))
	// Each redirect opens a new socket, so a new source port: a new flow.
	in("bash", "-c", fmt.Sprintf(`for i in $(seq 150); do echo x 2>/dev/null >/dev/udp/127.0.0.1/%[1]d; echo x 2>/dev/null >/dev/udp/::1/%[1]d; done; true`, port))

	for _, fam := range []string{"ipv4", "ipv6"} {
		out := in("conntrack", "-L", "-f", fam, "-p", "udp", "--dport", strconv.Itoa(port))
		checked, wrong := 0, 0
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			f := conntrackFields(sc.Text())
			if f["dport"] != strconv.Itoa(port) {
				continue
			}
			src, err1 := netip.ParseAddrPort(joinHostPort(f["src"], f["sport"]))
			dst, err2 := netip.ParseAddrPort(joinHostPort(f["dst"], f["dport"]))
			mark, err3 := strconv.ParseUint(f["mark"], 10, 32)
			if err1 != nil || err2 != nil || err3 != nil {
				t.Fatalf("unreadable conntrack line %q", sc.Text())
			}
			h, ok := maglev.FlowHash(src, dst, seed)
			if !ok {
				t.Fatalf("no flow hash for %s -> %s", src, dst)
			}
			checked++
			if got := maglev.Scale(h, mod); uint64(got) != mark {
				wrong++
				t.Errorf("%s %s -> %s: the kernel's slot %d, Go's %d", fam, src, dst, mark, got)
			}
		}
		t.Logf("%s: %d flows, %d slots differ", fam, checked, wrong)
		if checked < 100 {
			t.Errorf("%s: only %d flows to check, want at least 100:\n%s", fam, checked, out)
		}
	}
}

// conntrackFields reads the first (original direction) key=value fields
// of a conntrack -L line, and mark.
func conntrackFields(line string) map[string]string {
	f := map[string]string{}
	for _, w := range strings.Fields(line) {
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			continue
		}
		if _, seen := f[k]; !seen {
			f[k] = v
		}
	}
	return f
}

func joinHostPort(host, port string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}
