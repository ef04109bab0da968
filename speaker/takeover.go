package speaker

import (
	"context"
	"net"
	"net/netip"
	"time"

	"github.com/herald-lb/herald/speaker/layer2"
	"github.com/herald-lb/herald/speaker/partition"
)

// packetTakeoverCheck is the real partition.Check: a layer2.Probe on an
// AF_PACKET socket opened for the check.
type packetTakeoverCheck struct{ wait time.Duration }

// PacketTakeoverCheck returns the real takeover check, listening wait
// for an answer.
func PacketTakeoverCheck(wait time.Duration) partition.Check { return packetTakeoverCheck{wait} }

func (p packetTakeoverCheck) Answering(ctx context.Context, iface string, addr netip.Addr) (net.HardwareAddr, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, err
	}
	c, err := layer2.ListenProbe(ifi, addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return layer2.Probe(ctx, c, ifi.HardwareAddr, addr, p.wait)
}

// withTakeoverCheck sets the real takeover check listening wait; 0 leaves
// the check off.
func (d Deps) withTakeoverCheck(wait time.Duration) Deps {
	if wait > 0 {
		d.Takeover = PacketTakeoverCheck(wait)
	}
	return d
}
