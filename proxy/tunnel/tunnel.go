// Package tunnel is the node-to-node tunnel of direct server return
// (herald.io/forwarding: dsr; docs/dsr.md): a node that receives a packet
// for an LB address whose flow belongs to an endpoint on another node
// marks it (proxy/rules), and the policy routing made here sends marked
// packets, unchanged, to that node inside the tunnel.
//
// The tunnel is one VXLAN device per node (the kernels herald runs on
// may lack IPIP, GRE and FOU; VXLAN is the one every CNI relies on).
// Per peer node it holds:
//
//	fdb:   the peer's device MAC -> the peer's node address (VXLAN's remote)
//	neigh: a next-hop address per family -> the peer's device MAC
//	route: table base+id: default via that next hop, onlink
//	rule:  fwmark id<<shift/mask lookup table base+id, both families
//
// A device's MAC is derived from its node's address, so no node needs to
// be told another's. The device also carries an IPv4 address of its own:
// the kernel's reverse-path filter refuses packets arriving on a device
// without one, whatever rp_filter says, and rp_filter is set loose on it
// (the tunneled packet's source, the client, is not routed via the
// tunnel).
package tunnel

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/bits"
	"net"
	"net/netip"
	"slices"
	"sort"
)

// Defaults of the tunnel's settings.
const (
	DefaultDevice = "herald-dsr"
	// DefaultPort is the VXLAN UDP port: not the IANA 4789 or Linux's
	// 8472 that CNI plugins' VXLAN devices use.
	DefaultPort = 8475
	// DefaultVNI is the VXLAN network identifier.
	DefaultVNI = 0x4852
	// DefaultMarkMask holds the peer ids: 254 peers.
	DefaultMarkMask = 0x00ff0000
	// DefaultTableBase + id is a peer's routing table.
	DefaultTableBase = 0x48520000
	// DefaultRulePriority is the policy rules' priority: before the main
	// table's (32766).
	DefaultRulePriority = 98
)

// Config is the tunnel's settings, the same on every node.
type Config struct {
	Device       string
	Port         int
	VNI          uint32
	MarkMask     uint32
	TableBase    uint32
	RulePriority int
}

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	if c.Device == "" {
		c.Device = DefaultDevice
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.VNI == 0 {
		c.VNI = DefaultVNI
	}
	if c.MarkMask == 0 {
		c.MarkMask = DefaultMarkMask
	}
	if c.TableBase == 0 {
		c.TableBase = DefaultTableBase
	}
	if c.RulePriority == 0 {
		c.RulePriority = DefaultRulePriority
	}
	return c
}

// Device is what the kernel side makes of the tunnel device.
type Device struct {
	Name string
	Port int
	VNI  uint32
	MAC  net.HardwareAddr
	// Underlay is this node's address the peers send to; the device is
	// bound to its family.
	Underlay netip.Addr
	// RPAddr is the device's own IPv4 address (see the package comment).
	RPAddr netip.Prefix
	// ProbeAddr is the device's own IPv6 link-local address, derived from
	// the node's address (ProbeAddr): the peers' probes reach it over
	// the tunnel (probe.go).
	ProbeAddr netip.Addr
}

// Route is everything one peer needs: its FDB entry, next hops,
// routing table and policy rules.
type Route struct {
	Peer     string
	ID       uint32
	Mark     uint32
	Mask     uint32
	Table    uint32
	Priority int
	Underlay netip.Addr
	MAC      net.HardwareAddr
	// Hop4 and Hop6 are the next hops of the two families.
	Hop4, Hop6 netip.Addr
	// Probe is the peer's device address, for the probes (ProbeAddr).
	Probe netip.Addr
}

// Kernel makes the device and the routes; Netlink is the real one, a
// fake in tests. Every call is idempotent.
type Kernel interface {
	// EnsureDevice makes the device as d says, or leaves it when it is
	// so already; created reports that it was made (anew), without
	// routes.
	EnsureDevice(d Device) (created bool, err error)
	EnsureRoute(dev string, r Route) error
	DeleteRoute(dev string, r Route) error
	DeleteDevice(name string) error
}

