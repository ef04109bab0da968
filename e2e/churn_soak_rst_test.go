package e2e

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
)

// soakRSTFilter matches TCP segments with RST set, IPv4 and IPv6 (no
// extension headers: tcpdump's tcp[] offsets do not reach into IPv6).
const soakRSTFilter = "(ip and tcp[tcpflags] & tcp-rst != 0) or (ip6 and ip6[6] == 6 and ip6[53] & 4 != 0)"

// soakRSTCapture records every TCP reset seen in some namespaces, with
// link-layer addresses: a failed probe's "connection reset by peer"
// then shows who sent the reset (a pod through a node, a node itself,
// or the client) and when. Resets are rare on the soak's paths (the
// client closes with FIN), so the capture costs next to nothing.
type soakRSTCapture struct {
	dir   string
	procs map[string]*exec.Cmd // by namespace
}

// startSoakRSTCapture starts tcpdump in each namespace (all interfaces)
// if tcpdump is installed; otherwise it returns an empty capture.
func startSoakRSTCapture(t *testing.T, namespaces []string) *soakRSTCapture {
	c := &soakRSTCapture{dir: t.TempDir(), procs: map[string]*exec.Cmd{}}
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
		cmd := exec.Command("ip", "netns", "exec", ns, "tcpdump", "-l", "-n", "-e", "-tt", "-i", "any", soakRSTFilter)
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
func (c *soakRSTCapture) stop() {
	for _, cmd := range c.procs {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
	c.procs = map[string]*exec.Cmd{}
}

// near returns, per namespace, how many resets were captured and those
// within 2 s of one of the times (the failed requests): readiness probes
// refused by starting and stopping pods reset too, so the rest is noise.
func (c *soakRSTCapture) near(times []time.Time) []string {
	c.stop()
	var out []string
	entries, _ := os.ReadDir(c.dir)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(c.dir, e.Name()))
		if err != nil {
			continue
		}
		ns := strings.TrimSuffix(e.Name(), ".txt")
		total := 0
		var close []string
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) == 0 {
				continue
			}
			sec, err := strconv.ParseFloat(f[0], 64)
			if err != nil {
				continue // tcpdump's banner and summary
			}
			total++
			at := time.Unix(0, int64(sec*1e9))
			if slices.ContainsFunc(times, func(t time.Time) bool { return at.Sub(t).Abs() <= 2*time.Second }) {
				close = append(close, ns+": "+at.UTC().Format("15:04:05.000000")+" "+strings.Join(f[1:], " "))
			}
		}
		out = append(out, fmt.Sprintf("%s: %d resets in all, %d within 2 s of a failed request", ns, total, len(close)))
		out = append(out, close...)
	}
	return out
}
