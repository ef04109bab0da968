package rules_test

import (
	"bytes"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herald-lb/herald/proxy/internal/tracer"
	"github.com/herald-lb/herald/proxy/iptables"
	"github.com/herald-lb/herald/proxy/rules"
)

// fuzzReader hands out fuzz bytes as choices; past the end it gives
// zeros, and choice 0 is always an ordinary value, so a short input is a
// small, valid world.
type fuzzReader struct{ b []byte }

func (r *fuzzReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// pick chooses among n, mostly (7 in 8) among the first good ones, so
// that valid Services render next to the odd ones.
func (r *fuzzReader) pick(n, good int) int {
	c := int(r.byte())
	if c < 224 && good > 0 {
		return c % min(good, n)
	}
	return c % n
}

func (r *fuzzReader) u16() int { return int(r.byte())<<8 | int(r.byte()) }

// raw returns up to 24 bytes of the input as a string.
func (r *fuzzReader) raw() string {
	n := min(int(r.byte())%25, len(r.b))
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// A choice whose validity is known; unknown marks a string taken from
// the raw input, for which the test cannot say what the renderer does.
type known[T any] struct {
	v       T
	ok      bool
	unknown bool
}

// Names as Kubernetes spells them (namespace, Service and port names
// are DNS labels of at most 63 characters), and some it does not.
var fuzzNames = []known[string]{
	{v: "default", ok: true}, {v: "web", ok: true}, {v: "kube-system", ok: true}, {v: "a", ok: true},
	{v: "x.y", ok: true}, {v: "9z", ok: true}, {v: strings.Repeat("n", 63), ok: true},
	{v: ""}, {v: "Web"}, {v: "a b"}, {v: `q"`}, {v: "-x"}, {v: "x-"}, {v: "p\n-A X"}, {v: "ü"}, {v: `a\`},
}

func (r *fuzzReader) name() known[string] {
	if r.byte() >= 240 {
		return known[string]{v: r.raw(), unknown: true}
	}
	return fuzzNames[r.pick(len(fuzzNames), 6)]
}

var fuzzProtocols = []known[rules.Protocol]{
	{v: rules.TCP, ok: true}, {v: rules.UDP, ok: true}, {v: rules.SCTP, ok: true},
	{v: ""}, {v: "tcp"}, {v: "ICMP"}, {v: "DCCP"}, {v: "TCP "},
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// Addresses of both families, the ordinary ones first, then the odd:
// invalid, IPv4-mapped, loopback, unspecified, multicast, link-local,
// broadcast and one with a zone.
var fuzzAddrs = []netip.Addr{
	mustAddr("10.96.0.1"), mustAddr("10.244.1.5"), mustAddr("198.51.100.10"), mustAddr("192.0.2.10"),
	mustAddr("fd00:10:96::1"), mustAddr("fd00:10:244:1::5"), mustAddr("2001:db8::10"),
	{}, mustAddr("::ffff:10.96.0.3"), mustAddr("127.0.0.1"), mustAddr("::1"), mustAddr("0.0.0.0"), mustAddr("::"),
	mustAddr("224.0.0.1"), mustAddr("ff02::1"), mustAddr("fe80::1"), mustAddr("169.254.1.1"), mustAddr("255.255.255.255"),
	mustAddr("fe80::1%eth0"), mustAddr("::ffff:0.0.0.0"),
}

func (r *fuzzReader) addr() netip.Addr {
	switch r.byte() {
	case 254:
		var a [4]byte
		for i := range a {
			a[i] = r.byte()
		}
		return netip.AddrFrom4(a)
	case 255:
		var a [16]byte
		for i := range a {
			a[i] = r.byte()
		}
		return netip.AddrFrom16(a)
	}
	return fuzzAddrs[r.pick(len(fuzzAddrs), 7)]
}

func (r *fuzzReader) addrs(most int) []netip.Addr {
	var out []netip.Addr
	for range r.pick(most+1, 0) {
		out = append(out, r.addr())
	}
	return out
}

var fuzzPrefixes = []netip.Prefix{
	netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("2001:db8:ffff::/48"),
	netip.MustParsePrefix("fd00:10:244::/48"), netip.MustParsePrefix("10.1.2.3/8"), {}, netip.MustParsePrefix("0.0.0.0/0"),
	netip.MustParsePrefix("::/0"), netip.MustParsePrefix("::ffff:10.0.0.0/104"), netip.MustParsePrefix("::ffff:0.0.0.0/90"),
	netip.MustParsePrefix("192.0.2.10/32"),
}

func (r *fuzzReader) prefix() netip.Prefix {
	if r.byte() >= 240 {
		return netip.PrefixFrom(r.addr(), int(r.byte())-8)
	}
	return fuzzPrefixes[r.pick(len(fuzzPrefixes), 4)]
}

// num picks among ordinary values, odd ones and raw numbers.
func (r *fuzzReader) num(ordinary ...int) int {
	odd := []int{0, -1, 65535, 65536, 70000, 86400, 86401, -1 << 31}
	switch c := r.pick(len(ordinary)+len(odd)+2, len(ordinary)); {
	case c < len(ordinary):
		return ordinary[c]
	case c < len(ordinary)+len(odd):
		return odd[c-len(ordinary)]
	case c == len(ordinary)+len(odd):
		return r.u16()
	default:
		return int(int32(r.u16()<<16 | r.u16()))
	}
}

// fuzzPort is a decoded Service port and what the test knows of it.
type fuzzPort struct {
	svc rules.Service
	// bad is the field the renderer must refuse the port for ("" when
	// none); unknown when a raw name makes that unknowable.
	bad     string
	unknown bool
}

// fuzzWorld is a decoded input of the renderer.
type fuzzWorld struct {
	ports []fuzzPort
	eps   map[rules.ServicePortName][]rules.Endpoint
	node  rules.NodeConfig
	opts  rules.Options
	odd   bool // also render for a family that does not exist
}

func (w *fuzzWorld) services() []rules.Service {
	out := make([]rules.Service, len(w.ports))
	for i, p := range w.ports {
		out[i] = p.svc
	}
	return out
}

var fuzzNodeNames = []string{nodeA, nodeB, ""}

// Zones of the node and of hints, an empty and an odd one among them.
var (
	fuzzZones     = []string{"", "z1", "z2", "Z 1\n\""}
	fuzzZoneHints = [][]string{{"z1"}, {"z2"}, {"z2", "z1", "z1"}, {"", "Z 1\n\""}}
)

func decodeWorld(data []byte) *fuzzWorld {
	r := &fuzzReader{b: data}
	w := &fuzzWorld{eps: map[rules.ServicePortName][]rules.Endpoint{}}
	w.odd = r.byte() == 255
	n := &w.node
	n.Name = fuzzNodeNames[r.pick(3, 1)]
	n.IPs = r.addrs(2)
	for range r.pick(3, 0) {
		n.ClusterCIDRs = append(n.ClusterCIDRs, r.prefix())
	}
	flags := r.byte()
	n.MasqueradeAll, n.NoRandomFully, n.ConntrackLiberal = flags&1 != 0, flags&2 != 0, flags&4 != 0
	n.MasqueradeMark = []uint32{0, rules.DefaultMasqueradeMark, 1, 0x3, 1 << 31, 0xffffffff}[r.pick(6, 2)]
	if flags&8 != 0 {
		n.NodePortAddresses = map[rules.Family][]netip.Addr{rules.IPv4: r.addrs(2), rules.IPv6: r.addrs(2)}
	}
	// The zone and the endpoints' hints come from bits no other choice
	// reads, so the corpus decodes to the worlds it always did, plus hints.
	n.Zone = fuzzZones[flags>>4&3]
	// Small chunk limits split the nat table, negative never does.
	w.opts.ChunkChains = []int{0, 1, 3, 7, -1}[r.pick(5, 0)]

	for range r.pick(8, 0) {
		p := fuzzPort{}
		s := &p.svc
		ns, name := r.name(), r.name()
		s.Namespace, s.Name = ns.v, name.v
		var port known[string]
		if r.pick(3, 0) != 0 {
			port = r.name()
			s.PortName = port.v
		}
		port.ok = port.ok || s.PortName == "" // a Service's only port may be unnamed
		proto := fuzzProtocols[r.pick(len(fuzzProtocols), 3)]
		s.Protocol = proto.v
		s.Port = r.num(80, 443, 53, 8080)
		s.NodePort = r.num(0, 30080, 31000)
		s.ClusterIPs = r.addrs(3)
		s.ExternalIPs = r.addrs(2)
		for range r.pick(3, 0) {
			s.LoadBalancerIngress = append(s.LoadBalancerIngress, rules.Ingress{IP: r.addr(), Mode: rules.IPMode(r.pick(3, 1))})
		}
		for range r.pick(3, 0) {
			s.LoadBalancerSourceRanges = append(s.LoadBalancerSourceRanges, r.prefix())
		}
		flags := r.byte()
		s.SourceRangesInvalid = flags&1 != 0
		s.ExternalTrafficPolicy = rules.TrafficPolicy(r.pick(3, 2))
		s.InternalTrafficPolicy = rules.TrafficPolicy(r.pick(3, 2))
		s.HealthCheckNodePort = r.num(0, 32000)
		s.SessionAffinity = rules.Affinity(r.pick(3, 2))
		s.AffinityTimeout = r.num(0, 10800, 60, 1)

		p.unknown = ns.unknown || name.unknown || port.unknown
		// The API's own limits, in the order the renderer checks them.
		switch {
		case !ns.ok:
			p.bad = "namespace"
		case !name.ok:
			p.bad = "name"
		case !port.ok:
			p.bad = "port.name"
		case !proto.ok:
			p.bad = "port.protocol"
		case s.Port < 1 || s.Port > 65535:
			p.bad = "port.port"
		case s.NodePort < 0 || s.NodePort > 65535:
			p.bad = "port.nodePort"
		}
		w.ports = append(w.ports, p)

		// Endpoints, sometimes under a port that does not exist.
		id := s.ID()
		if flags&2 != 0 {
			id.Port += "-gone"
		}
		for range r.pick(6, 0) {
			e := rules.Endpoint{IP: r.addr(), Port: r.num(8080, 53), NodeName: fuzzNodeNames[r.pick(3, 2)]}
			c := r.byte()
			e.Ready, e.Serving, e.Terminating = c&1 != 0, c&2 != 0, c&4 != 0
			if c&8 != 0 {
				e.ZoneHints = fuzzZoneHints[c>>5&3]
			}
			if c&16 != 0 {
				e.NodeHints = []string{fuzzNodeNames[int(c>>6)%len(fuzzNodeNames)]}
			}
			w.eps[id] = append(w.eps[id], e)
		}
	}

	// Chains a previous sync left: real names of the current Services
	// (kept) and hash-shaped ones of Services gone (deleted).
	if c := r.byte(); c&1 != 0 {
		w.opts.Existing = []string{}
		prefixes := []string{rules.PrefixService, rules.PrefixLocal, rules.PrefixExternal, rules.PrefixFirewall, rules.PrefixEndpoint, "HERALD-SERVICES", "OTHER-"}
		const b32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
		for range r.pick(4, 0) {
			suffix := make([]byte, 16)
			for i := range suffix {
				suffix[i] = b32[r.byte()%32]
			}
			w.opts.Existing = append(w.opts.Existing, prefixes[r.pick(len(prefixes), 5)]+string(suffix))
		}
		if c&2 != 0 {
			w.opts.Existing = append(w.opts.Existing, rules.Render(rules.IPv4, w.services(), w.eps, w.node).NATChains...)
		}
	}
	return w
}

// wantRendered counts the ports that must get rules in family f: valid
// fields, the first of their name, and exactly one usable cluster IP of
// the family. ok is false when a raw name makes that unknowable.
func (w *fuzzWorld) wantRendered(f rules.Family) (n int, ok bool) {
	seen := map[rules.ServicePortName]bool{}
	for _, p := range w.ports {
		if p.unknown {
			return 0, false
		}
		id := p.svc.ID()
		if seen[id] {
			continue
		}
		seen[id] = true
		s := &p.svc
		if p.bad != "" || s.ExternalTrafficPolicy > rules.PolicyLocal || s.InternalTrafficPolicy > rules.PolicyLocal {
			continue
		}
		cips := 0
		for _, a := range s.ClusterIPs {
			a = a.Unmap()
			if a.IsValid() && a.Zone() == "" && a.Is4() == (f == rules.IPv4) {
				cips++
			}
		}
		if cips == 1 {
			n++
		}
	}
	return n, true
}

var (
	iptTestOnce  sync.Once
	iptTestTools map[rules.Family]string // nil: cannot run --test here
	iptTestWhy   string
	// iptTestNS is the scratch network namespace --test runs in; its
	// holder (iptTestHold) lives until this process closes its stdin or
	// exits, so the namespace never outlives the test, even killed.
	iptTestNS   string
	iptTestHold io.WriteCloser
)

// iptTestSetup finds out once whether `iptables-restore --test` can run
// (root, unshare, nsenter and the tools) and makes the namespace for it.
// One namespace for all inputs, because making one can take a second
// while other namespaces are torn down on the machine.
func iptTestSetup() {
	iptTestOnce.Do(func() {
		if os.Geteuid() != 0 {
			iptTestWhy = "not root"
			return
		}
		tools := map[rules.Family]string{rules.IPv4: "iptables-restore", rules.IPv6: "ip6tables-restore"}
		for _, bin := range []string{"unshare", "nsenter", tools[rules.IPv4], tools[rules.IPv6]} {
			if _, err := exec.LookPath(bin); err != nil {
				iptTestWhy = fmt.Sprintf("no %s: %v", bin, err)
				return
			}
		}
		hold := exec.Command("unshare", "--net", "cat")
		in, err := hold.StdinPipe()
		if err == nil {
			err = hold.Start()
		}
		if err != nil {
			iptTestWhy = fmt.Sprintf("unshare --net: %v", err)
			return
		}
		// unshare execs cat once the namespace is made; until then the
		// holder is still in ours.
		ns := fmt.Sprintf("/proc/%d/ns/net", hold.Process.Pid)
		self, _ := os.Readlink("/proc/self/ns/net")
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if cur, err := os.Readlink(ns); err == nil && cur != self {
				break
			}
			if time.Now().After(deadline) {
				in.Close()
				hold.Wait()
				iptTestWhy = "unshare --net made no namespace within 30 s"
				return
			}
		}
		iptTestNS, iptTestHold, iptTestTools = ns, in, tools
	})
}

// iptablesTest runs `iptables-restore --noflush --test` on text in the
// scratch namespace, so that nothing on the machine can be touched.
func iptablesTest(t *testing.T, f rules.Family, text []byte) {
	t.Helper()
	cmd := exec.Command("nsenter", "--net="+iptTestNS, iptTestTools[f], "--noflush", "--test")
	cmd.Stdin = bytes.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s --test refused the %s render: %v\n%s\n%s", iptTestTools[f], f, err, out, numbered(text))
	}
}

// numbered prefixes each line with its number, as iptables' errors count.
func numbered(text []byte) string {
	var b strings.Builder
	for i, l := range strings.SplitAfter(string(text), "\n") {
		if l != "" {
			fmt.Fprintf(&b, "%4d %s", i+1, l)
		}
	}
	return b.String()
}

// fuzzing tells whether this process runs the fuzzer rather than the
// seed corpus (go test -fuzz sets -test.fuzz in the workers too).
func fuzzing() bool {
	fl := flag.Lookup("test.fuzz")
	return fl != nil && fl.Value.String() != ""
}

// iptTestEvery is how many fuzzed inputs share one --test run: a run
// costs about 15 ms, a render tens of microseconds, so checking every
// input would spend the fuzzing time in iptables. Which inputs are
// checked depends on their bytes, so a failure found is found again.
const iptTestEvery = 256

// FuzzRenderIPTables decodes bytes into Services, endpoints and a node
// and renders them for both families. Nothing may panic; every port the
// API would refuse is left out with a problem naming the Service and the
// field; every valid port with a cluster IP of the family gets rules;
// the text parses with herald's own reader (every jump to a declared
// chain, one family's addresses only), respects iptables' name limit,
// does not depend on the order of the input, and, as root, passes
// `iptables-restore --test` (for every seed, and a sample of the fuzzed
// inputs).
func FuzzRenderIPTables(f *testing.F) {
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{250, 199, 7, 255, 13}, 40))
	f.Add([]byte("herald fuzz: odd names \"quoted\" and\nnewlines -A X -j ACCEPT"))
	addRandomWorlds(f, 12, 17)
	iptTestSetup()
	if iptTestTools == nil {
		f.Logf("iptables-restore --test is skipped (%s); the rendered text is still checked with herald's own parser", iptTestWhy)
	}
	sample := fuzzing()
	f.Fuzz(func(t *testing.T, data []byte) {
		w := decodeWorld(data)
		svcs := w.services()
		ids := map[rules.ServicePortName]bool{}
		for _, s := range svcs {
			ids[s.ID()] = true
		}
		for id := range w.eps {
			ids[id] = true
		}
		if w.odd {
			rs := rules.RenderWith(rules.Family(7), svcs, w.eps, w.node, w.opts)
			if len(rs.Bytes()) != 0 || len(rs.Problems) != 1 || rs.Problems[0].Field != "family" {
				t.Fatalf("family 7: %d bytes, problems %v", len(rs.Bytes()), rs.Problems)
			}
		}
		for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
			rs := rules.RenderWith(fam, svcs, w.eps, w.node, w.opts)
			checkProblems(t, fam, w, ids, rs.Problems)
			if want, ok := w.wantRendered(fam); ok && rs.Stats.Services != want {
				t.Fatalf("%s: %d service ports rendered, want %d; problems %v", fam, rs.Stats.Services, want, rs.Problems)
			}
			text := rs.Bytes()
			checkText(t, fam, rs, text)
			if !hasDuplicates(svcs) {
				// Reversing the Services changes nothing: the renderer
				// sorts them (duplicates aside, where the first wins).
				rev := slices.Clone(svcs)
				slices.Reverse(rev)
				if again := rules.RenderWith(fam, rev, w.eps, w.node, w.opts).Bytes(); !bytes.Equal(again, text) {
					t.Fatalf("%s: the render depends on the order of the Services:\n%s", fam, firstDiff(string(text), string(again)))
				}
			}
			if iptTestTools != nil && (!sample || crc32.ChecksumIEEE(data)%iptTestEvery == 0) {
				iptablesTest(t, fam, text)
			}
		}
	})
}

// addRandomWorlds adds n seeds of random bytes (stream picks the
// sequence). They decode to worlds of mostly valid Services (pick prefers
// the ordinary choices) with odd values among them.
func addRandomWorlds(f *testing.F, n, stream uint64) {
	for seed := range n {
		rng := rand.New(rand.NewPCG(seed, stream))
		b := make([]byte, 64+rng.IntN(400))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		f.Add(b)
	}
}

func hasDuplicates(svcs []rules.Service) bool {
	seen := map[rules.ServicePortName]bool{}
	for _, s := range svcs {
		if seen[s.ID()] {
			return true
		}
		seen[s.ID()] = true
	}
	return false
}

// checkProblems: every problem names its field, and a Service's problem
// its Service, which must be one of the input; every port with a field
// the API refuses is reported as left out.
func checkProblems(t *testing.T, fam rules.Family, w *fuzzWorld, ids map[rules.ServicePortName]bool, probs []rules.Problem) {
	t.Helper()
	for _, p := range probs {
		msg := p.Error()
		if p.Field == "" || p.Message == "" || !strings.Contains(msg, p.Field) {
			t.Fatalf("%s: problem %q (%+v) does not name its field", fam, msg, p)
		}
		if p.Service == (rules.ServicePortName{}) {
			if !strings.HasPrefix(msg, "node config: ") {
				t.Fatalf("%s: node problem %q", fam, msg)
			}
			continue
		}
		if !ids[p.Service] {
			t.Fatalf("%s: problem %q names a Service port that is not in the input", fam, msg)
		}
		if !strings.HasPrefix(msg, "service "+p.Service.String()+": ") {
			t.Fatalf("%s: problem %q does not start with its Service", fam, msg)
		}
	}
	seen := map[rules.ServicePortName]bool{}
	for _, port := range w.ports {
		id := port.svc.ID()
		want := port.bad
		if seen[id] {
			want = "port.name" // a duplicate
		}
		seen[id] = true
		if want == "" || port.unknown {
			continue
		}
		if !slices.ContainsFunc(probs, func(p rules.Problem) bool { return p.Service == id && p.Field == want && p.Skipped }) {
			t.Fatalf("%s: port %q (%s %d) has a bad %s, but no problem says it was left out: %v", fam, id, port.svc.Protocol, port.svc.Port, want, probs)
		}
	}
}

// checkText reads the render as herald does and checks what iptables
// itself would refuse that herald's reader lets pass.
func checkText(t *testing.T, fam rules.Family, rs rules.Ruleset, text []byte) {
	t.Helper()
	if _, err := tracer.Parse(string(text), rules.JumpsText()); err != nil {
		t.Fatalf("%s: the render does not parse: %v\n%s", fam, err, numbered(text))
	}
	if in := rs.Inputs(); !bytes.Equal(bytes.Join(in, nil), text) {
		t.Fatalf("%s: Inputs() is not Bytes() split", fam)
	} else if _, err := tracer.Parse(append(stringsOf(in), rules.JumpsText())...); err != nil {
		t.Fatalf("%s: the restore inputs, one by one, do not parse: %v", fam, err)
	}
	for l, err := range iptables.Lines(text) {
		if err != nil {
			t.Fatalf("%s: %v", fam, err)
		}
		// iptables refuses chain names of 29 characters or more.
		if (l.Kind == iptables.LineChain || l.Kind == iptables.LineRule || l.Kind == iptables.LineDelete) && len(l.Name) > 28 {
			t.Fatalf("%s: line %d: chain name %q is too long for iptables", fam, l.Num, l.Name)
		}
	}
}

func stringsOf(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}
