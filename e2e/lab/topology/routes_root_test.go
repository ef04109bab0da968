package topology

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/herald-lb/herald/e2e/lab/netns"
)

// TestUnreachableRoutesForReal applies the host's side of a lab's network
// (the bridge with the host's addresses, the unreachable routes, the
// member and pod CIDR routes: Commands' root-namespace commands but the
// namespaces and their veths) inside a scratch network namespace that
// stands in for the host, then asks the kernel: a lab address that is not
// a member fails with EHOSTUNREACH, the members still route through the
// bridge, and Teardown, from what observe reads there, removes the lab's
// routes and nothing else. It builds no lab and leaves the root namespace
// alone, so it needs no lab lock and runs while a lab is up.
func TestUnreachableRoutesForReal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const prefix = "hlrt"
	ns := fmt.Sprintf("%s-host%d", prefix, os.Getpid())
	sh := scratchHost{ctx: ctx, ns: ns, prefix: prefix}
	if out, err := exec.CommandContext(ctx, "ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", ns, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "delete", ns).CombinedOutput(); err != nil {
			t.Errorf("ip netns delete %s: %v: %s", ns, err, out)
		}
	})
	sh.mustIP(t, "link", "set", "lo", "up")
	l, err := Plan(prefix, 2)
	if err != nil {
		t.Fatal(err)
	}

	sh.checkOwnRangeRefused(t)

	var host []Cmd
	for _, c := range Commands(l) {
		if c.Netns == "" && !slices.ContainsFunc(c.Args, func(a string) bool { return a == "netns" || isHostVeth(l, a) }) {
			c.Netns = ns
			host = append(host, c)
		}
	}
	for _, c := range host {
		if err := (Exec{}).Run(ctx, c); err != nil {
			t.Fatal(err)
		}
	}

	sh.checkRouting(t)
	sh.checkTeardown(t, l)
	sh.checkStrayRoutes(t)
}

// scratchHost is the network namespace TestUnreachableRoutesForReal uses
// for the host.
type scratchHost struct {
	ctx    context.Context
	ns     string
	prefix string
}

