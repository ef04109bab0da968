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
	for _, c := range Commands(l) {
		if err := r.Run(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// Existing is what the machine has now, from `ip netns list` and `ip link`.
type Existing struct {
	Netns map[string]bool
	Links map[string]bool
	// Addrs are the root namespace's interface addresses with their
	// prefix lengths, from `ip -o addr show`.
	Addrs []netip.Prefix
	// AddrsByLink are the same addresses by interface name.
	AddrsByLink map[string][]netip.Prefix
}

// labRanges are the subnets the lab routes inside its namespaces.
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
// names objects exactly; nothing is matched by pattern.
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
	links := []string{l.ClientHostIf, l.RouterHostIf, l.Bridge}
	for _, n := range l.Nodes {
		links = append(links, n.HostIf)
	}
	for _, link := range links {
		if existing.Links[link] {
			cmds = append(cmds, Cmd{Args: []string{"ip", "link", "delete", link}})
		}
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

// Observe reads the machine's namespaces and links.
func Observe(ctx context.Context) (Existing, error) {
	e := Existing{Netns: map[string]bool{}, Links: map[string]bool{}}
	out, err := exec.CommandContext(ctx, "ip", "netns", "list").Output()
	if err != nil {
		return e, fmt.Errorf("ip netns list: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			e.Netns[f[0]] = true
		}
	}
	out, err = exec.CommandContext(ctx, "ip", "-o", "link", "show").Output()
	if err != nil {
		return e, fmt.Errorf("ip link: %v", err)
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
	out, err = exec.CommandContext(ctx, "ip", "-o", "addr", "show").Output()
	if err != nil {
		return e, fmt.Errorf("ip addr: %v", err)
	}
	e.AddrsByLink = parseAddrs(string(out))
	for _, addrs := range e.AddrsByLink {
		e.Addrs = append(e.Addrs, addrs...)
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
