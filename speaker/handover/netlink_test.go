package handover

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The kernel test builds a LAN of three throwaway namespaces on a bridge
// of a fourth: a client c and two nodes a and b, each DNATing the address
// to a server of its own, as the proxy does. The client opens a
// connection through a, then the address moves to b (the client's
// neighbour entry now names b's MAC). Without an entry, b resets the
// connection; with Netlink's entry, the connection goes on, answered by
// a's server, while a new connection is b's.

// family is one address family's lab addresses.
type family struct {
	name, c, a, b, vip, bits, iptables, table string
}

var offLink = map[string]netip.Addr{"IPv4": netip.MustParseAddr("198.51.100.9"), "IPv6": netip.MustParseAddr("2001:db8:49::9")}

var labFamilies = []family{
	{"IPv4", "192.0.2.11", "192.0.2.12", "192.0.2.13", "192.0.2.100", "/24", "iptables", "ip"},
	{"IPv6", "2001:db8:48::11", "2001:db8:48::12", "2001:db8:48::13", "2001:db8:48::100", "/64", "ip6tables", "ip6"},
}

func run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// inNetns runs f on a thread moved into the named namespace; sockets made
// there stay in it.
func inNetns(t *testing.T, ns string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		fd, err := unix.Open("/var/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Errorf("opening netns %s: %v", ns, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			t.Errorf("entering netns %s: %v", ns, err)
			return
		}
		f()
	}()
	<-done
}

// serve answers each line with "name:line".
func serve(t *testing.T, ns, name, addr string) {
	var ln net.Listener
	inNetns(t, ns, func() {
		var err error
		if ln, err = net.Listen("tcp", net.JoinHostPort(addr, "8080")); err != nil {
			t.Errorf("listening in %s: %v", ns, err)
		}
	})
	if ln == nil {
		t.FailNow()
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := io.WriteString(c, name+":"+l); err != nil {
						return
					}
				}
			}()
		}
	}()
}

func ask(c net.Conn, what string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, what+"\n"); err != nil {
		return "", err
	}
	l, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(l), err
}

func TestNetlinkKeepsConnection(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces and nftables")
	}
	for _, tool := range []string{"ip", "iptables", "ip6tables", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	for i, f := range labFamilies {
		t.Run(f.name, func(t *testing.T) { keepsConnection(t, f, fmt.Sprintf("hho%d%d", os.Getpid()%10000, i)) })
	}
}

