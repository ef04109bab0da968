package topology

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/herald-lb/herald/e2e/lab/netns"
)

// TestTopologyForReal builds a 3-node lab network, sends TCP across every
// path the lab promises, and checks that Down leaves the machine's
// namespaces and links exactly as they were.
func TestTopologyForReal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const prefix = "hltst"
	release, err := Lock(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release) // runs after Down
	before, err := Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Plan(prefix, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := Down(context.Background(), Exec{}, prefix); err != nil {
			t.Errorf("down: %v", err)
		}
		after, err := Observe(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(withoutOtherLabs(before, prefix), withoutOtherLabs(after, prefix)) {
			t.Errorf("down did not restore the machine:\nbefore %v\nafter  %v", before, after)
		}
	})
	start := time.Now()
	if err := Up(ctx, Exec{}, l, before); err != nil {
		t.Fatal(err)
	}
	t.Logf("up: %d namespaces in %v", len(l.Namespaces()), time.Since(start).Round(time.Millisecond))

	// A listener in every node and in the remote client answers with its
	// namespace's name.
	for _, ns := range l.Namespaces()[2:] { // remote and the nodes
		serve(t, ns)
	}
	// The host answers on its LAN address (the API server listens there).
	for _, a := range []netip.Addr{HostLANv4, HostLANv6} {
		ln, err := net.Listen("tcp", addr(a))
		if err != nil {
			t.Fatal(err)
		}
		answer(t, ln, "host")
	}
	n1, n2 := l.Nodes[0], l.Nodes[1]
	paths := []struct{ from, to, want string }{
		{l.Client, addr(n1.IPv4), n1.Netns},
		{l.Client, addr(l.Nodes[2].IPv4), l.Nodes[2].Netns},
		{l.Client, addr(n2.IPv6), n2.Netns},
		{n1.Netns, addr(n2.PodGateway), n2.Netns}, // pod CIDR route across nodes
		{n1.Netns, addr(RemoteV4IP), l.Remote},    // through the router
		{l.Remote, addr(n2.IPv4), n2.Netns},       // and back
		{l.Remote, addr(n1.IPv6), n1.Netns},
		{n1.Netns, addr(HostLANv4), "host"}, // and the host answers back through the lab
		{n2.Netns, addr(HostLANv6), "host"},
		{l.Client, addr(HostLANv4), "host"},
	}
	for _, p := range paths {
		got, err := dial(p.from, p.to)
		if err != nil || got != p.want {
			t.Errorf("%s -> %s: got %q, %v; want %q", p.from, p.to, got, err, p.want)
		}
	}
}

// withoutOtherLabs drops the namespaces and links of other labs ("hl"
// prefixes but ours): other packages' root tests build their own labs at
// the same time (go test runs packages in parallel).
func withoutOtherLabs(e Existing, prefix string) Existing {
	out := Existing{Netns: map[string]bool{}, Links: map[string]bool{}}
	other := func(name string) bool {
		p, _, ok := strings.Cut(name, "-")
		return ok && strings.HasPrefix(p, "hl") && p != prefix && len(p) <= 5
	}
	for n := range e.Netns {
		if !other(n) {
			out.Netns[n] = true
		}
	}
	for l := range e.Links {
		if !other(l) {
			out.Links[l] = true
		}
	}
	return out
}

func addr(a netip.Addr) string { return net.JoinHostPort(a.String(), "9000") }

func serve(t *testing.T, ns string) {
	var ln net.Listener
	if err := netns.Do(ns, func() (err error) { ln, err = net.Listen("tcp", ":9000"); return err }); err != nil {
		t.Fatal(err)
	}
	answer(t, ln, ns)
}

// answer replies to every connection on ln with name, until the test ends.
func answer(t *testing.T, ln net.Listener, name string) {
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprint(c, name)
			c.Close()
		}
	}()
}

func dial(ns, to string) (string, error) {
	var c net.Conn
	err := netns.Do(ns, func() (err error) { c, err = net.DialTimeout("tcp", to, 3*time.Second); return err })
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	b, err := io.ReadAll(c)
	return string(b), err
}
