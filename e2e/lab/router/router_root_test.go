package router

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/herald-lb/herald/e2e/lab/proc"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// The test's own namespaces; the hlrt- prefix is this test's, so leftovers
// of a killed run are removed at the start.
const (
	frrNS  = "hlrt-frr"
	birdNS = "hlrt-bird"
)

var (
	frrV4  = netip.MustParseAddr("198.51.100.1")
	birdV4 = netip.MustParseAddr("198.51.100.2")
	frrV6  = netip.MustParseAddr("2001:db8:0:1::1")
	birdV6 = netip.MustParseAddr("2001:db8:0:1::2")
	lanV6  = netip.MustParsePrefix("2001:db8:0:1::/64")

	birdRoute4 = netip.MustParsePrefix("203.0.113.128/32")
	birdRoute6 = netip.MustParsePrefix("2001:db8:0:3::/64")
	frrRoute4  = netip.MustParsePrefix("203.0.113.129/32")
)

const (
	frrPort  = 2179 // both daemons off 179, to exercise the port options
	birdPort = 1179
)

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// twoNamespaces makes frrNS and birdNS joined by one veth, with addresses
// from the documentation ranges and no routes beyond the link.
func twoNamespaces(t *testing.T) {
	for _, ns := range []string{frrNS, birdNS} {
		if _, err := os.Stat(filepath.Join("/var/run/netns", ns)); err == nil {
			t.Logf("removing netns %s left by an earlier run", ns)
			run(t, "ip", "netns", "del", ns)
		}
	}
	t.Cleanup(func() {
		for _, ns := range []string{frrNS, birdNS} {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("ip netns del %s: %v\n%s", ns, err, out)
			}
		}
	})
	for _, ns := range []string{frrNS, birdNS} {
		run(t, "ip", "netns", "add", ns)
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
		// Link-local addresses usable at once: BIRD and FRR need them as
		// IPv6 next hops, and DAD would hold them back for a second.
		for _, k := range []string{"all", "default"} {
			run(t, "ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf."+k+".accept_dad=0")
		}
	}
	// Both ends are created inside the namespaces: nothing appears in
	// the machine's own namespace, even for a moment.
	run(t, "ip", "-n", frrNS, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", birdNS)
	for _, e := range []struct {
		ns     string
		v4, v6 netip.Addr
	}{{frrNS, frrV4, frrV6}, {birdNS, birdV4, birdV6}} {
		run(t, "ip", "-n", e.ns, "addr", "add", e.v4.String()+"/24", "dev", "eth0")
		run(t, "ip", "-n", e.ns, "addr", "add", e.v6.String()+"/64", "dev", "eth0", "nodad")
		run(t, "ip", "-n", e.ns, "link", "set", "eth0", "up")
	}
}

// kernelRoute tells whether ns's kernel table has a route for p from
// the given routing protocol ("bgp" for zebra, "bird").
func kernelRoute(ns string, p netip.Prefix, protocol string) (bool, string) {
	family := "-4"
	if p.Addr().Is6() {
		family = "-6"
	}
	out, err := exec.Command("ip", "-n", ns, family, "route", "show", p.String()).CombinedOutput()
	return err == nil && strings.Contains(string(out), "proto "+protocol), string(out)
}

