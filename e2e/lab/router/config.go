package router

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// RouterBGP describes a lab router's BGP speaker. FRRBGPConfig and
// BIRDBGPConfig render the same description for either implementation, so
// a test can run the same scenario against both.
type RouterBGP struct {
	ASN      uint32
	RouterID netip.Addr
	// Neighbors are the router's peers: single addresses, or ranges from
	// which any speaker may open a session (so nodes need not be listed).
	Neighbors []Neighbor
	// Announce are the prefixes the router originates. They are the only
	// routes it sends: a lab router does not relay one node's routes to
	// the other nodes, so what a node learns never depends on its peers.
	Announce []netip.Prefix
	// MaximumPaths is how many equal paths (ECMP) the router installs for
	// one prefix, e.g. one per node announcing a service IP. Values below
	// 1 mean 1; both daemons get the number explicitly because their own
	// defaults differ.
	MaximumPaths int
	// KeepaliveTime, HoldTime and ConnectRetry default to 3s, 9s and 2s so
	// that lab sessions come up and fail fast.
	KeepaliveTime, HoldTime, ConnectRetry time.Duration
	// GracefulRestart makes the router keep a restarting peer's routes.
	GracefulRestart bool
	// BFDProfiles are the BFD timer sets neighbors refer to by name.
	BFDProfiles []BFDProfile
	// ListenPort is the TCP port BIRD accepts sessions on (0: 179). BIRD
	// only: FRR's listen port is a bgpd flag, FRRConfig.BGPPort. A
	// different port lets BIRD share a namespace with FRR.
	ListenPort int
}

// Neighbor is one peer, or a range of peers, of a lab router.
type Neighbor struct {
	// Name names the peer group of a range (FRR) or the protocol (BIRD):
	// letters, digits and '_'. Optional.
	Name string
	// Address is the peer's address. Range, instead, accepts sessions
	// from any address within it (FRR `bgp listen range`, BIRD `neighbor
	// range`); the router never connects to a range.
	Address netip.Addr
	Range   netip.Prefix
	// ASN is the peer's AS; 0 accepts any AS but the router's own.
	ASN uint32
	// Port is the peer's BGP port the router connects to (0: 179).
	Port int
	// Password enables TCP MD5 authentication.
	Password string
	// Multihop is the TTL for an eBGP peer more than one hop away; 0
	// means directly connected.
	Multihop int
	// Passive makes the router wait for the peer to connect.
	Passive bool
	// BFD tracks the session with BFD, using the timers of the profile
	// named BFDProfile (empty: the daemon's defaults).
	//
	// FRR 8.4 resets such a session once, right after it is first
	// established: bgpd then moves its BFD session to the connection's
	// source address and interface, which replaces the session, and takes
	// the new session's initial Down for a failure (Cease/BFD Down; a
	// BIRD peer sees the old session go down, with the same effect). The
	// session comes back about a second later and stays up.
	BFD        bool
	BFDProfile string
}

// BFDProfile is a named set of BFD timers. Zero values leave the daemons'
// defaults (300ms intervals, multiplier 3 in both).
type BFDProfile struct {
	Name                              string
	ReceiveInterval, TransmitInterval time.Duration
	DetectMultiplier                  int
	// Passive waits for the peer to start the BFD session.
	Passive bool
}

func (r RouterBGP) timers() (keepalive, hold, connect int) {
	secs := func(d time.Duration, def int) int {
		if d <= 0 {
			return def
		}
		return int((d + time.Second - 1) / time.Second)
	}
	return secs(r.KeepaliveTime, 3), secs(r.HoldTime, 9), secs(r.ConnectRetry, 2)
}

func (r RouterBGP) maxPaths() int { return max(r.MaximumPaths, 1) }

func (r RouterBGP) profile(name string) (BFDProfile, bool) {
	for _, p := range r.BFDProfiles {
		if p.Name == name {
			return p, true
		}
	}
	return BFDProfile{}, false
}

func (r RouterBGP) announced(v4 bool) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range r.Announce {
		if p.Addr().Is4() == v4 {
			out = append(out, p.Masked())
		}
	}
	return out
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// FRR names used in the rendered configuration.
const (
	frrExportMap = "HLAB-EXPORT"
	frrAnnounce4 = "HLAB-ANNOUNCE4"
	frrAnnounce6 = "HLAB-ANNOUNCE6"
)

// frrPeer is what FRR's `neighbor X ...` lines name: the address, or for a
// range the peer group bound to it.
func frrPeer(i int, n Neighbor) string {
	if n.Range.IsValid() {
		if n.Name != "" {
			return n.Name
		}
		return "RANGE" + strconv.Itoa(i+1)
	}
	return n.Address.String()
}

