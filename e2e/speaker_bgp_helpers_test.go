package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/cluster"
	"github.com/herald-lb/herald/e2e/lab/router"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// The BGP tests' view of the lab: the nodes peer with FRR in the router
// namespace (AS cluster.RouterASN, `bgp listen range` over the LAN with
// `remote-as external`), from AS bgpNodeASN.
const (
	bgpNodeASN = 64513
	// bgpRoleLabel on a Node moves it off the general BGPPeer of a test
	// (which selects the nodes without it) onto a BGPPeer of its own
	// (selecting bgpRoleLabel=<role>): FRR knows a neighbor by its
	// address alone, so a node with an explicitly configured FRR
	// neighbor (password, iBGP, BFD...) must not also have a session
	// matching the listen range.
	bgpRoleLabel = "herald-e2e/bgp"
	// bgpParked is the role of a node that has no BGP session at all.
	bgpParked = "parked"
	// frrExportMap is the lab router's export route-map
	// (lab/router/config.go): it lets nothing but the router's own
	// prefixes out, so a node never learns another node's routes.
	frrExportMap = "HLAB-EXPORT"
	// frrBFDProfile is the FRR BFD profile the tests add: 300 ms x 3.
	frrBFDProfile = "herald300"
)

// bgpLab wraps the shared lab with what the BGP speaker tests need; the
// layer-2 helpers (speakers, kill, links, metrics) come along.
type bgpLab struct {
	l2
	// dumped tells whether the BGP state was logged at a failure already
	// (once per test is enough).
	dumped *bool
}

// newBGPLab returns the helpers; the BGP state is logged if the test
// fails.
func newBGPLab(h *harness.T) bgpLab {
	b := bgpLab{l2{h}, new(bool)}
	h.T.Cleanup(b.dumpIfFailed)
	return b
}

// on binds the helpers to a subtest, so a failure ends that subtest; the
// BGP state is logged if it fails.
func (b bgpLab) on(t *testing.T) (bgpLab, *harness.T) {
	s, h := b.l2.on(t)
	c := bgpLab{s, b.dumped}
	t.Cleanup(c.dumpIfFailed)
	return c, h
}

func (b bgpLab) t() *testing.T { return b.T.T }

// nodeIP is a node's LAN IPv4 address.
func (b bgpLab) nodeIP(node string) string { return b.Node(node).IPv4.String() }

// nodeIPv6 is a node's LAN IPv6 address.
func (b bgpLab) nodeIPv6(node string) string { return b.Node(node).IPv6.String() }

// nodeIPs are the LAN IPv4 addresses of nodes, sorted.
func (b bgpLab) nodeIPs(nodes ...string) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, b.nodeIP(n))
	}
	slices.Sort(out)
	return out
}

// nodeIPsOfFamily are the nodes' LAN addresses of ip's family, sorted:
// the next hops a route for ip has.
func (b bgpLab) nodeIPsOfFamily(ip string, nodes ...string) []string {
	if !isIPv6(ip) {
		return b.nodeIPs(nodes...)
	}
	var out []string
	for _, n := range nodes {
		out = append(out, b.nodeIPv6(n))
	}
	slices.Sort(out)
	return out
}

func isIPv6(ip string) bool { return strings.Contains(ip, ":") }

// hostRoute is ip's host prefix (ip/32 or ip/128) and FRR's name of its
// address family.
func hostRoute(ip string) (prefix, family string) {
	if isIPv6(ip) {
		return ip + "/128", "ipv6"
	}
	return ip + "/32", "ipv4"
}

// --- FRR ---------------------------------------------------------------

func (b bgpLab) frr() *router.FRR {
	if b.Lab.Router == nil {
		b.t().Fatal("the lab runs no FRR")
	}
	return b.Lab.Router
}

// vtysh runs show commands and returns the output (errors included).
func (b bgpLab) vtysh(cmds ...string) string {
	out, err := b.frr().Vtysh(b.Ctx, cmds...)
	if err != nil {
		return fmt.Sprintf("%s\n(%v)", out, err)
	}
	return out
}

// frrConfigure runs configuration commands after `configure terminal`
// in one vtysh; FRR's complaints ("% ...") make it fail.
func (b bgpLab) frrConfigure(cmds ...string) error {
	out, err := b.frr().Vtysh(b.Ctx, append([]string{"configure terminal"}, cmds...)...)
	if err == nil && strings.Contains(out, "%") {
		err = fmt.Errorf("vtysh: %s", strings.TrimSpace(out))
	}
	if err != nil {
		return fmt.Errorf("configuring FRR (%s): %w", strings.Join(cmds, " / "), err)
	}
	return nil
}

// frrPeer is one line of `show bgp summary json`.
type frrPeer struct {
	RemoteAs    int64  `json:"remoteAs"`
	State       string `json:"state"`
	PfxRcd      int    `json:"pfxRcd"`
	DynamicPeer bool   `json:"dynamicPeer"`
	// Established and Dropped count the sessions since FRR created the
	// neighbor.
	Established int `json:"connectionsEstablished"`
	Dropped     int `json:"connectionsDropped"`
}

