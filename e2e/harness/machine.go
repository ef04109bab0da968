package harness

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/herald-lb/herald/e2e/lab/kubelet"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// MachineState is what a lab must leave as it found it. Only what this
// lab can touch is recorded, so other packages' tests running at the same
// time (with their own prefixes and processes) do not disturb the
// comparison.
type MachineState struct {
	// Netns and Links are those whose names start with the lab's prefix.
	Netns []string
	Links []string
	// Mounts are the root mount namespace's mount points of the lab's
	// namespaces and mount points.
	Mounts []string
	// HostAddrs are the machine's addresses inside the lab's ranges
	// ("dev prefix"), except on other labs' bridges.
	HostAddrs []string
	// HostRoutes are the root namespace's routes into the lab's ranges
	// (topology.LabRoutes): the lab's unreachable routes, which outlive
	// its bridge unless teardown removes them, and the member routes.
	HostRoutes []string
	// ServiceAccountDir tells whether kubelet.ServiceAccountDir exists.
	ServiceAccountDir bool
	// FRRFiles are what FRR leaves outside its directory for a pathspace
	// of the lab's (/var/run/frr/<prefix>-*, /var/tmp/frr).
	FRRFiles []string
	// Processes are the live descendants of this process ("pid exe"):
	// with KillWithParent, everything the lab starts is one.
	Processes []string
}

// ObserveMachine records the machine's state for a lab with prefix.
func ObserveMachine(ctx context.Context, prefix string) (MachineState, error) {
	var m MachineState
	e, err := topology.Observe(ctx)
	if err != nil {
		return m, err
	}
	mine := func(name string) bool { return strings.HasPrefix(name, prefix+"-") }
	for n := range e.Netns {
		if mine(n) {
			m.Netns = append(m.Netns, n)
		}
	}
	for l := range e.Links {
		if mine(l) {
			m.Links = append(m.Links, l)
		}
	}
	m.HostRoutes = topology.LabRoutes(e, prefix)
	out, err := exec.CommandContext(ctx, "ip", "-o", "addr", "show").Output()
	if err != nil {
		return m, fmt.Errorf("ip addr: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		// "5: hle-lan    inet 198.51.100.254/24 scope global hle-lan"
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		dev := strings.TrimSuffix(f[1], ":")
		if strings.HasSuffix(dev, "-lan") && !mine(dev) {
			continue // another lab's bridge, up at the same time
		}
		a, err := netip.ParsePrefix(f[3])
		if err == nil && topology.CheckHostAddresses([]netip.Prefix{a}) != nil {
			m.HostAddrs = append(m.HostAddrs, dev+" "+a.String())
		}
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return m, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (strings.HasPrefix(f[4], "/run/netns/"+prefix+"-") || strings.HasPrefix(f[4], "/run/secrets")) {
			m.Mounts = append(m.Mounts, f[4])
		}
	}
	_, err = os.Stat(kubelet.ServiceAccountDir)
	m.ServiceAccountDir = err == nil
	for _, pattern := range []string{"/var/run/frr/" + prefix + "-*", "/var/tmp/frr/*"} {
		files, _ := filepath.Glob(pattern)
		m.FRRFiles = append(m.FRRFiles, files...)
	}
	m.Processes = Descendants(os.Getpid())
	for _, s := range [][]string{m.Netns, m.Links, m.Mounts, m.HostAddrs, m.HostRoutes} {
		sort.Strings(s)
	}
	return m, nil
}

// Diff describes how after differs from m; empty when equal.
func (m MachineState) Diff(after MachineState) string {
	var b strings.Builder
	mv, av := reflect.ValueOf(m), reflect.ValueOf(after)
	for i := 0; i < mv.NumField(); i++ {
		if !reflect.DeepEqual(mv.Field(i).Interface(), av.Field(i).Interface()) {
			fmt.Fprintf(&b, "  %s: before %v, after %v\n", mv.Type().Field(i).Name, mv.Field(i).Interface(), av.Field(i).Interface())
		}
	}
	return b.String()
}

// Descendants lists the live processes below pid ("pid exe"), from /proc.
// Zombies are left out: they no longer run, and reaping orphans is init's
// business.
func Descendants(root int) []string {
	entries, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		parent[pid] = ppid
	}
	var out []string
	for pid := range parent {
		for p := parent[pid]; p > 1; p = parent[p] {
			if p == root {
				exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
				out = append(out, fmt.Sprintf("%d %s", pid, exe))
				break
			}
		}
	}
	sort.Strings(out)
	return out
}
