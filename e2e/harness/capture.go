package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/herald-lb/herald/e2e/lab/flows"
)

// RSTFilter matches TCP segments with RST set, IPv4 and IPv6 (no
// extension headers: tcpdump's tcp[] offsets do not reach into IPv6).
const RSTFilter = "(ip and tcp[tcpflags] & tcp-rst != 0) or (ip6 and ip6[6] == 6 and ip6[53] & 4 != 0)"

// RSTCapture records every TCP reset seen in some namespaces, with
// link-layer addresses: a failed probe's "connection reset by peer"
// then shows who sent the reset (a pod through a node, a node itself,
// or the client) and when. Resets are rare on the probes' paths (the
// client closes with FIN), so the capture costs next to nothing.
type RSTCapture struct {
	dir   string
	procs map[string]*exec.Cmd // by namespace
}

// StartRSTCapture starts tcpdump in each namespace (all interfaces)
// if tcpdump is installed; otherwise it returns an empty capture.
func StartRSTCapture(t *testing.T, namespaces []string) *RSTCapture {
	c := &RSTCapture{dir: t.TempDir(), procs: map[string]*exec.Cmd{}}
	if _, err := exec.LookPath("tcpdump"); err != nil {
		t.Logf("no tcpdump: TCP resets are not captured")
		return c
	}
	for _, ns := range namespaces {
		out, err := os.Create(filepath.Join(c.dir, ns+".txt"))
		if err != nil {
			t.Logf("reset capture in %s: %v", ns, err)
			continue
		}
		cmd := exec.Command("ip", "netns", "exec", ns, "tcpdump", "-l", "-n", "-e", "-tt", "-i", "any", RSTFilter)
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Logf("reset capture in %s: %v", ns, err)
			out.Close()
			continue
		}
		out.Close() // tcpdump holds its own descriptor
		c.procs[ns] = cmd
	}
	t.Cleanup(c.stop)
	time.Sleep(500 * time.Millisecond) // tcpdump opens its sockets
	return c
}

// stop ends the captures (the processes this test started, by PID).
func (c *RSTCapture) stop() {
	for _, cmd := range c.procs {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
	c.procs = map[string]*exec.Cmd{}
}

// Near returns, per namespace, how many resets were captured and those
// within 2 s of one of the times (the failed requests): readiness probes
// refused by starting and stopping pods reset too, so the rest is noise.
func (c *RSTCapture) Near(times []time.Time) []string {
	c.stop()
	var out []string
	entries, _ := os.ReadDir(c.dir)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(c.dir, e.Name()))
		if err != nil {
			continue
		}
		ns := strings.TrimSuffix(e.Name(), ".txt")
		packets := tcpdumpLines(string(b))
		var close []string
		for _, p := range packets {
			if p.near(times, 2*time.Second) {
				close = append(close, ns+": "+p.String())
			}
		}
		total := len(packets)
		out = append(out, fmt.Sprintf("%s: %d resets in all, %d within 2 s of a failed request", ns, total, len(close)))
		out = append(out, close...)
	}
	return out
}

// PacketCapture writes every packet to or from some hosts, seen in one
// namespace, to a pcap file: when a request fails, the handshake before
// a reset (which MAC answered, which port, which retransmission) is in
// it. The file is kept under _cache/captures when the test fails, and
// removed when it passes.
type PacketCapture struct {
	path string
	cmd  *exec.Cmd
}