// frrPeers are FRR's IPv4 unicast BGP neighbors by address, with the raw
// JSON for messages.
func (b bgpLab) frrPeers() (map[string]frrPeer, string) { return b.frrPeersAF("ipv4Unicast") }

// frrPeersAF are FRR's BGP neighbors of an address family (the key of
// `show bgp summary json`: ipv4Unicast, ipv6Unicast) by address.
func (b bgpLab) frrPeersAF(af string) (map[string]frrPeer, string) {
	out, err := b.frr().Vtysh(b.Ctx, "show bgp summary json")
	if err != nil {
		return nil, err.Error()
	}
	var sum map[string]struct {
		Peers map[string]frrPeer `json:"peers"`
	}
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		return nil, fmt.Sprintf("show bgp summary json: %v in %q", err, out)
	}
	peers := sum[af].Peers
	if peers == nil {
		peers = map[string]frrPeer{} // FRR prints {} without neighbors
	}
	return peers, compactJSON(out)
}

// frrPeerStates is "address=state" for every FRR neighbor, sorted.
func (b bgpLab) frrPeerStates() []string {
	peers, raw := b.frrPeers()
	if peers == nil {
		return []string{raw}
	}
	var out []string
	for a, p := range peers {
		out = append(out, a+"="+p.State)
	}
	slices.Sort(out)
	return out
}

// frrNeighbor is `show bgp neighbors ADDR json` decoded loosely (nil if
// FRR has no such neighbor), and the raw output.
func (b bgpLab) frrNeighbor(addr string) (map[string]any, string) {
	out, err := b.frr().Vtysh(b.Ctx, "show bgp neighbors "+addr+" json")
	if err != nil {
		return nil, err.Error()
	}
	var all map[string]any
	if err := json.Unmarshal([]byte(out), &all); err != nil {
		return nil, out
	}
	n, _ := all[addr].(map[string]any)
	return n, compactJSON(out)
}

// waitSessions waits until FRR has an Established session from each of
// the nodes' addresses.
func (b bgpLab) waitSessions(timeout time.Duration, nodes ...string) time.Duration {
	b.t().Helper()
	return b.Poll(timeout, fmt.Sprintf("Established BGP sessions at FRR from %v", nodes), func() (bool, string) {
		peers, raw := b.frrPeers()
		for _, n := range nodes {
			if p, ok := peers[b.nodeIP(n)]; !ok || p.State != "Established" {
				return false, raw
			}
		}
		return true, ""
	})
}

// waitSettled waits until FRR's session with node has stayed
// Established (with bfd, and its BFD session up) for 3 s, through no new
// connection: FRR 8.4 resets a BFD-tracked session once right after it
// first comes up (see router.Neighbor.BFD).
func (b bgpLab) waitSettled(node string, bfd bool, timeout time.Duration) time.Duration {
	b.t().Helper()
	addr := b.nodeIP(node)
	var last string
	var since time.Time
	return b.Poll(timeout, "FRR's session with "+node+" to settle", func() (bool, string) {
		peers, raw := b.frrPeers()
		p := peers[addr]
		now := fmt.Sprintf("%s #%d", p.State, p.Established)
		if bfd {
			st := "none"
			bp, _ := b.frrBFDPeers()
			for _, x := range bp {
				if x.Peer == addr {
					st = x.Status
				}
			}
			now += ", BFD " + st
		}
		if now != last {
			last, since = now, time.Now()
		}
		up := p.State == "Established" && (!bfd || strings.HasSuffix(now, "BFD up"))
		return up && time.Since(since) >= 3*time.Second, now + ": " + raw
	})
}

// waitNoFRRNeighbor waits until FRR lists no neighbor with addr (a
// dynamic neighbor is removed as soon as its session closes).
func (b bgpLab) waitNoFRRNeighbor(addr string, timeout time.Duration) error {
	return pollErr(b.Ctx, timeout, func() (bool, string) {
		peers, raw := b.frrPeers()
		_, ok := peers[addr]
		return peers != nil && !ok, raw
	})
}

// frrPath is one BGP path of a prefix at FRR (`show bgp ipv4 unicast
// PREFIX json`).
type frrPath struct {
	Peer, NextHop, ASPath    string
	Communities, Large       []string
	LocalPref                int // -1 when FRR shows none
	Stale, Multipath, Best   bool
	PeerType                 string
	Valid                    bool
	rawCommunity, rawLargeCm string
}

func (p frrPath) String() string {
	return fmt.Sprintf("{from %s via %s as-path %q communities %v large %v localpref %d best=%v multipath=%v stale=%v}",
		p.Peer, p.NextHop, p.ASPath, p.Communities, p.Large, p.LocalPref, p.Best, p.Multipath, p.Stale)
}

