package proxy

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/herald-lb/herald/proxy/rules"
)

// LocalMode is --detect-local-mode: how the rules tell traffic from pods
// (kept un-SNATed to cluster IPs, short-circuited under
// externalTrafficPolicy Local) from the rest.
type LocalMode string

// kube-proxy's local-traffic modes; the empty mode is ClusterCIDR.
const (
	LocalModeClusterCIDR         LocalMode = "ClusterCIDR"
	LocalModeNodeCIDR            LocalMode = "NodeCIDR"
	LocalModeBridgeInterface     LocalMode = "BridgeInterface"
	LocalModeInterfaceNamePrefix LocalMode = "InterfaceNamePrefix"
)

// UnmarshalText accepts kube-proxy's names.
func (m *LocalMode) UnmarshalText(b []byte) error {
	switch v := LocalMode(b); v {
	case "", LocalModeClusterCIDR, LocalModeNodeCIDR, LocalModeBridgeInterface, LocalModeInterfaceNamePrefix:
		*m = v
		return nil
	}
	return fmt.Errorf("%q: use ClusterCIDR, NodeCIDR, BridgeInterface or InterfaceNamePrefix", string(b))
}

// MarshalText implements encoding.TextMarshaler.
func (m LocalMode) MarshalText() ([]byte, error) { return []byte(m), nil }

// podInterface is the interface the interface modes tell pods by.
func (o Options) podInterface() rules.Interface {
	switch o.DetectLocalMode {
	case LocalModeBridgeInterface:
		return rules.Interface{Name: o.PodBridgeInterface}
	case LocalModeInterfaceNamePrefix:
		return rules.Interface{Name: o.PodInterfaceNamePrefix, Prefix: true}
	}
	return rules.Interface{}
}

// validateDetectLocal names the flag missing or at fault for the mode.
func (o Options) validateDetectLocal(bad func(flag, format string, args ...any)) {
	for _, c := range []struct {
		mode       LocalMode
		flag, name string
	}{
		{LocalModeBridgeInterface, "pod-bridge-interface", o.PodBridgeInterface},
		{LocalModeInterfaceNamePrefix, "pod-interface-name-prefix", o.PodInterfaceNamePrefix},
	} {
		switch {
		case o.DetectLocalMode == c.mode && c.name == "":
			bad(c.flag, "--detect-local-mode=%s needs it", c.mode)
		case c.name != "":
			if msg := rules.InterfaceNameProblem(c.name); msg != "" {
				bad(c.flag, "%s", msg)
			}
		}
	}
}

// withPrimary makes a the primary IP of its family in ips (kube-proxy's
// --bind-address); an unspecified or invalid a changes nothing.
func withPrimary(ips []netip.Addr, a netip.Addr) []netip.Addr {
	if !a.IsValid() || a.IsUnspecified() {
		return ips
	}
	out := []netip.Addr{a}
	for _, ip := range ips {
		if ip.Is4() != a.Is4() {
			out = append(out, ip)
		}
	}
	return out
}

// withAddr adds a to the node's addresses unless it is there, invalid or
// unspecified.
func withAddr(ips []netip.Addr, a netip.Addr) []netip.Addr {
	if !a.IsValid() || a.IsUnspecified() || slices.Contains(ips, a) {
		return ips
	}
	return append(slices.Clip(ips), a)
}
