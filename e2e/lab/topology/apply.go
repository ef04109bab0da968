package topology

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
)

// Runner runs one command; the real one execs, tests use a fake.
type Runner interface {
	Run(ctx context.Context, c Cmd) error
}

// Exec runs commands with os/exec, entering namespaces with `ip netns exec`.
type Exec struct{}

// Run runs the command and returns its output in the error when it fails.
func (Exec) Run(ctx context.Context, c Cmd) error {
	args := c.Args
	if c.Netns != "" {
		args = append([]string{"ip", "netns", "exec", c.Netns}, args...)
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %v: %s", c, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// Up builds the layout. It refuses to start when any of the lab's names is
// already taken, so it never adopts or breaks something it did not make.
// On failure the caller runs Down.
func Up(ctx context.Context, r Runner, l Layout, existing Existing) error {
	for _, ns := range l.Namespaces() {
		if existing.Netns[ns] {
			return fmt.Errorf("network namespace %s already exists: a lab is up (run down first)", ns)
		}
	}
	if existing.Links[l.Bridge] {
		return fmt.Errorf("link %s already exists: a lab is up (run down first)", l.Bridge)
	}
	if err := CheckHostAddresses(existing.Addrs); err != nil {
		return err
	}
	if err := CheckHostRoutes(existing.Routes); err != nil {
		return err
	}
	for _, c := range Commands(l) {
		if err := r.Run(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// Existing is what the machine has now, from `ip netns list`, `ip link`,
// `ip addr` and `ip route`.
type Existing struct {
	Netns map[string]bool
	Links map[string]bool
	// Addrs are the root namespace's interface addresses with their
	// prefix lengths, from `ip -o addr show`.
	Addrs []netip.Prefix
	// AddrsByLink are the same addresses by interface name.
	AddrsByLink map[string][]netip.Prefix
	// Routes are the root namespace's routes (main table, both
	// families), from `ip -o [-6] route show`.
	Routes []Route
}

// labRanges are the subnets the lab routes inside its namespaces; they
// hold every address the lab uses (the L2 pools lie inside the LAN, the
// pod CIDRs inside the cluster CIDRs), so the host's unreachable routes
// for them cover all of the lab.
var labRanges = []netip.Prefix{LANv4, LANv6, RemoteV4, RemoteV6, ClusterCIDR, ServiceCIDR, ClusterCIDRv6, ServiceCIDRv6, BGPPoolV4, BGPPoolV6}

// CheckHostAddresses refuses a machine whose own network overlaps the
// lab's ranges: lab members would then shadow real neighbours (or the
// machine's gateway), and replies could leave through the real uplink.
func CheckHostAddresses(addrs []netip.Prefix) error {
	for _, a := range addrs {
		if a.Addr() == HostLANv4 || a.Addr() == HostLANv6 {
			return fmt.Errorf("another lab is up on this machine (the host already has the lab's LAN address %s); bring it down first (herald-lab down)", a.Addr())
		}
		for _, r := range labRanges {
			if a.Overlaps(r) {
				return fmt.Errorf("this machine has %s on one of its interfaces, which overlaps the lab's %s; the lab would capture real traffic, so it refuses to start", a, r)
			}
		}
	}
	return nil
}

// Teardown returns the commands that remove every object a lab with this
// prefix can have (for the largest lab), limited to those that exist. It
// names objects exactly; nothing is matched by pattern. The host's
// unreachable routes go after the namespaces and before the bridge (they
// live within the bridge's lifetime, which is how LabRoutes tells them
// apart), and only those that are the lab's to the letter (labsOwn), and
// not while another lab is up: they are that lab's then.
func Teardown(prefix string, existing Existing) ([]Cmd, error) {
	l, err := Plan(prefix, MaxNodes)
	if err != nil {
		return nil, err
	}
	var cmds []Cmd
	// Deleting a namespace destroys the veths inside it and their peers.
	for _, ns := range l.Namespaces() {
		if existing.Netns[ns] {
			cmds = append(cmds, Cmd{Args: []string{"ip", "netns", "delete", ns}})
		}
	}
	links := []string{l.ClientHostIf, l.RouterHostIf}
	for _, n := range l.Nodes {
		links = append(links, n.HostIf)
	}
	for _, link := range links {
		if existing.Links[link] {
			cmds = append(cmds, Cmd{Args: []string{"ip", "link", "delete", link}})
		}
	}
	if !otherLabUp(existing, prefix) {
		cmds = append(cmds, ownRouteDels(existing)...)
	}
	if existing.Links[l.Bridge] {
		cmds = append(cmds, Cmd{Args: []string{"ip", "link", "delete", l.Bridge}})
	}
	return cmds, nil
}

// Down removes the lab's network. Processes running in its namespaces must
// be stopped first, or the kernel keeps the namespaces alive.
func Down(ctx context.Context, r Runner, prefix string) error {
	existing, err := Observe(ctx)
	if err != nil {
		return err
	}
	cmds, err := Teardown(prefix, existing)
	if err != nil {
		return err
	}
	var errs []string
	for _, c := range cmds {
		if err := r.Run(ctx, c); err != nil {
			errs = append(errs, err.Error())
		}
	}
	// Links whose namespace went first disappear on their own; check what
	// is really left.
	left, err := Observe(ctx)
	if err != nil {
		return err
	}
	if rest, _ := Teardown(prefix, left); len(rest) > 0 {
		return fmt.Errorf("lab network not fully removed: %v (errors: %s)", rest, strings.Join(errs, "; "))
	}
	return nil
}

// RemoveStrayRoutes removes the lab's unreachable routes when no lab's
// bridge exists and tells whether there were any: Commands adds them after
// the bridge and Teardown removes them before it, so without a bridge they
// are what a killed or failed run left, and no lab can start over them.
func RemoveStrayRoutes(ctx context.Context, r Runner) (bool, error) {
	return removeStrayRoutes(ctx, r, "")
}

// removeStrayRoutes does it in the namespace ns (the root one when empty).
func removeStrayRoutes(ctx context.Context, r Runner, ns string) (bool, error) {
	e, err := observe(ctx, ns)
	if err != nil {
		return false, err
	}
	for link := range e.Links {
		if otherLabBridge(link, "") { // any lab's
			return false, nil
		}
	}
	cmds := ownRouteDels(e)
	for _, c := range cmds {
		c.Netns = ns
		if err := r.Run(ctx, c); err != nil {
			return true, err
		}
	}
	return len(cmds) > 0, nil
}

// Observe reads the machine's namespaces and the root namespace's links,
// addresses and routes.
func Observe(ctx context.Context) (Existing, error) { return observe(ctx, "") }

// observe reads the namespaces and, in the namespace ns (the root one when
// empty), the links, addresses and routes. Tests give a scratch namespace;
// then the namespaces are not listed, so Teardown names none of them.
func observe(ctx context.Context, ns string) (Existing, error) {
	e := Existing{Netns: map[string]bool{}, Links: map[string]bool{}}
	ip := func(args ...string) ([]byte, error) {
		if ns != "" {
			args = append([]string{"-n", ns}, args...)
		}
		out, err := exec.CommandContext(ctx, "ip", args...).Output()
		if err != nil {
			return nil, fmt.Errorf("ip %s: %v", strings.Join(args, " "), err)
		}
		return out, nil
	}
	if ns == "" {
		out, err := ip("netns", "list")
		if err != nil {
			return e, err
		}
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 0 {
				e.Netns[f[0]] = true
			}
		}
	}
	out, err := ip("-o", "link", "show")
	if err != nil {
		return e, err
	}
	for _, line := range strings.Split(string(out), "\n") {
		// "7: hlab-n1@if2: <BROADCAST,..." -> hlab-n1
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name := strings.TrimSuffix(f[1], ":")
		if i := strings.IndexByte(name, '@'); i >= 0 {
			name = name[:i]
		}
		e.Links[name] = true
	}
	out, err = ip("-o", "addr", "show")
	if err != nil {
		return e, err
	}
	e.AddrsByLink = parseAddrs(string(out))
	for _, addrs := range e.AddrsByLink {
		e.Addrs = append(e.Addrs, addrs...)
	}
	for _, family := range []string{"-4", "-6"} {
		if out, err = ip("-o", family, "route", "show"); err != nil {
			return e, err
		}
		e.Routes = append(e.Routes, parseRoutes(string(out), family == "-6")...)
	}
	return e, nil
}

// parseAddrs reads `ip -o addr show` lines such as
// "2: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0" into
// the global addresses of each interface.
func parseAddrs(out string) map[string][]netip.Prefix {
	addrs := map[string][]netip.Prefix{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		dev := strings.TrimSuffix(f[1], ":")
		if i := strings.IndexByte(dev, '@'); i >= 0 {
			dev = dev[:i]
		}
		for i := 2; i+1 < len(f); i++ {
			if f[i] != "inet" && f[i] != "inet6" {
				continue
			}
			if p, err := netip.ParsePrefix(f[i+1]); err == nil && !p.Addr().IsLoopback() && !p.Addr().IsLinkLocalUnicast() {
				addrs[dev] = append(addrs[dev], p)
			}
			break
		}
	}
	return addrs
}