// frrPaths are FRR's BGP paths for ip/32 (ip/128), and the raw JSON.
func (b bgpLab) frrPaths(ip string) ([]frrPath, string) {
	prefix, family := hostRoute(ip)
	out, err := b.frr().Vtysh(b.Ctx, "show bgp "+family+" unicast "+prefix+" json")
	if err != nil {
		return nil, err.Error()
	}
	var r struct {
		Paths []struct {
			ASPath    struct{ String string } `json:"aspath"`
			Community *struct {
				String string `json:"string"`
			} `json:"community"`
			LargeCommunity *struct {
				String string `json:"string"`
			} `json:"largeCommunity"`
			LocPrf    *int `json:"locPrf"`
			LocalPref *int `json:"localpref"`
			Stale     bool `json:"stale"`
			Valid     bool `json:"valid"`
			Multipath bool `json:"multipath"`
			Bestpath  *struct {
				Overall bool `json:"overall"`
			} `json:"bestpath"`
			Nexthops []struct {
				IP string `json:"ip"`
			} `json:"nexthops"`
			Peer struct {
				PeerID string `json:"peerId"`
				Type   string `json:"type"`
			} `json:"peer"`
		} `json:"paths"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return nil, fmt.Sprintf("%v in %q", err, out)
	}
	var paths []frrPath
	for _, p := range r.Paths {
		fp := frrPath{Peer: p.Peer.PeerID, PeerType: p.Peer.Type, ASPath: p.ASPath.String, LocalPref: -1,
			Stale: p.Stale, Valid: p.Valid, Multipath: p.Multipath, Best: p.Bestpath != nil && p.Bestpath.Overall}
		if len(p.Nexthops) > 0 {
			fp.NextHop = p.Nexthops[0].IP
		}
		if p.Community != nil {
			fp.rawCommunity = p.Community.String
			fp.Communities = strings.Fields(p.Community.String)
		}
		if p.LargeCommunity != nil {
			fp.rawLargeCm = p.LargeCommunity.String
			fp.Large = strings.Fields(p.LargeCommunity.String)
		}
		switch {
		case p.LocPrf != nil:
			fp.LocalPref = *p.LocPrf
		case p.LocalPref != nil:
			fp.LocalPref = *p.LocalPref
		}
		slices.Sort(fp.Communities)
		slices.Sort(fp.Large)
		paths = append(paths, fp)
	}
	slices.SortFunc(paths, func(a, b frrPath) int { return strings.Compare(a.Peer, b.Peer) })
	return paths, compactJSON(out)
}

// zebraNextHops are the next hops FRR's zebra has installed in the
// kernel (fib) for ip/32 (ip/128), sorted, with the raw JSON.
func (b bgpLab) zebraNextHops(ip string) ([]string, string) {
	prefix, _ := hostRoute(ip)
	show := "show ip route "
	if isIPv6(ip) {
		show = "show ipv6 route "
	}
	out, err := b.frr().Vtysh(b.Ctx, show+prefix+" json")
	if err != nil {
		return nil, err.Error()
	}
	var r map[string][]struct {
		Protocol  string `json:"protocol"`
		Selected  bool   `json:"selected"`
		Installed bool   `json:"installed"`
		Nexthops  []struct {
			IP  string `json:"ip"`
			FIB bool   `json:"fib"`
		} `json:"nexthops"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return nil, fmt.Sprintf("%v in %q", err, out)
	}
	var hops []string
	for _, e := range r[prefix] {
		if e.Protocol != "bgp" || !e.Selected || !e.Installed {
			continue
		}
		for _, nh := range e.Nexthops {
			if nh.FIB {
				hops = append(hops, nh.IP)
			}
		}
	}
	slices.Sort(hops)
	return hops, compactJSON(out)
}

// kernelNextHops are the gateways of the router namespace's kernel route
// for ip/32 (ip/128) and the route's protocol ("bgp" from zebra, "bird").
func (b bgpLab) kernelNextHops(ip string) (hops []string, protocol, raw string) {
	prefix, _ := hostRoute(ip)
	fam := "-4"
	if isIPv6(ip) {
		fam = "-6"
	}
	out, err := b.Exec("router", "ip", "-j", fam, "route", "show", prefix)
	if err != nil {
		return nil, "", err.Error()
	}
	var routes []struct {
		Protocol string `json:"protocol"`
		Gateway  string `json:"gateway"`
		Nexthops []struct {
			Gateway string `json:"gateway"`
		} `json:"nexthops"`
	}
	if err := json.Unmarshal([]byte(out), &routes); err != nil {
		return nil, "", fmt.Sprintf("%v in %q", err, out)
	}
	for _, r := range routes {
		protocol = r.Protocol
		if r.Gateway != "" {
			hops = append(hops, r.Gateway)
		}
		for _, nh := range r.Nexthops {
			hops = append(hops, nh.Gateway)
		}
	}
	slices.Sort(hops)
	return hops, protocol, strings.TrimSpace(out)
}

