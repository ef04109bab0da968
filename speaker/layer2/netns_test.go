package layer2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"
)

// The root-only tests run in a pair of throwaway network namespaces
// joined by a veth pair, created and deleted here; the root namespace's
// interfaces are never touched.

// lab is two namespaces: A, where the code under test runs, and B, where
// arping and ndisc6 run.
type lab struct {
	nsA, nsB   string
	ifA, ifB   string
	addrA      string // 198.51.100.1
	addrB      string // 198.51.100.2
	addr6B     string // 2001:db8::2
	macA, macB string
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	for _, tool := range []string{"ip", "arping", "ndisc6"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
}

func sh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func newLab(t *testing.T) *lab {
	t.Helper()
	needRoot(t)
	id := os.Getpid() % 100000
	l := &lab{
		nsA: fmt.Sprintf("hll2-%d-a", id), nsB: fmt.Sprintf("hll2-%d-b", id),
		ifA: fmt.Sprintf("hll2a%d", id), ifB: fmt.Sprintf("hll2b%d", id),
		addrA: "198.51.100.1", addrB: "198.51.100.2", addr6B: "2001:db8::2",
	}
	for _, ns := range []string{l.nsA, l.nsB} {
		sh(t, "ip", "netns", "add", ns)
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("deleting netns %s: %v\n%s", ns, err, out)
			}
		})
	}
	// Created inside A with its peer inside B: never in the root namespace.
	sh(t, "ip", "-n", l.nsA, "link", "add", l.ifA, "type", "veth", "peer", "name", l.ifB, "netns", l.nsB)
	for _, side := range []struct{ ns, ifname, v4, v6 string }{
		{l.nsA, l.ifA, l.addrA, "2001:db8::1"},
		{l.nsB, l.ifB, l.addrB, l.addr6B},
	} {
		// No DAD, so that the addresses are usable at once.
		sh(t, "ip", "netns", "exec", side.ns, "sysctl", "-q", "-w", "net.ipv6.conf."+side.ifname+".accept_dad=0")
		sh(t, "ip", "-n", side.ns, "addr", "add", side.v4+"/24", "dev", side.ifname)
		sh(t, "ip", "-n", side.ns, "addr", "add", side.v6+"/64", "dev", side.ifname, "nodad")
		sh(t, "ip", "-n", side.ns, "link", "set", "lo", "up")
		sh(t, "ip", "-n", side.ns, "link", "set", side.ifname, "up")
	}
	l.macA = linkMAC(t, l.nsA, l.ifA)
	l.macB = linkMAC(t, l.nsB, l.ifB)
	return l
}

func linkMAC(t *testing.T, ns, ifname string) string {
	t.Helper()
	f := strings.Fields(sh(t, "ip", "-n", ns, "-o", "link", "show", ifname))
	for i, w := range f {
		if w == "link/ether" && i+1 < len(f) {
			return f[i+1]
		}
	}
	t.Fatalf("no MAC for %s in %s: %v", ifname, ns, f)
	return ""
}

// inNetns runs fn on an OS thread switched into namespace ns and fails t
// if fn does; sockets fn opens stay in ns.
func inNetns(t *testing.T, ns string, fn func() error) {
	t.Helper()
	done := make(chan struct{})
	var fail error
	go func() {
		defer close(done)
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			fail = err
			runtime.UnlockOSThread()
			return
		}
		defer orig.Close()
		target, err := os.Open("/run/netns/" + ns)
		if err != nil {
			fail = err
			runtime.UnlockOSThread()
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			fail = err
			runtime.UnlockOSThread()
			return
		}
		fail = fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			// Leave the thread locked: Go ends it with the goroutine
			// rather than reuse it in the wrong namespace.
			fail = errors.Join(fail, err)
			return
		}
		runtime.UnlockOSThread()
	}()
	<-done
	if fail != nil {
		t.Fatalf("in netns %s: %v", ns, fail)
	}
}

