package echoserver

import (
	"errors"
	"fmt"
	"net"
)

// EnvUDPPort, set in a container's environment, makes the lab's echo
// server also answer UDP on that port. The real echoserver:1.4 has no
// UDP; the lab adds it so the proxy's UDP paths (and their conntrack
// entries) can be tested with real traffic.
const EnvUDPPort = "ECHOSERVER_UDP_PORT"

// UDPReply is the answer to a datagram: which pod answered (its host
// name, the pod name in the lab) and from where the datagram came.
func UDPReply(hostname string, peer net.Addr) string {
	return fmt.Sprintf("hostname=%s client_address=%s\n", hostname, clientAddress(peer.String()))
}

// ServeUDP answers every datagram on pc with UDPReply until pc is closed.
func ServeUDP(pc net.PacketConn, hostname string) error {
	buf := make([]byte, 2048)
	for {
		_, peer, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		if _, err := pc.WriteTo([]byte(UDPReply(hostname, peer)), peer); err != nil && errors.Is(err, net.ErrClosed) {
			return nil
		}
	}
}