func keepsConnection(t *testing.T, f family, p string) {
	ns := func(n string) string { return p + "-" + n }
	for _, n := range []string{"br", "c", "a", "b"} {
		run(t, "ip", "netns", "add", ns(n))
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns(n)).Run() })
	}
	run(t, "ip", "-n", ns("br"), "link", "add", "br0", "type", "bridge")
	run(t, "ip", "-n", ns("br"), "link", "set", "br0", "up")
	for n, a := range map[string]string{"c": f.c, "a": f.a, "b": f.b} {
		// Made inside the bridge's namespace, the node's end moved out:
		// nothing touches the root namespace.
		run(t, "ip", "-n", ns("br"), "link", "add", "p"+n, "type", "veth", "peer", "name", "eth0", "netns", ns(n))
		run(t, "ip", "-n", ns("br"), "link", "set", "p"+n, "master", "br0", "up")
		// No duplicate address detection: the link-local address would
		// be tentative for a second, and neighbour discovery with it.
		run(t, "ip", "netns", "exec", ns(n), "sysctl", "-qw", "net.ipv6.conf.eth0.accept_dad=0")
		run(t, "ip", "-n", ns(n), "link", "set", "eth0", "up")
		run(t, "ip", "-n", ns(n), "link", "set", "lo", "up")
		run(t, "ip", "-n", ns(n), "addr", "add", a+f.bits, "dev", "eth0", "nodad")
	}
	for n, a := range map[string]string{"a": f.a, "b": f.b} {
		run(t, "ip", "netns", "exec", ns(n), f.iptables, "-t", "nat", "-A", "PREROUTING", "-d", f.vip, "-p", "tcp", "--dport", "80",
			"-j", "DNAT", "--to-destination", net.JoinHostPort(a, "8080"))
		serve(t, ns(n), n, a)
	}
	mac := func(n string) string {
		return strings.TrimSpace(run(t, "ip", "netns", "exec", ns(n), "cat", "/sys/class/net/eth0/address"))
	}
	index := func(string) (int, []netip.Prefix, error) {
		s := run(t, "ip", "netns", "exec", ns("b"), "cat", "/sys/class/net/eth0/ifindex")
		i, err := strconv.Atoi(strings.TrimSpace(s))
		return i, []netip.Prefix{netip.MustParsePrefix(f.b + f.bits)}, err
	}
	fd, err := unix.Open("/var/run/netns/"+ns("b"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	k := Netlink{NetNS: fd, Index: index}

	moveTo := func(n string) {
		run(t, "ip", "-n", ns("c"), "neigh", "replace", f.vip, "lladdr", mac(n), "dev", "eth0", "nud", "permanent")
	}
	dial := func() net.Conn {
		var c net.Conn
		inNetns(t, ns("c"), func() {
			var err error
			if c, err = net.DialTimeout("tcp", net.JoinHostPort(f.vip, "80"), 2*time.Second); err != nil {
				t.Errorf("dialing %s: %v", f.vip, err)
			}
		})
		if c == nil {
			t.FailNow()
		}
		return c
	}
	try := func(keep bool) (before, after, fresh string, afterErr error) {
		moveTo("a")
		c := dial()
		defer c.Close()
		var err error
		if before, err = ask(c, "1"); err != nil {
			t.Fatalf("through a: %v", err)
		}
		var entries []Entry
		if keep {
			entries = []Entry{{netip.MustParseAddr(f.vip), "eth0", netip.MustParseAddr(f.a), "a", time.UnixMilli(1795880000000)}}
		}
		if err := k.Apply(entries); err != nil {
			t.Fatal(err)
		}
		moveTo("b")
		after, afterErr = ask(c, "2")
		c2 := dial()
		defer c2.Close()
		fresh, err = ask(c2, "3")
		if err != nil {
			t.Fatalf("a new connection through b: %v", err)
		}
		return before, after, fresh, afterErr
	}

	before, after, fresh, err := try(false)
	t.Logf("without an entry: %q, then %q (%v); a new connection: %q", before, after, err, fresh)
	if before != "a:1" || err == nil || fresh != "b:3" {
		t.Errorf("without an entry the moved connection should fail: got %q then %q (%v), new %q", before, after, err, fresh)
	}
	before, after, fresh, err = try(true)
	t.Logf("with the entry: %q, then %q (%v); a new connection: %q", before, after, err, fresh)
	if before != "a:1" || err != nil || after != "a:2" || fresh != "b:3" {
		t.Errorf("with the entry the connection should go on through a: got %q then %q (%v), new %q", before, after, err, fresh)
	}
	out := run(t, "ip", "netns", "exec", ns("b"), "nft", "list", "table", f.table, TableName)
	t.Logf("nft list table %s %s:\n%s", f.table, TableName, out)
	if !strings.Contains(out, "dup to "+f.a+` device "eth0" drop`) {
		t.Errorf("the rule is not as expected:\n%s", out)
	}
	if !strings.Contains(out, "> 1 ") {
		t.Errorf("no TTL guard in the rule:\n%s", out)
	}
	got, err := k.List()
	if want := (Entry{netip.MustParseAddr(f.vip), "eth0", netip.MustParseAddr(f.a), "a", time.UnixMilli(1795880000000)}); err != nil || len(got) != 1 || got[0] != want {
		t.Errorf("List: %v (%v), want [%v]", got, err, want)
	}
	// A former holder on no subnet of the interface: left out, named.
	if err := k.Apply([]Entry{{netip.MustParseAddr(f.vip), "eth0", offLink[f.name], "x", time.Now()}}); err == nil || !strings.Contains(err.Error(), "no subnet") {
		t.Errorf("an off-link former holder: %v", err)
	}
	if err := k.Apply(nil); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ip", "netns", "exec", ns("b"), "nft", "list", "tables").CombinedOutput(); err != nil || strings.Contains(string(out), TableName) {
		t.Errorf("after Apply(nil) the tables should be gone: %v\n%s", err, out)
	}
}