// eventually polls check until it reports done, failing the test with the
// last state when ctx ends.
func eventually(ctx context.Context, t *testing.T, what string, check func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	last := ""
	for {
		done, state := check()
		if done {
			return time.Since(start)
		}
		last = state
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not after %v; last: %s", what, time.Since(start).Round(time.Millisecond), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// frrLeftovers lists the files FRR keeps outside its directory for the
// given daemons.
func frrLeftovers(name string, records []proc.Record) []string {
	var found []string
	paths := []string{filepath.Join(frrRunDir, name)}
	for _, r := range records {
		if d, _, ok := frrDaemonOf(r); ok {
			paths = append(paths, filepath.Join(frrTmpDir, d+"."+strconv.Itoa(r.PID)))
		}
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			found = append(found, p)
		}
	}
	return found
}

// peerPair is the FRR and BIRD that TestFRRAndBIRDPeer's steps work on.
type peerPair struct {
	ctx context.Context
	// waitCtx bounds the waits for sessions and routes.
	waitCtx context.Context
	frr     *FRR
	bird    *BIRD
	// birdConf is BIRD's configuration announcing the prefixes.
	birdConf   func(announce ...netip.Prefix) string
	frrRecords []proc.Record
	// birdStart is when BIRD was started.
	birdStart time.Time
}

// TestFRRAndBIRDPeer runs FRR and BIRD in two namespaces, peers them over
// IPv4 (configured neighbors, with BFD) and IPv6 (FRR listening on a
// range), and checks that routes flow both ways into the kernel tables.
func TestFRRAndBIRDPeer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and runs routing daemons")
	}
	for _, bin := range []string{filepath.Join(FRRDaemonDir, "bgpd"), "vtysh", "bird", "birdc"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is missing: install frr and bird2 (`make test` does): %v", bin, err)
		}
	}
	// The namespaces here are the test's own, but their addresses are the
	// lab's, and the lab lock is what keeps lab users apart.
	lockCtx, lockCancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer lockCancel()
	release, err := topology.Lock(lockCtx, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t.Cleanup(release) // last: after everything below is gone
	// FRR makes this directory when missing; the test must not leave it.
	_, tmpErrBefore := os.Stat(frrTmpDir)
	twoNamespaces(t)
	dir := t.TempDir()

	t.Run("bad configurations fail cleanly", func(t *testing.T) { checkBadConfigs(t, ctx, dir) })

	pp := startPeerPair(t, ctx, dir)

	waitCtx, waitCancel := context.WithTimeout(ctx, 60*time.Second)
	defer waitCancel()
	pp.waitCtx = waitCtx
	pp.waitSessions(t)
	pp.waitRoutes(t)
	before := pp.checkBFD(t)
	pp.checkReconfigure(t, before)
	pp.checkRestartAndStop(t, tmpErrBefore)
}

// checkBadConfigs checks that FRR and BIRD fail to start on a bad
// configuration, quoting it, and leave nothing behind.
func checkBadConfigs(t *testing.T, ctx context.Context, dir string) {
	_, err := StartFRR(ctx, FRRConfig{Netns: frrNS, Dir: filepath.Join(dir, "badfrr"), Name: "hlrt-badfrr", Config: "router bgp 64512\n neighbor 198.51.100.2 remote-as nonsense\n", KillWithParent: true})
	if err == nil || !strings.Contains(err.Error(), "remote-as nonsense") {
		t.Errorf("StartFRR with a bad config: error %v, want one quoting the bad line", err)
	} else {
		t.Logf("FRR: %v", err)
	}
	if l := frrLeftovers("hlrt-badfrr", nil); len(l) > 0 {
		t.Errorf("failed StartFRR left %v", l)
	}
	_, err = StartBIRD(ctx, BIRDConfig{Netns: birdNS, Dir: filepath.Join(dir, "badbird"), Config: "protocol bogus {}\n", KillWithParent: true})
	if err == nil || !strings.Contains(err.Error(), "syntax error") {
		t.Errorf("StartBIRD with a bad config: error %v, want bird's syntax error", err)
	} else {
		t.Logf("BIRD: %v", err)
	}
}