// Manager keeps the kernel's tunnel in step with the peer nodes. Not
// safe for concurrent use.
type Manager struct {
	cfg    Config
	kernel Kernel
	// ids are the peers' ids, stable while a peer stays: its mark is
	// in the rules and in nothing else.
	ids    map[string]uint32
	routes map[string]Route
	dev    *Device
}

// NewManager returns a manager with cfg's zero fields defaulted.
func NewManager(cfg Config, k Kernel) *Manager {
	return &Manager{cfg: cfg.WithDefaults(), kernel: k, ids: map[string]uint32{}, routes: map[string]Route{}}
}

// Config is the manager's configuration, defaults filled.
func (m *Manager) Config() Config { return m.cfg }

// MaxPeers is how many peers the mark mask holds ids for: every value
// but 0 and the mask itself, which the rules use for this node's own
// flows.
func (m *Manager) MaxPeers() int {
	return 1<<bits.OnesCount32(m.cfg.MarkMask) - 2
}

// Sync makes the device for this node (local is its address the peers
// reach) and a route for every peer with an address of local's family,
// and removes the routes of peers gone. It returns each reachable peer's
// mark. Peers beyond MaxPeers (by name) get none; what failed is in the
// error, and the marks returned are those whose routes are in place. It
// checks the device every time: one deleted or changed behind herald's
// back is made again, with its routes.
func (m *Manager) Sync(local netip.Addr, peers map[string][]netip.Addr) (map[string]uint32, error) {
	local = local.Unmap()
	if !local.IsValid() {
		return nil, fmt.Errorf("tunnel %s: this node has no address to tunnel from", m.cfg.Device)
	}
	if bits.OnesCount32(m.cfg.MarkMask) == 0 {
		return nil, fmt.Errorf("tunnel %s: empty mark mask", m.cfg.Device)
	}
	dev := Device{Name: m.cfg.Device, Port: m.cfg.Port, VNI: m.cfg.VNI, MAC: MAC(local), Underlay: local,
		RPAddr: netip.MustParsePrefix("169.254.75.1/32"), ProbeAddr: ProbeAddr(local)}
	created, err := m.kernel.EnsureDevice(dev)
	if err != nil {
		m.dev = nil
		return nil, fmt.Errorf("tunnel %s: %w", dev.Name, err)
	}
	if created || m.dev == nil || m.dev.Underlay != dev.Underlay {
		// A device made anew has no routes; the rules may be left.
		clear(m.routes)
	}
	m.dev = &dev
	want := map[string]netip.Addr{}
	for name, addrs := range peers {
		for _, a := range addrs {
			if a = a.Unmap(); a.Is4() == local.Is4() && a != local {
				want[name] = a
				break
			}
		}
	}
	var errs []error
	for name, r := range m.routes {
		if a, ok := want[name]; !ok || a != r.Underlay {
			if err := m.kernel.DeleteRoute(dev.Name, r); err != nil {
				errs = append(errs, fmt.Errorf("peer %s: %w", name, err))
				continue
			}
			delete(m.routes, name)
			if !ok {
				delete(m.ids, name)
			}
		}
	}
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	marks := map[string]uint32{}
	for _, name := range names {
		id, ok := m.id(name)
		if !ok {
			errs = append(errs, fmt.Errorf("peer %s: more peers than the mark mask %#x holds (%d)", name, m.cfg.MarkMask, m.MaxPeers()))
			continue
		}
		r := m.route(name, id, want[name])
		if old, ok := m.routes[name]; !ok || !sameRoute(old, r) {
			if err := m.kernel.EnsureRoute(dev.Name, r); err != nil {
				errs = append(errs, fmt.Errorf("peer %s: %w", name, err))
				continue
			}
			m.routes[name] = r
		}
		marks[name] = r.Mark
	}
	if len(errs) > 0 {
		return marks, fmt.Errorf("tunnel %s: %v", dev.Name, errs)
	}
	return marks, nil
}

