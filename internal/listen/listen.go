// Package listen checks the listen addresses of herald's flags, the same
// way for every component.
package listen

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
)

// Check accepts "IP:port" and ":port" (every address). A host name is
// refused, as kube-proxy refuses one: resolving it at bind time would tie
// the port to whatever DNS answers when the process starts.
func Check(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %v", addr, err)
	}
	if host != "" {
		if _, err := netip.ParseAddr(host); err != nil {
			return fmt.Errorf("%q: host %q is not an IP address", addr, host)
		}
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: port %q is not a number between 0 and 65535", addr, port)
	}
	return nil
}