// waitFRRNextHops waits until FRR has installed ip/32 (ip/128) with
// exactly the nodes (their addresses of ip's family) as next hops (ECMP
// when several), in zebra and in the router's kernel, and returns FRR's
// BGP paths for it.
func (b bgpLab) waitFRRNextHops(ip string, nodes []string, timeout time.Duration) []frrPath {
	b.t().Helper()
	want := b.nodeIPsOfFamily(ip, nodes...)
	prefix, _ := hostRoute(ip)
	var paths []frrPath
	d := b.Poll(timeout, fmt.Sprintf("FRR to route %s via exactly %v %v", prefix, nodes, want), func() (bool, string) {
		zebra, zraw := b.zebraNextHops(ip)
		kern, proto, kraw := b.kernelNextHops(ip)
		var praw string
		paths, praw = b.frrPaths(ip)
		ok := slices.Equal(zebra, want) && slices.Equal(kern, want) && proto == "bgp"
		return ok, fmt.Sprintf("zebra fib next hops %v, kernel %v (proto %s); show ip route: %s; kernel: %s; bgp paths: %v; %s",
			zebra, kern, proto, zraw, kraw, paths, praw)
	})
	b.t().Logf("FRR routes %s via %v (%v) after %s; BGP paths:\n  %s", prefix, want, nodes, d.Round(time.Millisecond), joinPaths(paths))
	return paths
}

func joinPaths(ps []frrPath) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.String())
	}
	return strings.Join(s, "\n  ")
}

// pathFrom is the path FRR learned from peer addr.
func pathFrom(ps []frrPath, addr string) (frrPath, bool) {
	for _, p := range ps {
		if p.Peer == addr {
			return p, true
		}
	}
	return frrPath{}, false
}

// frrBFDPeer is one entry of `show bfd peers json`.
type frrBFDPeer struct {
	Peer                   string `json:"peer"`
	Local                  string `json:"local"`
	Status                 string `json:"status"`
	Multihop               bool   `json:"multihop"`
	DetectMultiplier       int    `json:"detect-multiplier"`
	ReceiveInterval        int    `json:"receive-interval"`
	TransmitInterval       int    `json:"transmit-interval"`
	RemoteDetectMultiplier int    `json:"remote-detect-multiplier"`
	RemoteReceiveInterval  int    `json:"remote-receive-interval"`
	RemoteTransmitInterval int    `json:"remote-transmit-interval"`
}

func (b bgpLab) frrBFDPeers() ([]frrBFDPeer, string) {
	out, err := b.frr().Vtysh(b.Ctx, "show bfd peers json")
	if err != nil {
		return nil, err.Error()
	}
	var peers []frrBFDPeer
	if err := json.Unmarshal([]byte(out), &peers); err != nil {
		return nil, fmt.Sprintf("%v in %q", err, out)
	}
	return peers, compactJSON(out)
}

// frrNeighborConf is an explicit FRR neighbor for one node's address.
type frrNeighborConf struct {
	Addr     string
	RemoteAS string // a number, or "internal"
	Password string
	Multihop int
	// GracefulRestart enables FRR's graceful restart for this neighbor.
	GracefulRestart bool
	// BFD tracks the session with BFD, with frrBFDProfile's timers.
	BFD bool
}

func (n frrNeighborConf) commands() []string {
	p := "neighbor " + n.Addr
	// passive: the speakers connect; GoBGP does not listen.
	cmds := []string{fmt.Sprintf("router bgp %d", cluster.RouterASN), p + " remote-as " + n.RemoteAS, p + " passive"}
	if n.Password != "" {
		cmds = append(cmds, p+" password "+n.Password)
	}
	if n.Multihop > 0 {
		cmds = append(cmds, p+" ebgp-multihop "+strconv.Itoa(n.Multihop))
	}
	if n.GracefulRestart {
		cmds = append(cmds, p+" graceful-restart")
	}
	if n.BFD {
		cmds = append(cmds, p+" bfd", p+" bfd profile "+frrBFDProfile)
	}
	return append(cmds, "address-family ipv4 unicast", p+" activate", p+" route-map "+frrExportMap+" out", "exit-address-family")
}

// frrAddBFDProfile adds frrBFDProfile (300 ms x 3) to bfdd.
func (b bgpLab) frrAddBFDProfile() error {
	return b.frrConfigure("bfd", "profile "+frrBFDProfile, "receive-interval 300", "transmit-interval 300", "detect-multiplier 3")
}

// isolated describes a node moved onto a BGPPeer of its own.
type isolated struct {
	Node, Role string
	FRR        frrNeighborConf
	// YAML is applied once FRR knows the neighbor (the BGPPeer selecting
	// bgpRoleLabel=Role, its Secret, BFDProfile...); Objects are deleted
	// again ("kind/name" in herald's namespace).
	YAML    string
	Objects []string
	// NoWait skips waiting for the session to establish.
	NoWait bool
}