// TestRealSockets runs a Responder on real AF_PACKET sockets in namespace
// A and asks from B with arping and ndisc6: only announced IPs are
// answered, gratuitous announcements update B's neighbor table, and the
// solicited-node group is joined (with an MLD report on the wire) and
// left again.
func TestRealSockets(t *testing.T) {
	l := newLab(t)
	const (
		vip4s, other4 = "198.51.100.10", "198.51.100.11"
		vip6s, other6 = "2001:db8::10", "2001:db8::11"
	)
	group := SolicitedNodeMulticast(netip.MustParseAddr(vip6s))

	var a Announcements
	a.Set(map[netip.Addr][]string{netip.MustParseAddr(vip4s): {l.ifA}, netip.MustParseAddr(vip6s): {l.ifA}})
	watch, r, stop := startRealResponder(t, l, &a)

	if err := r.SyncGroups(a.On(l.ifA)); err != nil {
		t.Fatal(err)
	}
	maddr := func() string { return sh(t, "ip", "-n", l.nsA, "maddr", "show", "dev", l.ifA) }
	if m := maddr(); !strings.Contains(m, "33:33:ff:00:00:10") || !strings.Contains(m, group.String()) {
		t.Errorf("group %s not joined:\n%s", group, m)
	}
	if !sawMLDReport(t, watch, group) {
		t.Errorf("no MLD report for %s from A", group)
	}

	arping := func(ip string) (string, error) {
		out, err := exec.Command("ip", "netns", "exec", l.nsB, "arping", "-r", "-c", "1", "-w", "1", "-i", l.ifB, ip).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	ndisc := func(ip string) (string, error) {
		out, err := exec.Command("ip", "netns", "exec", l.nsB, "ndisc6", "-1", "-q", "-r", "2", "-w", "500", ip, l.ifB).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	for _, tt := range []struct {
		name, ip string
		ask      func(string) (string, error)
		answered bool
	}{
		{"arping announced", vip4s, arping, true},
		{"arping not announced", other4, arping, false},
		{"ndisc6 announced", vip6s, ndisc, true},
		{"ndisc6 not announced", other6, ndisc, false},
	} {
		out, err := tt.ask(tt.ip)
		switch {
		case tt.answered && (err != nil || !strings.EqualFold(out, l.macA)):
			t.Errorf("%s: %q, %v; want %s", tt.name, out, err, l.macA)
		case !tt.answered && (err == nil || strings.Contains(strings.ToLower(out), l.macA)):
			t.Errorf("%s: answered: %q", tt.name, out)
		}
	}
	if s := r.Stats(); s.ARPReplies < 1 || s.NAReplies < 1 || s.Ignored[ReasonNotAnnounced] < 2 {
		t.Errorf("stats %+v", s)
	}

	// Gratuitous announcements correct B's stale entries.
	sh(t, "ip", "netns", "exec", l.nsB, "sysctl", "-q", "-w", "net.ipv4.neigh."+l.ifB+".locktime=0")
	for _, ip := range []string{vip4s, vip6s} {
		sh(t, "ip", "-n", l.nsB, "neigh", "replace", ip, "lladdr", "02:00:5e:00:00:99", "dev", l.ifB, "nud", "stale")
		if err := r.Gratuitous(netip.MustParseAddr(ip)); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(3 * time.Second)
		for {
			n := sh(t, "ip", "-n", l.nsB, "neigh", "show", ip, "dev", l.ifB)
			if strings.Contains(n, l.macA) {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("B's entry for %s not updated by the gratuitous announcement: %s", ip, n)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// A probe from B (a speaker taking an address over) hears A answer
	// for its addresses, and nobody for the others.
	probe := func(ip string) net.HardwareAddr {
		var mac net.HardwareAddr
		inNetns(t, l.nsB, func() error {
			a := netip.MustParseAddr(ip)
			ifi, err := net.InterfaceByName(l.ifB)
			if err != nil {
				return err
			}
			c, err := ListenProbe(ifi, a)
			if err != nil {
				return err
			}
			defer c.Close()
			mac, err = Probe(context.Background(), c, ifi.HardwareAddr, a, 300*time.Millisecond)
			return err
		})
		return mac
	}
	for _, tt := range []struct {
		ip   string
		want string
	}{{vip4s, l.macA}, {vip6s, l.macA}, {other4, ""}, {other6, ""}} {
		if got := probe(tt.ip); !strings.EqualFold(got.String(), tt.want) {
			t.Errorf("probe for %s: answered by %q, want %q", tt.ip, got, tt.want)
		}
	}

	// Leaving the group, and closing the sockets, undoes the join.
	if err := r.SyncGroups(nil); err != nil {
		t.Fatal(err)
	}
	if m := maddr(); strings.Contains(m, "33:33:ff:00:00:10") {
		t.Errorf("group %s still joined after SyncGroups(nil):\n%s", group, m)
	}
	if err := r.SyncGroups(a.On(l.ifA)); err != nil {
		t.Fatal(err)
	}
	stop()
	if m := maddr(); strings.Contains(m, "33:33:ff:00:00:10") {
		t.Errorf("group %s still joined after Run returned:\n%s", group, m)
	}
	for _, ip := range []string{vip4s, vip6s} {
		if got := probe(ip); got != nil {
			t.Errorf("probe for %s after the responder stopped: answered by %s", ip, got)
		}
	}
}

// startRealResponder starts a Responder for a on A's interface and a
// packet socket on B's that watches for A's MLD reports; stop ends the
// Responder (also at the test's end).
func startRealResponder(t *testing.T, l *lab, a *Announcements) (watch *packet.Conn, r *Responder, stop func()) {
	t.Helper()
	// A packet socket in B watches for A's MLD reports.
	inNetns(t, l.nsB, func() error {
		ifi, err := net.InterfaceByName(l.ifB)
		if err == nil {
			watch, err = ListenNDP(ifi)
		}
		return err
	})
	t.Cleanup(func() { watch.Close() })

	inNetns(t, l.nsA, func() error {
		ifi, err := net.InterfaceByName(l.ifA)
		if err != nil {
			return err
		}
		socks, err := Listen(ifi, IPv4, IPv6)
		if err != nil {
			return err
		}
		r, err = NewResponder(Interface{Name: ifi.Name, Index: ifi.Index, MAC: ifi.HardwareAddr}, socks, a,
			Options{Log: slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		if err != nil {
			socks.close()
		}
		return err
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	t.Cleanup(stop)
	return watch, r, stop
}

// sawMLDReport reads frames from c for up to 3 s and reports whether one
// is an MLDv2 report (after a hop-by-hop header) naming group.
func sawMLDReport(t *testing.T, c *packet.Conn, group netip.Addr) bool {
	t.Helper()
	g := group.As16()
	buf := make([]byte, 2048)
	if err := c.SetReadDeadline(time.Now().Add(3 * time.Second)); err != nil {
		t.Fatal(err)
	}
	for {
		n, _, err := c.ReadFrom(buf)
		if err != nil {
			return false
		}
		f := buf[:n]
		if len(f) > 62 && f[20] == protoHopByHop && f[62] == 143 && bytes.Contains(f[62:], g[:]) {
			return true
		}
	}
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// TestRealSocketsForOther: an address answered for another node leads a
// real client's kernel to that node's MAC (the ARP sender and the NA's
// target link-layer address), while the frames come from A's own MAC:
// arping -r, which prints the Ethernet source, shows A's.
func TestRealSocketsForOther(t *testing.T) {
	l := newLab(t)
	const vip4s, vip6s, holder = "198.51.100.10", "2001:db8::10", "02:00:5e:00:00:77"
	var a Announcements
	a.SetOthers(map[netip.Addr]map[string]net.HardwareAddr{
		netip.MustParseAddr(vip4s): {l.ifA: mustMAC(holder)},
		netip.MustParseAddr(vip6s): {l.ifA: mustMAC(holder)},
	})
	_, r, stop := startRealResponder(t, l, &a)
	defer stop()
	if err := r.SyncGroups(a.Listening(l.ifA)); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("ip", "netns", "exec", l.nsB, "arping", "-r", "-c", "1", "-w", "1", "-i", l.ifB, vip4s).CombinedOutput()
	if got := strings.TrimSpace(string(out)); !strings.EqualFold(got, l.macA) {
		t.Errorf("arping -r printed %q, want A's Ethernet source %s", got, l.macA)
	}
	for _, ip := range []string{vip4s, vip6s} {
		// A datagram to the address makes B's kernel resolve it, as a
		// client's does.
		_ = exec.Command("ip", "netns", "exec", l.nsB, "bash", "-c", "echo x > /dev/udp/"+ip+"/9").Run()
		var n string
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if n = sh(t, "ip", "-n", l.nsB, "neigh", "show", ip, "dev", l.ifB); strings.Contains(n, holder) {
				break
			}
		}
		if !strings.Contains(n, holder) {
			t.Errorf("B's kernel resolved %s to %q, want the holder's %s", ip, n, holder)
		}
	}
}