// Probes are this node's probe address and each peer's whose route is
// in place (for a Prober's SetPeers).
func (m *Manager) Probes() (self netip.Addr, peers map[string]netip.Addr) {
	peers = map[string]netip.Addr{}
	for n, r := range m.routes {
		peers[n] = r.Probe
	}
	if m.dev != nil {
		self = m.dev.ProbeAddr
	}
	return self, peers
}

// Close removes the device, and with it its neighbours, FDB and routes;
// the rules are removed one by one.
func (m *Manager) Close() error {
	var errs []error
	for name, r := range m.routes {
		if err := m.kernel.DeleteRoute(m.cfg.Device, r); err != nil {
			errs = append(errs, fmt.Errorf("peer %s: %w", name, err))
		}
	}
	clear(m.routes)
	if err := m.kernel.DeleteDevice(m.cfg.Device); err != nil {
		errs = append(errs, err)
	}
	m.dev = nil
	if len(errs) > 0 {
		return fmt.Errorf("tunnel %s: %v", m.cfg.Device, errs)
	}
	return nil
}

// id is a peer's id: the one it has, else the smallest free one.
func (m *Manager) id(name string) (uint32, bool) {
	if id, ok := m.ids[name]; ok {
		return id, true
	}
	used := make([]uint32, 0, len(m.ids))
	for _, id := range m.ids {
		used = append(used, id)
	}
	slices.Sort(used)
	next := uint32(1)
	for _, id := range used {
		if id == next {
			next++
		}
	}
	if int(next) > m.MaxPeers() {
		return 0, false
	}
	m.ids[name] = next
	return next, true
}

func (m *Manager) route(name string, id uint32, underlay netip.Addr) Route {
	shift := bits.TrailingZeros32(m.cfg.MarkMask)
	var h4 [4]byte
	h4[0], h4[1] = 169, 254
	binary.BigEndian.PutUint16(h4[2:], uint16(id))
	var h6 [16]byte
	h6[0], h6[1] = 0xfe, 0x80
	binary.BigEndian.PutUint32(h6[8:], 0x48520000)
	binary.BigEndian.PutUint32(h6[12:], id)
	return Route{Peer: name, ID: id, Mark: id << shift, Mask: m.cfg.MarkMask, Table: m.cfg.TableBase + id, Priority: m.cfg.RulePriority,
		Underlay: underlay, MAC: MAC(underlay), Hop4: netip.AddrFrom4(h4), Hop6: netip.AddrFrom16(h6), Probe: ProbeAddr(underlay)}
}

// ProbeAddr is the tunnel device's IPv6 link-local address on the node
// with underlay address a: fe80::4852:1 and the IPv4 address, or 4 bytes
// of the hash MAC uses for an IPv6 one. Every node computes every peer's
// alike, as with MAC.
func ProbeAddr(a netip.Addr) netip.Addr {
	var b [16]byte
	b[0], b[1] = 0xfe, 0x80
	binary.BigEndian.PutUint32(b[8:], 0x48520001)
	copy(b[12:], MAC(a)[2:])
	return netip.AddrFrom16(b)
}

func sameRoute(a, b Route) bool {
	return a.ID == b.ID && a.Mark == b.Mark && a.Table == b.Table && a.Underlay == b.Underlay && a.Priority == b.Priority
}

// MAC is the device MAC of the node with underlay address a: locally
// administered, unicast, 0e:68 then the IPv4 address, or 4 bytes of a
// hash of the IPv6 one. Every node computes every peer's alike.
func MAC(a netip.Addr) net.HardwareAddr {
	mac := net.HardwareAddr{0x0e, 0x68, 0, 0, 0, 0}
	a = a.Unmap()
	if a.Is4() {
		b := a.As4()
		copy(mac[2:], b[:])
		return mac
	}
	h := fnv.New32a()
	b := a.As16()
	h.Write(b[:])
	binary.BigEndian.PutUint32(mac[2:], h.Sum32())
	return mac
}