// isolate moves a node onto a BGPPeer of its own for the rest of the
// (sub)test: the node is parked (no BGPPeer selects it; its dynamic
// session at FRR closes and FRR forgets it), FRR gets an explicit
// neighbor for its address, the objects are applied and the node takes
// the role. The cleanup undoes all of it in the reverse order and waits
// for the node's session on the general peer (selecting nodes without
// the label) to come back.
func (b bgpLab) isolate(iso isolated) {
	b.t().Helper()
	t := b.t()
	addr := b.nodeIP(iso.Node)
	var configured, profile bool
	t.Cleanup(func() {
		b.dumpIfFailed()
		var errs []string
		note := func(err error) {
			if err != nil {
				errs = append(errs, err.Error())
			}
		}
		note(b.labelNode(iso.Node, bgpParked))
		if len(iso.Objects) > 0 {
			_, err := b.K.Run(b.Ctx, append([]string{"-n", heraldNS, "delete", "--ignore-not-found"}, iso.Objects...)...)
			note(err)
		}
		if configured {
			note(b.frrConfigure(fmt.Sprintf("router bgp %d", cluster.RouterASN), "no neighbor "+addr))
		}
		if profile {
			note(b.frrConfigure("bfd", "no profile "+frrBFDProfile))
		}
		note(b.waitNoFRRNeighbor(addr, 30*time.Second))
		note(b.labelNode(iso.Node, ""))
		note(pollErr(b.Ctx, 60*time.Second, func() (bool, string) {
			peers, raw := b.frrPeers()
			return peers[addr].State == "Established", "the node's session on the general BGPPeer: " + raw
		}))
		if len(errs) > 0 {
			t.Errorf("putting %s back on the general BGPPeer: %s", iso.Node, strings.Join(errs, "; "))
		}
	})
	if err := b.labelNode(iso.Node, bgpParked); err != nil {
		t.Fatal(err)
	}
	if err := b.waitNoFRRNeighbor(addr, 30*time.Second); err != nil {
		t.Fatalf("%s parked, but FRR still has its session: %v", iso.Node, err)
	}
	if iso.FRR.BFD {
		profile = true
		if err := b.frrAddBFDProfile(); err != nil {
			t.Fatal(err)
		}
	}
	configured = true
	if err := b.frrConfigure(iso.FRR.commands()...); err != nil {
		t.Fatal(err)
	}
	if iso.YAML != "" {
		b.Apply(iso.YAML)
	}
	if err := b.labelNode(iso.Node, iso.Role); err != nil {
		t.Fatal(err)
	}
	if !iso.NoWait {
		d := b.waitSessions(60*time.Second, iso.Node)
		t.Logf("%s on its own BGPPeer (%s=%s): FRR neighbor %s Established %s after the label", iso.Node, bgpRoleLabel, iso.Role, addr, d.Round(time.Millisecond))
	}
}

// labelNode sets bgpRoleLabel on node; "" removes it.
func (b bgpLab) labelNode(node, role string) error {
	arg := bgpRoleLabel + "-"
	if role != "" {
		arg = bgpRoleLabel + "=" + role
	}
	_, err := b.K.Run(b.Ctx, "label", "node", node, arg, "--overwrite")
	return err
}

// --- Kubernetes side ---------------------------------------------------

// bgpAnnouncements returns who advertises a Service over BGP as
// "node:bgp:peers:ips" strings (peers and IPs as JSON lists), sorted, as
// `herald status -o json` resolves it: from the ServiceAnnouncements of
// Local Services and from the NodeAnnouncements for Cluster ones (which
// have no ServiceAnnouncement per node). A Service that is gone has none.
func (b bgpLab) bgpAnnouncements(ns, svc string) []string {
	b.t().Helper()
	byNode, err := b.statusAnnouncers(ns, svc, "bgp")
	if err != nil {
		b.t().Fatal(err)
	}
	var lines []string
	for node, a := range byNode {
		peers, _ := json.Marshal(a.peers)
		ips, _ := json.Marshal(a.ips)
		lines = append(lines, node+":bgp:"+string(peers)+":"+string(ips))
	}
	slices.Sort(lines)
	return lines
}

// nodeAnnouncer is what one node announces of a Service: its peers (or
// interfaces) and addresses, each sorted.
type nodeAnnouncer struct{ peers, ips []string }

// statusReport is the part of `herald status -o json` the tests read.
type statusReport struct {
	Services []struct {
		Namespace, Name string
		Addresses       []struct {
			IP          string
			AnnouncedBy []struct {
				Node, Protocol string
				Interfaces     []string
				Peers          []string
			} `json:"announcedBy"`
		}
	}
}

// status runs `herald status -n ns -o json`.
func (s l2) status(ns string) (statusReport, error) {
	var rep statusReport
	out, err := s.heraldStatus("-n", ns, "-o", "json")
	if err != nil {
		return rep, fmt.Errorf("herald status: %v: %s", err, out)
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		return rep, fmt.Errorf("herald status -o json: %v", err)
	}
	return rep, nil
}

// statusAnnouncers reads `herald status -n ns -o json` and returns, by
// node, what each node announces of Service ns/svc with protocol.
func (s l2) statusAnnouncers(ns, svc, protocol string) (map[string]*nodeAnnouncer, error) {
	rep, err := s.status(ns)
	if err != nil {
		return nil, err
	}
	byNode := map[string]*nodeAnnouncer{}
	for _, sv := range rep.Services {
		if sv.Namespace != ns || sv.Name != svc {
			continue
		}
		for _, a := range sv.Addresses {
			for _, who := range a.AnnouncedBy {
				if who.Protocol != protocol {
					continue
				}
				na := byNode[who.Node]
				if na == nil {
					na = &nodeAnnouncer{}
					byNode[who.Node] = na
				}
				na.ips = append(na.ips, a.IP)
				na.peers = append(na.peers, who.Peers...)
				na.peers = append(na.peers, who.Interfaces...)
			}
		}
	}
	for _, na := range byNode {
		slices.SortFunc(na.ips, func(x, y string) int { return netip.MustParseAddr(x).Compare(netip.MustParseAddr(y)) })
		slices.Sort(na.peers)
		na.peers = slices.Compact(na.peers)
	}
	return byNode, nil
}

