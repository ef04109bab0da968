package members

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/memberlist"
)

// transport is memberlist's UDP and TCP transport on one address and
// port, as memberlist.NetTransport does it, but without its allocation
// of a fresh 64 KiB buffer for every packet received. With herald's
// timers a member receives some 60 packets a second in a 3-node cluster
// (pings, acks, gossip), so NetTransport alone allocated about 4 MB/s:
// a garbage collection every second or two, each scanning the whole
// binary's globals on both CPUs. A speaker with the manifests' 50m
// request on a saturated node then waited for the CPU behind its own
// collections, missed its 50 ms acks and was declared dead again and
// again (TestL2UnderCPUStressTarget). Here one buffer is read into and
// each packet is copied out at its size, since memberlist may keep a
// packet's bytes after the handler returns.
type transport struct {
	udp     *net.UDPConn
	tcp     *net.TCPListener
	packets chan *memberlist.Packet
	streams chan net.Conn
	log     *log.Logger
	closing atomic.Bool
	wg      sync.WaitGroup
}

var _ memberlist.NodeAwareTransport = (*transport)(nil)

// maxPacket is the largest UDP payload.
const maxPacket = 65536

// udpReadBuffer is the socket receive buffer asked for, so that a burst
// of gossip waiting for a CPU-starved reader is not dropped (the kernel
// caps it at net.core.rmem_max).
const udpReadBuffer = 2 << 20

// newTransport listens on addr:port for TCP and UDP; log takes
// memberlist-style lines ("[ERR] memberlist: ...").
func newTransport(addr string, port int, logger *log.Logger) (*transport, error) {
	ip := net.ParseIP(addr)
	if ip == nil {
		return nil, fmt.Errorf("bind address %q is not an IP address", addr)
	}
	tcp, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip, Port: port})
	if err != nil {
		return nil, fmt.Errorf("listening on TCP %s: %w", net.JoinHostPort(addr, fmt.Sprint(port)), err)
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: ip, Port: port})
	if err != nil {
		_ = tcp.Close()
		return nil, fmt.Errorf("listening on UDP %s: %w", net.JoinHostPort(addr, fmt.Sprint(port)), err)
	}
	if err := udp.SetReadBuffer(udpReadBuffer); err != nil {
		logger.Printf("[WARN] memberlist: setting the UDP receive buffer: %v", err)
	}
	t := &transport{udp: udp, tcp: tcp, packets: make(chan *memberlist.Packet), streams: make(chan net.Conn), log: logger}
	t.wg.Add(2)
	go t.readPackets()
	go t.acceptStreams()
	return t, nil
}

// FinalAdvertiseAddr is the address and port the other members reach
// this one at: the configured address, else the bound one, else (bound
// to all addresses) a private address of this host.
func (t *transport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	bound := t.tcp.Addr().(*net.TCPAddr)
	if ip != "" {
		a := net.ParseIP(ip)
		if a == nil {
			return nil, 0, fmt.Errorf("advertise address %q is not an IP address", ip)
		}
		if a4 := a.To4(); a4 != nil {
			a = a4
		}
		return a, port, nil
	}
	if !bound.IP.IsUnspecified() {
		return bound.IP, bound.Port, nil
	}
	private, err := sockaddr.GetPrivateIP()
	if err != nil {
		return nil, 0, fmt.Errorf("finding a private address to advertise: %w", err)
	}
	a := net.ParseIP(private)
	if a == nil {
		return nil, 0, errors.New("no private address to advertise, and none configured")
	}
	return a, bound.Port, nil
}

func (t *transport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

func (t *transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if ap, err := netip.ParseAddrPort(a.Addr); err == nil {
		_, err = t.udp.WriteToUDPAddrPort(b, ap)
		return time.Now(), err
	}
	ua, err := net.ResolveUDPAddr("udp", a.Addr)
	if err != nil {
		return time.Time{}, err
	}
	_, err = t.udp.WriteTo(b, ua)
	return time.Now(), err
}

func (t *transport) PacketCh() <-chan *memberlist.Packet { return t.packets }

func (t *transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (t *transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return (&net.Dialer{Timeout: timeout}).Dial("tcp", a.Addr)
}

func (t *transport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown closes both sockets and waits for the readers. memberlist
// keeps draining both channels until it has called this.
func (t *transport) Shutdown() error {
	t.closing.Store(true)
	_ = t.tcp.Close()
	_ = t.udp.Close()
	t.wg.Wait()
	return nil
}

func (t *transport) readPackets() {
	defer t.wg.Done()
	buf := make([]byte, maxPacket)
	for {
		n, from, err := t.udp.ReadFromUDPAddrPort(buf)
		at := time.Now()
		switch {
		case err != nil && t.closing.Load():
			return
		case err != nil:
			t.log.Printf("[ERR] memberlist: reading a UDP packet: %v", err)
			continue
		case n == 0:
			t.log.Printf("[ERR] memberlist: empty UDP packet from %s", from)
			continue
		}
		t.packets <- &memberlist.Packet{Buf: bytes.Clone(buf[:n]), From: net.UDPAddrFromAddrPort(from), Timestamp: at}
	}
}

func (t *transport) acceptStreams() {
	defer t.wg.Done()
	var backoff time.Duration
	for {
		c, err := t.tcp.AcceptTCP()
		if err != nil {
			if t.closing.Load() {
				return
			}
			// Out of file descriptors, say: wait rather than spin.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t.log.Printf("[ERR] memberlist: accepting a TCP connection: %v", err)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		t.streams <- c
	}
}