// startPeerPair starts FRR and BIRD, configured to peer, each stopped
// (its logs shown if the test failed) at the test's end.
func startPeerPair(t *testing.T, ctx context.Context, dir string) *peerPair {
	fast := BFDProfile{Name: "fast", ReceiveInterval: 100 * time.Millisecond, TransmitInterval: 100 * time.Millisecond, DetectMultiplier: 3}
	frrConf := FRRBGPConfig(RouterBGP{
		ASN: 64512, RouterID: frrV4,
		Neighbors: []Neighbor{
			{Address: birdV4, ASN: 64513, Port: birdPort, BFD: true, BFDProfile: "fast"},
			{Name: "NODES6", Range: lanV6, ASN: 64513},
		},
		Announce:     []netip.Prefix{frrRoute4},
		MaximumPaths: 4,
		BFDProfiles:  []BFDProfile{fast},
	})
	birdConf := func(announce ...netip.Prefix) string {
		return BIRDBGPConfig(RouterBGP{
			ASN: 64513, RouterID: birdV4, ListenPort: birdPort,
			Neighbors: []Neighbor{
				{Name: "frr4", Address: frrV4, ASN: 64512, Port: frrPort, BFD: true, BFDProfile: "fast"},
				{Name: "frr6", Address: frrV6, ASN: 64512, Port: frrPort},
			},
			Announce:     announce,
			MaximumPaths: 4,
			BFDProfiles:  []BFDProfile{fast},
		})
	}

	start := time.Now()
	frr, err := StartFRR(ctx, FRRConfig{Netns: frrNS, Dir: filepath.Join(dir, "frr"), Name: "hlrt-frr", Config: frrConf, BGPPort: frrPort, KillWithParent: true})
	if err != nil {
		t.Fatal(err)
	}
	frrStarted := time.Since(start)
	frrRecords := frr.Records()
	t.Cleanup(func() {
		if t.Failed() {
			var b strings.Builder
			frr.WriteLogTails(&b, 60)
			t.Log(b.String())
		}
		if err := frr.Stop(); err != nil {
			t.Errorf("stop FRR: %v", err)
		}
	})
	start = time.Now()
	bird, err := StartBIRD(ctx, BIRDConfig{Netns: birdNS, Dir: filepath.Join(dir, "bird"), Config: birdConf(birdRoute4, birdRoute6), KillWithParent: true})
	if err != nil {
		t.Fatal(err)
	}
	birdStarted := time.Since(start)
	t.Cleanup(func() {
		if t.Failed() {
			var b strings.Builder
			bird.WriteLogTails(&b, 60)
			t.Log(b.String())
		}
		if err := bird.Stop(); err != nil {
			t.Errorf("stop BIRD: %v", err)
		}
	})
	t.Logf("started FRR (zebra, bgpd, bfdd, config loaded) in %v, BIRD in %v", frrStarted.Round(time.Millisecond), birdStarted.Round(time.Millisecond))
	return &peerPair{ctx: ctx, frr: frr, bird: bird, birdConf: birdConf, frrRecords: frrRecords, birdStart: start}
}

// waitSessions waits for both sessions Established at FRR; the IPv6 one
// must be a listen range peer.
func (pp *peerPair) waitSessions(t *testing.T) {
	type peer struct {
		State       string `json:"state"`
		PfxRcd      int    `json:"pfxRcd"`
		DynamicPeer bool   `json:"dynamicPeer"`
	}
	var summary map[string]struct {
		Peers map[string]peer `json:"peers"`
	}
	// The IPv6 session is opened by BIRD alone (FRR only listens on the
	// range); on IPv4 both sides connect, and BGP resolves the collision.
	var up4, up6 time.Duration
	eventually(pp.waitCtx, t, "FRR sessions established", func() (bool, string) {
		summary = nil
		if err := pp.frr.VtyshJSON(pp.ctx, "show bgp summary json", &summary); err != nil {
			return false, err.Error()
		}
		since := time.Since(pp.birdStart)
		if up4 == 0 && summary["ipv4Unicast"].Peers[birdV4.String()].State == "Established" {
			up4 = since
		}
		if up6 == 0 && summary["ipv6Unicast"].Peers[birdV6.String()].State == "Established" {
			up6 = since
		}
		return up4 != 0 && up6 != 0, fmt.Sprintf("%+v", summary)
	})
	t.Logf("first Established after BIRD started: IPv4 session (both sides connect, BFD) %v, IPv6 session (FRR listen range) %v", up4.Round(time.Millisecond), up6.Round(time.Millisecond))
	if !summary["ipv6Unicast"].Peers[birdV6.String()].DynamicPeer {
		t.Errorf("IPv6 peer %s is not a dynamic (listen range) peer: %+v", birdV6, summary["ipv6Unicast"])
	}
}