// FRRBGPConfig renders r as an integrated frr.conf for StartFRR.
func FRRBGPConfig(r RouterBGP) string {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	keepalive, hold, connect := r.timers()

	line("! rendered by herald e2e/lab/router")
	// bgpd holds every configured peer until the configuration is loaded
	// and then until the route-map update timer (5s by default) fires;
	// without it, peers start a second after `vtysh -b` and route-map
	// changes apply at once.
	line("bgp route-map delay-timer 0")
	line("router bgp %d", r.ASN)
	if r.RouterID.IsValid() {
		line(" bgp router-id %s", r.RouterID)
	}
	// FRR's default profile refuses to exchange eBGP routes without
	// policies, and `network` would wait for a matching route in the RIB;
	// the router announces its prefixes unconditionally.
	line(" no bgp ebgp-requires-policy")
	line(" no bgp network import-check")
	// Nodes usually share one AS, but multipath must not depend on that.
	line(" bgp bestpath as-path multipath-relax")
	if r.GracefulRestart {
		line(" bgp graceful-restart")
	}
	line(" timers bgp %d %d", keepalive, hold)
	for i, n := range r.Neighbors {
		p := frrPeer(i, n)
		if n.Range.IsValid() {
			line(" neighbor %s peer-group", p)
		}
		if n.ASN == 0 {
			line(" neighbor %s remote-as external", p)
		} else {
			line(" neighbor %s remote-as %d", p, n.ASN)
		}
		if n.Range.IsValid() {
			line(" bgp listen range %s peer-group %s", n.Range.Masked(), p)
		} else if n.Port != 0 {
			line(" neighbor %s port %d", p, n.Port)
		}
		line(" neighbor %s timers connect %d", p, connect)
		if n.Password != "" {
			line(" neighbor %s password %s", p, n.Password)
		}
		if n.Multihop > 0 {
			line(" neighbor %s ebgp-multihop %d", p, n.Multihop)
		}
		if n.Passive && !n.Range.IsValid() {
			line(" neighbor %s passive", p)
		}
		if n.BFD {
			line(" neighbor %s bfd", p)
			if n.BFDProfile != "" {
				line(" neighbor %s bfd profile %s", p, n.BFDProfile)
			}
		}
	}
	for _, af := range []struct {
		name string
		v4   bool
	}{{"ipv4", true}, {"ipv6", false}} {
		line(" !")
		line(" address-family %s unicast", af.name)
		for _, p := range r.announced(af.v4) {
			line("  network %s", p)
		}
		line("  maximum-paths %d", r.maxPaths())
		line("  maximum-paths ibgp %d", r.maxPaths())
		for i, n := range r.Neighbors {
			p := frrPeer(i, n)
			line("  neighbor %s activate", p)
			line("  neighbor %s route-map %s out", p, frrExportMap)
		}
		line(" exit-address-family")
	}
	line("exit")
	line("!")

	// The export map lets only the router's own prefixes out.
	for i, p := range r.announced(true) {
		line("ip prefix-list %s seq %d permit %s", frrAnnounce4, (i+1)*5, p)
	}
	for i, p := range r.announced(false) {
		line("ipv6 prefix-list %s seq %d permit %s", frrAnnounce6, (i+1)*5, p)
	}
	if len(r.announced(true)) > 0 {
		line("route-map %s permit 10", frrExportMap)
		line(" match ip address prefix-list %s", frrAnnounce4)
		line("exit")
	}
	if len(r.announced(false)) > 0 {
		line("route-map %s permit 20", frrExportMap)
		line(" match ipv6 address prefix-list %s", frrAnnounce6)
		line("exit")
	}
	// Always defined: a route-map that does not exist would be a
	// configuration mistake rather than "send nothing".
	line("route-map %s deny 100", frrExportMap)
	line("exit")
	line("!")

	if len(r.BFDProfiles) > 0 {
		line("bfd")
		for _, p := range r.BFDProfiles {
			line(" profile %s", p.Name)
			if p.ReceiveInterval > 0 {
				line("  receive-interval %d", ms(p.ReceiveInterval))
			}
			if p.TransmitInterval > 0 {
				line("  transmit-interval %d", ms(p.TransmitInterval))
			}
			if p.DetectMultiplier > 0 {
				line("  detect-multiplier %d", p.DetectMultiplier)
			}
			if p.Passive {
				line("  passive-mode")
			}
			line(" exit")
			line(" !")
		}
		line("exit")
		line("!")
	}
	return b.String()
}