// nodeAnnouncements returns each node's NodeAnnouncement as
// "advertisement:ipv4Peers:ipv6Peers" strings (peers comma-separated),
// by node, with "reason:..." for a node that may advertise nothing.
func (b bgpLab) nodeAnnouncements() map[string][]string {
	b.t().Helper()
	out, err := b.K.Output(b.Ctx, "-n", heraldNS, "get", "nodeannouncements", "-o", "json")
	if err != nil {
		b.t().Fatal(err)
	}
	var l struct {
		Items []struct {
			Status struct {
				Node, Reason   string
				Advertisements []struct {
					Name                 string
					IPv4Peers, IPv6Peers []string
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		b.t().Fatal(err)
	}
	m := map[string][]string{}
	for _, it := range l.Items {
		st := it.Status
		if st.Reason != "" {
			m[st.Node] = append(m[st.Node], "reason:"+st.Reason)
		}
		for _, a := range st.Advertisements {
			m[st.Node] = append(m[st.Node], a.Name+":"+strings.Join(a.IPv4Peers, ",")+":"+strings.Join(a.IPv6Peers, ","))
		}
	}
	return m
}

// objectEvents returns "Reason: message" of the events on a herald
// object of kind in herald's namespace.
func (b bgpLab) objectEvents(kind, name string) []string {
	b.t().Helper()
	l, err := b.CS.CoreV1().Events(heraldNS).List(b.Ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		b.t().Fatal(err)
	}
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].CreationTimestamp.Before(&l.Items[j].CreationTimestamp) })
	var out []string
	for _, e := range l.Items {
		if e.InvolvedObject.Kind == kind {
			out = append(out, e.Reason+": "+e.Message)
		}
	}
	return out
}