// waitRoutes waits for each side's routes in the other's BGP and kernel
// table.
func (pp *peerPair) waitRoutes(t *testing.T) {
	// FRR learns BIRD's routes and zebra installs them in the namespace.
	var routes struct {
		Routes map[string][]struct {
			Valid bool `json:"valid"`
		} `json:"routes"`
	}
	for _, p := range []netip.Prefix{birdRoute4, birdRoute6} {
		family := "ipv4"
		if p.Addr().Is6() {
			family = "ipv6"
		}
		eventually(pp.waitCtx, t, "FRR learns "+p.String(), func() (bool, string) {
			if err := pp.frr.VtyshJSON(pp.ctx, "show bgp "+family+" unicast json", &routes); err != nil {
				return false, err.Error()
			}
			paths := routes.Routes[p.String()]
			return len(paths) > 0 && paths[0].Valid, fmt.Sprintf("%+v", routes.Routes)
		})
		eventually(pp.waitCtx, t, p.String()+" in "+frrNS+"'s kernel table", func() (bool, string) {
			return kernelRoute(frrNS, p, "bgp")
		})
	}
	// BIRD learns FRR's route, and only that one: FRR does not send BIRD's
	// own routes back.
	eventually(pp.waitCtx, t, "BIRD learns "+frrRoute4.String(), func() (bool, string) {
		out, err := pp.bird.Birdc(pp.ctx, "show route protocol frr4")
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(out, frrRoute4.String()) && !strings.Contains(out, birdRoute4.String()), out
	})
	eventually(pp.waitCtx, t, frrRoute4.String()+" in "+birdNS+"'s kernel table", func() (bool, string) {
		return kernelRoute(birdNS, frrRoute4, "bird")
	})
}

// checkBFD waits for the BFD session up on both sides and checks that the
// IPv4 session then stays up; it returns how often it was established.
func (pp *peerPair) checkBFD(t *testing.T) int {
	bfdUp := eventually(pp.waitCtx, t, "BFD session up in FRR and BIRD", func() (bool, string) {
		var peers []struct {
			Peer             string `json:"peer"`
			Status           string `json:"status"`
			ReceiveInterval  int    `json:"receive-interval"`
			TransmitInterval int    `json:"transmit-interval"`
		}
		if err := pp.frr.VtyshJSON(pp.ctx, "show bfd peers json", &peers); err != nil {
			return false, err.Error()
		}
		up := false
		for _, p := range peers {
			up = up || (p.Peer == birdV4.String() && p.Status == "up" && p.ReceiveInterval == 100 && p.TransmitInterval == 100)
		}
		out, err := pp.bird.Birdc(pp.ctx, "show bfd sessions")
		if err != nil {
			return false, err.Error()
		}
		return up && strings.Contains(out, frrV4.String()) && strings.Contains(out, "Up"), fmt.Sprintf("FRR %+v; BIRD %s", peers, out)
	})
	t.Logf("BFD up in both %v after the routes were checked", bfdUp.Round(time.Millisecond))

	// The sessions stay up: BFD at 100ms intervals agrees between the two
	// implementations (a mismatch would flap within 300ms).
	before, _ := pp.established(t)
	time.Sleep(2 * time.Second)
	if after, state := pp.established(t); after != before || state != "Established" {
		t.Errorf("IPv4 session not stable: %s, established %d times, %d times 2s earlier", state, after, before)
	}
	// With BFD on, FRR 8.4 resets a new session once (see Neighbor.BFD).
	t.Logf("IPv4 session (BFD on) established %d times", before)
	return before
}