// ip runs ip in the namespace.
func (sh scratchHost) ip(args ...string) (string, error) {
	out, err := exec.CommandContext(sh.ctx, "ip", append([]string{"-n", sh.ns}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// mustIP runs ip in the namespace, and ends the test if it fails.
func (sh scratchHost) mustIP(t *testing.T, args ...string) string {
	t.Helper()
	out, err := sh.ip(args...)
	if err != nil {
		t.Fatalf("ip -n %s %s: %v: %s", sh.ns, strings.Join(args, " "), err, out)
	}
	return out
}

// onlyMachinesOwn checks that the only unreachable routes left are the
// machine's own.
func (sh scratchHost) onlyMachinesOwn(t *testing.T, after string) {
	t.Helper()
	if out := sh.mustIP(t, "-o", "route", "show", "type", "unreachable"); out != "unreachable 198.51.100.0/24 proto static metric 100" {
		t.Errorf("IPv4 unreachable routes after %s: %q, want only the machine's own", after, out)
	}
	if out := sh.mustIP(t, "-o", "-6", "route", "show", "type", "unreachable"); out != "" {
		t.Errorf("IPv6 unreachable routes after %s: %q", after, out)
	}
}

// checkOwnRangeRefused checks that a machine routing part of the lab's
// ranges itself is refused, and that its route is not Teardown's to delete.
func (sh scratchHost) checkOwnRangeRefused(t *testing.T) {
	// A machine that routes part of the lab's ranges itself is refused,
	// and its route is not Teardown's to delete.
	sh.mustIP(t, "route", "add", "198.18.0.0/15", "dev", "lo")
	e, err := observe(sh.ctx, sh.ns)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckHostRoutes(e.Routes); err == nil || !strings.Contains(err.Error(), "198.18.0.0/15") {
		t.Errorf("CheckHostRoutes with the machine's 198.18.0.0/15: %v", err)
	}
	if cmds, _ := Teardown(sh.prefix, e); len(cmds) > 0 {
		t.Errorf("Teardown deletes the machine's own: %v", cmds)
	}
	sh.mustIP(t, "route", "del", "198.18.0.0/15", "dev", "lo")
}

// checkRouting checks, after the lab's host commands, that lab addresses
// that are not members are unreachable, that the rest of 203.0.113.0/24
// is the machine's, and that members and pod CIDRs route through the
// bridge.
func (sh scratchHost) checkRouting(t *testing.T) {
	// Not members: an L2 pool address, a ClusterIP, a pod CIDR without a
	// node.
	for _, a := range []string{"198.51.100.201", "198.19.0.10", "198.18.9.1",
		"2001:db8:0:1::201", "2001:db8:2::a", "2001:db8:1:9::1"} {
		if out, err := sh.ip("route", "get", a); err == nil || !strings.Contains(out, "No route to host") {
			t.Errorf("ip -n %s route get %s: %v: %s; want unreachable", sh.ns, a, err, out)
		}
		var c net.Conn
		err := netns.Do(sh.ns, func() (err error) {
			c, err = net.DialTimeout("tcp", net.JoinHostPort(a, "80"), 2*time.Second)
			return err
		})
		if err == nil {
			c.Close()
		}
		if !errors.Is(err, syscall.EHOSTUNREACH) {
			t.Errorf("dial %s: %v, want EHOSTUNREACH", a, err)
		}
	}
	// Not the lab's: the rest of 203.0.113.0/24, where this machine's
	// package mirrors live (203.0.113.80). The scratch namespace has no
	// default route, so the kernel says the network is unreachable; the
	// lab must neither capture it nor answer "no route to host".
	if out, _ := sh.ip("route", "get", "203.0.113.80"); strings.Contains(out, "No route to host") || strings.Contains(out, "-lan") {
		t.Errorf("ip -n %s route get 203.0.113.80: %s; the lab must leave the rest of 203.0.113.0/24 to the machine", sh.ns, out)
	}
	// Members, and pod CIDRs through their nodes.
	for a, want := range map[string]string{
		"198.51.100.100":    "198.51.100.100 dev hlrt-lan src 198.51.100.254",
		"198.51.100.12":     "198.51.100.12 dev hlrt-lan src 198.51.100.254",
		"2001:db8:0:1::11":  "2001:db8:0:1::11 from :: dev hlrt-lan src 2001:db8:0:1::fe",
		"198.18.2.7":        "198.18.2.7 via 198.51.100.12 dev hlrt-lan src 198.51.100.254",
		"198.51.100.1":      "198.51.100.1 dev hlrt-lan src 198.51.100.254",
		"203.0.113.10":      "203.0.113.10 via 198.51.100.1 dev hlrt-lan src 198.51.100.254",
		"2001:db8:0:2::10":  "2001:db8:0:2::10 from :: via 2001:db8:0:1::1 dev hlrt-lan src 2001:db8:0:1::fe",
		"2001:db8:1:1::abc": "2001:db8:1:1::abc from :: via 2001:db8:0:1::11 dev hlrt-lan src 2001:db8:0:1::fe",
	} {
		if out := sh.mustIP(t, "route", "get", a); !strings.HasPrefix(out, want) {
			t.Errorf("ip -n %s route get %s: %s; want %s", sh.ns, a, out, want)
		}
	}
}

// checkTeardown checks what observe finds of the lab's routes beside one
// of the machine's own, and that Teardown removes the lab's alone.
func (sh scratchHost) checkTeardown(t *testing.T, l Layout) {
	// A route of the machine's own beside the lab's, for the same range.
	sh.mustIP(t, "route", "add", "unreachable", "198.51.100.0/24", "proto", "static", "metric", "100")
	e, err := observe(sh.ctx, sh.ns)
	if err != nil {
		t.Fatal(err)
	}
	// The lab's unreachable routes, the client's, the router's and each
	// node's /32 and /128, the remote subnet's and the pod CIDRs, and the
	// machine's own.
	if got, want := len(LabRoutes(e, sh.prefix)), len(unreachableRanges())+2+2+2+4*len(l.Nodes)+1; got != want {
		t.Errorf("LabRoutes: %d routes, want %d: %v", got, want, LabRoutes(e, sh.prefix))
	}
	own := 0
	for _, r := range e.Routes {
		if labsOwn(r) {
			own++
		}
	}
	if own != len(unreachableRanges()) {
		t.Errorf("observe found %d of the lab's unreachable routes, want %d: %v", own, len(unreachableRanges()), e.Routes)
	}
	if err := CheckHostRoutes(e.Routes); err == nil {
		t.Error("CheckHostRoutes accepts a host with the lab's routes")
	}
	cmds, err := Teardown(sh.prefix, e)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cmds {
		c.Netns = sh.ns
		if err := (Exec{}).Run(sh.ctx, c); err != nil {
			t.Error(err)
		}
	}
	sh.onlyMachinesOwn(t, "teardown")
	after, err := observe(sh.ctx, sh.ns)
	if err != nil {
		t.Fatal(err)
	}
	if rest, _ := Teardown(sh.prefix, after); len(rest) > 0 {
		t.Errorf("left after teardown: %v", rest)
	}
	if got := LabRoutes(after, sh.prefix); !slices.Equal(got, []string{"unreachable 198.51.100.0/24 proto static"}) {
		t.Errorf("routes into the lab's ranges after teardown: %v, want only the machine's own", got)
	}
}

// checkStrayRoutes checks that a killed run's routes are kept while a
// lab's bridge exists and removed once none does.
func (sh scratchHost) checkStrayRoutes(t *testing.T) {
	// The routes a killed run left: kept while a lab's bridge exists (a
	// lab coming up adds them after its bridge), removed once none does.
	for _, c := range unreachableRoutes("add") {
		c.Netns = sh.ns
		if err := (Exec{}).Run(sh.ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	sh.mustIP(t, "link", "add", "hle-lan", "type", "bridge")
	if removed, err := removeStrayRoutes(sh.ctx, Exec{}, sh.ns); removed || err != nil {
		t.Errorf("removeStrayRoutes with hle-lan there: removed=%v err=%v", removed, err)
	}
	sh.mustIP(t, "link", "delete", "hle-lan")
	if removed, err := removeStrayRoutes(sh.ctx, Exec{}, sh.ns); !removed || err != nil {
		t.Errorf("removeStrayRoutes: removed=%v err=%v", removed, err)
	}
	sh.onlyMachinesOwn(t, "removeStrayRoutes")
}

func isHostVeth(l Layout, name string) bool {
	if name == l.ClientHostIf || name == l.RouterHostIf {
		return true
	}
	for _, n := range l.Nodes {
		if name == n.HostIf {
			return true
		}
	}
	return false
}
