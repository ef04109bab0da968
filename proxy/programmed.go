package proxy

import (
	"net/netip"

	"github.com/herald-lb/herald/proxy/rules"
)

// programmed is what the kernel holds after the last successful sync of
// each family: which families have rules at all, and the LoadBalancer
// VIPs they send to Services. It is replaced, never changed.
type programmed struct {
	families map[rules.Family]bool
	vips     map[netip.Addr]bool
}

// Programmed says whether this node's rules send traffic for the
// LoadBalancer VIP ip to its Service. handled is false while no sync of
// ip's family has succeeded, or when the proxy does not program that
// family at all: then nobody here can tell. A speaker in the same
// process waits for it before announcing an address, so the first
// packets to a new VIP are not routed onwards un-NATed (and a later
// connection reusing their ports does not match their conntrack entry).
func (s *Syncer) Programmed(ip netip.Addr) (handled, ok bool) {
	p := s.programmed.Load()
	if p == nil {
		return false, false
	}
	ip = ip.Unmap()
	for f := range p.families {
		if f.Has(ip) {
			return true, p.vips[ip]
		}
	}
	return false, false
}

// recordProgrammed publishes the VIPs of the families whose sync just
// succeeded (others keep what they had) and reports whether the set
// changed.
func (s *Syncer) recordProgrammed(snap Snapshot, ok []rules.Family) bool {
	old := s.programmed.Load()
	next := &programmed{families: map[rules.Family]bool{}, vips: map[netip.Addr]bool{}}
	fresh := map[rules.Family]bool{}
	for _, f := range ok {
		fresh[f] = true
		next.families[f] = true
	}
	if old != nil {
		for f := range old.families {
			next.families[f] = true
		}
		for a := range old.vips {
			if !freshFamily(fresh, a) {
				next.vips[a] = true
			}
		}
	}
	for _, svc := range snap.Services {
		for _, ing := range svc.LoadBalancerIngress {
			a := ing.IP.Unmap()
			if ing.Mode == rules.IPModeVIP && a.IsValid() && freshFamily(fresh, a) {
				next.vips[a] = true
			}
		}
	}
	changed := old == nil || len(old.families) != len(next.families) || len(old.vips) != len(next.vips)
	if !changed {
		for a := range next.vips {
			if !old.vips[a] {
				changed = true
				break
			}
		}
	}
	s.programmed.Store(next)
	return changed
}

func freshFamily(fresh map[rules.Family]bool, a netip.Addr) bool {
	for f := range fresh {
		if f.Has(a) {
			return true
		}
	}
	return false
}