// checkReconfigure checks that BIRD keeps its configuration when it
// rejects a new one, and takes a good one without resetting the session.
func (pp *peerPair) checkReconfigure(t *testing.T, before int) {
	// BIRD takes a new configuration at run time, and keeps running the
	// old one when it rejects the new.
	if err := pp.bird.Reconfigure(pp.ctx, "protocol bogus {}\n"); err == nil || !strings.Contains(err.Error(), "syntax error") {
		t.Errorf("Reconfigure with a bad config: error %v, want bird's syntax error", err)
	}
	extra := netip.MustParsePrefix("203.0.113.130/32")
	if err := pp.bird.Reconfigure(pp.ctx, pp.birdConf(birdRoute4, birdRoute6, extra)); err != nil {
		t.Fatal(err)
	}
	eventually(pp.waitCtx, t, "FRR learns "+extra.String()+" after BIRD's reconfiguration", func() (bool, string) {
		return kernelRoute(frrNS, extra, "bgp")
	})
	if after, state := pp.established(t); after != before || state != "Established" {
		t.Errorf("reconfiguring BIRD's static routes reset the session: %s, established %d times, %d before", state, after, before)
	}
}

// checkRestartAndStop restarts FRR, then stops it by its process records
// and checks that nothing of it is left.
func (pp *peerPair) checkRestartAndStop(t *testing.T, tmpErrBefore error) {
	// A restart: new daemons, the old ones gone, the sessions and routes
	// back with the configuration FRR started with.
	start := time.Now()
	if err := pp.frr.Restart(pp.ctx); err != nil {
		t.Fatal(err)
	}
	restarted := time.Since(start)
	for _, r := range pp.frrRecords {
		if r.Alive() {
			t.Errorf("%s (pid %d) alive after Restart", r.Name, r.PID)
		}
	}
	pp.frrRecords = pp.frr.Records()
	restartCtx, restartCancel := context.WithTimeout(pp.ctx, 60*time.Second)
	defer restartCancel()
	eventually(restartCtx, t, "FRR learns "+birdRoute4.String()+" again after its restart", func() (bool, string) {
		return kernelRoute(frrNS, birdRoute4, "bgp")
	})
	t.Logf("FRR restarted in %v; BIRD's route back in its kernel table %v after the restart began", restarted.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	// The path a lab takes after a crash: stop by record, not by handle.
	if err := StopRecorded(pp.frrRecords, 0); err != nil {
		t.Errorf("StopRecorded: %v", err)
	}
	for _, r := range pp.frrRecords {
		if r.Alive() {
			t.Errorf("%s (pid %d) alive after StopRecorded", r.Name, r.PID)
		}
	}
	if l := frrLeftovers("hlrt-frr", pp.frrRecords); len(l) > 0 {
		t.Errorf("FRR left %v behind", l)
	}
	if _, err := os.Stat(frrTmpDir); err == nil && tmpErrBefore != nil {
		t.Errorf("%s did not exist before the test and still does", frrTmpDir)
	}
	// BIRD sees the session go down (FRR's NOTIFICATION at shutdown).
	eventually(pp.waitCtx, t, "BIRD notices FRR stopped", func() (bool, string) {
		out, err := pp.bird.Birdc(pp.ctx, "show protocols frr4")
		return err == nil && !strings.Contains(out, "Established"), out
	})
}

// established is how often FRR established the IPv4 session, and its
// state.
func (pp *peerPair) established(t *testing.T) (int, string) {
	var n map[string]struct {
		BGPState               string `json:"bgpState"`
		ConnectionsEstablished int    `json:"connectionsEstablished"`
	}
	if err := pp.frr.VtyshJSON(pp.ctx, "show bgp neighbors "+birdV4.String()+" json", &n); err != nil {
		t.Fatal(err)
	}
	return n[birdV4.String()].ConnectionsEstablished, n[birdV4.String()].BGPState
}