// speakerSample reads one sample of a node's speaker /metrics: the
// series name with at least the given labels (in any order).
func (b bgpLab) speakerSample(node, name string, labels map[string]string) (float64, error) {
	n, ok := b.Layout.Node(node)
	if !ok {
		return 0, fmt.Errorf("no lab node %q", node)
	}
	page, err := harness.HTTPGetFrom(n.Netns, "http://127.0.0.1:7473/metrics")
	if err != nil {
		return 0, err
	}
next:
	for _, line := range strings.Split(page, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		for k, v := range labels {
			if !strings.Contains(rest, k+`="`+v+`"`) {
				continue next
			}
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		return strconv.ParseFloat(f[0], 64)
	}
	return 0, fmt.Errorf("%s%v not in the speaker metrics of %s", name, labels, node)
}

// speakerLogs is the speaker log of a node (every container run).
func (s l2) speakerLogs(node string) string {
	files := s.Lab.PodLogFiles(node, heraldNS, speakerDS+"-", "speaker")
	var out strings.Builder
	for _, f := range files {
		data, _ := os.ReadFile(f)
		out.Write(data)
	}
	return out.String()
}

// speakerLogTail is the last lines of a node's speaker log mentioning
// BGP.
func (b bgpLab) speakerLogTail(node string, n int) string {
	var lines []string
	for _, l := range strings.Split(b.speakerLogs(node), "\n") {
		if strings.Contains(strings.ToLower(l), "bgp") {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// dumpIfFailed logs the router's and the speakers' BGP state once the
// test has failed (isolate calls it before undoing its changes).
func (b bgpLab) dumpIfFailed() {
	t := b.t()
	if !t.Failed() || *b.dumped {
		return
	}
	*b.dumped = true
	var s strings.Builder
	for _, c := range []string{"show bgp summary", "show bgp ipv4 unicast", "show ip route bgp", "show bfd peers brief"} {
		fmt.Fprintf(&s, "$ vtysh -c '%s'\n%s\n", c, b.vtysh(c))
	}
	for _, n := range b.nodeNames() {
		fmt.Fprintf(&s, "===== %s speaker log, BGP lines (last 25):\n%s\n", n, b.speakerLogTail(n, 25))
	}
	t.Log("BGP state at the failure:\n" + s.String())
}

// --- objects -----------------------------------------------------------

// bgpPoolYAML is an IPAddressPool that only Services asking for it by
// the herald.io/address-pool annotation get addresses from.
func bgpPoolYAML(name string, addrs ...string) string {
	return poolYAML(name, addrs, "autoAssign: false")
}

// bgpPeerYAML is a BGPPeer of a node in bgpNodeASN towards the lab
// router, with a hold time of 9 s; extra lines go into its spec.
func bgpPeerYAML(name string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "---\napiVersion: herald.io/v1beta1\nkind: BGPPeer\nmetadata: {name: %s, namespace: %s}\nspec:\n", name, heraldNS)
	has := func(key string) bool {
		for _, e := range extra {
			if strings.HasPrefix(e, key+":") {
				return true
			}
		}
		return false
	}
	for _, d := range [][2]string{{"myASN", strconv.Itoa(bgpNodeASN)}, {"peerASN", strconv.Itoa(cluster.RouterASN)},
		{"peerAddress", topology.RouterLANv4.String()}, {"holdTime", "9s"}, {"keepaliveTime", "3s"}, {"connectTime", "1s"}} {
		if !has(d[0]) {
			fmt.Fprintf(&b, "  %s: %s\n", d[0], d[1])
		}
	}
	for _, e := range extra {
		b.WriteString("  " + e + "\n")
	}
	return b.String()
}

// generalPeerSelector selects the nodes not moved onto a peer of their
// own.
var generalPeerSelector = `nodeSelectors: [{matchExpressions: [{key: ` + bgpRoleLabel + `, operator: DoesNotExist}]}]`

// rolePeerSelector selects the node of a role.
func rolePeerSelector(role string) string {
	return fmt.Sprintf(`nodeSelectors: [{matchLabels: {%s: %s}}]`, bgpRoleLabel, role)
}

// bgpAdvertisementYAML announces pool; extra lines go into its spec.
func bgpAdvertisementYAML(name, pool string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "---\napiVersion: herald.io/v1beta1\nkind: BGPAdvertisement\nmetadata: {name: %s, namespace: %s}\nspec:\n  ipAddressPools: [%s]\n", name, heraldNS, pool)
	for _, e := range extra {
		b.WriteString("  " + e + "\n")
	}
	return b.String()
}

// echoDeploymentYAML runs replicas of the echo server (port 8080)
// labelled app=name on node.
func echoDeploymentYAML(name, node string, replicas int) string {
	return fmt.Sprintf(`---
apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s, namespace: default}
spec:
  replicas: %[3]d
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      nodeSelector: {kubernetes.io/hostname: %[2]s}
      terminationGracePeriodSeconds: 5
      containers: [{name: echo, image: registry.k8s.io/echoserver:1.4}]
`, name, node, replicas)
}

// echoPodYAML is a bare echo server pod labelled app=app on node.
func echoPodYAML(name, app, node string) string {
	return fmt.Sprintf(`---
apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: default, labels: {app: %s}}
spec:
  nodeSelector: {kubernetes.io/hostname: %s}
  terminationGracePeriodSeconds: 5
  containers: [{name: echo, image: registry.k8s.io/echoserver:1.4}]
`, name, app, node)
}

// lbServiceYAML is a LoadBalancer Service in default for the pods
// app=app on port 80 -> 8080, from pool, with the policy ("Cluster" or
// "Local"); ip, when set, asks for that address.
func lbServiceYAML(name, app, pool, policy, ip string) string {
	ann := fmt.Sprintf("    herald.io/address-pool: %s\n", pool)
	if ip != "" {
		ann += fmt.Sprintf("    herald.io/loadBalancerIPs: %q\n", ip)
	}
	return fmt.Sprintf(`---
apiVersion: v1
kind: Service
metadata:
  name: %s
  namespace: default
  annotations:
%s
spec:
  type: LoadBalancer
  externalTrafficPolicy: %s
  selector: {app: %s}
  ports: [{port: 80, targetPort: 8080, protocol: TCP}]
`, name, strings.TrimRight(ann, "\n"), policy, app)
}

// --- the remote client ---------------------------------------------------

// remoteGet GETs url from the remote client behind the router.
func (b bgpLab) remoteGet(url string) (string, error) {
	return harness.HTTPGetFrom(b.Layout.Remote, url)
}

// waitRemoteEcho waits until the remote client gets the echo server's
// page from url and returns its client_address.
func (b bgpLab) waitRemoteEcho(url string, want func(addr string) bool, what string) string {
	b.t().Helper()
	var addr string
	b.Poll(30*time.Second, what, func() (bool, string) {
		page, err := b.remoteGet(url)
		addr = harness.ClientAddress(page)
		return err == nil && strings.Contains(page, "CLIENT VALUES:") && want(addr), fmt.Sprintf("client_address=%q, err %v", addr, err)
	})
	return addr
}

// --- BIRD ----------------------------------------------------------------

// birdSessions maps neighbor address to BGP state from `show protocols
// all`.
func birdSessions(out string) map[string]string {
	res := map[string]string{}
	var state, addr string
	flush := func() {
		if addr != "" {
			res[addr] = state
		}
		state, addr = "", ""
	}
	for _, line := range strings.Split(out, "\n") {
		if line != "" && line[0] != ' ' && line[0] != '\t' {
			flush()
			continue
		}
		l := strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(l, "BGP state:"); ok {
			state = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(l, "Neighbor address:"); ok {
			addr = strings.TrimSpace(v)
		}
	}
	flush()
	return res
}

// birdPath is one route of `birdc show route PREFIX all`.
type birdPath struct {
	Via         []string
	Communities []string
	Large       []string
}

var (
	birdVia   = regexp.MustCompile(`^\s*via (\S+) on `)
	birdPairs = regexp.MustCompile(`\(([^)]*)\)`)
)

// birdPaths parses `birdc show route PREFIX all`.
func birdPaths(out string) []birdPath {
	var paths []birdPath
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "unicast [") {
			paths = append(paths, birdPath{})
			continue
		}
		if len(paths) == 0 {
			continue
		}
		p := &paths[len(paths)-1]
		if m := birdVia.FindStringSubmatch(line); m != nil {
			p.Via = append(p.Via, m[1])
		}
		l := strings.TrimSpace(line)
		for prefix, dst := range map[string]*[]string{"BGP.community:": &p.Communities, "BGP.large_community:": &p.Large} {
			if v, ok := strings.CutPrefix(l, prefix); ok {
				for _, m := range birdPairs.FindAllStringSubmatch(v, -1) {
					parts := strings.Split(m[1], ",")
					for i := range parts {
						parts[i] = strings.TrimSpace(parts[i])
					}
					*dst = append(*dst, strings.Join(parts, ":"))
				}
				slices.Sort(*dst)
			}
		}
	}
	return paths
}

// --- watching the router's kernel routes ---------------------------------

// routeEvent is one message of `ip -o -4 monitor route` in the router
// namespace, stamped when it was read.
type routeEvent struct {
	At      time.Time
	Deleted bool
	Dst     string
	Via     []string
	Line    string
}

// routeWatch records the router namespace's IPv4 route changes (FRR's
// zebra installing and removing what bgpd decided) as they happen.
type routeWatch struct {
	mu     sync.Mutex
	events []routeEvent
	cmd    *exec.Cmd
	cancel context.CancelFunc
	done   chan struct{}
}

var monitorVia = regexp.MustCompile(`\bvia (\S+)`)

// watchRoutes starts `ip -o -4 monitor route` in the router namespace
// until the test ends.
func (b bgpLab) watchRoutes() *routeWatch {
	b.t().Helper()
	ctx, cancel := context.WithCancel(b.Ctx)
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", b.Layout.Router, "ip", "-o", "-4", "monitor", "route")
	out, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		b.t().Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		b.t().Fatal(err)
	}
	w := &routeWatch{cmd: cmd, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			at := time.Now()
			line := sc.Text()
			f := strings.Fields(line)
			ev := routeEvent{At: at, Line: line}
			if len(f) > 0 && f[0] == "Deleted" {
				ev.Deleted, f = true, f[1:]
			}
			if len(f) > 0 {
				ev.Dst = strings.TrimSuffix(f[0], "/32")
			}
			for _, m := range monitorVia.FindAllStringSubmatch(line, -1) {
				ev.Via = append(ev.Via, m[1])
			}
			slices.Sort(ev.Via)
			w.mu.Lock()
			w.events = append(w.events, ev)
			w.mu.Unlock()
		}
	}()
	b.t().Cleanup(w.stop)
	return w
}

