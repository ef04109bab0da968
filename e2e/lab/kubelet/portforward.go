package kubelet

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/herald-lb/herald/e2e/lab/netns"
)

// podPorts forwards the kubelet API's port-forward streams to a pod:
// each stream becomes a TCP connection to localhost:<port> opened inside
// the pod's network namespace (the node's for hostNetwork pods), IPv4
// first, then IPv6, as CRI runtimes do.
type podPorts struct {
	netns string
}

// PortForward implements the streaming server's PortForwarder.
func (p podPorts) PortForward(ctx context.Context, _ string, _ types.UID, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	conn, err := p.dial(ctx, port)
	if err != nil {
		return err
	}
	defer conn.Close()
	go func() {
		_, err := io.Copy(conn, stream)
		if tc, ok := conn.(*net.TCPConn); ok && err == nil {
			// The client is done sending: tell the pod, and keep
			// reading its answer.
			_ = tc.CloseWrite()
			return
		}
		conn.Close() // the stream broke: nobody reads the answer

	}()
	fromPod := make(chan struct{})
	go func() {
		defer close(fromPod)
		_, _ = io.Copy(stream, conn)
	}()
	// The forward lasts until the pod's side closes (or the client's
	// stream breaks, which ends the copy too).
	select {
	case <-fromPod:
	case <-ctx.Done():
	}
	return nil
}

func (p podPorts) dial(ctx context.Context, port int32) (net.Conn, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("port %d: want 1 to 65535", port)
	}
	var conn net.Conn
	var errs []error
	err := netns.Do(p.netns, func() error {
		d := net.Dialer{Timeout: 5 * time.Second}
		for _, host := range []string{"127.0.0.1", "::1"} {
			c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(int(port))))
			if err == nil {
				conn = c
				return nil
			}
			errs = append(errs, err)
		}
		return fmt.Errorf("nothing listens on port %d of the pod's localhost: %v", port, errs)
	})
	return conn, err
}