// StartPacketCapture starts tcpdump in ns on all interfaces for traffic
// to or from hosts, if tcpdump is installed; otherwise the capture is
// empty.
func StartPacketCapture(t *testing.T, moduleDir, ns string, hosts ...string) *PacketCapture {
	c := &PacketCapture{}
	if _, err := exec.LookPath("tcpdump"); err != nil || len(hosts) == 0 {
		t.Logf("no tcpdump: packets in %s are not captured", ns)
		return c
	}
	dir := filepath.Join(moduleDir, "_cache", "captures")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("packet capture in %s: %v", ns, err)
		return c
	}
	name := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
	c.path = filepath.Join(dir, fmt.Sprintf("%s-%s-%s.pcap", name, ns, time.Now().UTC().Format("20060102-150405")))
	filter := "host " + strings.Join(hosts, " or host ")
	// -s 200: headers and the start of the HTTP exchange, not whole
	// bodies; -U: each packet reaches the file as it is seen, so a
	// killed test still leaves a readable capture.
	c.cmd = exec.Command("ip", "netns", "exec", ns, "tcpdump", "-U", "-s", "200", "-n", "-i", "any", "-w", c.path, filter)
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		t.Logf("packet capture in %s: %v", ns, err)
		c.cmd, c.path = nil, ""
		return c
	}
	t.Cleanup(func() {
		c.stop()
		if c.path == "" {
			return
		}
		if t.Failed() {
			t.Logf("packets to and from %s in %s: %s (tcpdump -n -e -tt -r FILE)", strings.Join(hosts, ", "), ns, c.path)
			return
		}
		_ = os.Remove(c.path)
	})
	time.Sleep(500 * time.Millisecond) // tcpdump opens its socket
	return c
}

// Flows stops the capture and follows its connections to port
// (package flows): how many there were and which got no answer, with
// their packets. A capture that never ran has none.
func (c *PacketCapture) Flows(port uint16) (flows.Result, error) {
	c.stop()
	if c.path == "" {
		return flows.Result{}, nil
	}
	f, err := os.Open(c.path)
	if err != nil {
		return flows.Result{}, err
	}
	defer f.Close()
	return flows.Scan(f, port)
}

// Path is the capture's file ("" when nothing is captured). It is kept
// only when the test fails.
func (c *PacketCapture) Path() string { return c.path }

func (c *PacketCapture) stop() {
	if c.cmd == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	_ = c.cmd.Wait()
	c.cmd = nil
}

// Around stops the capture and returns the packets within window of
// one of the times (failed requests), at most limit lines, as tcpdump
// prints them with link-layer addresses.
func (c *PacketCapture) Around(times []time.Time, window time.Duration, limit int) []string {
	c.stop()
	if c.path == "" || len(times) == 0 {
		return nil
	}
	out, err := exec.Command("tcpdump", "-n", "-e", "-tt", "-r", c.path).Output()
	if err != nil && len(out) == 0 {
		return []string{fmt.Sprintf("reading %s: %v", c.path, err)}
	}
	var lines []string
	for _, p := range tcpdumpLines(string(out)) {
		if !p.near(times, window) {
			continue
		}
		if len(lines) == limit {
			lines = append(lines, "... (more in the file)")
			break
		}
		lines = append(lines, p.String())
	}
	return lines
}

// packet is one line of tcpdump -tt output: its time and the rest.
type packet struct {
	at   time.Time
	rest string
}

// tcpdumpLines reads tcpdump -tt output, leaving out its banner and
// summary (lines that do not start with a time).
func tcpdumpLines(text string) []packet {
	var out []packet
	for _, l := range strings.Split(text, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		// -tt prints seconds.microseconds; a summary line ("2 packets
		// captured") starts with a number without the dot.
		secs, micros, ok := strings.Cut(f[0], ".")
		sec, err1 := strconv.ParseInt(secs, 10, 64)
		us, err2 := strconv.ParseInt(micros, 10, 64)
		if !ok || err1 != nil || err2 != nil || len(micros) != 6 {
			continue
		}
		out = append(out, packet{at: time.Unix(sec, us*1000), rest: strings.Join(f[1:], " ")})
	}
	return out
}

func (p packet) near(times []time.Time, window time.Duration) bool {
	return slices.ContainsFunc(times, func(t time.Time) bool { return p.at.Sub(t).Abs() <= window })
}

func (p packet) String() string { return p.at.UTC().Format("15:04:05.000000") + " " + p.rest }