// stop ends the monitor (the process this test started, by its own
// handle) and waits for it.
func (w *routeWatch) stop() {
	w.cancel()
	<-w.done
	_ = w.cmd.Wait()
}

// first returns the first event for ip after since that matches.
func (w *routeWatch) first(ip string, since time.Time, match func(routeEvent) bool) (routeEvent, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.events {
		if e.Dst == ip && !e.At.Before(since) && match(e) {
			return e, true
		}
	}
	return routeEvent{}, false
}

// wait waits up to timeout for the first matching event for ip after
// since.
func (w *routeWatch) wait(ctx context.Context, ip string, since time.Time, timeout time.Duration, match func(routeEvent) bool) (routeEvent, bool) {
	deadline := time.Now().Add(timeout)
	for {
		if e, ok := w.first(ip, since, match); ok {
			return e, true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return routeEvent{}, false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// recent is the last n events, for messages.
func (w *routeWatch) recent(n int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	ev := w.events[max(0, len(w.events)-n):]
	var s []string
	for _, e := range ev {
		s = append(s, e.At.Format("15:04:05.000")+" "+e.Line)
	}
	return strings.Join(s, "\n")
}

func isDeleted(e routeEvent) bool { return e.Deleted }
func isAdded(e routeEvent) bool   { return !e.Deleted }

// --- small things --------------------------------------------------------

// pollErr is Poll for cleanups: it returns an error instead of failing.
func pollErr(ctx context.Context, timeout time.Duration, cond func() (bool, string)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("not after %s: %s", timeout, why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// compactJSON shortens JSON for messages.
func compactJSON(s string) string {
	var v any
	if json.Unmarshal([]byte(s), &v) != nil {
		return strings.TrimSpace(s)
	}
	b, _ := json.Marshal(v)
	if len(b) > 3000 {
		return string(b[:3000]) + "..."
	}
	return string(b)
}

// durations summarises trials: min, median, max.
func durations(ds []time.Duration) (lo, med, hi time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[0], s[len(s)/2], s[len(s)-1]
}

// mustAddr parses an IP address or fails the test.
func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatalf("%q is not one IP address: %v", s, err)
	}
	return a
}
