package speaker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/herald-lb/herald/speaker/layer2"
)

// Responder is a running ARP/NDP responder on one interface.
type Responder interface {
	Gratuitous(ip netip.Addr) error
	SyncGroups(ips []netip.Addr) error
	Stats() layer2.Stats
	// Done is closed when the responder stopped by itself (its socket
	// failed for good); the speaker then starts a new one.
	Done() <-chan struct{}
	// Stop stops it and waits until it has.
	Stop()
}

// ResponderFactory starts a Responder on ifi answering for what a
// announces there.
type ResponderFactory func(ifi layer2.Interface, a layer2.Announcer) (Responder, error)

// packetResponder is a layer2.Responder over AF_PACKET sockets, running
// in its own goroutine.
type packetResponder struct {
	*layer2.Responder
	cancel context.CancelFunc
	done   chan struct{}
}

func (r *packetResponder) Done() <-chan struct{} { return r.done }

func (r *packetResponder) Stop() {
	r.cancel()
	<-r.done
}

// PacketResponders is the real ResponderFactory: it opens ARP and NDP
// sockets on the interface (IPv4 only where IPv6 is disabled) and runs
// the responder until stopped.
//
// Its responders share one layer2.Wake, ticking for the life of the
// process: after a pause of the process they stay silent for a moment.
func PacketResponders(log *slog.Logger) ResponderFactory {
	wake := layer2.NewWake(layer2.DefaultPause, layer2.DefaultQuiet, time.Now())
	go wake.Run(context.Background(), layer2.DefaultWakeTick, log)
	return func(ifi layer2.Interface, a layer2.Announcer) (Responder, error) {
		nifi, err := net.InterfaceByIndex(ifi.Index)
		if err != nil {
			return nil, fmt.Errorf("interface %s: %w", ifi.Name, err)
		}
		if nifi.Name != ifi.Name {
			return nil, fmt.Errorf("interface %d is now %s, not %s", ifi.Index, nifi.Name, ifi.Name)
		}
		socks, err := layer2.Listen(nifi, layer2.IPv4, layer2.IPv6)
		if err != nil {
			var err4 error
			if socks, err4 = layer2.Listen(nifi, layer2.IPv4); err4 != nil {
				return nil, errors.Join(err, err4)
			}
			log.Warn("IPv6 not served on this interface: NDP sockets cannot be opened", "interface", ifi.Name, "err", err)
		}
		r, err := layer2.NewResponder(ifi, socks, a, layer2.Options{Log: log.With("interface", ifi.Name), Wake: wake})
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithCancel(context.Background())
		pr := &packetResponder{Responder: r, cancel: cancel, done: make(chan struct{})}
		go func() {
			defer close(pr.done)
			if err := r.Run(ctx); err != nil {
				log.Error("responder stopped", "interface", ifi.Name, "err", err)
			}
		}()
		return pr, nil
	}
}
