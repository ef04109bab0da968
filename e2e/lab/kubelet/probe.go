package kubelet

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/herald-lb/herald/e2e/lab/netns"
)

// prober runs readiness probes from inside the node's network namespace,
// where the real kubelet's probes come from too: the pod's address is
// reachable there over the pod bridge.
type prober struct {
	netns string // the node's namespace; empty: the current one
	// exec is where an exec probe's command runs: the probed run of the
	// container.
	exec execTarget
}

// dial opens a TCP connection from the node's namespace.
func (p prober) dial(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	d := net.Dialer{Timeout: timeout}
	do := func() (err error) { c, err = d.DialContext(ctx, "tcp", addr); return err }
	var err error
	if p.netns == "" {
		err = do()
	} else {
		err = netns.Do(p.netns, do)
	}
	return c, err
}

// probe runs one check of pb against a container of a pod with address
// podIP. It returns whether it succeeded and, if not, why.
func (p prober) probe(ctx context.Context, pb *v1.Probe, c *v1.Container, podIP string) (bool, string) {
	timeout := time.Duration(pb.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case pb.HTTPGet != nil:
		return p.httpGet(ctx, pb.HTTPGet, c, podIP, timeout)
	case pb.TCPSocket != nil:
		port, err := resolvePort(pb.TCPSocket.Port, c)
		if err != nil {
			return false, err.Error()
		}
		host := pb.TCPSocket.Host
		if host == "" {
			host = podIP
		}
		conn, err := p.dial(ctx, net.JoinHostPort(host, strconv.Itoa(port)), timeout)
		if err != nil {
			return false, err.Error()
		}
		conn.Close()
		return true, ""
	case pb.Exec != nil:
		return p.execProbe(ctx, pb.Exec.Command)
	}
	// gRPC probes are not run by the lab kubelet; see unsupportedProbe.
	return true, ""
}

// maxProbeOutput is how much of an exec probe's output a failure message
// carries, as the kubelet keeps at most 10 KiB of it.
const maxProbeOutput = 10 * 1024

// execProbe runs cmd in the container as `kubectl exec` would: it passes
// when the command exits 0. A command still running at the probe's
// timeout is killed and the probe fails, as the kubelet's do since
// ExecProbeTimeout went GA.
func (p prober) execProbe(ctx context.Context, cmd []string) (bool, string) {
	var out limitedBuffer
	out.max = maxProbeOutput
	err := p.exec.run(ctx, cmd, nil, &out, &out, false, nil)
	if err == nil {
		return true, ""
	}
	if ctx.Err() != nil {
		return false, fmt.Sprintf("command %q timed out", strings.Join(cmd, " "))
	}
	msg := fmt.Sprintf("command %q failed: %v", strings.Join(cmd, " "), err)
	if o := strings.TrimSpace(out.String()); o != "" {
		msg += ": " + o
	}
	return false, msg
}

// limitedBuffer keeps the first max bytes written to it and discards the
// rest, so a chatty probe command cannot grow the kubelet.
type limitedBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (b *limitedBuffer) Write(d []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - len(b.buf); room > 0 {
		b.buf = append(b.buf, d[:min(room, len(d))]...)
	}
	return len(d), nil
}

func (b *limitedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// unsupportedProbe names a probe kind the lab kubelet does not run, or
// returns "".
func unsupportedProbe(pb *v1.Probe) string {
	switch {
	case pb == nil, pb.HTTPGet != nil, pb.TCPSocket != nil, pb.Exec != nil:
		return ""
	case pb.GRPC != nil:
		return "grpc"
	}
	return "empty"
}

func (p prober) httpGet(ctx context.Context, g *v1.HTTPGetAction, c *v1.Container, podIP string, timeout time.Duration) (bool, string) {
	port, err := resolvePort(g.Port, c)
	if err != nil {
		return false, err.Error()
	}
	host := g.Host
	if host == "" {
		host = podIP
	}
	scheme := strings.ToLower(string(g.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	path := g.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	u := &url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(port))}
	if ref, err := url.Parse(path); err == nil {
		u = u.ResolveReference(ref)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return false, err.Error()
	}
	req.Header.Set("User-Agent", "kube-probe/lab")
	for _, h := range g.HTTPHeaders {
		if strings.EqualFold(h.Name, "host") {
			req.Host = h.Value
			continue
		}
		req.Header.Add(h.Name, h.Value)
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return p.dial(ctx, addr, timeout)
		},
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, // as the kubelet: probes do not verify
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{
		Transport: tr,
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 10*1024))
	if resp.StatusCode >= 200 && resp.StatusCode < 400 {
		return true, ""
	}
	return false, fmt.Sprintf("HTTP probe failed with statuscode: %d", resp.StatusCode)
}

// resolvePort turns a probe's port (number or the name of a container
// port) into a number.
func resolvePort(p intstr.IntOrString, c *v1.Container) (int, error) {
	if p.Type == intstr.Int {
		if p.IntVal <= 0 || p.IntVal > 65535 {
			return 0, fmt.Errorf("invalid port %d", p.IntVal)
		}
		return int(p.IntVal), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil && n > 0 && n < 65536 {
		return n, nil
	}
	return 0, fmt.Errorf("port %q not found among the container's ports", p.StrVal)
}