// birdProto is the BIRD protocol name of neighbor i.
func birdProto(i int, n Neighbor) string {
	if n.Name != "" {
		return n.Name
	}
	if n.Range.IsValid() {
		return "range" + strconv.Itoa(i+1)
	}
	return "peer" + strconv.Itoa(i+1)
}

// BIRDBGPConfig renders r as a bird.conf for StartBIRD. BGP routes go to
// the namespace's kernel table (merged into multipath routes up to
// MaximumPaths), the announced prefixes are blackhole static routes that
// only BGP exports, and everything learned is imported.
func BIRDBGPConfig(r RouterBGP) string {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	keepalive, hold, connect := r.timers()

	line("# rendered by herald e2e/lab/router")
	if r.RouterID.IsValid() {
		line("router id %s;", r.RouterID)
	}
	// StartBIRD runs bird in the foreground with stderr in its log file.
	line("log stderr all;")
	line("")
	line("protocol device {}")
	for _, k := range []struct{ name, channel string }{{"kernel4", "ipv4"}, {"kernel6", "ipv6"}} {
		line("protocol kernel %s {", k.name)
		line("  %s { export where source = RTS_BGP; };", k.channel)
		if r.maxPaths() > 1 {
			line("  merge paths on limit %d;", r.maxPaths())
		}
		line("}")
	}
	for _, s := range []struct {
		name, channel string
		v4            bool
	}{{"announce4", "ipv4", true}, {"announce6", "ipv6", false}} {
		if ps := r.announced(s.v4); len(ps) > 0 {
			line("protocol static %s {", s.name)
			line("  %s;", s.channel)
			for _, p := range ps {
				line("  route %s blackhole;", p)
			}
			line("}")
		}
	}
	for _, n := range r.Neighbors {
		if n.BFD {
			// BGP asks this protocol for its sessions; the timers are set
			// per BGP protocol below.
			line("protocol bfd {}")
			break
		}
	}
	for i, n := range r.Neighbors {
		line("")
		line("protocol bgp %s {", birdProto(i, n))
		local := "local"
		if r.ListenPort != 0 {
			local += " port " + strconv.Itoa(r.ListenPort)
		}
		line("  %s as %d;", local, r.ASN)
		peer := "neighbor "
		if n.Range.IsValid() {
			peer += "range " + n.Range.Masked().String()
		} else {
			peer += n.Address.String()
			if n.Port != 0 {
				peer += " port " + strconv.Itoa(n.Port)
			}
		}
		if n.ASN == 0 {
			peer += " external"
		} else {
			peer += " as " + strconv.FormatUint(uint64(n.ASN), 10)
		}
		line("  %s;", peer)
		line("  hold time %d;", hold)
		line("  keepalive time %d;", keepalive)
		line("  connect retry time %d;", connect)
		// BIRD waits 5s before its first connect and 60s after any
		// session error (including a peer's NOTIFICATION) before it
		// even accepts a new session; lab peers restart on purpose.
		line("  connect delay time %d;", connect)
		line("  error wait time 1, 5;")
		if n.Multihop > 0 {
			line("  multihop %d;", n.Multihop)
		}
		if n.Passive && !n.Range.IsValid() {
			line("  passive on;")
		}
		if n.Password != "" {
			line("  password %q;", n.Password)
		}
		if r.GracefulRestart {
			line("  graceful restart on;")
		}
		if n.BFD {
			line("  %s;", birdBFD(r, n))
		}
		for _, af := range []struct {
			channel string
			v4      bool
		}{{"ipv4", true}, {"ipv6", false}} {
			export := "none"
			if len(r.announced(af.v4)) > 0 {
				export = "where source = RTS_STATIC"
			}
			line("  %s { import all; export %s; };", af.channel, export)
		}
		line("}")
	}
	return b.String()
}

func birdBFD(r RouterBGP, n Neighbor) string {
	p, ok := r.profile(n.BFDProfile)
	if !ok {
		return "bfd on"
	}
	var opts []string
	if p.ReceiveInterval > 0 {
		opts = append(opts, fmt.Sprintf("min rx interval %d ms;", ms(p.ReceiveInterval)))
	}
	if p.TransmitInterval > 0 {
		opts = append(opts, fmt.Sprintf("min tx interval %d ms;", ms(p.TransmitInterval)))
	}
	if p.DetectMultiplier > 0 {
		opts = append(opts, fmt.Sprintf("multiplier %d;", p.DetectMultiplier))
	}
	if p.Passive {
		opts = append(opts, "passive on;")
	}
	if len(opts) == 0 {
		return "bfd on"
	}
	return "bfd { " + strings.Join(opts, " ") + " }"
}
